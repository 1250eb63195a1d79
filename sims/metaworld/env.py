"""One Meta-World v3 task (any of its 50 Sawyer envs) as a gymnasium env with seeded task sampling.

``gymnasium.make("sims.metaworld.env:robo/MetaWorld-v0", env_name="reach-v3", obs_type="state")`` (the
``module:`` prefix imports this module, which registers the id; it needs the ``metaworld`` package,
``pip install 'robo[metaworld]'``).

The task: Meta-World's goal-observable env ``env_name`` (the MT1 / MT50 form: the goal position is in the
observation). Each ``reset(seed=s)`` seeds Meta-World's own task sampling (``SawyerXYZEnv.seed(s)``, then its
``_random_reset_space`` draw of the object and goal positions), so seed s is always the same start and goal;
``reset()`` without a seed draws the next task from that stream.

Action: (4,) float32 in [-1, 1]: the hand's xyz position delta (Meta-World's world frame, z up; scaled by
1/100: 1 cm per unit per step) and the gripper effort (-1 open, +1 closed). Out-of-range actions are clipped.

Observations:

- ``"state"``: Meta-World's (39,) float32 vector: hand xyz (m), gripper opening (0..1), up to two objects'
  xyz + quaternion (14, zero-padded), the same 18 floats of the previous step, and the goal xyz (m).
- ``"pixels_agent_pos"``: Dict ``{"agent_pos": (4,) float32 hand xyz (m) + gripper opening, "pixels":
  (S, S, 3) uint8}``, the image from the fixed camera ``camera`` (default ``"corner2"``, the camera DP3 renders
  its Meta-World images and point clouds from; Meta-World's others: ``corner``, ``corner3``, ``topview``,
  ``behindGripper``, ``gripperPOV``), ``S = image_size`` px, turned upright (MuJoCo's offscreen buffer
  is bottom-up), drawn without shadows and reflections unless ``effects`` (on a CPU's software OpenGL they
  cost ~10x the rest of the frame). Offscreen rendering needs an OpenGL backend: ``MUJOCO_GL=egl`` headless.
  ``render()`` (videos) draws the same camera, ``render_size`` px for state observations.

Reward, success and episode length are Meta-World's: its v2 shaped reward in [0, 10], ``info["success"]``
(the task's own test), ``max_path_length`` = 500 steps
(12.5 ms each: 5 MuJoCo steps of 2.5 ms) before truncation. With ``terminate_on_success`` (default) the
episode ends at the first successful step (``terminated``), so success at the last step is success at any
step of the 500, Meta-World's evaluation rule. ``info`` adds ``is_success`` (bool) and ``goal`` (3,) m.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")  # headless offscreen rendering unless the caller chose a backend

ENV_ID = "robo/MetaWorld-v0"
MAKE_ID = f"{__name__}:{ENV_ID}"   # gym.make(MAKE_ID) imports this module first
OBS_TYPES = ("state", "pixels_agent_pos")
MAX_PATH_LENGTH = 500               # Meta-World's SawyerXYZEnv.max_path_length
CAMERAS = ("corner", "corner2", "corner3", "topview", "behindGripper", "gripperPOV")
STATE_DIM, AGENT_POS_DIM, ACTION_DIM = 39, 4, 4


def env_classes() -> dict:
    """Meta-World's v3 env classes by name (``"reach-v3"``: ``SawyerReachEnvV3``, 50 of them)."""
    try:
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS
    except ImportError as e:
        raise ImportError(f"task metaworld needs the metaworld package ({e}); pip install 'robo[metaworld]'") from e
    return ALL_V3_ENVIRONMENTS


def env_names() -> list[str]:
    """The 50 Meta-World v3 env names, sorted."""
    return sorted(env_classes())


def checked_action(action) -> np.ndarray:
    """A Meta-World action as a (4,) float32 array clipped to [-1, 1]; ValueError for a wrong shape or NaN."""
    a = np.asarray(action, dtype=np.float32)
    if a.shape != (ACTION_DIM,):
        raise ValueError(f"action has shape {a.shape}, expected (4,) (hand dx, dy, dz, gripper effort in [-1, 1])")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"action {a} is not finite")
    return np.clip(a, -1.0, 1.0)


