"""Self-imitation on push-T: a policy's own successes recorded (``collect_successes``, ``robo record
policy=checkpoint``) and training continued on the demos plus them (``extra_dataset``, ``init_from``)."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from policies.registry import load_policy
from robo.datasets import LeRobotDataset
from robo.datasets.record import record_pusht_rollouts
from robo.imitation.evaluate import collect_successes, evaluate_chunked_policy
from robo.imitation.sources import init_weights, load_episodes, make_imitation_policy
from robo.imitation.data import compute_stats
from robo.imitation.demos import pusht_demos
from sims.pusht import PushTEnv
from tests.robo.test_energy_imitation import robo

TINY_ENERGY = {"kind": "energy", "backbone": "resmlp", "hidden_dims": [32, 32], "horizon": 6, "n_action_steps": 2,
               "n_candidates": 2}


class CoinEnv(gym.Env):
    """One-step episodes: success when the action's first entry is positive."""
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        win = bool(action[0] > 0)
        return np.ones(1, np.float32), float(win), True, False, {"is_success": win}


class NoisePolicy:
    """A chunked policy whose action is its initial noise: each attempt's luck is its noise seed."""
    noise_shape = (1, 1)

    def reset(self, mask=None):
        pass

    def act(self, obs, noise=None):
        return noise[:, 0].numpy()


def test_collect_successes_keeps_each_starts_first_success_over_attempts():
    episodes, stats = collect_successes(NoisePolicy(), lambda **kw: CoinEnv(), starts=40, seed=7, attempts=3,
                                        num_envs=16)
    tried, won = zip(*stats["successes_per_attempt"])
    assert tried[0] == 40 and all(tried[a + 1] == tried[a] - won[a] for a in range(2))
    assert stats["kept"] == len(episodes) == sum(won) and sum(won) > won[0]  # retries add starts
    assert all(ep["action"][0, 0] > 0 and ep["reward"][0] == 1.0 for ep in episodes)
    assert all(ep["obs"].shape == (1, 1) for ep in episodes)
    again, _ = collect_successes(NoisePolicy(), lambda **kw: CoinEnv(), starts=40, seed=7, attempts=3, num_envs=5)
    assert all(np.array_equal(a["action"], b["action"]) for a, b in zip(episodes, again))  # batch-size free
    firsts, stats1 = collect_successes(NoisePolicy(), lambda **kw: CoinEnv(), 40, seed=7, keep_failures=True)
    assert len(firsts) == 40 and stats1["successes_per_attempt"] == [(40, won[0])]
    # the first attempts are the evaluation's episodes of the same seeds
    assert evaluate_chunked_policy(NoisePolicy(), lambda **kw: CoinEnv(), 40, seed=7)["success_rate"] == won[0] / 40
    with pytest.raises(ValueError, match="attempts"):
        collect_successes(NoisePolicy(), lambda **kw: CoinEnv(), 4, attempts=0)


@pytest.fixture(scope="module")
def tiny_pusht_policy(tmp_path_factory):
    torch.manual_seed(0)
    demos = pusht_demos(2, seed=0)
    policy = make_imitation_policy(TINY_ENERGY, 5, 2)
    policy.set_normalization(compute_stats(demos))
    return policy.save(tmp_path_factory.mktemp("tiny") / "policy")


def test_recorded_pusht_rollouts_replay_in_the_sim_and_extend_the_demos(tmp_path, tiny_pusht_policy):
    out = tmp_path / "self"
    summary = record_pusht_rollouts(out, tiny_pusht_policy, starts=2, seed=321, keep_failures=True)
    ds = LeRobotDataset(out)
    assert ds.num_episodes == summary["episodes"] == 2 and ds.num_frames == summary["frames"]
    for i in range(2):
        ep = ds.episode(i)
        env = PushTEnv()
        obs, _ = env.reset(seed=321 + i)
        np.testing.assert_allclose(ep["observation.state"][0], obs, atol=1e-6)
        for t, a in enumerate(ep["action"][:-1]):  # the executed actions reproduce the recorded states and rewards
            obs, reward, *_ = env.step(a)
            np.testing.assert_allclose(ep["observation.state"][t + 1], obs, atol=1e-5)
            assert reward == pytest.approx(ep["next.reward"][t], abs=1e-6)
    task = {"name": "pusht", "demo_generator": "robo.imitation.demos:pusht_demos", "demos": 3}
    episodes = load_episodes(task, None, None, seed=0, extra_dataset=str(out))
    assert len(episodes) == 5 and np.array_equal(episodes[3]["action"], ds.episode(0)["action"])
    with pytest.raises(RuntimeError, match="succeeded from none"):  # an untrained policy: nothing to keep
        record_pusht_rollouts(tmp_path / "none", tiny_pusht_policy, starts=2, seed=321)
    assert not (tmp_path / "none").exists()


def test_init_from_starts_from_the_saved_weights_and_refuses_a_misfit(tmp_path, tiny_pusht_policy):
    saved = load_policy(tiny_pusht_policy)
    fresh = make_imitation_policy(TINY_ENERGY, 5, 2)
    init_weights(fresh, str(tiny_pusht_policy.parent))  # a folder holding policy/ works too
    for (name, a), b in zip(saved.model.state_dict().items(), fresh.model.state_dict().values()):
        assert torch.equal(a, b), name  # normalization buffers included
    with pytest.raises(ValueError, match="does not fit"):
        init_weights(make_imitation_policy({**TINY_ENERGY, "hidden_dims": [64, 64]}, 5, 2), str(tiny_pusht_policy))
    with pytest.raises(ValueError, match="'energy' policy"):
        init_weights(make_imitation_policy({"kind": "implicit_bc", "hidden_dims": [16]}, 5, 2), str(tiny_pusht_policy))
    with pytest.raises(FileNotFoundError, match="no saved policy"):
        init_weights(fresh, str(tmp_path))


@pytest.mark.slow  # ~25 s; the recording and init_from tests above stay in the default suite
def test_cli_records_a_policys_rollouts_and_trains_on_demos_plus_them(tmp_path, tiny_pusht_policy):
    r = robo("record", "task=pusht", "policy=checkpoint", f"policy.path={tiny_pusht_policy}", "episodes=1",
             "keep_failures=true", f"out={tmp_path / 'self'}", f"hydra.run.dir={tmp_path / 'rec'}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "rec" / "metrics.json").read_text())["episodes"] == 1
    run = tmp_path / "train"
    overrides = [f"policy.{k}={v}" for k, v in TINY_ENERGY.items() if k not in ("kind", "hidden_dims")]
    r = robo("train", "policy=energy", "task=pusht", "demos=2", f"extra_dataset={tmp_path / 'self'}",
             f"init_from={tiny_pusht_policy}", "policy.hidden_dims=[32,32]", *overrides, "policy.train.steps=2",
             "policy.train.lr=1e-12", "policy.train.warmup_steps=1", "policy.train.eval_every=0",
             "task.eval.episodes=1", "video.enabled=false", f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "metrics.json").read_text())["num_demos"] == 3
    trained = load_policy(run / "checkpoints" / "latest" / "policy").model.state_dict()
    for name, a in load_policy(tiny_pusht_policy).model.state_dict().items():
        torch.testing.assert_close(trained[name], a, rtol=0, atol=1e-6, msg=name)  # started from it (lr ~ 0)
    bad = robo("record", "task=pusht", "policy=raptor", "episodes=1", f"hydra.run.dir={tmp_path / 'bad'}", cwd=tmp_path)
    assert bad.returncode != 0 and "policy=checkpoint" in bad.stderr
