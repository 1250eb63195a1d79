"""Push-T: env API, coverage math, physics sanity, rendering and the scripted expert."""

import warnings

import cv2
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import sims  # noqa: F401  (registers robo/PushT-v0)
from sims.pusht import ENV_ID, PushTConfig, PushTEnv, coverage, t_rectangles
from sims.pusht.expert import PushTExpert
from sims.pusht.geometry import transform
from sims.pusht.render import to_pixels

GOAL = np.array([0.0, 0.0, np.pi / 4])


@pytest.mark.parametrize("obs_type", ["state", "pixels_agent_pos", "pixels"])
def test_check_env_is_clean(obs_type):
    env = gym.make(ENV_ID, obs_type=obs_type).unwrapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=False)
    assert not [w for w in caught if "gymnasium" in str(w.filename)], [str(w.message) for w in caught]


def test_spaces_reset_and_time_limit():
    env = gym.make(ENV_ID)
    assert env.spec.max_episode_steps == 300
    obs, info = env.reset(seed=3)
    assert obs.shape == (5,) and obs.dtype == np.float32 and env.observation_space.contains(obs)
    again, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs, again)
    assert info["coverage"] < 0.5
    env2 = gym.make(ENV_ID, obs_type="pixels_agent_pos")
    obs, _ = env2.reset(seed=3)
    assert obs["pixels"].shape == (96, 96, 3) and obs["pixels"].dtype == np.uint8
    np.testing.assert_array_equal(obs["agent_pos"], again[:2])
    for k in range(300):
        _, _, terminated, truncated, _ = env.step(env.unwrapped.state[:2].astype(np.float32))  # stand still
        if terminated or truncated:
            break
    assert truncated and not terminated and k == 299


def test_bad_actions_and_states_raise():
    env = PushTEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3,\), expected \(2,\)"):
        env.step(np.zeros(3))
    with pytest.raises(ValueError, match="not finite"):
        env.step(np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="5 finite floats"):
        env.reset(options={"state": np.zeros(4)})
    with pytest.raises(ValueError, match="obs_type"):
        PushTEnv(obs_type="rgb")
    with pytest.raises(ValueError, match="unknown push-T config keys"):
        PushTEnv(config={"half_sise": 0.3})


def test_coverage_exact_at_goal_zero_far_and_matches_rasterization():
    assert coverage(GOAL, GOAL) == pytest.approx(1.0, abs=1e-12)
    assert coverage(np.array([0.2, 0.2, 0.0]), GOAL) == 0.0
    shifts = [coverage(GOAL + [d, 0, 0], GOAL) for d in (0.0, 0.002, 0.005, 0.01, 0.03)]
    assert all(a > b for a, b in zip(shifts, shifts[1:]))
    # shifted up by the bar's height at yaw 0: the bars just touch; stem-stem overlaps 6 cm of
    # stem and the block's stem fills the goal's bar middle (3 x 3 cm)
    flat = np.zeros(3)
    assert coverage(flat + [0, 0.03, 0], flat) == pytest.approx((0.03 * 0.06 + 0.03 * 0.03) / 0.0063, rel=1e-9)
    rng = np.random.default_rng(0)
    size, h = 2000, 0.15
    for _ in range(5):
        pose = np.array([*rng.uniform(-0.03, 0.03, 2), rng.uniform(-np.pi, np.pi)])
        masks = []
        for p in (pose, GOAL):
            m = np.zeros((size, size), np.uint8)
            cv2.fillPoly(m, [np.round(to_pixels(transform(r, p), h, size)).astype(np.int32) for r in t_rectangles()], 1)
            masks.append(m)
        raster = (masks[0] & masks[1]).sum() / masks[1].sum()
        assert coverage(pose, GOAL) == pytest.approx(raster, abs=0.01)


def test_success_terminates_with_full_reward():
    env = PushTEnv()
    env.reset(options={"state": np.array([-0.2, -0.2, *GOAL])})
    _, reward, terminated, _, info = env.step(np.array([-0.2, -0.2], np.float32))
    assert terminated and info["is_success"] and reward == 1.0
    env.reset(options={"state": np.array([-0.2, -0.2, 0.01, 0.0, np.pi / 4])})
    _, reward, terminated, _, info = env.step(np.array([-0.2, -0.2], np.float32))
    assert not terminated and reward == pytest.approx(min(info["coverage"] / 0.95, 1.0)) and reward < 1.0


