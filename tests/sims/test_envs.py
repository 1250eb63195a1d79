from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from omegaconf import OmegaConf
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import sims  # noqa: F401  (registers robo/ envs)
from sims.envs import ENV_IDS, OBS_SLICES, QuadrotorEnv, QuadrotorVectorEnv, make_task_config
from sims.envs.config import QuadrotorTaskConfig
from sims.quadrotor import preset


@pytest.mark.parametrize("env_id", sorted(ENV_IDS.values()))
def test_single_envs_pass_gymnasium_and_sb3_checkers(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=env_id != ENV_IDS["hover"])
    sb3_check_env(env.unwrapped, warn=False)


@pytest.mark.parametrize("task", sorted(ENV_IDS))
def test_make_vec_gives_the_native_batched_env(task):
    venv = gym.make_vec(ENV_IDS[task], num_envs=16, vectorization_mode="vector_entry_point")
    assert isinstance(venv, QuadrotorVectorEnv)
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (16, 22) and obs.dtype == np.float32
    obs, rew, term, trunc, info = venv.step(np.zeros((16, 4), np.float32))
    assert rew.shape == term.shape == trunc.shape == (16,)
    assert venv.observation_space.contains(obs)


def test_observation_layout_at_reset():
    env = QuadrotorEnv("hover")
    obs, _ = env.reset(seed=3)
    s = env.core.state[0].numpy()
    np.testing.assert_allclose(obs[OBS_SLICES["position_error"]], s[:3] - np.array([0, 0, 1.0]), atol=1e-6)
    R = obs[OBS_SLICES["rotation_matrix"]].reshape(3, 3)
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-6)
    assert np.linalg.norm(obs[OBS_SLICES["position_error"]]) <= 0.5 + 1e-6
    assert np.degrees(np.arccos(np.clip(R[2, 2], -1, 1))) <= 30 + 1e-3  # tilt within 30 deg
    np.testing.assert_allclose(obs[OBS_SLICES["previous_action"]], preset("crazyflie").hover_action, atol=1e-6)


def test_same_seed_same_episode_and_different_seed_differs():
    a, b = QuadrotorEnv("waypoint"), QuadrotorEnv("waypoint")
    oa, _ = a.reset(seed=7)
    ob, _ = b.reset(seed=7)
    np.testing.assert_array_equal(oa, ob)
    oc, _ = b.reset(seed=8)
    assert not np.allclose(oa, oc)


def test_truncation_after_episode_time():
    env = QuadrotorEnv(make_task_config("hover", episode_seconds=0.3, init={"position_radius": 0.0, "angle_deg": 0.0}))
    env.reset(seed=0)
    hover = np.full(4, preset("crazyflie").hover_action, np.float32)
    flags = [env.step(hover)[3] for _ in range(30)]
    assert flags == [False] * 29 + [True]


def test_motors_off_crashes_into_the_floor():
    env = QuadrotorEnv("hover")
    env.reset(seed=0)
    for k in range(200):
        _, _, terminated, truncated, _ = env.step(-np.ones(4, np.float32))
        if terminated:
            break
    assert terminated and not truncated and env.core.state[0, 2] < 0.0
    assert 40 < k < 80  # falling ~1 m takes ~0.45 s plus the motors' spin-down


def test_vector_env_autoresets_in_the_same_step():
    venv = QuadrotorVectorEnv(4, make_task_config("hover", episode_seconds=0.05))
    venv.reset(seed=0)
    a = np.zeros((4, 4), np.float32)
    for _ in range(4):
        _, _, _, trunc, info = venv.step(a)
        assert not trunc.any() and "final_obs" not in info
    obs, _, _, trunc, info = venv.step(a)
    assert trunc.all() and info["_final_obs"].all()
    assert not np.allclose(obs, info["final_obs"])
    assert (venv.core.steps == 0).all()


