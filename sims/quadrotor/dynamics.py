"""Batched multirotor dynamics: pure functions over torch tensors.

State layout, ``state: (B, 17)``:

==========  =======  =====================================================
slice       name     meaning
==========  =======  =====================================================
0:3         p        position of the centre of mass, world FLU, m
3:7         q        orientation quaternion (w, x, y, z), body -> world
7:10        v        linear velocity, world FLU, m/s
10:13       w        angular velocity, body FLU, rad/s
13:17       m        motor states, normalized command units in [0, 1]
==========  =======  =====================================================

Actions are normalized motor commands ``a in [-1, 1]^4`` (motor order FR, BR, BL, FL),
mapped to ``u = (a + 1) / 2``. Thrust acts on the lagged motor state (``m``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple, Sequence

import numpy as np
import torch

from .params import QuadrotorParams, stack_field

STATE_DIM = 17
ACTION_DIM = 4
POS, QUAT, VEL, OMEGA, MOTOR = slice(0, 3), slice(3, 7), slice(7, 10), slice(10, 13), slice(13, 17)


@dataclass
class ParamsBatch:
    """Per-environment physical parameters as tensors with leading batch dimension B.

    ``mixer`` maps the four rotor thrusts (N) to the body wrench
    [force (3) N; torque (3) N m]: ``wrench = mixer @ thrust``.
    """

    mass: torch.Tensor  # (B,)
    inertia: torch.Tensor  # (B, 3, 3)
    inertia_inv: torch.Tensor  # (B, 3, 3)
    mixer: torch.Tensor  # (B, 6, 4)
    thrust_curve: torch.Tensor  # (B, 4, 3)
    tau_rising: torch.Tensor  # (B, 4)
    tau_falling: torch.Tensor  # (B, 4)
    gravity: torch.Tensor  # (B, 3)
    rotor_positions: torch.Tensor  # (B, 4, 3)
    rotor_thrust_directions: torch.Tensor  # (B, 4, 3)
    rotor_torque_directions: torch.Tensor  # (B, 4, 3)
    torque_constant: torch.Tensor  # (B, 4)
    dt: float

    @property
    def batch_size(self) -> int:
        return self.mass.shape[0]

    @classmethod
    def from_params(cls, params: QuadrotorParams | Sequence[QuadrotorParams], batch_size: int | None = None,
                    dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> "ParamsBatch":
        """Stack parameter sets (or repeat one ``batch_size`` times) into tensors."""
        if isinstance(params, QuadrotorParams):
            params = [params] * (batch_size or 1)
        elif batch_size is not None and len(params) != batch_size:
            raise ValueError(f"got {len(params)} parameter sets for batch_size={batch_size}")
        dts = {p.dt for p in params}
        if len(dts) != 1:
            raise ValueError(f"all environments of a batch must share dt, got {sorted(dts)}")
        arrays = {k: stack_field(params, k) for k in (
            "mass", "inertia", "thrust_curve", "motor_time_constant_rising", "motor_time_constant_falling",
            "gravity", "rotor_positions", "rotor_thrust_directions", "rotor_torque_directions", "torque_constant")}
        return cls.from_arrays(**arrays, dt=dts.pop(), dtype=dtype, device=device)

    @classmethod
    def from_arrays(cls, *, mass, inertia, thrust_curve, motor_time_constant_rising, motor_time_constant_falling,
                    gravity, rotor_positions, rotor_thrust_directions, rotor_torque_directions, torque_constant,
                    dt: float, dtype=torch.float32, device="cpu") -> "ParamsBatch":
        """Build from numpy arrays with a leading batch dimension (float64 math, then cast)."""
        J = np.asarray(inertia, dtype=np.float64)
        pos = np.asarray(rotor_positions, dtype=np.float64)
        tdir = np.asarray(rotor_thrust_directions, dtype=np.float64)
        qdir = np.asarray(rotor_torque_directions, dtype=np.float64)
        kq = np.asarray(torque_constant, dtype=np.float64)
        force_cols = tdir  # (B, 4, 3)
        torque_cols = np.cross(pos, tdir) + kq[..., None] * qdir
        mixer = np.concatenate([force_cols, torque_cols], axis=-1).transpose(0, 2, 1)  # (B, 6, 4)
        t = lambda x: torch.as_tensor(np.ascontiguousarray(x, dtype=np.float64), dtype=dtype,  # noqa: E731
                                      device=device)
        return cls(
            mass=t(mass), inertia=t(J), inertia_inv=t(np.linalg.inv(J)), mixer=t(mixer),
            thrust_curve=t(thrust_curve), tau_rising=t(motor_time_constant_rising),
            tau_falling=t(motor_time_constant_falling), gravity=t(gravity), rotor_positions=t(pos),
            rotor_thrust_directions=t(tdir), rotor_torque_directions=t(qdir), torque_constant=t(kq), dt=float(dt),
        )

    def to_params(self, i: int, name: str = "sampled") -> QuadrotorParams:
        """Environment ``i``'s parameters as a validated dataclass (e.g. to build its MuJoCo model)."""
        g = lambda x: x[i].detach().cpu().double().numpy()  # noqa: E731
        return QuadrotorParams(
            name=name, mass=float(self.mass[i]), inertia=g(self.inertia), rotor_positions=g(self.rotor_positions),
            rotor_thrust_directions=g(self.rotor_thrust_directions),
            rotor_torque_directions=g(self.rotor_torque_directions), thrust_curve=g(self.thrust_curve),
            torque_constant=g(self.torque_constant), motor_time_constant_rising=g(self.tau_rising),
            motor_time_constant_falling=g(self.tau_falling), gravity=g(self.gravity), dt=self.dt,
        )

    def index(self, idx) -> "ParamsBatch":
        """A sub-batch (``idx``: index tensor, slice or bool mask)."""
        return ParamsBatch(**{f.name: (getattr(self, f.name) if f.name == "dt" else getattr(self, f.name)[idx])
                              for f in fields(self)})

    def to(self, dtype: torch.dtype | None = None, device=None) -> "ParamsBatch":
        return ParamsBatch(**{f.name: (getattr(self, f.name) if f.name == "dt"
                                       else getattr(self, f.name).to(dtype=dtype, device=device))
                              for f in fields(self)})

    def hover_command(self) -> torch.Tensor:
        """(B,) normalized motor command in [0, 1] that carries the weight (mean thrust curve)."""
        c = self.thrust_curve.mean(dim=1)
        w = self.mass * self.gravity.norm(dim=-1) / 4
        c0, c1, c2 = c.unbind(-1)
        disc = (c1 * c1 - 4 * c2 * (c0 - w)).clamp(min=0)
        quad = (-c1 + disc.sqrt()) / (2 * c2.clamp(min=1e-12))
        lin = (w - c0) / c1.clamp(min=1e-12)
        return torch.where(c2 > 1e-12, quad, lin)


