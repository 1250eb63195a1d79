"""One robo quadrotor (B = 1) that protocol stand-ins serve state from and apply commands to.

The stand-ins in this package (``crazyflie_link``, ``betaflight_sitl``) play a flight controller:
they decode a driver's bytes, hand the command to a ``SimVehicle`` and report its state back in
the stack's own units. Frames are robo's: world FLU (z up), body FLU, SI units, quaternion
(w, x, y, z) body -> world, motor order FR, BR, BL, FL.

A vehicle "on the ground" (not armed) holds its initial pose; once armed, ``step`` advances the
sim by ``dt`` under the latest command. ``start`` runs ``step`` in real time on a thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch, QuadrotorParams, hover_state, preset

from .loops import BackgroundLoops

ATTITUDE_KP = 40.0  # 1/s^2: attitude error (rad) -> angular acceleration
ATTITUDE_KD = 12.0  # 1/s: rate error (rad/s) -> angular acceleration


def quat_to_euler_zyx(q: np.ndarray) -> np.ndarray:
    """Quaternion (4,) w, x, y, z -> (roll, pitch, yaw) (3,) rad, ZYX intrinsic, same frame."""
    w, x, y, z = q
    roll = np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0))
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return np.array([roll, pitch, yaw])


def euler_zyx_to_quat(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """(roll, pitch, yaw) rad, ZYX intrinsic -> quaternion (4,) w, x, y, z."""
    cr, sr = np.cos(roll / 2), np.sin(roll / 2)
    cp, sp = np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return np.array([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy])


def attitude_to_motors(state: np.ndarray, roll: float, pitch: float, yaw_rate: float, thrust: float,
                       params: QuadrotorParams) -> np.ndarray:
    """A stand-in flight controller's angle mode: PD on roll/pitch, P on yaw rate, then the mixer.

    state: (17,) robo state; roll, pitch rad (FLU, ZYX), yaw_rate rad/s (FLU z), thrust in [0, 1]
    of the maximum collective thrust. Returns motor commands (4,) in [0, 1], order FR, BR, BL, FL.
    """
    q, w = state[3:7], state[10:13]
    _, _, yaw = quat_to_euler_zyx(q)
    err = quat_to_euler_zyx(_quat_mul(_quat_conj(q), euler_zyx_to_quat(roll, pitch, yaw)))
    acc = ATTITUDE_KP * np.array([err[0], err[1], 0.0]) + ATTITUDE_KD * (np.array([0.0, 0.0, yaw_rate]) - w)
    inertia = np.asarray(params.inertia)
    torque = inertia @ acc + np.cross(w, inertia @ w)
    mixer = _mixer(params)  # (6, 4)
    wrench = np.concatenate([[float(np.clip(thrust, 0, 1)) * params.max_thrust], torque])
    rotor = np.linalg.solve(mixer[2:6], wrench).clip(min=0.0)
    c0, c1, c2 = np.asarray(params.thrust_curve).T
    disc = np.maximum(c1 * c1 - 4 * c2 * (c0 - rotor), 0.0)
    u = np.where(c2 > 1e-12, (-c1 + np.sqrt(disc)) / (2 * np.maximum(c2, 1e-12)), (rotor - c0) / c1)
    return np.clip(u, 0.0, 1.0)


def _mixer(params: QuadrotorParams) -> np.ndarray:
    """(6, 4) map from rotor thrusts (N) to the body wrench [force; torque], as in the sim."""
    pos, tdir = np.asarray(params.rotor_positions), np.asarray(params.rotor_thrust_directions)
    qdir, kq = np.asarray(params.rotor_torque_directions), np.asarray(params.torque_constant)
    return np.concatenate([tdir, np.cross(pos, tdir) + kq[:, None] * qdir], axis=1).T


def _quat_conj(q: np.ndarray) -> np.ndarray:
    return np.array([q[0], -q[1], -q[2], -q[3]])


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw])


@dataclass
class VehicleSnapshot:
    """The vehicle's state at ``time`` (s of sim time since start), robo conventions.

    position, velocity (3,) world FLU; quaternion (4,) w, x, y, z; angular_velocity (3,) body FLU
    rad/s; specific_force (3,) body FLU m/s^2 (what an accelerometer reads: +g on z when level);
    motors (4,) states in [0, 1].
    """

    time: float
    position: np.ndarray
    velocity: np.ndarray
    quaternion: np.ndarray
    angular_velocity: np.ndarray
    specific_force: np.ndarray
    motors: np.ndarray
    armed: bool


class SimVehicle:
    """robo's quadrotor sim with B = 1, commanded by motor or attitude/thrust setpoints.

    Args:
        params: physical parameters (default: the ``crazyflie`` preset).
        position: (3,) initial position, world FLU m.
    """

    def __init__(self, params: QuadrotorParams | None = None, position=(0.0, 0.0, 1.0)):
        self.params = params or preset("crazyflie")
        self._batch = ParamsBatch.from_params(self.params, dtype=torch.float64)
        self._sim = BatchedQuadrotorSim(self._batch)
        self._sim.reset(_hover(self._batch, position))
        self._lock = threading.Lock()
        self._motors = np.full(4, self.params.hover_command)
        self._attitude: tuple[float, float, float, float] | None = None
        self._specific_force = np.array([0.0, 0.0, float(np.linalg.norm(self.params.gravity))])
        self.armed = False
        self.commanded = np.zeros(4)  # motor commands (4,) in [0, 1] of the last step (FR, BR, BL, FL)
        self._loops = BackgroundLoops("SimVehicle")

    @property
    def dt(self) -> float:
        return self.params.dt

    def set_motors(self, motors) -> None:
        """Hold motor commands (4,) in [0, 1] (FR, BR, BL, FL) until the next command."""
        m = np.asarray(motors, dtype=np.float64)
        if m.shape != (4,) or not np.all(np.isfinite(m)):
            raise ValueError(f"motors must be 4 finite values, got {m!r}")
        with self._lock:
            self._motors, self._attitude = np.clip(m, 0.0, 1.0), None

    def set_attitude(self, roll: float, pitch: float, yaw_rate: float, thrust: float) -> None:
        """Hold an angle-mode setpoint (rad, rad, rad/s FLU; thrust in [0, 1] of max collective)."""
        vals = (float(roll), float(pitch), float(yaw_rate), float(thrust))
        if not np.all(np.isfinite(vals)):
            raise ValueError(f"attitude setpoint must be finite, got {vals}")
        with self._lock:
            self._attitude = vals

    def set_state(self, position=None, quaternion=None, velocity=None, angular_velocity=None) -> None:
        """Overwrite parts of the state (robo frames; quaternion w, x, y, z is normalized)."""
        with self._lock:
            s = self._sim.state[0].clone()
            for sl, v in ((slice(0, 3), position), (slice(3, 7), quaternion), (slice(7, 10), velocity),
                          (slice(10, 13), angular_velocity)):
                if v is not None:
                    s[sl] = torch.as_tensor(np.asarray(v, dtype=np.float64))
            s[3:7] = s[3:7] / s[3:7].norm()
            self._sim.state = s[None]

    def step(self) -> None:
        """Advance by ``dt`` under the held command (no-op while disarmed: it sits on the ground)."""
        with self._lock:
            if not self.armed:
                return
            state = self._sim.state[0].numpy()
            if self._attitude is not None:
                motors = attitude_to_motors(state, *self._attitude, self.params)
            else:
                motors = self._motors
            self.commanded = motors  # what a flight controller reports as its motor outputs (MSP_MOTOR)
            v0 = state[7:10].copy()
            action = torch.as_tensor(2 * motors - 1, dtype=torch.float64)[None]
            new = self._sim.step(action, validate=False)[0].numpy()
            acc_world = (new[7:10] - v0) / self.dt - np.asarray(self.params.gravity)
            self._specific_force = _rotate(_quat_conj(new[3:7]), acc_world)

    def snapshot(self) -> VehicleSnapshot:
        with self._lock:
            s = self._sim.state[0].numpy().copy()
            return VehicleSnapshot(float(self._sim.time[0]), s[0:3], s[7:10], s[3:7], s[10:13],
                                   self._specific_force.copy(), s[13:17], self.armed)

    def start(self) -> None:
        """Step in real time on a background thread until ``stop``."""
        self._loops.start(self._run)

    def stop(self) -> None:
        self._loops.stop()

    def _run(self) -> None:
        next_t = time.monotonic()
        while self._loops.running:
            self.step()
            next_t += self.dt
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.monotonic()


def _hover(batch: ParamsBatch, position) -> torch.Tensor:
    return hover_state(batch, torch.as_tensor(position, dtype=torch.float64)[None])


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return _quat_mul(_quat_mul(q, np.concatenate([[0.0], v])), _quat_conj(q))[1:]