def test_pusher_pushes_the_block_and_block_rests_otherwise():
    env = PushTEnv()
    start = np.array([-0.1, -0.03, 0.0, 0.0, 0.0])  # the pusher level with the stem, left of it
    env.reset(options={"state": start})
    for _ in range(5):
        env.step(np.array([-0.1, 0.15], np.float32))  # move away, never touching the block
    np.testing.assert_allclose(env.block_pose, start[2:], atol=1e-9)
    env.reset(options={"state": start})
    for k in range(8):
        env.step(np.array([-0.1 + 0.02 * (k + 1), -0.03], np.float32))
    assert env.block_pose[0] > 0.05 and abs(env.block_pose[1]) < 0.02  # pushed along +x
    assert np.all(np.abs(env.block_pose[:2]) < PushTConfig().half_size)


def test_render_shows_goal_block_and_agent():
    env = PushTEnv()
    env.reset(seed=1)
    img = env.render()
    assert img.shape == (384, 384, 3) and img.dtype == np.uint8
    colors = {tuple(c) for c in img.reshape(-1, 3)}
    assert {(144, 238, 144), (119, 136, 153), (65, 105, 225), (255, 255, 255)} <= colors
    small = env.render_image()
    assert small.shape == (96, 96, 3)
    np.testing.assert_array_equal(small, env.render_image())  # deterministic


def _run_expert(env_seed, expert_seed, steps=300):
    env = gym.make(ENV_ID)
    obs, info = env.reset(seed=env_seed)
    expert = PushTExpert(seed=expert_seed)
    agents = []
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(expert.act(obs))
        agents.append(obs[:2])
        if terminated or truncated:
            break
    return info["is_success"], np.array(agents), expert


def test_expert_solves_push_t():
    results = [_run_expert(seed, 100 + seed)[0] for seed in range(20)]
    assert np.mean(results) >= 0.9, f"expert success {np.mean(results):.2f} over 20 episodes"


def test_expert_is_multimodal_and_rejects_bad_obs():
    """From one start, episodes that prefer the other way around the block take another path."""
    paths = {}
    for s in range(12):
        _, agents, expert = _run_expert(env_seed=5, expert_seed=s, steps=25)
        paths.setdefault(expert.side, []).append(agents[:20])
    assert set(paths) == {-1.0, 1.0}
    mean = {side: np.mean(p, axis=0) for side, p in paths.items()}
    assert np.linalg.norm(mean[1.0] - mean[-1.0], axis=1).max() > 0.05  # m apart: distinct modes
    with pytest.raises(ValueError, match=r"expected \(5,\)"):
        PushTExpert().act(np.zeros(4))


def test_goal_mirror_maps_the_task_onto_itself_and_replays_mirrored_demos():
    """The reflection about the goal T's axis: an involution that fixes the goal, keeps coverage, and
    turns an expert episode into one the sim reproduces step for step (a valid demo)."""
    from sims.pusht.symmetry import GoalMirror

    mirror, rng = GoalMirror(), np.random.default_rng(0)
    states = rng.uniform([-0.2, -0.2, -0.2, -0.2, -np.pi], [0.2, 0.2, 0.2, 0.2, np.pi], (50, 5))
    np.testing.assert_allclose(mirror.state(mirror.state(states)), states, atol=1e-12)
    np.testing.assert_allclose(mirror.state(np.array([0.1, 0.1, *GOAL]))[2:], GOAL, atol=1e-12)  # goal fixed
    for s in states[:10]:
        assert coverage(mirror.state(s)[2:], GOAL) == pytest.approx(coverage(s[2:], GOAL), abs=1e-9)
    env = PushTEnv(render_mode=None)
    env.reset(seed=3)
    start = env.state.copy()
    expert = PushTExpert(seed=0)
    expert.reset()
    obs, actions = [env.state.copy()], []
    for _ in range(60):
        actions.append(expert.act(env.state.astype(np.float32)))
        env.step(actions[-1])
        obs.append(env.state.copy())
    env.set_state(mirror.state(start))
    for t, a in enumerate(actions):
        env.step(mirror.action(a))
        np.testing.assert_allclose(env.state[:4], mirror.state(obs[t + 1])[:4], atol=1e-4)
    assert np.abs(mirror.state(np.array(obs)) - np.array(obs))[:, :4].max() > 0.01  # another path, not the same one
    with pytest.raises(ValueError, match="mirror-symmetric"):
        GoalMirror(PushTConfig(goal_x=0.05))
    with pytest.raises(ValueError, match="last axis of 5"):
        mirror.state(np.zeros(4))
