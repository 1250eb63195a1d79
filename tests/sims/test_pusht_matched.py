"""robo's MuJoCo push-T matched to gym-pusht (task=pusht_matched): walls, starts, image, physics and the expert."""

import warnings
from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from omegaconf import OmegaConf

import sims  # noqa: F401  (registers robo/PushT-v0)
from sims.pusht import ENV_ID, PushTConfig, PushTEnv
from sims.pusht.gym_pusht import MAKE_ID, PX, WALLS, WINDOW, to_robo_points
from sims.pusht.gym_pusht_expert import GymPushTExpert
from sims.pusht.matched import GYM_PUSHT_MATCHED, generate_demos

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "task"


def matched(obs_type="state"):
    return PushTEnv(obs_type=obs_type, render_mode=None, config=GYM_PUSHT_MATCHED)


def gym_pusht(obs_type="state"):
    return gym.make(MAKE_ID, obs_type=obs_type, render_mode=None).unwrapped


@pytest.mark.parametrize("name", ["pusht_matched", "pusht_matched_image"])
def test_task_configs_repeat_the_matched_values(name):
    config = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"{name}.yaml").env_kwargs.config)
    assert config.keys() == GYM_PUSHT_MATCHED.keys()
    for key, value in GYM_PUSHT_MATCHED.items():
        assert config[key] == pytest.approx(value, abs=1e-9) if not isinstance(value, str) else config[key] == value


def test_matched_tasks_compose_with_push_t_presets_and_their_own_demos():
    from tests.hydra_configs import composed

    cfg = OmegaConf.to_container(composed("train", "policy=energy", "task=pusht_matched_image"), resolve=True)
    task, policy = cfg["task"], cfg["policy"]
    assert (policy["encoder_channels"], policy["image_crop"]) == ([16, 32, 64], [84, 84])  # pusht_image's preset
    assert task["demo_generator"] == "sims.pusht.matched:generate_demos"
    assert task["demo_kwargs"] == {"env": task["env_kwargs"]["config"], "obs_type": "image"}
    env = gym.make(task["env_id"], **task["env_kwargs"])
    assert env.unwrapped.cfg.image_style == "gym_pusht" and env.observation_space["pixels"].shape == (96, 96, 3)


def test_walls_window_mass_and_friction_are_gym_pusht_own():
    ref = gym_pusht()
    ref.reset(seed=0)
    segments = [s for s in ref.inner.space.shapes if s.body is ref.inner.space.static_body]
    ends = np.array([[s.a, s.b] for s in segments]).reshape(-1, 2)
    inner_px = (ends.min() + segments[0].radius, ends.max() - segments[0].radius)  # gym-pusht's inner faces
    corners = to_robo_points(np.array([[inner_px[1]] * 2, [inner_px[0]] * 2]))  # robo's frame: turned 180 deg
    (x0, y0), (x1, y1) = PushTConfig(**GYM_PUSHT_MATCHED).wall_box
    assert (x0, y0, x1, y1) == pytest.approx([*corners[0], *corners[1]], abs=1e-6)
    assert (x0, y0, x1, y1) == pytest.approx([*WALLS[0], *WALLS[1]], abs=1e-6)
    assert (x0, x1, y0, y1) == pytest.approx([-0.277, 0.220, -0.219, 0.278], abs=1e-3)
    env = matched()
    assert env.action_space.low == pytest.approx(WINDOW[0], abs=1e-6)
    assert env.action_space.high == pytest.approx(WINDOW[1], abs=1e-6)
    m = env.model
    faces = []
    for i in range(4):
        g = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"wall_{i}")
        axis = 0 if i < 2 else 1
        faces.append(m.geom_pos[g][axis] + (-1 if i % 2 == 0 else 1) * m.geom_size[g][axis])
    assert faces == pytest.approx([x1, x0, y1, y0], abs=1e-9)
    block = ref.inner.block
    b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "block")
    assert m.body_mass[b] == pytest.approx(block.mass)
    assert m.body_inertia[b][2] / m.body_mass[b] == pytest.approx(block.moment / block.mass * PX**2)
    # the centre of gravity 45 px from the bar's outer edge, the area centroid 40.7 px: 4.3 mm towards the stem
    assert m.body_ipos[b][:2] == pytest.approx([0.0, -(45.0 - 256500.0 / 6300.0) * PX], abs=1e-7)
    assert all(s.friction == 0.0 for s in ref.inner.space.shapes)
    assert np.all(m.geom_condim == 1)  # frictionless contacts
    assert m.dof_frictionloss.max() == 0.0 and m.dof_damping[2:].max() == 0.0  # no floor friction
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(matched(), skip_render_check=True)
    caught = [str(w.message) for w in caught if "gymnasium" in str(w.filename)]
    assert not [w for w in caught if "symmetric and normalized" not in w], caught  # gym-pusht's window is off-centre


