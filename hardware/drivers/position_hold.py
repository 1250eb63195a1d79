"""A companion computer's position loop: position/velocity (mocap or VIO) -> ``AttitudeThrustCommand``; ``fly`` runs
it along a trajectory (``hover_then_eight``) through any attitude-level ``Robot``.

What an offboard computer runs above an angle-mode flight controller (Betaflight's ANGLE, PX4's
attitude setpoints, the Crazyflie's commander): a PID on position error gives a desired
acceleration, which becomes a tilt (small-angle, heading-aligned) and a collective thrust around
``hover_thrust``; heading is held with a yaw-rate command. World and body FLU, SI units.

    a = kp (p* - p) + kd (v* - v) + ki integral(p* - p),   |a_xy| <= g tan(max_tilt)
    pitch = atan(a_x' / g), roll = -atan(a_y' / g)        (a' = a in the heading frame)
    thrust = hover_thrust (1 + a_z / g) / (cos roll cos pitch)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from .base import AttitudeThrustCommand, RobotState
from .frames import euler_to_quat, quat_to_euler

GRAVITY = 9.81


@dataclass
class PositionHold:
    """PID position hold. Gains are per axis (x, y, z) in 1/s^2, 1/s and 1/s^3.

    hover_thrust: the normalized thrust command that carries the weight (the integrator finds the rest).
    max_tilt: rad; max_integral: m s, per axis; yaw_gain: 1/s (yaw rate per rad of heading error).
    """

    hover_thrust: float
    kp: tuple[float, float, float] = (4.0, 4.0, 6.0)
    kd: tuple[float, float, float] = (3.0, 3.0, 4.0)
    ki: tuple[float, float, float] = (0.5, 0.5, 2.0)
    max_tilt: float = math.radians(25.0)
    max_integral: float = 1.0
    yaw_gain: float = 2.0
    _integral: np.ndarray = field(default_factory=lambda: np.zeros(3), repr=False)

    def reset(self) -> None:
        self._integral[:] = 0.0

    def command(self, state: RobotState, target, dt: float, target_velocity=(0.0, 0.0, 0.0),
                heading: float = 0.0) -> AttitudeThrustCommand:
        """One step: state (position, velocity, quaternion, world FLU), target (3,) m -> command."""
        p, v = np.asarray(state.position, dtype=np.float64), np.asarray(state.velocity, dtype=np.float64)
        if not (np.isfinite(p).all() and np.isfinite(v).all()):
            raise ValueError(f"position hold needs a finite position and velocity (mocap/VIO), got p={p} v={v}")
        error = np.asarray(target, dtype=np.float64) - p
        self._integral = np.clip(self._integral + error * dt, -self.max_integral, self.max_integral)
        a = np.asarray(self.kp) * error + np.asarray(self.kd) * (np.asarray(target_velocity) - v) \
            + np.asarray(self.ki) * self._integral
        a_max = GRAVITY * math.tan(self.max_tilt)
        norm = float(np.linalg.norm(a[:2]))
        if norm > a_max:
            a[:2] *= a_max / norm
        yaw = float(quat_to_euler(state.quaternion)[2])
        c, s = math.cos(yaw), math.sin(yaw)
        ax, ay = c * a[0] + s * a[1], -s * a[0] + c * a[1]  # into the heading frame
        pitch, roll = math.atan2(ax, GRAVITY), -math.atan2(ay, GRAVITY)
        thrust = self.hover_thrust * max(1.0 + a[2] / GRAVITY, 0.0) / (math.cos(roll) * math.cos(pitch))
        yaw_error = math.atan2(math.sin(heading - yaw), math.cos(heading - yaw))
        return AttitudeThrustCommand(euler_to_quat(roll, pitch, yaw), float(np.clip(thrust, 0.0, 1.0)),
                                     body_rates=np.array([0.0, 0.0, self.yaw_gain * yaw_error]))


def hover_then_eight(height: float = 1.0, climb_rate: float = 0.5, hover_s: float = 10.0, eight_s: float = 0.0,
                     size: float = 0.5, period_s: float = 8.0, start_height: float = 0.0):
    """A trajectory t -> (position (3,), velocity (3,)): climb at ``climb_rate`` from ``start_height`` to ``height``,
    hold ``hover_s``, then ``eight_s`` of a figure-eight (lemniscate of Gerono in x-y, ``size`` m, ``period_s`` per
    loop) over the take-off point. ``target.duration`` is the total time, ``target.climb`` the climb's."""
    climb = (height - start_height) / climb_rate

    def target(t: float) -> tuple[np.ndarray, np.ndarray]:
        if t < climb:
            return np.array([0.0, 0.0, start_height + climb_rate * t]), np.array([0.0, 0.0, climb_rate])
        te = t - climb - hover_s
        if te <= 0.0 or te > eight_s:
            return np.array([0.0, 0.0, height]), np.zeros(3)
        w = 2 * math.pi / period_s
        return (np.array([size * math.sin(w * te), size * math.sin(w * te) * math.cos(w * te), height]),
                np.array([size * w * math.cos(w * te), size * w * math.cos(2 * w * te), 0.0]))

    target.duration, target.climb = climb + hover_s + eight_s, climb
    return target


def fly(robot, controller: PositionHold, trajectory, seconds: float, period: float = 0.02,
        clock=time.monotonic) -> dict:
    """Fly ``trajectory`` (t -> (position, velocity) target) for ``seconds`` at ``period`` through ``robot`` (an
    armed ``Robot``, normally a ``SafetyLayer``). -> {"t", "position", "target"} arrays (N,), (N, 3), (N, 3) and
    "stopped": None, or why the flight ended early (a dropped command, a disarm).

    ``clock`` () -> s times the trajectory, the ticks and the controller's integral: a simulator's clock when the
    vehicle runs on sim time (a lockstep SITL, slower than the wall clock on a loaded host)."""
    log = {"t": [], "position": [], "target": [], "stopped": None}
    t0 = clock()
    k, last = 0, None
    while (t := clock() - t0) < seconds:
        state = robot.read_state()
        if state is None or not state.armed:
            log["stopped"] = "the vehicle is not armed" if state is not None else "no state"
            break
        target, velocity = trajectory(t)
        dt = period if last is None else max(t - last, 0.0)
        last = t
        if robot.send(controller.command(state, target, dt, target_velocity=velocity)) is None:
            log["stopped"] = f"command dropped: {getattr(robot, 'fault', None)}"
            break
        log["t"].append(t)
        log["position"].append(np.asarray(state.position, dtype=np.float64))
        log["target"].append(target)
        k += 1
        while (left := t0 + k * period - clock()) > 0:
            time.sleep(left if clock is time.monotonic else min(left, 0.002))
    return {key: (np.array(v) if key != "stopped" else v) for key, v in log.items()}