def test_vector_env_rejects_bad_actions():
    venv = QuadrotorVectorEnv(3)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions have shape \(3, 2\), expected \(3, 4\)"):
        venv.step(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        venv.step(np.full((3, 4), np.nan))


def test_reward_is_highest_at_the_reference():
    venv = QuadrotorVectorEnv(2, make_task_config("hover", init={"position_radius": 0.0, "angle_deg": 0.0}))
    venv.reset(seed=0)
    venv.core.sim.state[1, 0] += 0.3
    _, rew, _, _, _ = venv.step(np.full((2, 4), preset("crazyflie").hover_action, np.float32))
    assert rew[0] > rew[1]


def test_figure_eight_reference_passes_its_extremes():
    venv = QuadrotorVectorEnv(1, "figure_eight")
    t = torch.linspace(0, 6.0, 601, dtype=torch.float32)
    venv.core.origin = venv.core.origin.expand(601, 3)
    pos, vel = venv.core.reference(t)
    assert pos[:, 0].max() == pytest.approx(1.0, abs=1e-3) and pos[:, 1].max() == pytest.approx(0.5, abs=1e-3)
    np.testing.assert_allclose(pos[0].numpy(), pos[-1].numpy(), atol=1e-5)  # closed curve
    # velocity is the derivative of position
    np.testing.assert_allclose(np.gradient(pos[:, 0].numpy(), 0.01), vel[:, 0].numpy(), atol=1e-2)


def test_randomized_figure_eights_draw_a_shape_per_episode_and_start_on_it():
    cfg = make_task_config("figure_eight", init={"position_radius": 0.0},
                           figure_eight_randomization={"amplitude": [0.5, 1.5], "period": [4.0, 10.0],
                                                       "random_phase": True})
    venv = QuadrotorVectorEnv(256, cfg)
    obs, _ = venv.reset(seed=0)
    core = venv.core
    period = 2 * np.pi / core.omega.numpy()
    assert 0.5 <= core.amplitude.min() and core.amplitude.max() <= 1.5 and core.amplitude.std() > 0.2
    assert 4.0 <= period.min() and period.max() <= 10.0 and core.phase.std() > 1.0
    # every episode starts on its own reference (radius 0), most of them off the hover point
    np.testing.assert_allclose(obs[:, OBS_SLICES["position_error"]], 0.0, atol=1e-5)
    assert (np.linalg.norm(core.state[:, :2].numpy(), axis=1) > 0.1).mean() > 0.5
    # the velocity is still the derivative of the position, env by env
    t = torch.full((256,), 1.3)
    dp = (core.reference(t + 1e-3)[0] - core.reference(t - 1e-3)[0]) / 2e-3
    np.testing.assert_allclose(dp.numpy(), core.reference(t)[1].numpy(), atol=2e-3)
    # and the acceleration and jerk are the derivatives of the velocity and the acceleration
    h = torch.tensor(1e-3, dtype=torch.float64)
    t = t.double()
    acc, jerk = core.reference_derivatives(t)
    dv = (core.reference(t + h)[1] - core.reference(t - h)[1]) / (2 * h)
    da = (core.reference_derivatives(t + h)[0] - core.reference_derivatives(t - h)[0]) / (2 * h)
    assert acc.abs().max() > 1.0
    np.testing.assert_allclose(dv.numpy(), acc.numpy(), atol=2e-3)
    np.testing.assert_allclose(da.numpy(), jerk.numpy(), atol=2e-3)
    still = QuadrotorVectorEnv(4, "hover").core.reference_derivatives()
    assert all(torch.equal(x, torch.zeros(4, 3, dtype=x.dtype)) for x in still)
    # a reset redraws only the envs reset
    before = core.amplitude.clone()
    mask = torch.zeros(256, dtype=torch.bool)
    mask[:8] = True
    core.reset(mask)
    assert torch.equal(core.amplitude[8:], before[8:]) and not torch.equal(core.amplitude[:8], before[:8])
    with pytest.raises(ValueError, match="figure_eight_randomization.period"):
        make_task_config("figure_eight", figure_eight_randomization={"period": [0.0, 5.0]})
    with pytest.raises(ValueError, match="hover_fraction is a fraction"):
        make_task_config("figure_eight", figure_eight_randomization={"hover_fraction": 2.0})
    half = QuadrotorVectorEnv(1000, make_task_config("figure_eight", figure_eight_randomization={
        "amplitude": [0.5, 1.5], "hover_fraction": 0.3}))
    half.reset(seed=1)
    assert 0.25 < (half.core.amplitude == 0).float().mean() < 0.35 and half.core.amplitude.max() > 1.4


def test_random_pushes_change_the_horizontal_velocity_by_the_drawn_amount_once_per_episode():
    """Pushed and unpushed twins fly the same commands; their horizontal velocities part by dv at the
    drawn time, in the drawn direction, and only in the pushed fraction of episodes."""
    common = dict(init={"position_radius": 0.0, "angle_deg": 0.0}, episode_seconds=3.0)
    push = {"probability": 0.5, "velocity": [0.5, 1.5], "time": [0.5, 1.0], "duration": 0.1}
    pushed = QuadrotorVectorEnv(512, make_task_config("hover", push=push, **common)).core
    still = QuadrotorVectorEnv(512, make_task_config("hover", **common)).core
    pushed.seed(0)
    still.seed(0)
    pushed.reset()
    still.reset()
    start = pushed.push_start.clone()
    assert 0.4 < (start >= 0).float().mean() < 0.6  # about half the episodes are pushed
    on = start >= 0
    assert start[on].min() >= 50 and start[on].max() <= 100  # 0.5-1.0 s at dt = 0.01 s
    hover = 2 * pushed.sim.params.hover_command()[:, None].expand(512, 4) - 1
    for _ in range(120):
        pushed.step(hover)
        still.step(hover)
    dv = (pushed.state[:, 7:10] - still.state[:, 7:10]).numpy()
    expected = (pushed.push_force / pushed.sim.params.mass[:, None] * 0.1).numpy()
    np.testing.assert_allclose(dv[on.numpy()], expected[on.numpy()], atol=1e-3)
    speed = np.linalg.norm(dv[on.numpy(), :2], axis=1)
    assert 0.5 - 1e-3 <= speed.min() and speed.max() <= 1.5 + 1e-3 and np.abs(dv[:, 2]).max() < 1e-4
    np.testing.assert_allclose(dv[~on.numpy()], 0.0, atol=1e-6)
    with pytest.raises(ValueError, match="push.probability is a fraction"):
        make_task_config("hover", push={"probability": 1.5})
    with pytest.raises(ValueError, match=r"push.time must be \[low, high\]"):
        make_task_config("hover", push={"time": [2.0, 1.0]})


def test_hover_yaml_mirrors_the_task_dataclass():
    """configs/task/hover.yaml (the base of every quadrotor task's YAML) holds the dataclass's defaults."""
    yaml = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[2] / "configs/task/hover.yaml"))
    assert QuadrotorTaskConfig.from_dict(yaml) == QuadrotorTaskConfig()