def check_action(action: torch.Tensor, batch_size: int) -> None:
    """Raise ``ValueError`` unless ``action`` is a finite (batch_size, 4) tensor."""
    if action.shape != (batch_size, ACTION_DIM):
        raise ValueError(f"action has shape {tuple(action.shape)}, expected ({batch_size}, {ACTION_DIM})")
    if not bool(torch.isfinite(action).all()):
        bad = (~torch.isfinite(action)).any(-1).nonzero().flatten()[:8].tolist()
        raise ValueError(f"action contains NaN or inf (environments {bad}...); motors need finite commands")


def rotor_thrusts(motor: torch.Tensor, p: ParamsBatch) -> torch.Tensor:
    """(B, 4) motor states in [0, 1] -> (B, 4) rotor thrusts, N."""
    c = p.thrust_curve
    return c[..., 0] + motor * (c[..., 1] + motor * c[..., 2])


# The integrator works in a batch-last ("structure of arrays") layout: a state is (17, B),
# and every parameter is permuted so that each scalar field is a contiguous (B,) row. On
# CPU, elementwise ops over contiguous rows are several times faster than the same ops on
# (B, 3) / (B, 4) views with stride 17, and tiny (3x3, 6x4) batched mat-vecs become a few
# broadcast multiply-adds instead of ``bmm`` calls.
class _RowParams(NamedTuple):
    mass: torch.Tensor  # (1, B)
    gravity: torch.Tensor  # (3, B)
    inertia_cols: torch.Tensor  # (3, 3, B): [k] is column k of the inertia
    inertia_inv_cols: torch.Tensor  # (3, 3, B)
    mixer_cols: torch.Tensor  # (4, 6, B): [j] is the body wrench of unit thrust on rotor j
    curve: torch.Tensor  # (3, 4, B): [i] is coefficient c_i of the four motors
    tau_rising: torch.Tensor  # (4, B)
    tau_falling: torch.Tensor  # (4, B)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """Reverse all dimensions, contiguous: (B, ...) -> (..., B), and back."""
    return x.permute(*reversed(range(x.dim()))).contiguous()


def _row_params(p: ParamsBatch) -> _RowParams:
    return _RowParams(p.mass[None], _rows(p.gravity), _rows(p.inertia), _rows(p.inertia_inv), _rows(p.mixer),
                      _rows(p.thrust_curve), _rows(p.tau_rising), _rows(p.tau_falling))


