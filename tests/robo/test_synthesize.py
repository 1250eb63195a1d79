"""Synthetic data for BC (``robo.world_model.synthesize``): a chunked policy as a PGD guidance
target, the generated segments the filter keeps, and their shape as imitation episodes."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.world_model import TrajectoryDiffusionConfig
from robo.imitation.data import compute_stats
from robo.world_model.synthesize import chunked_policy_target, segment_episodes, segments_from_episodes, synthesize
from robo.world_model.tasks import make_task
from sims.toy import generate_demos
from sims.toy.obstacle_reach import GOAL


def toy_policy() -> DiffusionPolicy:
    torch.manual_seed(0)
    policy = DiffusionPolicy(DiffusionConfig(obs_dim=2, action_dim=2, denoiser="mlp", mlp_hidden=32, mlp_blocks=1))
    policy.set_normalization(compute_stats(generate_demos(4)))
    return policy


def test_chunked_target_is_the_policy_first_executed_action_at_each_state():
    policy = toy_policy()
    states = torch.as_tensor(np.random.default_rng(0).uniform(-1, 1, (3, 5, 2)), dtype=torch.float32)
    target = chunked_policy_target(policy, seed=7)
    got = target(states)
    assert got.shape == (3, 5, 2)
    torch.testing.assert_close(target(states), got)  # the same noise at every call (denoising step)
    # step t of segment b: the chunk planned from (s[t-1], s[t]), the first state repeated at t = 0
    history = torch.stack([states[1, 0], states[1, 0]])[None]
    noise = torch.randn(15, *policy.noise_shape, generator=torch.Generator().manual_seed(7))[5:6]  # row b*H + t
    chunk = torch.as_tensor(policy.predict_chunk(history, noise))
    torch.testing.assert_close(got[1, 0], chunk[0, policy.n_obs_steps - 1])
    history = states[2, 2:4][None]
    noise = torch.randn(15, *policy.noise_shape, generator=torch.Generator().manual_seed(7))[13:14]
    torch.testing.assert_close(got[2, 3], torch.as_tensor(policy.predict_chunk(history, noise))[0, 1])


def test_segment_episodes_end_at_their_first_success():
    task = make_task("obstacle_reach")
    far, near = np.array([0.0, -1.0]), GOAL + [0.0, -0.05]
    seg = np.zeros((2, 6, 5), np.float32)
    seg[0, :, :2] = [far, far, near, near, far, far]  # succeeds at step 2
    seg[1, :, :2] = far                               # never succeeds: kept whole
    seg[:, :, 2:4] = np.arange(6)[None, :, None]
    episodes = segment_episodes(seg, task)
    assert [len(e["obs"]) for e in episodes] == [3, 6]
    np.testing.assert_array_equal(episodes[0]["action"][:, 0], [0, 1, 2])
    assert episodes[0]["obs"].shape == (3, 2) and episodes[1]["action"].shape == (6, 2)


class Scripted:
    """Stands for a trained generator: returns the given segments, whatever the starts."""

    def __init__(self, segments: np.ndarray):
        self.segments = torch.as_tensor(segments)
        self.config = TrajectoryDiffusionConfig(obs_dim=2, action_dim=2, horizon=segments.shape[1], down_dims=[8])

    def sample(self, start_obs, target_policy, guidance_scale, generator=None):
        return self.segments


def test_synthesize_keeps_the_successful_segments_and_names_their_starts():
    task = make_task("obstacle_reach")
    seg = np.zeros((4, 4, 5), np.float32)
    seg[:, :, 1] = -1.0
    seg[[1, 3], 3, :2] = GOAL
    kept, stats = synthesize(Scripted(seg), np.zeros((4, 2)), task)
    assert stats["generated"] == 4 and stats["successful"] == stats["kept"] == 2
    np.testing.assert_array_equal(stats["kept_starts"], [1, 3])
    np.testing.assert_array_equal(kept, seg[[1, 3]])
    # a dynamics check that every segment fails keeps none
    model = SimpleNamespace(predict=lambda s, a, prev_obs: SimpleNamespace(next_obs=s + 10.0))
    kept, stats = synthesize(Scripted(seg), np.zeros((4, 2)), task, model=model, max_residual=1.0)
    assert stats["successful"] == 2 and stats["kept"] == 0 and len(kept) == 0


def test_segments_from_episodes_slide_over_long_enough_episodes():
    episodes = [{"obs": np.zeros((n, 2)), "action": np.ones((n, 2)), "reward": np.full(n, 0.5)} for n in (10, 3)]
    seg = segments_from_episodes(episodes, horizon=4, stride=3)
    assert seg.shape == (3, 4, 5)  # starts 0, 3, 6 of the 10-step episode; the 3-step one is too short
    with pytest.raises(ValueError, match="at least 11 steps"):
        segments_from_episodes(episodes, horizon=11)  # nothing is long enough


def test_terminated_episodes_are_held_in_their_final_state():
    """With pad_terminal a 3-step episode that terminated gives windows that reach and hold its final
    state (next_obs[-1]); a truncated one is not padded, so it stays too short."""
    def episode(n, terminated):
        obs = np.arange(n, dtype=np.float32)[:, None].repeat(2, 1)
        return {"obs": obs, "next_obs": obs + 1, "action": -obs, "reward": np.full(n, 0.5, np.float32),
                "terminated": np.array([False] * (n - 1) + [terminated])}
    seg = segments_from_episodes([episode(3, True), episode(3, False)], horizon=4, stride=1, pad_terminal=True)
    assert seg.shape == (3, 4, 5)  # 3 + 3 padded steps: starts 0, 1, 2; the truncated episode: none
    np.testing.assert_array_equal(seg[0, :, 0], [0, 1, 2, 3])  # obs 0, 1, 2, then the final state 3
    np.testing.assert_array_equal(seg[2, :, 0], [2, 3, 3, 3])
    np.testing.assert_array_equal(seg[2, 1:, 2], [-2, -2, -2])  # the last action, held
