"""The one interface every robot driver implements (PX4/MAVLink, Crazyflie, Betaflight, ...).

Conventions are robo's everywhere above this line: SI units, world frame FLU (x forward,
y left, z up), body frame FLU, quaternions (w, x, y, z) rotating body -> world, motor order
[front-right, back-right, back-left, front-left]. Each driver converts to and from its
stack's own conventions (NED/FRD, its motor order, its units) inside the driver, in one
tested place, so nothing above it ever sees a foreign frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


class RobotError(RuntimeError):
    """A driver-level failure: no link, refused arming, timeout. The message says what to check."""


@dataclass
class RobotState:
    """One timestamped measurement of the vehicle, in robo's conventions.

    timestamp: s, host monotonic clock (``time.monotonic()``) when the measurement arrived.
    position (3,) world FLU m; velocity (3,) world FLU m/s; quaternion (4,) w, x, y, z body -> world;
    angular_velocity (3,) body FLU rad/s. Fields the stack does not report are NaN.
    armed: whether the vehicle reports its motors armed. ``extra`` holds driver-specific values.
    vehicle_time: s on the driver's ``clock`` when the measurement arrived, for a driver that has one (a lockstep
    SITL's sim time: ``BetaflightRobot(clock=)``); None otherwise. The safety layer measures state ages on it.
    """

    timestamp: float
    position: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))
    velocity: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))
    quaternion: np.ndarray = field(default_factory=lambda: np.array([1.0, 0.0, 0.0, 0.0]))
    angular_velocity: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))
    armed: bool = False
    extra: dict = field(default_factory=dict)
    vehicle_time: float | None = None


@dataclass
class MotorCommand:
    """Direct motor-level command: ``motors`` (4,) in [0, 1] (robo action a maps to (a + 1) / 2),
    order FR, BR, BL, FL."""

    motors: np.ndarray


@dataclass
class AttitudeThrustCommand:
    """Attitude setpoint: ``quaternion`` (4,) w, x, y, z body -> world FLU, ``thrust`` in [0, 1]
    (collective, normalized), optional ``body_rates`` (3,) FLU rad/s feed-forward."""

    quaternion: np.ndarray
    thrust: float
    body_rates: np.ndarray | None = None


Command = MotorCommand | AttitudeThrustCommand


@runtime_checkable
class Robot(Protocol):
    """A real (or stand-in) robot behind a link.

    ``connect`` opens the link and waits for the first state (raises ``RobotError`` after
    ``timeout`` s); ``arm``/``disarm`` switch the motors (``arm`` raises if the vehicle refuses);
    ``read_state`` returns the newest ``RobotState`` (None before the first arrives) without
    blocking; ``send`` transmits one command (raises ``TypeError`` for a command kind the
    driver does not support); ``close`` stops the motors if armed and releases the link.
    """

    name: str

    def connect(self, timeout: float = 5.0) -> None: ...

    def arm(self) -> None: ...

    def disarm(self) -> None: ...

    def read_state(self) -> RobotState | None: ...

    def send(self, command: Command) -> None: ...

    def close(self) -> None: ...
