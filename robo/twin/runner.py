"""Fly a robot with a digital twin beside it: **shadow** (the policy acts on the robot's measured
state; the twin follows and reports its prediction error and parameter estimates) or
**twin-in-the-loop** (the policy acts on the twin's latency-compensated state; the robot receives
the commands, and the twin is corrected toward the robot every tick, so the robot tracks the twin).

``fly_with_twin`` flies a motor-level policy through a ``RobotEnv``. Above a flight controller that flies
attitude/thrust commands (Betaflight over MSP) the twin needs the motors the controller actually drove:
``ShadowRobot`` wraps such a robot, reads them from ``RobotState.extra["motors"]`` (``BetaflightRobot(...,
read_motors=True)``) and feeds the twin one tick per ``read_state``; ``n_step_errors`` scores its open-loop
predictions afterwards.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from hardware.drivers.base import RobotState
from policies.base import Policy
from robo.evaluate import previous_action_for
from robo.real.robot_env import RobotEnv
from sims.envs.observation import observe
from sims.quadrotor.dynamics import POS, ParamsBatch, rk4_step
from sims.quadrotor.params import QuadrotorParams
from sims.twin import DigitalTwin, measurement

MODES = ("shadow", "twin_in_the_loop")


def twin_measurement(state: RobotState) -> torch.Tensor:
    """A driver's ``RobotState`` -> the twin's (17,) measurement (validated: raises on NaN fields)."""
    return measurement(state.position, state.quaternion, state.velocity, state.angular_velocity)


@dataclass
class TwinFlight:
    """One flight. Per tick t: position_error (T,) m (measured, robot), prediction_error (T, 2) running
    RMS position m / velocity m/s, mass (T,) kg, thrust_scale (T,), latency_steps (T,);
    safety_events: kinds of the safety events; terminated: a safety fault ended it."""

    position_error: list = field(default_factory=list)
    prediction_error: list = field(default_factory=list)
    mass: list = field(default_factory=list)
    thrust_scale: list = field(default_factory=list)
    latency_steps: list = field(default_factory=list)
    safety_events: list = field(default_factory=list)
    terminated: bool = False

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(getattr(self, k)) for k in ("position_error", "prediction_error", "mass",
                                                         "thrust_scale", "latency_steps")}


@torch.no_grad()
def fly_with_twin(env: RobotEnv, twin: DigitalTwin, policy: Policy, mode: str = "shadow", steps: int = 500,
                  seed: int = 0, on_tick: Callable[[int, DigitalTwin], None] | None = None) -> TwinFlight:
    """One episode of ``steps`` ticks on ``env`` (a ``RobotEnv``, so always through the safety layer). Where
    ``env``'s config says ``previous_action: auto``, the episode reports the previous action the way ``policy``
    expects (``robo.evaluate.previous_action_for``: L2F's ``raw_motor_state`` for RAPTOR-compatible policies);
    twin in the loop, the twin's observation reports the same previous action as the robot's would
    (``env.observed_previous_action``), while the twin predicts with the command sent (``env.previous_action``)."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; choose one of {MODES}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    with previous_action_for(policy, env):
        return _fly_with_twin(env, twin, policy, mode, steps, seed, on_tick)


def _fly_with_twin(env: RobotEnv, twin: DigitalTwin, policy: Policy, mode: str, steps: int, seed: int,
                   on_tick: Callable[[int, DigitalTwin], None] | None) -> TwinFlight:
    obs, info = env.reset(seed=seed)
    twin.reset(twin_measurement(info["state"]))
    policy.reset()
    ref = env.reference
    flight = TwinFlight()
    for t in range(steps):
        if mode == "twin_in_the_loop":
            prev = torch.as_tensor(env.observed_previous_action, dtype=torch.float64)[None]  # as env reports it
            obs = observe(twin.state[None], ref, torch.zeros(1, 3, dtype=torch.float64), prev)[0].float().numpy()
        action = np.asarray(policy.act(obs[None].astype(np.float32))[0], dtype=np.float64)
        obs, _, terminated, truncated, info = env.step(action)
        twin.predict(env.previous_action)  # what the safety layer actually sent
        twin.correct(twin_measurement(info["state"]))
        flight.position_error.append(info["position_error"])
        pe = twin.prediction_error
        flight.prediction_error.append((pe["position"], pe["velocity"]))
        est = twin.estimate
        flight.mass.append(est["mass"])
        flight.thrust_scale.append(est["thrust_scale"])
        flight.latency_steps.append(twin.latency_steps)
        flight.safety_events += [e.kind for e in info["safety_events"]]
        if on_tick is not None:
            on_tick(t, twin)
        if terminated or truncated:
            flight.terminated = bool(terminated)
            break
    return flight


class ShadowRobot:
    """``robot`` (any attitude-level ``Robot`` whose states carry ``extra["motors"]``, (4,) in [0, 1], robo's
    order) with ``twin`` shadowing it: each ``read_state`` is one twin tick (``predict`` with the motors reported
    at the previous tick, which drove the vehicle since, as the action; ``correct`` with the state), so the twin's
    ``dt`` must be the caller's control period. Ticks
    below ``min_height`` m (on the ground, which the twin does not model) or without motors are not fed; the
    first tick above resets the twin to the measurement. Everything else goes to ``robot``.

    ``live=False`` only keeps the ticks' (action, measurement) during the flight and ``catch_up()`` feeds them to
    the twin afterwards: the same estimates and predictions (in shadow mode the twin never acts), without the twin's
    compute inside the control loop (tens of ms a tick on a loaded machine).

    ``flight``: a ``TwinFlight`` (position_error stays empty); ``record``: per fed tick (twin state (17,), action
    (4,), measurement (17,)) for ``n_step_errors``; ``seconds``: wall time spent in the twin."""

    def __init__(self, robot, twin: DigitalTwin, min_height: float = 0.3, live: bool = True):
        self.robot, self.twin, self.min_height, self.live = robot, twin, min_height, live
        self.flight, self.record, self.seconds = TwinFlight(), [], 0.0
        self._started = False
        self._pending: list[tuple[np.ndarray | None, torch.Tensor]] = []
        self._last_action: np.ndarray | None = None

    def read_state(self) -> RobotState | None:
        state = self.robot.read_state()
        motors = None if state is None else state.extra.get("motors")
        if motors is None or not state.armed or not float(state.position[2]) > self.min_height:
            return state
        self._pending.append((self._last_action, twin_measurement(state)))  # None on the first tick
        self._last_action = 2.0 * np.asarray(motors, dtype=np.float64) - 1.0
        if self.live:
            self.catch_up()
        return state

    def catch_up(self) -> None:
        """Feed the twin the ticks kept since the last call."""
        for action, z in self._pending:
            self._tick(action, z)
        self._pending.clear()

    def _tick(self, action: np.ndarray, z: torch.Tensor) -> None:
        t0 = time.perf_counter()
        if not self._started or action is None:
            self.twin.reset(z)
            self._started = True
        else:
            self.twin.predict(action)
            self.twin.correct(z)
            pe, est = self.twin.prediction_error, self.twin.estimate
            self.flight.prediction_error.append((pe["position"], pe["velocity"]))
            self.flight.mass.append(est["mass"])
            self.flight.thrust_scale.append(est["thrust_scale"])
            self.flight.latency_steps.append(self.twin.latency_steps)
        self.record.append((self.twin.state.numpy(), np.full(4, np.nan) if action is None else action, z.numpy()))
        self.seconds += time.perf_counter() - t0

    def __getattr__(self, name):
        return getattr(self.robot, name)


@torch.no_grad()
def n_step_errors(record: list, params: QuadrotorParams, steps: int, latency_steps: int = 0,
                  start: int = 0) -> np.ndarray:
    """Open-loop prediction errors (K,) m: from the twin's state at each tick k >= ``start`` of ``record``
    (``ShadowRobot.record``), simulate ``steps`` ticks of ``params`` (the calibrated model; its dt the tick) under
    the recorded actions and compare the position with the measurement of that state (``latency_steps`` ticks
    later). ``steps=1`` is the one-step error."""
    states, actions, z = (torch.as_tensor(np.stack(c), dtype=torch.float64) for c in zip(*record))
    k = torch.arange(start, len(record) - steps - latency_steps)
    if len(k) < 1:
        raise ValueError(f"record has {len(record)} ticks: too few for {steps} steps from tick {start}")
    p = ParamsBatch.from_params(params, len(k), dtype=torch.float64)
    x = states[k]
    for j in range(1, steps + 1):
        x = rk4_step(x, actions[k + j], p)
    return (x[:, POS] - z[k + steps + latency_steps][:, POS]).norm(dim=-1).numpy()


__all__ = ["MODES", "ShadowRobot", "TwinFlight", "fly_with_twin", "n_step_errors", "twin_measurement"]
