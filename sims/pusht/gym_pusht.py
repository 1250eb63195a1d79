"""gym-pusht (the pymunk Push-T that LeRobot and Diffusion Policy report on) behind robo's push-T interface.

``gymnasium.make("sims.pusht.gym_pusht:robo/GymPushT-v0", obs_type="state" | "pixels_agent_pos" | "pixels")``
(the ``module:`` prefix imports this module, which registers the id; it needs the ``gym-pusht`` package,
``pip install 'robo[bench]'``).

Frames. gym-pusht works in pixels of its 512 x 512 window (x right, y down, 1 px = 1 mm), the block's pose
being its body origin (the middle of the bar's outer edge) and angle. robo's frame (``sims.pusht.geometry``) is
the same plane turned by 180 degrees, in metres, with its origin on the goal T's area centroid:

    p_robo = -(p_px - GOAL_CENTROID_PX) / 1000,   yaw_robo = wrap(angle_px)

so positions, the goal (0, 0, pi/4), the T's outline and coverage agree exactly with robo's push-T, and robo's
block position is the T's area centroid. The walls (inner faces at 7 and 504 px) sit at x in [-0.277, 0.220],
y in [-0.219, 0.278] m (``WALLS``); the workspace is not centred on the goal as robo's is.

Action: (2,) float32, the pusher's target (x, y) in m in robo's frame, inside gym-pusht's [0, 512]^2 px
(``action_space``; targets outside are clipped). gym-pusht's PD servo (kp 100, kv 20 per unit mass, 10 ms
steps) drives the pusher toward it for 0.1 s.

Observations (robo's layout):

- ``"state"``: (5,) float32 ``[agent x, agent y, block x, block y, block yaw]`` (m, m, m, m, rad), the block
  at its area centroid, yaw in [-pi, pi).
- ``"pixels_agent_pos"``: Dict ``{"agent_pos": (2,) float32 m, "pixels": (96, 96, 3) uint8}``, the image
  being gym-pusht's own (its colours and frame: robo's top view mirrored left to right), as in LeRobot's
  ``lerobot/pusht`` data.
- ``"pixels"``: gym-pusht's (96, 96, 3) uint8 image alone.

Reward, success and episode length are gym-pusht's: reward ``clip(coverage / 0.95, 0, 1)``, success and
termination when coverage > 0.95 (strictly), truncation after 300 steps (the registered TimeLimit). Resets
draw gym-pusht's own starts from the seed (``reset(seed=s)`` is gym-pusht's episode s); ``options={"state":
(5,) robo state}`` starts from a given state. ``info``: coverage, is_success, state (5,), goal_pose (3,).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from .geometry import wrap_angle
from .pusht_env import checked_action

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # gym-pusht imports pygame; it draws on a Surface only

ENV_ID = "robo/GymPushT-v0"
MAKE_ID = f"{__name__}:{ENV_ID}"   # gym.make(MAKE_ID) imports this module first
OBS_TYPES = ("state", "pixels_agent_pos", "pixels")
MAX_EPISODE_STEPS = 300             # gym-pusht's registered limit
WINDOW_PX = 512.0                   # gym-pusht's action and observation range [0, 512]
PX = 1e-3                           # m per px
GOAL_PX = np.array([256.0, 256.0, np.pi / 4])  # gym-pusht's goal pose (body origin px, angle rad)
CENTROID_BODY_PX = np.array([0.0, (3600.0 * 15.0 + 2700.0 * 75.0) / 6300.0])  # T's area centroid, body frame px
COG_BODY_PX = np.array([0.0, 45.0])  # the block's centre of gravity (gym-pusht: the mean of its shapes' centroids)
WALL_PX = (7.0, 504.0)              # inner faces of gym-pusht's walls (segments at 5 and 506 px, radius 2)


def _rot(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s], [s, c]])


GOAL_CENTROID_PX = GOAL_PX[:2] + _rot(GOAL_PX[2]) @ CENTROID_BODY_PX


def to_robo_points(p_px: np.ndarray) -> np.ndarray:
    """gym-pusht window points (..., 2) px -> robo-frame points (..., 2) m."""
    return -(np.asarray(p_px, dtype=float) - GOAL_CENTROID_PX) * PX


def to_gym_points(p_m: np.ndarray) -> np.ndarray:
    """robo-frame points (..., 2) m -> gym-pusht window points (..., 2) px."""
    return GOAL_CENTROID_PX - np.asarray(p_m, dtype=float) / PX


def to_robo_state(agent_px: np.ndarray, block_origin_px: np.ndarray, angle: float) -> np.ndarray:
    """gym-pusht's agent position (2,) px and block body origin (2,) px and angle (rad) -> robo's state (5,)
    float64 [agent x, y, block centroid x, y, yaw] (m, rad)."""
    centroid_px = np.asarray(block_origin_px, dtype=float) + _rot(angle) @ CENTROID_BODY_PX
    return np.array([*to_robo_points(agent_px), *to_robo_points(centroid_px), float(wrap_angle(angle))])


def to_gym_state(state: np.ndarray) -> np.ndarray:
    """robo's state (5,) -> the gym-pusht ``reset_to_state`` (5,) [agent x, y, block x, y (px), angle] that puts
    the block there. gym-pusht sets the block's position at angle 0 and then turns it about its centre of
    gravity (``COG_BODY_PX``), so the position it is given is the body origin of the unturned block."""
    state = np.asarray(state, dtype=float)
    origin_px = to_gym_points(state[2:4]) - _rot(state[4]) @ CENTROID_BODY_PX
    return np.array([*to_gym_points(state[:2]), *(origin_px - COG_BODY_PX + _rot(state[4]) @ COG_BODY_PX), state[4]])


def _box(lo_px: float, hi_px: float) -> tuple[np.ndarray, np.ndarray]:
    """The robo-frame (low, high) (2,) m of the window square [lo_px, hi_px]^2 (the 180-degree turn swaps ends)."""
    a, b = to_robo_points(np.array([hi_px, hi_px])), to_robo_points(np.array([lo_px, lo_px]))
    return a, b


WALLS = _box(*WALL_PX)          # (low, high) (2,) m: the block stays inside
WINDOW = _box(0.0, WINDOW_PX)   # (low, high) (2,) m: the action range


class GymPushTEnv(gym.Env):
    """gym-pusht's ``PushTEnv`` with robo's observation layout, action units (m) and frame; see the module."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, obs_type: str = "state", render_mode: str | None = "rgb_array"):
        if obs_type not in OBS_TYPES:
            raise ValueError(f"obs_type {obs_type!r} is not one of {OBS_TYPES}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or None")
        try:
            from gym_pusht.envs import PushTEnv as GymPushT
        except ImportError as e:
            raise ImportError(f"task gym_pusht needs the gym-pusht package ({e}); "
                              "pip install 'robo[bench]' and pip install --no-deps gym-pusht==0.1.8") from e
        self.obs_type, self.render_mode = obs_type, render_mode
        pixels = obs_type != "state"
        self.inner = GymPushT(obs_type="pixels_agent_pos" if pixels else "state",
                              render_mode="rgb_array" if pixels or render_mode else None)
        low, high = WINDOW
        self.action_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), (2,), np.float32)
        self._state_space = gym.spaces.Box(np.array([*low, *low, -np.pi], np.float32),
                                           np.array([*high, *high, np.pi], np.float32), dtype=np.float32)
        if obs_type == "state":
            self.observation_space = self._state_space
        else:
            image = self.inner.observation_space["pixels"]  # (96, 96, 3) uint8
            agent_pos = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), (2,), np.float32)
            self.observation_space = image if obs_type == "pixels" else gym.spaces.Dict(
                {"agent_pos": agent_pos, "pixels": image})
        self.goal_pose = np.array([0.0, 0.0, float(wrap_angle(GOAL_PX[2]))])

    @property
    def state(self) -> np.ndarray:
        """(5,) float64 robo state [agent x, y, block x, y, yaw] of the current pymunk bodies."""
        block = self.inner.block
        return to_robo_state(np.array(self.inner.agent.position), np.array(block.position), float(block.angle))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        state = (options or {}).get("state")
        if state is not None:
            state = np.asarray(state, dtype=float)
            if state.shape != (5,) or not np.all(np.isfinite(state)):
                raise ValueError(f"options['state'] must be 5 finite floats [agent x, y, block x, y, yaw], got {state}")
        inner_options = None if state is None else {"reset_to_state": to_gym_state(state)}
        obs, info = self.inner.reset(seed=seed, options=inner_options)
        return self._obs(obs), self._info(self.inner._get_coverage(), False)

    def step(self, action):
        a = checked_action(action)
        target = np.clip(to_gym_points(np.clip(a, self.action_space.low, self.action_space.high)), 0.0, WINDOW_PX)
        obs, reward, terminated, truncated, info = self.inner.step(target)
        return (self._obs(obs), float(reward), bool(terminated), bool(truncated),
                self._info(float(info["coverage"]), bool(info["is_success"])))

    def render(self) -> np.ndarray | None:
        """gym-pusht's (680, 680, 3) uint8 view with the last target marked; None without render_mode."""
        return None if self.render_mode is None else self.inner.render()

    def close(self) -> None:
        self.inner.close()

    def _obs(self, inner_obs):
        s = np.clip(self.state, self._state_space.low, self._state_space.high).astype(np.float32)
        if self.obs_type == "state":
            return s
        if self.obs_type == "pixels":
            return inner_obs["pixels"]
        return {"agent_pos": s[:2].copy(), "pixels": inner_obs["pixels"]}

    def _info(self, coverage: float, success: bool) -> dict[str, Any]:
        return {"coverage": coverage, "is_success": success, "state": self.state.astype(np.float32),
                "goal_pose": self.goal_pose.copy()}


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=f"{__name__}:GymPushTEnv", max_episode_steps=MAX_EPISODE_STEPS)
