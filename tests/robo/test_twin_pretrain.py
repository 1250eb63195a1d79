"""Pre-training the fine-tuning learner in the calibrated twin (robo.twin.pretrain)."""

import numpy as np
import pytest
import torch

from hardware.safety import SafetyConfig
from policies.foundation import load_raptor
from robo.real.learner import LearnerConfig, MixedReplayBuffer, build_sac, load_learner, load_snapshots
from robo.twin import evaluate_in_twin, hover_scores, perturbed
from robo.twin.pretrain import TwinPretrainConfig, pretrain_in_twin, safe_task, single_env_buffer
from robo.twin.select import ResidualPolicy, TwinGate, best_in_twin
from sims.envs import make_robot

LEARNER = LearnerConfig(learning_starts=100, batch_size=64)


class WeakBase:
    """RAPTOR with its collective lowered by 0.2: a base "tuned for a lighter quad" that sinks on a
    heavy one. Batched, with RAPTOR's per-env hidden-state resets."""

    def __init__(self):
        self.raptor = load_raptor()

    def reset(self, mask=None):
        self.raptor.reset(mask)

    def act(self, obs):
        return (torch.as_tensor(self.raptor.act(torch.as_tensor(obs, dtype=torch.float32))) - 0.2).clamp(-1, 1)


def test_single_env_buffer_keeps_every_transition_in_order():
    from gymnasium.spaces import Box
    from stable_baselines3.common.buffers import ReplayBuffer

    buf = ReplayBuffer(40, Box(-1, 1, (3,)), Box(-1, 1, (2,)), device="cpu", n_envs=4)  # 10 rows of 4
    for t in range(5):
        obs = np.arange(12, dtype=np.float32).reshape(4, 3) + 100 * t
        buf.add(obs, obs + 1, np.full((4, 2), t / 10, np.float32), np.arange(4) + t, np.zeros(4), [{}] * 4)
    one = single_env_buffer(buf, 4)
    assert one.n_envs == 1 and one.size() == 20
    np.testing.assert_array_equal(one.observations[:20, 0], buf.observations[:5].reshape(20, 3))
    np.testing.assert_array_equal(one.rewards[:20, 0], buf.rewards[:5].reshape(20))
    np.testing.assert_array_equal(one.next_observations[:20, 0], buf.next_observations[:5].reshape(20, 3))


def test_mixed_buffer_draws_the_prior_share_of_every_batch():
    from gymnasium.spaces import Box
    from stable_baselines3.common.buffers import ReplayBuffer

    space = Box(-1, 1, (1,))
    prior = ReplayBuffer(1000, space, space, device="cpu")
    for _ in range(900):  # prior rows carry reward 1, the robot's rows reward 0
        prior.add(np.zeros(1), np.zeros(1), np.zeros(1), np.ones(1), np.zeros(1), [{}])
    mixed = MixedReplayBuffer(1000, space, space, prior=prior, prior_ratio=0.5, device="cpu")
    assert mixed.sample(64).rewards.mean() == 1.0  # no robot data yet: all prior
    for _ in range(100):
        mixed.add(np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1), [{}])
    assert mixed.sample(64).rewards.mean() == 0.5  # 32 + 32
    mixed.prior_ratio = None  # in proportion to the sizes: 900 / 1000
    assert mixed.sample(100).rewards.mean() == 0.9
    with pytest.raises(ValueError, match="prior_ratio"):
        LearnerConfig(prior_ratio=1.5)


def test_safe_task_ends_episodes_at_the_safety_limits():
    t = safe_task("hover", SafetyConfig(max_tilt_deg=50.0, max_body_rate=15.0))
    assert t.termination.tilt_deg == 50.0 and t.termination.angular_velocity == 15.0
    with pytest.raises(ValueError, match="steps"):
        TwinPretrainConfig(steps=0)


def test_pretraining_in_the_twin_beats_the_base_and_leaves_a_resumable_learner(tmp_path):
    """A base 0.2 short on collective sinks on a 30 % heavier Crazyflie; the residual learned in the
    (calibrated) twin lifts it, and the folder is what ``finetune`` resumes from."""
    heavy = make_robot(perturbed("crazyflie", 1.3, 1.0))
    base = WeakBase()
    cfg = TwinPretrainConfig(steps=6000, num_envs=16, residual_scale=0.5, gradient_steps=2,
                             task={"name": "hover", "episode_seconds": 2.0}, snapshot_every=2000,
                             select_start=(0.0, 0.0, 1.0))
    torch.manual_seed(0)
    out = pretrain_in_twin(base, heavy, tmp_path, cfg, LEARNER, SafetyConfig())
    assert out["steps"] == 6000 and out["transitions"] == 6000
    model, held, _ = load_learner(tmp_path, LEARNER)
    buf = model.replay_buffer  # the twin's transitions are the prior data; the robot's buffer starts empty
    assert held == 0 and isinstance(buf, MixedReplayBuffer) and buf.size() == 0 and buf.prior.size() == 6000
    assert buf.prior.n_envs == 1 and buf.sample(32).observations.shape == (32, 22)
    # snapshots every 2000 steps; the learner continues from the one the twin scored best
    snaps = load_snapshots(tmp_path, LEARNER)
    assert sorted(snaps) == ["sim-000002000", "sim-000004000", "sim-000006000"] == sorted(out["scores"])
    assert out["selected"] == min(out["scores"], key=out["scores"].get)
    for k, v in snaps[out["selected"]].state_dict().items():
        torch.testing.assert_close(model.actor.state_dict()[k], v)
    # a zero residual (the base alone) scores worse in the twin than the selected actor
    best, scores = best_in_twin(base, {"zero": build_sac(LEARNER).actor, "pretrained": model.actor}, heavy,
                                (0.0, 0.0, 1.0), 0.5)
    assert best == "pretrained" and scores["zero"] > scores["pretrained"]
    # the twin gate: the first actor sets the bar; a worse one is held back, the bar stays
    gate = TwinGate(base, heavy, (0.0, 0.0, 1.0), 0.5, tolerance=0.1)
    first, admitted = gate(model.actor)
    assert admitted and first == pytest.approx(scores["pretrained"])
    worse, admitted = gate(build_sac(LEARNER).actor)
    assert not admitted and worse == pytest.approx(scores["zero"]) and gate.best == first
    assert gate(model.actor) == (first, True)

    errors = evaluate_in_twin([base, ResidualPolicy(base, model.actor, 0.5)], heavy, (0.0, 0.0, 1.0), steps=200,
                              envs_per_policy=8, start_jitter=0.1)
    before, after = (hover_scores(errors[:, i])["final_error"].mean() for i in range(2))
    assert before > 0.5 and after < 0.5 * before, (before, after)
    with pytest.raises(FileExistsError):
        pretrain_in_twin(base, heavy, tmp_path, cfg, LEARNER)


def test_twin_gate_config_names_what_is_missing():
    with pytest.raises(ValueError, match=r"\['robot', 'scale'\]"):
        TwinGate.from_config({"base": "raptor", "start": (0, 0, 1)})
    with pytest.raises(ValueError, match="tolerance"):
        TwinGate.from_config({"base": "raptor", "robot": "crazyflie", "start": (0, 0, 1), "scale": 0.5,
                              "tolerance": -1})
    gate = TwinGate.from_config({"base": "raptor", "robot": "crazyflie", "start": (0, 0, 1), "scale": 0.5,
                                 "every": 100, "starts": 4})
    assert gate.starts == 4 and gate.best == float("inf")
