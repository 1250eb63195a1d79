"""Fine-tuning on imagined successes (``robo.world_model.self_improve``): the kept episodes are
successes in the model, a replay in the simulator reproduces real episodes, selection and fine-tuning
do what they say. (How many imagined successes reproduce depends on the model: 92-99 % with the
benchmark's 200-episode ensemble, ``benchmarks/imagined_finetune.py``.)"""

import numpy as np
import pytest
import torch

from policies.world_model import EnsembleDynamics
from robo.world_model.self_improve import finetune, imagined_successes, replay_in_sim
from robo.world_model.tasks import ensemble_config, make_task, transitions
from tests.hydra_configs import composed

START_SEED = 5_000


@pytest.fixture(scope="module")
def toy():
    """The toy task, an ensemble fitted on 48 behaviour episodes, 24 real start states (seeds 5000..)."""
    task = make_task("obstacle_reach")
    data, _ = task.collect(task.behaviour(0), 48, seed=0)
    model = EnsembleDynamics(ensemble_config(task, 3, [128, 128]))
    model.fit(transitions(data), steps=1500, seed=0)
    starts, _ = task.collect(task.behaviour(1), 24, seed=START_SEED, max_steps=1)
    return task, model, np.stack([e["obs"][0] for e in starts])


def test_imagined_successes_end_at_their_first_success(toy):
    task, model, start = toy
    (_, policy), = task.ladder([0.3], seed=0)  # the scripted expert with 30 % random actions
    episodes, stats = imagined_successes(model, policy, start, task, attempts=2)
    assert 0 < stats["kept"] == len(episodes) <= 48 and stats["rollouts"] == 48
    for e in episodes:
        assert len(e["obs"]) == len(e["action"]) >= 2
        assert task.success_fn(e["obs"][-1:])[0] and not task.success_fn(e["obs"][:-1]).any()
        assert np.array_equal(e["obs"][0], start[int(e["start"])])
        assert "plan" not in e  # the expert is not a chunked policy


def test_replay_reproduces_recorded_sim_episodes():
    """Real episodes (a noisy expert) in the imagined-episode format replay to the same outcomes."""
    task = make_task("obstacle_reach")
    (_, policy), = task.ladder([0.5], seed=0)
    recorded, ok = task.collect(policy, 16, seed=START_SEED)
    assert 0 < ok.sum() < 16  # both outcomes occur
    episodes = [{"obs": np.concatenate([e["obs"], e["next_obs"][-1:]]),
                 "action": np.concatenate([e["action"], e["action"][-1:]]), "start": np.asarray(i)}
                for i, e in enumerate(recorded)]
    assert np.array_equal(replay_in_sim(task.make_env, episodes, START_SEED + np.arange(16)), ok)


class EveryThird:
    """Stands for a chunked policy that replans every 3 steps."""

    n_action_steps = 3

    def __init__(self, policy):
        self.policy = policy

    def reset(self, mask=None):
        self.policy.reset(mask)

    def act(self, obs):
        return self.policy.act(obs)


def test_shortest_keeps_the_fastest_success_of_each_start(toy):
    task, model, start = toy
    def policy():  # the same random actions in both calls
        return EveryThird(task.ladder([0.3], seed=0)[0][1])

    every, _ = imagined_successes(model, policy(), start, task, attempts=3, seed=1)
    best, stats = imagined_successes(model, policy(), start, task, attempts=3, select="shortest", seed=1)
    starts = [int(e["start"]) for e in best]
    assert len(starts) == len(set(starts)) == len({int(e["start"]) for e in every})
    fastest = {s: min(len(e["obs"]) for e in every if int(e["start"]) == s) for s in starts}
    assert all(len(e["obs"]) == fastest[int(e["start"])] for e in best)
    assert all(e["plan"].tolist() == [t % 3 == 0 for t in range(len(e["obs"]))] for e in best)
    assert stats["starts_with_a_success"] == pytest.approx(len(starts) / len(start))


