"""A gymnasium env over any ``Robot`` (real or stand-in), always behind a ``SafetyLayer``.

Same observation and action as the simulated quadrotor tasks, so the same evaluation and
fine-tuning code runs on hardware: observation (22,) float32 from ``sims.envs.observation.observe``
(position error, rotation matrix, velocity error, body rates, previous action), action (4,)
normalized motor commands in [-1, 1] (-> ``MotorCommand``), reward ``sims.envs.task.quadrotor_reward``.
An episode ends (terminated) on a safety fault, or (truncated) after ``max_steps`` or on
``request_stop()``; either way the motors are put in the safe state.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from hardware.drivers.base import Robot, RobotState
from hardware.safety import SafetyConfig, SafetyLayer
from sims.envs.config import RewardConfig, check_previous_action
from sims.envs.observation import OBS_DIM, observe
from sims.envs.quadrotor_env import ACTION_SPACE, make_robot
from sims.envs.task import quadrotor_reward
from sims.quadrotor.dynamics import OMEGA, POS, QUAT, STATE_DIM, VEL


@dataclass
class RobotEnvConfig:
    """hover_position: reference, world FLU m; max_steps: cap on env steps per episode;
    control_period: s between steps (pacing for real time; 0 = step as soon as a fresh state
    arrives, for lockstep simulators); state_timeout: s to wait for a fresh state; robot: preset
    (name or dict) whose hover command is the reward's and the first observation's action.

    previous_action: what the observation's previous action holds, as in the simulated tasks
    (``sims.envs.config.QuadrotorTaskConfig``): ``clipped_hover``, the command the safety layer sent, and the
    hover command after a reset; ``raw_motor_state`` (RAPTOR's and L2F's), the action the policy gave, before any
    clipping, and after a reset the motor states the robot reports (``RobotState.extra["motors"]``, [0, 1], mapped
    to [-1, 1]) or, where it reports none, the hover command (the motors of a vehicle hovering at the start; PX4's
    RAPTOR module starts from 0); ``auto``: ``clipped_hover`` unless the code flying a known policy picks the
    policy's own (``robo.evaluate.previous_action_for``)."""

    hover_position: tuple[float, float, float] = (0.0, 0.0, 1.0)
    max_steps: int = 500
    control_period: float = 0.01
    state_timeout: float = 0.2
    robot: str | dict = "crazyflie"
    reward: RewardConfig = field(default_factory=RewardConfig)
    previous_action: str = "auto"

    def __post_init__(self) -> None:
        check_previous_action(self.previous_action)
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.control_period < 0 or self.state_timeout <= 0:
            raise ValueError(f"control_period must be >= 0 and state_timeout > 0, got "
                             f"{self.control_period}, {self.state_timeout}")


def state_tensor(state: RobotState) -> torch.Tensor:
    """``RobotState`` -> (1, 17) float64 simulator-layout state (motor states unknown: 0)."""
    s = torch.zeros(1, STATE_DIM, dtype=torch.float64)
    for sl, v in ((POS, state.position), (QUAT, state.quaternion), (VEL, state.velocity),
                  (OMEGA, state.angular_velocity)):
        s[0, sl] = torch.as_tensor(np.asarray(v, dtype=np.float64))
    return s