def _task_env(env_name: str, render: bool, camera: str, size: int):
    """Meta-World's env ``env_name`` made goal-observable with seeded task sampling (what its
    ``ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE`` classes do, but with the camera and image size of ours)."""
    classes = env_classes()
    if env_name not in classes:
        raise ValueError(f"env_name {env_name!r} is not a Meta-World v3 env; choose one of {sorted(classes)}")
    try:
        env = classes[env_name](render_mode="rgb_array" if render else None, camera_name=camera, width=size,
                                height=size)
    except ValueError as e:   # metaworld 3.1.1 on mujoco 4.0: its mocap welds no longer fit model.eq_data
        import mujoco

        raise RuntimeError(f"metaworld could not build {env_name} on mujoco {mujoco.__version__} ({e}); it pins "
                           "mujoco==3.3.0: pip install 'robo[metaworld]'") from e
    env._partially_observable = False      # the goal position is part of the observation
    del env.sawyer_observation_space       # a cached property built for the goal-hidden form: rebuild it
    env._freeze_rand_vec = False           # a fresh object / goal draw at every reset ...
    env.seeded_rand_vec = True             # ... from the env's own seeded generator
    env._set_task_called = True            # the draw replaces MT1's fixed list of tasks
    return env


class MetaWorldEnv(gym.Env):
    """A Meta-World v3 task behind robo's env interface; see the module."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 80}

    def __init__(self, env_name: str = "reach-v3", obs_type: str = "state", camera: str = "corner2",
                 image_size: int = 96, render_size: int = 240, render_mode: str | None = None,
                 terminate_on_success: bool = True, effects: bool = False):
        if obs_type not in OBS_TYPES:
            raise ValueError(f"obs_type {obs_type!r} is not one of {OBS_TYPES}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or None")
        if camera not in CAMERAS:
            raise ValueError(f"camera {camera!r} is not one of Meta-World's cameras {CAMERAS}")
        if int(image_size) < 8 or int(render_size) < 8:
            raise ValueError(f"image_size and render_size must be >= 8 px, got {image_size} and {render_size}")
        self.env_name, self.obs_type, self.camera, self.render_mode = env_name, obs_type, camera, render_mode
        self.terminate_on_success, self.effects, self._styled = bool(terminate_on_success), bool(effects), False
        pixels = obs_type != "state"
        self.inner = _task_env(env_name, pixels or render_mode is not None, camera,
                               int(image_size) if pixels else int(render_size))
        space = self.inner.sawyer_observation_space
        state = gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)
        if pixels:
            size = int(image_size)
            self.observation_space = gym.spaces.Dict({
                "agent_pos": gym.spaces.Box(state.low[:AGENT_POS_DIM], state.high[:AGENT_POS_DIM], dtype=np.float32),
                "pixels": gym.spaces.Box(0, 255, (size, size, 3), np.uint8)})
        else:
            self.observation_space = state
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.state = np.zeros(STATE_DIM, np.float32)   # (39,) the last state observation, whatever obs_type

    @property
    def goal(self) -> np.ndarray:
        """(3,) float64 the task's goal position (m, Meta-World's world frame)."""
        return np.array(self.inner._target_pos, dtype=float)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.inner.seed(int(seed))   # Meta-World's task sampling draws from this generator
        obs, _ = self.inner.reset()
        return self._obs(obs), self._info(False)

    def step(self, action):
        obs, reward, _, truncated, info = self.inner.step(checked_action(action))
        success = bool(info["success"])
        return (self._obs(obs), float(reward), success and self.terminate_on_success, bool(truncated),
                {**info, **self._info(success)})

    def render(self) -> np.ndarray | None:
        """The fixed camera's upright (S, S, 3) uint8 view; None without render_mode."""
        return None if self.render_mode is None else self._image()

    def close(self) -> None:
        self.inner.close()

    def _image(self) -> np.ndarray:
        if not self._styled:   # the viewer exists once asked for: set its scene flags before it first draws
            import mujoco

            flags = self.inner.mujoco_renderer._get_viewer("rgb_array").scn.flags
            flags[mujoco.mjtRndFlag.mjRND_SHADOW] = flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = int(self.effects)
            self._styled = True
        return np.ascontiguousarray(self.inner.render()[::-1])

    def _obs(self, inner_obs: np.ndarray):
        state = self.state = np.asarray(inner_obs, dtype=np.float32)
        if self.obs_type == "state":
            return state
        return {"agent_pos": state[:AGENT_POS_DIM].copy(), "pixels": self._image()}

    def _info(self, success: bool) -> dict[str, Any]:
        return {"is_success": success, "goal": self.goal}


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=f"{__name__}:MetaWorldEnv", max_episode_steps=MAX_PATH_LENGTH)
