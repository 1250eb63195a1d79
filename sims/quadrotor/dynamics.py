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
from typing import Sequence

import numpy as np
import torch

from .params import QuadrotorParams, stack_field
from .rotations import quat_rotate

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
        t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=dtype, device=device)  # noqa: E731
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


def rotor_thrusts(motor: torch.Tensor, p: ParamsBatch) -> torch.Tensor:
    """(B, 4) motor states in [0, 1] -> (B, 4) rotor thrusts, N."""
    c = p.thrust_curve
    return c[..., 0] + motor * (c[..., 1] + motor * c[..., 2])


def state_derivative(state: torch.Tensor, motor_command: torch.Tensor, p: ParamsBatch,
                     external_force: torch.Tensor | None = None) -> torch.Tensor:
    """Time derivative of ``state`` (B, 17) under normalized motor commands (B, 4) in [0, 1].

    ``external_force`` (B, 3) is an optional world-frame force in N (disturbances, pushes).
    """
    q = state[:, QUAT]
    v = state[:, VEL]
    w = state[:, OMEGA]
    m = state[:, MOTOR]
    wrench = torch.bmm(p.mixer, rotor_thrusts(m, p).unsqueeze(-1)).squeeze(-1)  # (B, 6) body
    force_world = quat_rotate(q, wrench[:, :3])
    if external_force is not None:
        force_world = force_world + external_force
    acc = force_world / p.mass[:, None] + p.gravity
    Jw = torch.bmm(p.inertia, w.unsqueeze(-1)).squeeze(-1)
    wdot = torch.bmm(p.inertia_inv, (wrench[:, 3:] - torch.cross(w, Jw, dim=-1)).unsqueeze(-1)).squeeze(-1)
    # q_dot = 0.5 * q (x) (0, w)
    qw, qx, qy, qz = q.unbind(-1)
    wx, wy, wz = w.unbind(-1)
    qdot = 0.5 * torch.stack([
        -qx * wx - qy * wy - qz * wz,
        qw * wx + qy * wz - qz * wy,
        qw * wy - qx * wz + qz * wx,
        qw * wz + qx * wy - qy * wx,
    ], -1)
    tau = torch.where(motor_command >= m, p.tau_rising, p.tau_falling)
    mdot = (motor_command - m) / tau
    return torch.cat([v, qdot, acc, wdot, mdot], dim=-1)


def action_to_command(action: torch.Tensor) -> torch.Tensor:
    """Normalized actions (B, 4) in [-1, 1] (clipped) -> motor commands in [0, 1]."""
    return (action.clamp(-1.0, 1.0) + 1.0) * 0.5


def rk4_step(state: torch.Tensor, action: torch.Tensor, p: ParamsBatch,
             external_force: torch.Tensor | None = None) -> torch.Tensor:
    """Advance ``state`` (B, 17) by ``p.dt`` with RK4 under actions (B, 4) in [-1, 1].

    The motor command is held over the step (zero-order hold). After integration the
    quaternion is renormalized and motor states are clamped to [0, 1].
    """
    u = action_to_command(action)
    dt = p.dt
    k1 = state_derivative(state, u, p, external_force)
    k2 = state_derivative(state + (0.5 * dt) * k1, u, p, external_force)
    k3 = state_derivative(state + (0.5 * dt) * k2, u, p, external_force)
    k4 = state_derivative(state + dt * k3, u, p, external_force)
    nxt = state + (dt / 6.0) * (k1 + 2 * (k2 + k3) + k4)
    q = nxt[:, QUAT]
    nxt = torch.cat([nxt[:, :3], q / q.norm(dim=-1, keepdim=True), nxt[:, 7:13], nxt[:, MOTOR].clamp(0.0, 1.0)], -1)
    return nxt


def hover_state(p: ParamsBatch, position: torch.Tensor | None = None) -> torch.Tensor:
    """(B, 17) states at rest, level, with motors at the hover command."""
    B = p.batch_size
    s = torch.zeros(B, STATE_DIM, dtype=p.mass.dtype, device=p.mass.device)
    s[:, 3] = 1.0
    s[:, MOTOR] = p.hover_command()[:, None]
    if position is not None:
        s[:, POS] = position
    return s
