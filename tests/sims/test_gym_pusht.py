"""gym-pusht behind robo's push-T interface: spaces, frames, success, and the adapted expert."""

import gymnasium as gym
import numpy as np
import pytest

from sims.pusht.geometry import coverage
from sims.pusht.gym_pusht import MAKE_ID, WALLS, WINDOW, to_gym_points, to_gym_state, to_robo_state
from sims.pusht.gym_pusht_demos import iter_demos
from sims.pusht.gym_pusht_expert import COG_BODY_PX, GYRATION_SQ, PX, GymPushTExpert, ServoLead

GOAL = np.array([0.0, 0.0, np.pi / 4])


def make(obs_type="state", render_mode=None):
    return gym.make(MAKE_ID, obs_type=obs_type, render_mode=render_mode)


def test_spaces_follow_robo_push_t_layout():
    env = make()
    assert env.spec.max_episode_steps == 300  # gym-pusht's episode length
    obs, info = env.reset(seed=0)
    assert obs.shape == (5,) and obs.dtype == np.float32 and env.observation_space.contains(obs)
    assert env.action_space.shape == (2,) and env.action_space.low == pytest.approx(WINDOW[0])
    assert info["goal_pose"] == pytest.approx(GOAL) and not info["is_success"]
    assert WALLS[0] == pytest.approx([-0.2768, -0.2192], abs=1e-4)  # the walls in robo's frame (m)
    assert WALLS[1] == pytest.approx([0.2202, 0.2778], abs=1e-4)
    pixels = make("pixels_agent_pos")
    obs, _ = pixels.reset(seed=0)
    assert obs["pixels"].shape == (96, 96, 3) and obs["pixels"].dtype == np.uint8
    assert pixels.observation_space.contains(obs)
    with pytest.raises(ValueError, match=r"action has shape \(3,\), expected \(2,\)"):
        env.step(np.zeros(3))
    with pytest.raises(ValueError, match="obs_type 'keypoints' is not one of"):
        make("keypoints")


def test_frames_map_gym_pusht_onto_robo_exactly():
    env = make()
    covs = []
    for seed in range(10):
        obs, info = env.reset(seed=seed)
        covs.append(info["coverage"])
        assert info["coverage"] == pytest.approx(coverage(obs[2:].astype(float), GOAL), abs=1e-5)  # shapely vs robo
    assert max(covs) > 0.0  # some starts overlap the goal
    state = np.array([0.1, -0.05, 0.03, -0.02, 1.0])
    inner = to_gym_state(state)
    obs, _ = env.reset(options={"state": state})  # gym-pusht turns the block about its centre of gravity
    assert obs == pytest.approx(state, abs=1e-6)
    block = env.unwrapped.inner.block
    assert to_robo_state(inner[:2], np.array(block.position), block.angle) == pytest.approx(state, abs=1e-9)
    assert block.moment / block.mass == pytest.approx(GYRATION_SQ / PX**2)
    assert tuple(block.center_of_gravity) == pytest.approx(tuple(COG_BODY_PX))


def test_image_is_gym_pusht_own_mirrored_from_robo_top_view():
    env = make("pixels_agent_pos")
    agent = np.array([0.15, 0.05])  # robo frame: right of the goal
    obs, _ = env.reset(options={"state": [*agent, -0.15, -0.1, 0.0]})
    blue = np.argwhere((obs["pixels"][..., 2] > 180) & (obs["pixels"][..., 0] < 120))  # the royal-blue pusher
    row, col = blue.mean(0)
    expected_col, expected_row = to_gym_points(agent) / 512 * 96
    assert (col, row) == pytest.approx((expected_col, expected_row), abs=1.0)
    assert col < 48  # robo's +x is gym-pusht's left: the images are mirror images
    assert obs["agent_pos"] == pytest.approx(agent, abs=1e-6)


def test_success_is_gym_pusht_coverage_above_95_percent():
    env = make()
    _, info = env.reset(options={"state": [0.2, 0.2, 0.0, 0.0, np.pi / 4]})
    assert info["coverage"] == pytest.approx(1.0) and not info["is_success"]
    _, reward, terminated, truncated, info = env.step(np.array([0.2, 0.2]))
    assert terminated and info["is_success"] and reward == 1.0 and not truncated
    _, info = env.reset(options={"state": [0.2, 0.2, 0.0, 0.0, np.pi / 4 + 0.4]})
    _, reward, terminated, _, info = env.step(np.array([0.2, 0.2]))
    assert not terminated and not info["is_success"] and reward == pytest.approx(info["coverage"] / 0.95)


def test_servo_lead_predicts_the_kinematic_pusher():
    env = make()
    env.reset(seed=3)
    pusher = env.unwrapped.inner.agent
    phi, gamma = ServoLead().matrices()
    x, v = np.array(pusher.position), np.array(pusher.velocity)
    for target in ([300.0, 200.0], [310.0, 260.0], [250.0, 250.0]):
        env.unwrapped.inner.step(np.array(target))
        x, v = phi[0, 0] * x + phi[0, 1] * v + gamma[0] * np.array(target), \
            phi[1, 0] * x + phi[1, 1] * v + gamma[1] * np.array(target)
        assert np.array(pusher.position) == pytest.approx(x, abs=1e-6)
        assert np.array(pusher.velocity) == pytest.approx(v, abs=1e-6)


def expert_results(n: int, seed: int = 0) -> tuple[float, float]:
    episodes = [ep for ep, _ in iter_demos(n, seed, keep_failures=True)]
    success = np.mean([ep["coverage"][-1] > 0.95 for ep in episodes])
    return float(success), float(np.mean([len(ep["action"]) for ep in episodes]))


def test_adapted_expert_solves_gym_pusht():
    success, steps = expert_results(20)
    assert success >= 0.95 and steps < 150
    expert = GymPushTExpert(seed=0)
    with pytest.raises(ValueError, match=r"obs has shape \(4,\)"):
        expert.act(np.zeros(4))


@pytest.mark.slow
def test_adapted_expert_succeeds_in_98_percent_of_200_episodes():
    success, _ = expert_results(200)
    assert success >= 0.98


def test_gym_pusht_tasks_take_push_t_policy_presets():
    from tests.hydra_configs import composed

    cfg = composed("train", "policy=diffusion", "task=gym_pusht")
    assert cfg.policy.n_action_steps == 2 and cfg.task.eval.episodes == 200  # configs/task_policy/gym_pusht_*.yaml
    image = composed("train", "policy=energy", "task=gym_pusht_image").policy
    assert (image.horizon, image.encoder_channels, image.image_crop) == (6, [16, 32, 64], [84, 84])
    env = gym.make(composed("train", "task=gym_pusht").task.env_id, obs_type="state", render_mode=None)
    assert env.observation_space.shape == (5,)