def test_bad_task_config_is_rejected_by_name():
    with pytest.raises(ValueError, match="unknown task 'loop'"):
        make_task_config("loop")
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['init.radius'\]"):
        make_task_config("hover", init={"radius": 1.0})


def test_action_history_extends_the_observation_newest_first():
    env = QuadrotorEnv(make_task_config("hover", action_history=3))
    assert env.observation_space.shape == (34,)
    obs, _ = env.reset(seed=0)
    hover = preset("crazyflie").hover_action
    np.testing.assert_allclose(obs[22:], hover, atol=1e-6)
    a1, a2 = np.full(4, 0.1, np.float32), np.full(4, 0.2, np.float32)
    env.step(a1)
    obs, *_ = env.step(a2)
    np.testing.assert_allclose(obs[OBS_SLICES["previous_action"]], 0.2, atol=1e-6)
    np.testing.assert_allclose(obs[22:26], 0.1, atol=1e-6)
    np.testing.assert_allclose(obs[26:34], hover, atol=1e-6)
    check_env(env, skip_render_check=True)


def test_position_integral_sums_dt_times_the_position_error_clipped_and_restarts_each_episode():
    env = QuadrotorEnv(make_task_config("hover", action_history=1, position_integral=0.02))
    assert env.observation_space.shape == (29,)   # 22 + 4 (one older action) + 3
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs[26:29], 0.0)
    hover, dt = preset("crazyflie").hover_action, env.core.dt
    expected = np.zeros(3)
    for _ in range(40):  # I_t = clip(I_{t-1} + dt e_{t-1}): the error of the observation the action was chosen on
        expected = np.clip(expected + dt * obs[OBS_SLICES["position_error"]], -0.02, 0.02)
        obs, *_ = env.step(np.full(4, hover, np.float32))
        np.testing.assert_allclose(obs[26:29], expected, atol=1e-6)
    assert np.abs(obs[26:29]).max() == pytest.approx(0.02)   # the start is several cm off: the clip is reached
    obs, _ = env.reset(seed=1)
    np.testing.assert_array_equal(obs[26:29], 0.0)
    check_env(env, skip_render_check=True)


