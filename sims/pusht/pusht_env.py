"""Push-T as a gymnasium env, simulated in MuJoCo (after Diffusion Policy's Push-T / gym-pusht).

Action: (2,) float32, the pusher's target position (x, y) in m, inside the workspace
``[-half_size, half_size]^2`` (0.256 m by default; ``PushTConfig.window`` when set; out-of-range
targets are clipped). A PD servo drives the pusher toward it for one control period (0.1 s at 10 Hz).
The variant matched to gym-pusht (``sims.pusht.matched``, ``task=pusht_matched``) is this env with
other ``PushTConfig`` values: its walls, window, image, starts, block inertia and contacts.

Observations (``obs_type``):

- ``"state"``: (5,) float32 ``[agent x, agent y, block x, block y, block yaw]`` (m, m, m, m, rad);
  the block position is its area centroid, yaw in [-pi, pi).
- ``"pixels_agent_pos"``: Dict ``{"agent_pos": (2,) float32 m, "pixels": (96, 96, 3) uint8}``
  (a top view, +y up; ``image_flip_x``: +x to the left, as gym-pusht's image).
- ``"pixels"``: the (96, 96, 3) uint8 top view alone.

Reward: ``clip(coverage / success_threshold, 0, 1)``; the episode terminates when the block
covers >= 95% of the goal T (success), and is truncated after 300 steps (registered TimeLimit).
``info``: coverage, is_success, state (5,), goal_pose (3,).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from .config import PushTConfig
from .geometry import coverage, t_rectangles, to_body, transform, wrap_angle
from .model import build_model
from .render import View, render_gym_pusht_view, render_top_view

OBS_TYPES = ("state", "pixels_agent_pos", "pixels")
STATE_DIM = 5



def checked_action(action) -> np.ndarray:
    """A push-T action as a (2,) float array (pusher target x, y in m); ValueError for a wrong shape or NaN."""
    a = np.asarray(action, dtype=float)
    if a.shape != (2,):
        raise ValueError(f"action has shape {a.shape}, expected (2,) (pusher target x, y in m)")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"action {a} is not finite")
    return a


class PushTEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, obs_type: str = "state", render_mode: str | None = "rgb_array",
                 config: PushTConfig | dict | None = None):
        if obs_type not in OBS_TYPES:
            raise ValueError(f"obs_type {obs_type!r} is not one of {OBS_TYPES}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or None")
        self.cfg = config if isinstance(config, PushTConfig) else PushTConfig.from_dict(config)
        self.obs_type, self.render_mode = obs_type, render_mode
        self.metadata = {**self.metadata, "render_fps": self.cfg.control_hz}
        self.model = build_model(self.cfg)
        self.data = mujoco.MjData(self.model)
        self.goal_pose = np.array([self.cfg.goal_x, self.cfg.goal_y, self.cfg.goal_yaw])
        self._rects = t_rectangles()
        low, high = (np.array(b, np.float32) for b in self.cfg.window_box)
        self.action_space = gym.spaces.Box(low, high, (2,), np.float32)
        state_space = gym.spaces.Box(np.array([*low, *low, -np.pi], np.float32),
                                     np.array([*high, *high, np.pi], np.float32), dtype=np.float32)
        s = self.cfg.image_size
        pixels = gym.spaces.Box(0, 255, (s, s, 3), np.uint8)
        agent_pos = gym.spaces.Box(low, high, (2,), np.float32)
        self.observation_space = {"state": state_space, "pixels": pixels,
                                  "pixels_agent_pos": gym.spaces.Dict({"agent_pos": agent_pos, "pixels": pixels}),
                                  }[obs_type]
        self._state_space = state_space

    # --- state -------------------------------------------------------------------------------
    @property
    def state(self) -> np.ndarray:
        """(5,) float64 [agent x, agent y, block x, block y, block yaw (wrapped)]."""
        q = self.data.qpos
        return np.array([q[0], q[1], q[2], q[3], float(wrap_angle(q[4]))])

    @property
    def block_pose(self) -> np.ndarray:
        return self.state[2:]

    def set_state(self, state: np.ndarray) -> None:
        """Place the pusher and block at ``state`` (5,) at rest, with the servo target on the pusher."""
        state = np.asarray(state, dtype=float)
        if state.shape != (STATE_DIM,) or not np.all(np.isfinite(state)):
            raise ValueError(f"state must be 5 finite floats [agent x, y, block x, y, yaw], got {state}")
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = state
        self.data.ctrl[:] = state[:2]
        mujoco.mj_forward(self.model, self.data)

    def coverage(self) -> float:
        return coverage(self.block_pose, self.goal_pose, self._rects)

    def sample_initial_state(self, rng: np.random.Generator) -> np.ndarray:
        """A random start: block anywhere in its range and yaw, pusher not touching it, coverage < 50%
        (``start="gym_pusht"``: gym-pusht's reset draw from ``rng``, in robo's frame)."""
        c = self.cfg
        if c.start == "gym_pusht":
            from .matched import gym_pusht_start  # it maps gym-pusht's frame, whose module imports this one
            return gym_pusht_start(rng)
        while True:
            block = np.array([*rng.uniform(-c.init_block_range, c.init_block_range, 2), rng.uniform(-np.pi, np.pi)])
            agent = rng.uniform(-c.init_agent_range, c.init_agent_range, 2)
            if coverage(block, self.goal_pose, self._rects) < 0.5 and not self._touches(agent, block):
                return np.concatenate([agent, block])

    def _touches(self, agent: np.ndarray, block_pose: np.ndarray, margin: float = 0.005) -> bool:
        p = to_body(agent, block_pose)
        r = self.cfg.agent_radius + margin
        return any(np.all(p >= rect.min(0) - r) and np.all(p <= rect.max(0) + r) for rect in self._rects)

    # --- gym API -----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        state = (options or {}).get("state")
        self.set_state(self.sample_initial_state(self.np_random) if state is None else state)
        return self._obs(), self._info(self.coverage())

    def step(self, action):
        a = checked_action(action)
        self.data.ctrl[:] = np.clip(a, self.action_space.low, self.action_space.high)
        if self.cfg.block_velocity_reset > 0:
            self._step_with_velocity_reset()
        else:
            mujoco.mj_step(self.model, self.data, nstep=self.cfg.substeps)
        cov = self.coverage()
        reward = float(np.clip(cov / self.cfg.success_threshold, 0.0, 1.0))
        terminated = cov >= self.cfg.success_threshold
        return self._obs(), reward, bool(terminated), False, self._info(cov)

    def _step_with_velocity_reset(self) -> None:
        """One control period in which the block's velocity is zeroed every ``block_velocity_reset`` s, as
        gym-pusht's pymunk space (damping 0) does every 10 ms step: the block moves only while it is pushed."""
        every = max(1, int(round(self.cfg.block_velocity_reset / self.cfg.timestep)))
        left = self.cfg.substeps
        while left > 0:
            n = min(every, left)
            self.data.qvel[2:] = 0.0
            mujoco.mj_step(self.model, self.data, nstep=n)
            left -= n

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            return None
        return self.render_image(self.cfg.render_size)

    def render_image(self, size: int | None = None) -> np.ndarray:
        """(size, size, 3) uint8 top view (default: the observation's 96 x 96)."""
        s, c = self.state, self.cfg
        view = View(*c.window_box, c.image_flip_x)
        draw = render_gym_pusht_view if c.image_style == "gym_pusht" else render_top_view
        return draw(s[:2], s[2:], self.goal_pose, view, c.agent_radius, size or c.image_size, walls=c.wall_box)

    def _obs(self):
        s = np.clip(self.state, self._state_space.low, self._state_space.high).astype(np.float32)
        if self.obs_type == "state":
            return s
        if self.obs_type == "pixels":
            return self.render_image()
        return {"agent_pos": s[:2].copy(), "pixels": self.render_image()}

    def _info(self, cov: float) -> dict[str, Any]:
        return {"coverage": cov, "is_success": cov >= self.cfg.success_threshold,
                "state": self.state.astype(np.float32), "goal_pose": self.goal_pose.copy()}

    def block_outline_world(self) -> np.ndarray:
        """(2, 4, 2) m: the block's two rectangles in the world frame."""
        return transform(self._rects, self.block_pose)
