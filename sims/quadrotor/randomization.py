"""Domain randomization: draw a batch of physically consistent multirotors.

In the spirit of RAPTOR / RLtools ``l2f`` domain randomization, a sample is not a
preset with independent per-field noise but a *different airframe*, built from a
few interpretable quantities so that the result is always flyable and self-consistent:

1. mass ``m`` (kg), log-uniform: the size of the vehicle;
2. thrust-to-weight ``twr``: total thrust at full command is ``twr * m * g``;
3. torque-to-inertia ``tti`` (rad/s^2): the roll angular acceleration the motors can
   produce at most, which fixes the inertia;
4. motor dynamics (time constants) and yaw torque constant;
5. small asymmetries: arm length off the size-consistent value, per-motor thrust.

Geometry and the thrust-curve *shape* come from a base preset (``config.base``) and
are scaled. Everything is vectorized numpy over the batch with one
``np.random.Generator``; the same seed gives the same batch, bit for bit.

Default ranges, and the values of the shipped presets they are meant to cover
(``tti`` as defined in :func:`max_roll_torque`):

=======================  =========  ===========  ========  =========  ==============
quantity                 crazyflie  racer5       x500      default    note
=======================  =========  ===========  ========  =========  ==============
mass, kg                 0.0306     0.65         2.0       0.02-3.0   log-uniform
thrust_to_weight         1.47       7.53         1.78      1.5-5.0    cf, racer5 out
torque_to_inertia, 1/s2  634        1167         143       100-1500   all covered
motor tau rising, s      0.055      0.020        0.030     0.015-0.08 all covered
falling / rising         4.50       1.50         1.00      1.0-5.0    all covered
torque_constant, m       0.00467    0.0125       0.016     0.003-0.02 all covered
arm / m^(1/3), m/kg^1/3  0.127      0.127        0.198     base*0.9-1.1 x500 out (+57%)
=======================  =========  ===========  ========  =========  ==============

The thrust-to-weight default (1.5-5.0) is the RAPTOR-style training range; the
Crazyflie (1.47) sits just below it and the 5-inch racer (7.5) far above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch

from .dynamics import ParamsBatch
from .params import PRESETS, QuadrotorParams, preset

Range = tuple[float, float]


@dataclass(frozen=True)
class RandomizationConfig:
    """Ranges of the randomized quantities. Each range is ``(low, high)``; ``low == high``
    fixes the quantity (the term is then effectively disabled).

    Attributes:
        base: preset whose rotor layout, thrust axes, spin directions, thrust-curve shape,
            J_zz / J_xx ratio, gravity and dt are kept (scaled to the sampled size).
        mass: take-off mass, kg, sampled log-uniformly.
        thrust_to_weight: total thrust at full command over weight, uniform. Must exceed 1.
        torque_to_inertia: maximum roll angular acceleration, rad/s^2, uniform
            (``max_roll_torque / J_xx``, see :func:`max_roll_torque`).
        mass_size_deviation: fraction; the arm length is the size-consistent value times
            ``U(1 - d, 1 + d)``. 0 disables.
        motor_time_constant_rising: spin-up time constant, s, uniform.
        motor_time_constant_falling_ratio: falling / rising time constant, uniform.
        per_motor_thrust_variation: fraction; each motor's thrust curve is scaled by
            ``U(1 - v, 1 + v)``, then the four factors are divided by their mean so the
            total thrust stays ``twr * m * g``. 0 disables.
        torque_constant: yaw torque per unit thrust, m, uniform (same for the four motors).
    """

    base: str = "crazyflie"
    mass: Range = (0.02, 3.0)
    thrust_to_weight: Range = (1.5, 5.0)
    torque_to_inertia: Range = (100.0, 1500.0)
    mass_size_deviation: float = 0.1
    motor_time_constant_rising: Range = (0.015, 0.08)
    motor_time_constant_falling_ratio: Range = (1.0, 5.0)
    per_motor_thrust_variation: float = 0.05
    torque_constant: Range = (0.003, 0.02)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field if a range is malformed or unphysical."""
        if self.base not in PRESETS:
            raise ValueError(f"base: unknown quadrotor preset {self.base!r}; choose one of {sorted(PRESETS)}")
        # field -> (smallest allowed low, whether low itself is allowed)
        lower = {"mass": (0.0, False), "thrust_to_weight": (1.0, False), "torque_to_inertia": (0.0, False),
                 "motor_time_constant_rising": (0.0, False), "motor_time_constant_falling_ratio": (0.0, False),
                 "torque_constant": (0.0, True)}
        for name, (bound, inclusive) in lower.items():
            r = getattr(self, name)
            if not (isinstance(r, (tuple, list)) and len(r) == 2):
                raise ValueError(f"{name} must be a (low, high) pair, got {r!r}")
            lo, hi = float(r[0]), float(r[1])
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise ValueError(f"{name} range {r!r} must be finite")
            if lo > hi:
                raise ValueError(f"{name} range {r!r} has low > high; give (low, high)")
            if lo < bound or (lo == bound and not inclusive):
                rel = ">=" if inclusive else ">"
                why = " (the quadrotor must be able to hover)" if name == "thrust_to_weight" else ""
                raise ValueError(f"{name} range {r!r}: low must be {rel} {bound}{why}")
        for name in ("mass_size_deviation", "per_motor_thrust_variation"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 <= v < 1.0):
                raise ValueError(f"{name} must be a fraction in [0, 1), got {v!r}")
        J = np.asarray(preset(self.base).inertia)
        if J[2, 2] / (0.5 * (J[0, 0] + J[1, 1])) > 2.0:
            raise ValueError(f"base: preset {self.base!r} has J_zz > J_xx + J_yy; cannot keep its inertia ratio")

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "RandomizationConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown randomization field(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()})