def _cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cross product of (3, B) vectors stored as rows."""
    if a.shape[-1] < 512:  # few environments: one kernel call beats five
        return torch.linalg.cross(a, b, dim=0)
    a2, b2 = torch.cat([a, a[:2]]), torch.cat([b, b[:2]])  # (5, B): rows x y z x y
    return a2[1:4] * b2[2:5] - a2[2:5] * b2[1:4]


def _matvec(cols: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """sum_k cols[k] * x[k]: (K, R, B), (K, B) -> (R, B)."""
    out = cols[0] * x[0]
    for k in range(1, cols.shape[0]):
        out = out + cols[k] * x[k]
    return out


def _derivative_rows(x: torch.Tensor, u: torch.Tensor, p: _RowParams, ext: torch.Tensor | None) -> torch.Tensor:
    """``state_derivative`` in the batch-last layout: x (17, B), u (4, B), ext (3, B) -> (17, B)."""
    qw, qv, v, w, m = x[3:4], x[4:7], x[7:10], x[10:13], x[13:17]
    c = p.curve
    wrench = _matvec(p.mixer_cols, c[0] + m * (c[1] + m * c[2]))  # (6, B) body
    f = wrench[:3]
    t = 2 * _cross(qv, f)  # rotate f body -> world: f + qw t + qv x t
    force_world = f + qw * t + _cross(qv, t)
    if ext is not None:
        force_world = force_world + ext
    acc = force_world / p.mass + p.gravity
    Jw = _matvec(p.inertia_cols, w)
    wdot = _matvec(p.inertia_inv_cols, wrench[3:] - _cross(w, Jw))
    # q_dot = 0.5 * q (x) (0, w) = 0.5 * (-qv . w, qw w + qv x w)
    qdot_w = (qv * w).sum(0, keepdim=True) * -0.5
    qdot_v = (qw * w + _cross(qv, w)) * 0.5
    tau = torch.where(u >= m, p.tau_rising, p.tau_falling)
    mdot = (u - m) / tau
    return torch.cat([v, qdot_w, qdot_v, acc, wdot, mdot])


def state_derivative(state: torch.Tensor, motor_command: torch.Tensor, p: ParamsBatch,
                     external_force: torch.Tensor | None = None) -> torch.Tensor:
    """Time derivative of ``state`` (B, 17) under normalized motor commands (B, 4) in [0, 1].

    ``external_force`` (B, 3) is an optional world-frame force in N (disturbances, pushes).
    """
    ext = None if external_force is None else _rows(external_force)
    return _rows(_derivative_rows(_rows(state), _rows(motor_command), _row_params(p), ext))


def action_to_command(action: torch.Tensor) -> torch.Tensor:
    """Normalized actions (B, 4) in [-1, 1] (clipped) -> motor commands in [0, 1]."""
    return (action.clamp(-1.0, 1.0) + 1.0) * 0.5


def rk4_step(state: torch.Tensor, action: torch.Tensor, p: ParamsBatch,
             external_force: torch.Tensor | None = None) -> torch.Tensor:
    """Advance ``state`` (B, 17) by ``p.dt`` with RK4 under actions (B, 4) in [-1, 1].

    The motor command is held over the step (zero-order hold). After integration the
    quaternion is renormalized and motor states are clamped to [0, 1].
    """
    u = _rows(action_to_command(action))
    rp = _row_params(p)
    ext = None if external_force is None else _rows(external_force)
    x = _rows(state)
    dt = p.dt
    k1 = _derivative_rows(x, u, rp, ext)
    k2 = _derivative_rows(torch.add(x, k1, alpha=0.5 * dt), u, rp, ext)
    k3 = _derivative_rows(torch.add(x, k2, alpha=0.5 * dt), u, rp, ext)
    k4 = _derivative_rows(torch.add(x, k3, alpha=dt), u, rp, ext)
    nxt = torch.add(x, k1 + 2 * (k2 + k3) + k4, alpha=dt / 6.0)
    q = nxt[3:7]
    q = q / (q * q).sum(0, keepdim=True).sqrt()
    return _rows(torch.cat([nxt[:3], q, nxt[7:13], nxt[13:17].clamp(0.0, 1.0)]))


def hover_state(p: ParamsBatch, position: torch.Tensor | None = None) -> torch.Tensor:
    """(B, 17) states at rest, level, with motors at the hover command."""
    B = p.batch_size
    s = torch.zeros(B, STATE_DIM, dtype=p.mass.dtype, device=p.mass.device)
    s[:, 3] = 1.0
    s[:, MOTOR] = p.hover_command()[:, None]
    if position is not None:
        s[:, POS] = position
    return s