def test_a_negative_position_integral_is_refused():
    with pytest.raises(ValueError, match="position_integral"):
        make_task_config("hover", position_integral=-1.0)


def test_guidance_starts_that_fraction_of_episodes_at_the_reference_at_rest():
    cfg = make_task_config("hover", init={"position_radius": 0.5, "angle_deg": 30.0, "velocity": 1.0,
                                          "guidance": 0.25})
    venv = QuadrotorVectorEnv(4000, cfg)
    obs, _ = venv.reset(seed=0)
    at_goal = (np.abs(obs[:, OBS_SLICES["position_error"]]).sum(1) == 0) & (
        np.abs(obs[:, OBS_SLICES["velocity_error"]]).sum(1) == 0)
    assert 0.22 < at_goal.mean() < 0.28
    np.testing.assert_allclose(obs[at_goal][:, OBS_SLICES["rotation_matrix"]],
                               np.tile(np.eye(3).ravel(), (at_goal.sum(), 1)))
    with pytest.raises(ValueError, match="guidance"):
        make_task_config("hover", init={"guidance": 1.5})


def test_action_rate_penalizes_the_change_of_command_only():
    from sims.envs import make_batched_task

    hover = preset("crazyflie").hover_action
    jump = torch.tensor([0.9, -0.5, 0.9, -0.5])

    def rewards(action_rate):
        cfg = make_task_config("hover", reward={"action_rate": action_rate, "action": 0.0, "scale": 0.5})
        task = make_batched_task(cfg, "crazyflie", 2)
        task.seed(0)
        task.reset()
        task.step(torch.full((2, 4), hover))
        return task.step(torch.stack([torch.full((4,), hover), jump])).reward

    off, on = rewards(0.0), rewards(2.0)
    torch.testing.assert_close(on[0], off[0])  # held its command: no cost
    expected = 0.5 * 2.0 * float(((jump - hover) ** 2).sum())  # scale * action_rate * |a_t - a_{t-1}|^2
    assert expected > 1.0
    torch.testing.assert_close(off[1] - on[1], torch.tensor(expected), rtol=1e-4, atol=1e-4)


def test_tilt_limit_terminates_past_the_angle_only():
    """termination.tilt_deg (a safety layer's tilt limit): 45 deg of roll ends a 40-deg-limited episode,
    30 deg does not; the default (180) never does."""
    def step_at_roll(deg: float, limit: float | None):
        task = {"name": "hover"} if limit is None else {"name": "hover", "termination": {"tilt_deg": limit}}
        env = QuadrotorEnv(task)
        env.reset(seed=0)
        half = np.radians(deg) / 2
        env.core.state[0, 3:7] = torch.tensor([np.cos(half), np.sin(half), 0.0, 0.0], dtype=env.core.state.dtype)
        env.core.state[0, 7:13] = 0.0
        return env.step(np.zeros(4, np.float32))[2]

    assert step_at_roll(45.0, 40.0) and not step_at_roll(30.0, 40.0)
    assert not step_at_roll(120.0, None)