def max_roll_torque(thrust_curve: np.ndarray, rotor_positions: np.ndarray) -> np.ndarray:
    """Largest roll torque the motors can produce, N m: (B, 4, 3), (B, 4, 3) -> (B,).

    With vertical thrust axes a rotor at body ``y_i`` gives roll torque ``y_i * T_i``, and
    ``T_i`` ranges over ``[T_i(0), T_i(1)] = [c0, c0 + c1 + c2]``; the maximum over that box is
    ``sum_i max(y_i T_i(1), y_i T_i(0))`` (left motors at full command, right motors off).
    Torque-to-inertia is this divided by ``J_xx``.
    """
    y = rotor_positions[..., 1]
    t1 = thrust_curve.sum(-1)
    t0 = thrust_curve[..., 0]
    return np.maximum(y * t1, y * t0).sum(-1)


def _uniform(u: np.ndarray, r: Range) -> np.ndarray:
    return r[0] + (r[1] - r[0]) * u


def sample_arrays(config: RandomizationConfig, batch_size: int, seed: int | np.random.Generator) -> dict:
    """The sampled fields as float64 numpy arrays with leading dimension B (``from_arrays`` keywords).

    Formulas (``b`` = base preset, ``g = |gravity|``):

    - ``m = exp(U(log m_lo, log m_hi))``
    - rotor positions ``r_i = r_i^b * (m / m^b)^(1/3) * U(1 - d, 1 + d)``: the arm length
      scales with the cube root of mass, like a body of constant density, times a deviation.
    - per-motor curve ``c_i = shape_i * (twr * m * g / 4) * s_i`` with ``shape_i = c_i^b / sum(c_i^b)``
      and ``s_i = v_i / mean(v)``, ``v_i ~ U(1 - var, 1 + var)``; so ``sum_i sum(c_i) = twr m g``.
    - ``J_xx = J_yy = max_roll_torque(c, r) / tti``, ``J_zz = J_xx * J_zz^b / mean(J_xx^b, J_yy^b)``.
    - ``tau_rising ~ U``, ``tau_falling = tau_rising * U(ratio)``, ``torque_constant ~ U``.
    """
    if not (isinstance(batch_size, (int, np.integer)) and batch_size >= 1):
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    B = int(batch_size)
    b = preset(config.base)
    g = float(np.linalg.norm(b.gravity))
    # Fixed draw order and count whatever the ranges, so one field's range never shifts another's draws.
    u = rng.random((B, 7))
    v = rng.random((B, 4))

    lo, hi = np.log(config.mass[0]), np.log(config.mass[1])
    mass = np.exp(lo + (hi - lo) * u[:, 0])
    twr = _uniform(u[:, 1], config.thrust_to_weight)
    tti = _uniform(u[:, 2], config.torque_to_inertia)
    dev = 1.0 + config.mass_size_deviation * (2.0 * u[:, 3] - 1.0)
    tau_rising = _uniform(u[:, 4], config.motor_time_constant_rising)
    tau_falling = tau_rising * _uniform(u[:, 5], config.motor_time_constant_falling_ratio)
    kq = _uniform(u[:, 6], config.torque_constant)

    scale = (mass / b.mass) ** (1.0 / 3.0) * dev  # (B,)
    pos = np.asarray(b.rotor_positions)[None] * scale[:, None, None]  # (B, 4, 3)

    base_curve = np.asarray(b.thrust_curve)
    shape = base_curve / base_curve.sum(-1, keepdims=True)  # (4, 3), each row sums to 1
    var = 1.0 + config.per_motor_thrust_variation * (2.0 * v - 1.0)
    var = var / var.mean(-1, keepdims=True)  # (B, 4), mean 1
    per_motor_max = (twr * mass * g / 4.0)[:, None] * var  # (B, 4) N at u = 1
    curve = shape[None] * per_motor_max[..., None]  # (B, 4, 3)

    Jb = np.asarray(b.inertia)
    zz_ratio = Jb[2, 2] / (0.5 * (Jb[0, 0] + Jb[1, 1]))
    jxx = max_roll_torque(curve, pos) / tti
    inertia = np.zeros((B, 3, 3))
    inertia[:, 0, 0] = inertia[:, 1, 1] = jxx
    inertia[:, 2, 2] = jxx * zz_ratio

    rep = lambda x: np.broadcast_to(np.asarray(x, dtype=np.float64), (B,) + np.shape(x)).copy()  # noqa: E731
    return dict(
        mass=mass, inertia=inertia, thrust_curve=curve,
        motor_time_constant_rising=np.repeat(tau_rising[:, None], 4, axis=1),
        motor_time_constant_falling=np.repeat(tau_falling[:, None], 4, axis=1),
        gravity=rep(b.gravity), rotor_positions=pos, rotor_thrust_directions=rep(b.rotor_thrust_directions),
        rotor_torque_directions=rep(b.rotor_torque_directions), torque_constant=np.repeat(kq[:, None], 4, axis=1),
        dt=b.dt,
    )


def sample_params(config: RandomizationConfig, batch_size: int, seed: int | np.random.Generator,
                  dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> ParamsBatch:
    """Draw ``batch_size`` randomized quadrotors as a ``ParamsBatch`` (float64 math, then cast).

    ``seed``: an int (same int -> identical batch) or a ``np.random.Generator`` (advanced in place).
    """
    return ParamsBatch.from_arrays(**sample_arrays(config, batch_size, seed), dtype=dtype, device=device)


def sample_param_list(config: RandomizationConfig, n: int, seed: int | np.random.Generator) -> list[QuadrotorParams]:
    """Draw ``n`` randomized quadrotors as validated ``QuadrotorParams`` (for small n: MuJoCo models, logs)."""
    batch = sample_params(config, n, seed, dtype=torch.float64)
    return [batch.to_params(i, name=f"{config.base}_dr_{i}") for i in range(n)]
