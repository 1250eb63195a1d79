"""Meta-World tasks as robo tasks (sims/metaworld): spaces, seeded task sampling, the success signal of an
expert rollout, recorded demos read back with robo's reader, the task set and the task config."""

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
from omegaconf import OmegaConf

from sims.metaworld import GROUPS, MAKE_ID, select_tasks

needs_metaworld = pytest.mark.skipif(importlib.util.find_spec("metaworld") is None,
                                     reason="the metaworld package is not installed (pip install 'robo[metaworld]')")


@pytest.fixture(scope="module")
def reach():
    """One reach-v3 env with state observations for the tests below (each build takes ~0.3-1 s)."""
    env = gym.make(MAKE_ID, env_name="reach-v3")
    yield env
    env.close()


@needs_metaworld
def test_spaces_and_episode_length(reach):
    env = reach
    obs, info = env.reset(seed=0)
    assert env.observation_space.shape == (39,) and obs.dtype == np.float32 and env.observation_space.contains(obs)
    assert env.action_space.shape == (4,) and np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)
    assert env.spec.max_episode_steps == 500 and info["is_success"] is False
    np.testing.assert_allclose(obs[-3:], info["goal"], atol=1e-6)   # the goal is observed
    obs, reward, terminated, truncated, info = env.step(np.array([5.0, 0, 0, 0]))   # clipped, not refused
    assert np.isfinite(reward) and not terminated and not truncated
    with pytest.raises(ValueError, match=r"expected \(4,\)"):
        env.step(np.zeros(3))


@needs_metaworld
def test_image_observation():
    env = gym.make(MAKE_ID, env_name="reach-v3", obs_type="pixels_agent_pos", image_size=32)
    obs, _ = env.reset(seed=0)
    assert obs["pixels"].shape == (32, 32, 3) and obs["pixels"].dtype == np.uint8 and obs["pixels"].std() > 5
    assert obs["agent_pos"].shape == (4,) and env.observation_space.contains(obs)
    np.testing.assert_allclose(obs["agent_pos"], env.unwrapped.state[:4])
    env.close()


@needs_metaworld
def test_seed_fixes_goal_and_objects(reach):
    env = reach
    a, _ = env.reset(seed=7)
    b, _ = env.reset(seed=8)
    c, _ = env.reset(seed=7)
    other = gym.make(MAKE_ID, env_name="reach-v3")
    d, _ = other.reset(seed=7)
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(a, d)
    assert np.linalg.norm(a[-3:] - b[-3:]) > 1e-3 and np.linalg.norm(a[4:7] - b[4:7]) > 1e-3  # goal and object
    other.close()


@needs_metaworld
def test_expert_rollout_succeeds_and_ends_there(reach):
    from sims.metaworld.demos import expert_policy, rollout_expert

    env = reach
    ep, success = rollout_expert(env, expert_policy("reach-v3"), seed=3)
    assert success and ep["success"][-1] == 1.0 and not ep["success"][:-1].any()   # ends at its first success
    assert len(ep["action"]) < 500 and np.abs(ep["action"]).max() <= 1.0
    obs, _ = env.reset(seed=3)
    for _ in range(10):    # standing still does not reach the goal
        obs, _, terminated, _, info = env.step(np.zeros(4))
    assert not terminated and not info["is_success"]
    with pytest.raises(ValueError, match="not a Meta-World v3 env"):
        gym.make(MAKE_ID, env_name="reach-v2")


@needs_metaworld
def test_recorded_demos_load_with_robos_reader(tmp_path):
    from robo.datasets import LeRobotDataset
    from robo.datasets.metaworld import record_metaworld
    from sims.metaworld.demos import generate_demos

    summary = record_metaworld(tmp_path / "ds", "button-press-v3", episodes=1, seed=5, progress=False)
    assert summary["episodes"] == 1 and summary["attempts"] == 1 and summary["expert_success_rate"] == 1.0
    ds = LeRobotDataset(tmp_path / "ds")
    assert ds.num_episodes == 1 and ds.fps == 80
    got, (want,) = ds.episode(0), generate_demos(1, seed=5, env_name="button-press-v3")
    assert got["observation.state"].shape == (summary["frames"], 39)
    np.testing.assert_array_equal(got["observation.state"], want["obs"])
    np.testing.assert_array_equal(got["action"], want["action"])


def test_task_groups():
    assert select_tasks("easy") == ["reach-v3", "button-press-v3", "drawer-open-v3", "door-open-v3"]
    assert select_tasks("hard,reach-v3,hard") == ["pick-place-v3", "assembly-v3", "reach-v3"]
    assert len(GROUPS["all"]) == 8
    assert select_tasks("soccer-v3", known=["soccer-v3"]) == ["soccer-v3"]
    with pytest.raises(ValueError, match="neither a group"):
        select_tasks("reach")


def test_task_config_names_the_env_and_picks_the_preset():
    from robo.run_dir import compose

    cfg = compose("train", ["task=metaworld", "task.name=door-open-v3", "policy=diffusion"])
    c = OmegaConf.to_container(cfg, resolve=True)
    assert c["task"]["env_kwargs"]["env_name"] == "door-open-v3" == c["task"]["demo_kwargs"]["env_name"]
    assert c["policy"]["denoiser"] == "mlp" and c["task"]["eval"]["max_steps"] == 500
    image = OmegaConf.to_container(compose("train", ["task=metaworld_image", "task.name=hammer-v3", "policy=energy"]),
                                   resolve=True)
    assert image["task"]["env_kwargs"]["obs_type"] == "pixels_agent_pos"
    assert image["task"]["demo_kwargs"] == {"env_name": "hammer-v3", "obs_type": "image", "camera": "corner2",
                                            "image_size": 96}
    assert image["policy"]["backbone"] == "resmlp" and image["policy"]["encoder_stem_pool"] is True
