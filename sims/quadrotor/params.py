"""Physical parameters of a multirotor, and the presets robo ships.

Frames and units: body frame FLU (x forward, y left, z up), world frame FLU with
z up, SI units throughout. Motor order is [front-right, back-right, back-left,
front-left]. A motor's normalized command ``u`` lies in [0, 1]; its thrust is the
polynomial ``c0 + c1*u + c2*u**2`` in newtons, evaluated on the motor's *state*
``u_m`` which follows the command with a first-order lag (time constant
``motor_time_constant_rising`` when spinning up, ``..._falling`` when spinning
down). Yaw reaction torque of a rotor is ``torque_constant * thrust`` about its
``rotor_torque_direction``.

These conventions follow RLtools' ``l2f`` simulator, in which RAPTOR's
foundation policy and *Learning to Fly in Seconds* were trained, so that those
policies fly in robo without adaptation.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

Vec3 = tuple[float, float, float]
Vec4 = tuple[float, float, float, float]

MOTOR_ORDER = ("front_right", "back_right", "back_left", "front_left")


def _as_tuple(x, shape: tuple[int, ...], name: str):
    arr = np.asarray(x, dtype=np.float64)
    if arr.shape != shape:
        raise ValueError(f"{name} has shape {arr.shape}, expected {shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf: {arr.tolist()}")
    return tuple(map(tuple, arr)) if arr.ndim == 2 else tuple(arr.tolist())


@dataclass(frozen=True)
class QuadrotorParams:
    """Rigid-body multirotor with four first-order-lag motors.

    Attributes:
        name: human-readable identifier.
        mass: total take-off mass, kg.
        inertia: (3, 3) inertia tensor about the centre of mass, body FLU, kg m^2.
        rotor_positions: (4, 3) rotor hub positions, body FLU, m.
        rotor_thrust_directions: (4, 3) unit thrust axes, body FLU.
        rotor_torque_directions: (4, 3) unit axes of each rotor's reaction torque.
        thrust_curve: (4, 3) per-motor coefficients (c0, c1, c2), thrust in N for u in [0, 1].
        torque_constant: (4,) yaw torque per unit thrust, m (N m / N).
        motor_time_constant_rising: (4,) s.
        motor_time_constant_falling: (4,) s.
        gravity: (3,) world-frame gravity, m/s^2.
        dt: control and integration step, s.
    """

    name: str
    mass: float
    inertia: tuple[Vec3, Vec3, Vec3]
    rotor_positions: tuple[Vec3, Vec3, Vec3, Vec3]
    rotor_thrust_directions: tuple[Vec3, Vec3, Vec3, Vec3]
    rotor_torque_directions: tuple[Vec3, Vec3, Vec3, Vec3]
    thrust_curve: tuple[Vec3, Vec3, Vec3, Vec3]
    torque_constant: Vec4
    motor_time_constant_rising: Vec4
    motor_time_constant_falling: Vec4
    gravity: Vec3 = (0.0, 0.0, -9.81)
    dt: float = 0.01

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        set_("inertia", _as_tuple(self.inertia, (3, 3), "inertia"))
        for k in ("rotor_positions", "rotor_thrust_directions", "rotor_torque_directions", "thrust_curve"):
            set_(k, _as_tuple(getattr(self, k), (4, 3), k))
        for k in ("torque_constant", "motor_time_constant_rising", "motor_time_constant_falling"):
            set_(k, _as_tuple(getattr(self, k), (4,), k))
        set_("gravity", _as_tuple(self.gravity, (3,), "gravity"))
        set_("mass", float(self.mass))
        set_("dt", float(self.dt))
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` if the parameters are not physical."""
        if not (math.isfinite(self.mass) and self.mass > 0):
            raise ValueError(f"mass must be a positive number of kg, got {self.mass}")
        J = np.asarray(self.inertia)
        if not np.allclose(J, J.T, atol=1e-12):
            raise ValueError(f"inertia must be symmetric, got {J.tolist()}")
        eig = np.linalg.eigvalsh(J)
        if eig.min() <= 0:
            raise ValueError(f"inertia must be positive definite, eigenvalues {eig.tolist()}")
        # Triangle inequality of principal moments (any real rigid body satisfies it).
        a, b, c = sorted(eig)
        if a + b < c * (1 - 1e-6):
            raise ValueError(f"inertia principal moments {eig.tolist()} violate the triangle inequality")
        for k in ("rotor_thrust_directions", "rotor_torque_directions"):
            n = np.linalg.norm(np.asarray(getattr(self, k)), axis=1)
            if not np.allclose(n, 1.0, atol=1e-6):
                raise ValueError(f"{k} must be unit vectors, norms are {n.tolist()}")
        if min(self.motor_time_constant_rising + self.motor_time_constant_falling) <= 0:
            raise ValueError("motor time constants must be positive seconds")
        if min(self.torque_constant) < 0:
            raise ValueError(f"torque_constant must be >= 0, got {self.torque_constant}")
        if not self.dt > 0:
            raise ValueError(f"dt must be positive seconds, got {self.dt}")
        if self.max_thrust <= 0:
            raise ValueError("thrust_curve gives no positive thrust at full command")

    # Derived quantities -------------------------------------------------
    @property
    def max_thrust(self) -> float:
        """Total thrust at full command (u = 1), N."""
        return float(sum(sum(c) for c in self.thrust_curve))

    @property
    def thrust_to_weight(self) -> float:
        return self.max_thrust / (self.mass * float(np.linalg.norm(self.gravity)))

    @property
    def arm_length(self) -> float:
        """Mean distance of the rotors from the centre of mass, m."""
        return float(np.linalg.norm(np.asarray(self.rotor_positions), axis=1).mean())

    @property
    def hover_command(self) -> float:
        """Normalized motor command u in [0, 1] at which the four motors carry the weight.

        Assumes vertical thrust axes and equal motors (uses the mean curve).
        """
        c0, c1, c2 = np.asarray(self.thrust_curve).mean(axis=0)
        w = self.mass * float(np.linalg.norm(self.gravity)) / 4
        if c2 > 1e-12:
            u = (-c1 + math.sqrt(max(c1 * c1 - 4 * c2 * (c0 - w), 0.0))) / (2 * c2)
        else:
            u = (w - c0) / c1
        return float(u)

    @property
    def hover_action(self) -> float:
        """Hover command in the action space [-1, 1]."""
        return 2 * self.hover_command - 1

    def replace(self, **changes) -> "QuadrotorParams":
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return {k: (np.asarray(v).tolist() if isinstance(v, tuple) else v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict) -> "QuadrotorParams":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown quadrotor parameter(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)


def x_configuration(arm: float) -> tuple[Vec3, Vec3, Vec3, Vec3]:
    """Rotor positions of an X quad with radial arm length ``arm`` (m), robo motor order."""
    a = arm / math.sqrt(2)
    return ((a, -a, 0.0), (-a, -a, 0.0), (-a, a, 0.0), (a, a, 0.0))


UP4 = ((0.0, 0.0, 1.0),) * 4
# Reaction-torque axes: front-right and back-left spin one way, back-right and front-left the other.
SPIN4 = ((0.0, 0.0, -1.0), (0.0, 0.0, 1.0), (0.0, 0.0, -1.0), (0.0, 0.0, 1.0))


def diag3(x: float, y: float, z: float) -> tuple[Vec3, Vec3, Vec3]:
    return ((x, 0.0, 0.0), (0.0, y, 0.0), (0.0, 0.0, z))


def _crazyflie() -> QuadrotorParams:
    # Source: RLtools l2f `parameters/dynamics/crazyflie.h` (Eschmann et al., "Learning to Fly in
    # Seconds", 2024): system identification of a Crazyflie 2.1 with SD-card and flow decks.
    # Take-off mass 27 g + decks = 30.6 g; 28 mm x/y rotor offsets; thrust curve fitted on a
    # thrust stand; motor time constants from the manufacturer's step-response plot.
    # Every value equals that file at rl-tools 48488c58 (2025-08-31, the commit the `l2f` package
    # builds) and 9acdf5c8; its J was diag(9.114e-6, 9.713e-6, 1.9426e-5) at 95467b26 (2025-03-05)
    # and diag(1.029e-5, 1.105e-5, 2.005e-5) before.
    return QuadrotorParams(
        name="crazyflie",
        mass=0.027 + 0.0017 + 0.0003 + 0.0016,
        inertia=diag3(9.416556729130406e-06, 9.644051701582312e-06, 1.745951732253285e-05),
        rotor_positions=((0.028, -0.028, 0.0), (-0.028, -0.028, 0.0), (-0.028, 0.028, 0.0), (0.028, 0.028, 0.0)),
        rotor_thrust_directions=UP4,
        rotor_torque_directions=SPIN4,
        thrust_curve=((0.00352526, 0.01437313, 0.09223048),) * 4,
        torque_constant=(4.665e-3,) * 4,
        motor_time_constant_rising=(0.05545454545454546,) * 4,
        motor_time_constant_falling=(0.24939393939393945,) * 4,
    )


def _racer5() -> QuadrotorParams:
    # Typical 5-inch FPV racer (220 mm diagonal frame, 2306 motors, 4S, 5" props), not one
    # measured airframe: 0.65 kg with battery; ~12 N static thrust per motor (bench data of
    # 2306/2450KV motors on 4S is 1.1-1.4 kgf), so thrust-to-weight ~7.5; inertia of the same
    # order as the racer in Kaufmann et al., "Champion-level drone racing" (Nature 2023);
    # motor time constant ~20-30 ms (ESCs with active braking spin down about as fast).
    return QuadrotorParams(
        name="racer5",
        mass=0.65,
        inertia=diag3(1.6e-3, 1.6e-3, 2.8e-3),
        rotor_positions=x_configuration(0.11),
        rotor_thrust_directions=UP4,
        rotor_torque_directions=SPIN4,
        thrust_curve=((0.0, 2.0, 10.0),) * 4,
        torque_constant=(0.0125,) * 4,
        motor_time_constant_rising=(0.02,) * 4,
        motor_time_constant_falling=(0.03,) * 4,
    )


def _x500() -> QuadrotorParams:
    # Holybro X500 class, 2 kg: RLtools l2f `parameters/dynamics/x500_sim.h` (PX4 Gazebo x500
    # model): 0.25 m radial arm, 8.74 N max thrust per motor, inertia diag(0.0217, 0.0217, 0.04),
    # 30 ms motor time constant. Yaw moment constant 0.016 m from the PX4 Gazebo model.
    return QuadrotorParams(
        name="x500",
        mass=2.0,
        inertia=diag3(0.0216666666666666, 0.0216666666666666, 0.04),
        rotor_positions=x_configuration(0.25),
        rotor_thrust_directions=UP4,
        rotor_torque_directions=SPIN4,
        thrust_curve=((0.0, 0.0, 8.74),) * 4,
        torque_constant=(0.016,) * 4,
        motor_time_constant_rising=(0.03,) * 4,
        motor_time_constant_falling=(0.03,) * 4,
    )


def _betaflight_quadx() -> QuadrotorParams:
    # The racer5 airframe as Betaflight's QUADX mixer sees it (``flight/mixer_init.c``): motors 1-4 =
    # rear-right, front-right, rear-left, front-left spinning CW, CCW, CCW, CW from above ("props in",
    # Betaflight's default) -- robo's SPIN4 -- so its yaw mixer column matches. ``u`` is the firmware's
    # motor output above mincommand ([0, 1], idle ~0.055). dt = 4 ms: the state-packet period of
    # ``sims.vehicles.betaflight_firmware`` (the SITL answers each state packet with one motor packet; 250 Hz keeps
    # robo's RK4 step in real time on a loaded 2-core machine).
    return dataclasses.replace(_racer5(), name="betaflight_quadx", dt=0.004)


PRESETS = {"crazyflie": _crazyflie, "racer5": _racer5, "x500": _x500, "betaflight_quadx": _betaflight_quadx}


def preset(name: str, **overrides) -> QuadrotorParams:
    """A named parameter set (``crazyflie``, ``racer5``, ``x500``, ``betaflight_quadx``), optionally with fields
    changed."""
    if name not in PRESETS:
        raise ValueError(f"unknown quadrotor preset {name!r}; choose one of {sorted(PRESETS)}")
    p = PRESETS[name]()
    return p.replace(**overrides) if overrides else p


def stack_field(params: Sequence[QuadrotorParams], name: str) -> np.ndarray:
    """Stack one field over a list of parameter sets: (B, ...) float64."""
    return np.stack([np.asarray(getattr(p, name), dtype=np.float64) for p in params])