class RobotEnv(gym.Env):
    """``gymnasium.Env`` over ``robot`` (wrapped in a ``SafetyLayer`` unless it is one).

    The robot must be connected; ``reset`` clears non-kill faults, arms (through the arming
    checks) and returns the first observation. ``info``: ``position_error`` m, ``safety_events``
    (new ``SafetyEvent`` s of this step), ``stopped`` (a human stop ended the episode), ``state``
    (the ``RobotState`` the observation was made from).

    ``previous_action`` (4,) is the command last sent (what drove the motors: the reward's and a twin's action);
    ``observed_previous_action`` (4,) is what the observation reports, per ``previous_action_mode`` (the config's
    ``previous_action`` resolved, see ``RobotEnvConfig``).
    """

    metadata = {"render_modes": []}

    def __init__(self, robot: Robot | SafetyLayer, config: RobotEnvConfig | None = None,
                 safety: SafetyConfig | None = None):
        self.safety = robot if isinstance(robot, SafetyLayer) else SafetyLayer(robot, safety)
        self.config = config or RobotEnvConfig()
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
        self.action_space = ACTION_SPACE
        self.hover_action = float(make_robot(self.config.robot).hover_action)
        self.reference = torch.tensor([self.config.hover_position], dtype=torch.float64)
        self.previous_action = np.full(4, self.hover_action)
        mode = self.config.previous_action
        self.previous_action_mode = "clipped_hover" if mode == "auto" else mode
        self.observed_previous_action = self.previous_action.copy()
        self.steps = 0
        self._state: RobotState | None = None
        self._n_events = 0
        self._last_step = 0.0
        self._stop_requested = threading.Event()

    def request_stop(self) -> None:
        """Human stop, callable from any thread: motors to the safe state now; the episode ends."""
        self._stop_requested.set()
        self.safety.stop("human stop requested")

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._stop_requested.clear()
        self.safety.clear_faults()
        self._fresh_state(None)  # the arming checks need a recent state
        if not self.safety.armed:
            self.safety.arm()
        state = self.safety.read_state()  # the newest: each step then waits for one newer than this
        self.previous_action = np.full(4, self.hover_action)
        self.observed_previous_action = self._reset_previous_action(state)
        self.steps = 0
        self._n_events = len(self.safety.events)
        self._state = state
        self._last_step = time.monotonic()
        return self._observe(state), {"position_error": self._position_error(state), "state": state}

    def step(self, action):
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (4,):
            raise ValueError(f"action has shape {a.shape}, expected (4,)")
        sent = None if self._stop_requested.is_set() else self.safety.send_action(a)
        before = self.previous_action
        if sent is not None:
            self.previous_action = sent
            self.observed_previous_action = a.copy() if self.previous_action_mode == "raw_motor_state" else sent
            state = self._fresh_state(self._state)
            self._state = state if state is not None else self._state
        self.steps += 1
        events = self.safety.events[self._n_events:]
        self._n_events += len(events)
        stopped = self._stop_requested.is_set()
        terminated = self.safety.fault is not None and not stopped
        truncated = not terminated and (stopped or self.steps >= self.config.max_steps)
        if truncated and not stopped:
            self.safety.stop("episode ended (max_steps)")
        s = self._state
        t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64))[None]  # noqa: E731
        reward = quadrotor_reward(t(s.position - self.config.hover_position), t(s.quaternion[0]), t(s.velocity),
                                  t(s.angular_velocity), t(self.previous_action), t(self.hover_action),
                                  self.config.reward, t(before))
        reward = -self.config.reward.termination_penalty if terminated else float(reward[0])
        info = {"position_error": self._position_error(s), "safety_events": events, "stopped": stopped, "state": s}
        return self._observe(s), reward, terminated, truncated, info

    def close(self):
        self.safety.close()

    # Helpers ---------------------------------------------------------------------------------------------
    def _fresh_state(self, previous: RobotState | None) -> RobotState | None:
        """Wait until ``control_period`` has passed since the last step and a state newer than
        ``previous`` has arrived (up to ``state_timeout``); None if none came."""
        start = time.monotonic()
        pace_until = self._last_step + self.config.control_period
        deadline = start + self.config.state_timeout
        while True:
            now = time.monotonic()
            state = self.safety.read_state()
            fresh = state is not None and (previous is None or state.timestamp > previous.timestamp)
            if fresh and now >= pace_until:
                self._last_step = now
                return state
            if now > deadline:
                return None if previous is not None else state
            time.sleep(max(pace_until - now, 0.0) if fresh else 2e-4)

    def _reset_previous_action(self, state: RobotState | None) -> np.ndarray:
        """(4,) the first observation's previous action: the hover command, or under ``raw_motor_state`` the
        reported motor states mapped to [-1, 1] (the hover command where the robot reports none)."""
        motors = None if state is None else state.extra.get("motors")
        if self.previous_action_mode != "raw_motor_state" or motors is None:
            return np.full(4, self.hover_action)
        motors = np.asarray(motors, dtype=np.float64)
        if motors.shape != (4,) or not np.isfinite(motors).all():
            return np.full(4, self.hover_action)
        return 2 * np.clip(motors, 0.0, 1.0) - 1

    def _observe(self, state: RobotState) -> np.ndarray:
        obs = observe(state_tensor(state), self.reference, torch.zeros(1, 3, dtype=torch.float64),
                      torch.as_tensor(self.observed_previous_action, dtype=torch.float64)[None])
        return obs[0].float().numpy()

    def _position_error(self, state: RobotState) -> float:
        return float(np.linalg.norm(state.position - np.asarray(self.config.hover_position)))