def test_bad_inputs_are_refused(toy):
    task, model, start = toy
    (_, policy), = task.ladder([0.0], seed=0)
    with pytest.raises(ValueError, match="attempts"):
        imagined_successes(model, policy, start, task, attempts=0)
    with pytest.raises(ValueError, match="select"):
        imagined_successes(model, policy, start, task, select="best")
    with pytest.raises(ValueError, match="start_obs has shape"):
        imagined_successes(model, policy, start[:, :1], task)
    episode = {"obs": start[:1] + 0.5, "action": np.zeros((1, 2), np.float32), "start": np.asarray(0)}
    with pytest.raises(ValueError, match="reset with seed"):
        replay_in_sim(task.make_env, [episode], [START_SEED])


def test_finetune_pulls_the_policy_toward_the_new_data():
    """A chunked policy fine-tuned on episodes that always take one action predicts it far more closely."""
    from policies.diffusion import DiffusionConfig, DiffusionPolicy
    from robo.imitation.data import compute_stats

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    episodes = [{"obs": rng.uniform(-1, 1, (20, 2)).astype(np.float32),
                 "action": rng.uniform(-1, 1, (20, 2)).astype(np.float32)} for _ in range(4)]
    policy = DiffusionPolicy(DiffusionConfig(obs_dim=2, action_dim=2, denoiser="mlp", mlp_hidden=64, mlp_blocks=1,
                                             use_ema=False))
    policy.set_normalization(compute_stats(episodes))
    target = np.array([0.6, -0.4], np.float32)
    new = [{"obs": e["obs"], "action": np.tile(target, (20, 1))} for e in episodes]
    obs = torch.as_tensor(np.stack([e["obs"][:2] for e in episodes]))

    def error() -> float:
        chunk = policy.predict_chunk(obs, noise=torch.randn(len(obs), *policy.noise_shape,
                                                            generator=torch.Generator().manual_seed(0)))
        return float((torch.as_tensor(chunk) - torch.as_tensor(target)).abs().mean())

    before = error()
    finetune(policy, new, steps=600, lr=1e-3, batch_size=64)
    assert error() < 0.65 * before, (before, error())  # 0.65 -> 0.36 m


def test_robo_imagine_synthesize_finetunes_a_chunked_base(tmp_path):
    """``robo imagine synthesize synthesize.base=<checkpoint>``: imagined rollouts of the base, a
    fine-tuned copy saved as a policy of the same kind with new weights, both scored in the sim."""
    from policies.diffusion import DiffusionConfig, DiffusionPolicy
    from policies.registry import load_policy
    from robo.imitation.data import compute_stats
    from robo.commands.imagine import run
    from sims.toy import generate_demos

    torch.manual_seed(0)
    demos = generate_demos(10, seed=0)
    base = DiffusionPolicy(DiffusionConfig(obs_dim=2, action_dim=2, denoiser="mlp", mlp_hidden=32, mlp_blocks=1))
    base.set_normalization(compute_stats(demos))
    base.save(tmp_path / "base")
    overrides = ["task=obstacle_reach", "mode=synthesize", f"synthesize.base={tmp_path / 'base'}",
                 "synthesize.attempts=2", "synthesize.finetune_steps=20", "synthesize.eval_episodes=4",
                 "model.data_episodes=8", "model.fit_steps=50", "model.members=2", "model.hidden_dims=[32]",
                 "model.demos=10"]
    m = run(composed("imagine", *overrides), tmp_path / "run")
    assert m["rollouts"] == 16 and m["demos"] == 10 and 0 <= m["kept"] <= 16
    assert m["gain"] == pytest.approx(m["sim_success"] - m["base_sim_success"])
    tuned = load_policy(tmp_path / "run" / "checkpoints" / "latest" / "policy")
    assert tuned.kind == base.kind
    before, after = base.model.state_dict(), tuned.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)

    from policies.mlp import MLPConfig, MLPPolicy

    MLPPolicy(MLPConfig(obs_dim=2, action_dim=2)).save(tmp_path / "mlp")
    overrides[2] = f"synthesize.base={tmp_path / 'mlp'}"
    with pytest.raises(ValueError, match="chunked"):
        run(composed("imagine", *overrides), tmp_path / "run_mlp")
