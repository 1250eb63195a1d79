"""The obstacle-reach toy's scene options: the default start draws are the demos' (±5 cm), a wider
box covers its half-widths, a moved obstacle blocks the demos' right-hand path and not the left, and
a box that reaches the obstacle, an obstacle over the goal or a malformed option is refused."""

import gymnasium as gym
import numpy as np
import pytest

from sims.toy import ENV_ID, ObstacleReachEnv, expert_action
from sims.toy.obstacle_reach import START


def starts(env, n: int = 400) -> np.ndarray:
    return np.stack([env.reset(seed=i)[0] for i in range(n)])


def test_default_starts_are_the_demos_box():
    """Same draws as the fixed ±5 cm box the demos and every earlier result used."""
    got = starts(ObstacleReachEnv())
    expected = np.stack([(START + np.random.default_rng(np.random.SeedSequence(i)).uniform(-0.05, 0.05, 2))
                         for i in range(len(got))]).astype(np.float32)
    # gymnasium seeds np_random with PCG64(SeedSequence(seed)), as default_rng(SeedSequence(seed)) does
    np.testing.assert_array_equal(got, expected)


def test_wide_start_box_covers_its_half_widths():
    env = gym.make(ENV_ID, start_spread=(1.2, 0.3))
    offset = starts(env) - START
    assert (np.abs(offset) <= [1.2, 0.3]).all()
    assert np.abs(offset[:, 0]).max() > 1.1 and np.abs(offset[:, 1]).max() > 0.27
    assert np.abs(offset[:, 0]).mean() == pytest.approx(0.6, abs=0.06)  # uniform: mean |x| = half-width / 2


@pytest.mark.parametrize("spread, match", [((0.1,), "two finite"), ((0.1, -0.1), "two finite"),
                                           ((np.nan, 0.1), "two finite"), ((0.5, 0.7), "reaches the obstacle")])
def test_bad_start_box_is_refused(spread, match):
    with pytest.raises(ValueError, match=match):
        ObstacleReachEnv(start_spread=spread)


def expert_episode(env, side: float) -> dict:
    """The scripted expert's episode on ``side`` (+1 right, -1 left) -> the last step's info."""
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    for _ in range(env.max_steps):
        obs, _, terminated, truncated, info = env.step(expert_action(obs.astype(np.float64), side, rng))
        if terminated or truncated:
            return info
    return info


def test_moved_obstacle_blocks_the_right_hand_path():
    default, moved = ObstacleReachEnv(), ObstacleReachEnv(obstacle_center=(0.3, 0.0))
    assert expert_episode(default, +1.0)["is_success"] and expert_episode(default, -1.0)["is_success"]
    assert expert_episode(moved, +1.0)["collision"] and expert_episode(moved, -1.0)["is_success"]


@pytest.mark.parametrize("center, match", [((0.3,), "finite"), ((np.inf, 0.0), "finite"),
                                           ((0.0, -0.8), "reaches the obstacle"), ((0.0, 0.7), "covers the goal")])
def test_bad_obstacle_is_refused(center, match):
    with pytest.raises(ValueError, match=match):
        ObstacleReachEnv(obstacle_center=center)