def test_starts_are_gym_pusht_own_draws():
    env, ref = matched(), gym_pusht()
    for seed in range(10):
        _, info = env.reset(seed=seed)
        _, expected = ref.reset(seed=seed)
        np.testing.assert_allclose(info["state"], expected["state"], atol=1e-6)


def test_image_agrees_with_gym_pusht_on_a_fixed_state():
    """benchmarks/pusht_matched.py: a mean absolute pixel difference of 0.12 (of 255) over 300 states, 9.7 for
    robo's default image."""
    state = np.array([0.12, -0.06, -0.05, 0.08, 0.7])  # pusher right of the goal, block upper left, turned
    pixels, _ = gym_pusht("pixels").reset(options={"state": state})
    env, robo = matched("pixels"), PushTEnv(obs_type="pixels", render_mode=None)
    image, _ = env.reset(options={"state": state})
    default, _ = robo.reset(options={"state": state})
    assert np.abs(image.astype(int) - pixels).mean() < 0.3
    assert np.abs(default.astype(int) - pixels).mean() > 5.0
    blue = np.argwhere((image[..., 2] > 200) & (image[..., 0] < 100))[:, 1].mean()  # the pusher's columns
    assert blue < 48 < np.argwhere((default[..., 2] > 200) & (default[..., 0] < 100))[:, 1].mean()  # mirrored


def test_open_loop_push_follows_gym_pusht():
    """One push of the bar's end from the same start (15 steps): the block ends 0.34 mm and 0.18 deg from
    gym-pusht's (robo's default push-T: 14 mm and 12 deg)."""
    start = np.array([0.1, -0.02, 0.0, 0.0, 0.0])
    path = [np.array([0.1 - 0.012 * k, -0.02 - 0.002 * k], np.float32) for k in range(1, 16)]
    ref = gym_pusht()
    ref.reset(options={"state": start})
    results = {}
    for name, env in (("matched", matched()), ("robo", PushTEnv(render_mode=None))):
        env.reset(options={"state": start})
        for a in path:
            env.step(a)
        results[name] = env.state
    for a in path:
        ref.step(a)
    target = ref.state
    assert np.hypot(*target[2:4]) > 0.05  # the block was pushed
    d = results["matched"] - target
    assert np.hypot(*d[2:4]) < 1e-3 and abs(d[4]) < np.radians(0.5)
    d = results["robo"] - target
    assert np.hypot(*d[2:4]) > 5e-3


def test_adapted_expert_succeeds_in_matched_and_records_demos():
    env = matched()
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        expert = GymPushTExpert(seed=seed)
        for _ in range(300):
            obs, _, terminated, _, info = env.step(expert.act(obs))
            if terminated:
                break
        assert info["is_success"], f"seed {seed}: coverage {info['coverage']:.2f}"
    demos = generate_demos(1, seed=0, obs_type="image", env=GYM_PUSHT_MATCHED)
    assert demos[0]["image"].shape[1:] == (3, 96, 96) and demos[0]["coverage"][-1] >= 0.95
    with pytest.raises(ValueError, match="image_style='pymunk' is not one of"):
        PushTConfig(image_style="pymunk")
    with pytest.raises(ValueError, match="walls="):
        PushTConfig(walls=(0.1, -0.1, 0.0, 0.2))
    assert gym.make(ENV_ID, config=GYM_PUSHT_MATCHED).spec.max_episode_steps == 300
