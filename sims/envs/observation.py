"""The deployable quadrotor observation, compatible with RAPTOR's foundation policy.

``obs: (B, 22) float32``, all FLU:

=======  ====================================================================
0:3      position error p - p_ref, world frame, m
3:12     rotation matrix body -> world, flattened row-major
12:15    linear velocity error v - v_ref, world frame, m/s
15:18    angular velocity, body frame, rad/s
18:22    previous action, normalized motor commands (FR, BR, BL, FL), in [-1, 1] but see below
=======  ====================================================================

What the previous action is, and what it is after a reset, is the task's ``previous_action`` (``clipped_hover``:
robo's clipped command, the hover command after a reset; ``raw_motor_state``: RAPTOR's and L2F's raw policy
output, which may leave [-1, 1], the motor states after a reset; see ``sims.envs.config.QuadrotorTaskConfig``).
"""

from __future__ import annotations

import torch

from sims.quadrotor.dynamics import OMEGA, POS, QUAT, VEL
from sims.quadrotor.rotations import quat_to_rotmat

OBS_DIM = 22
OBS_SLICES = {
    "position_error": slice(0, 3),
    "rotation_matrix": slice(3, 12),
    "velocity_error": slice(12, 15),
    "angular_velocity": slice(15, 18),
    "previous_action": slice(18, 22),
}


def observe(state: torch.Tensor, ref_position: torch.Tensor, ref_velocity: torch.Tensor,
            previous_action: torch.Tensor) -> torch.Tensor:
    """(B, 17) states, (B, 3) references, (B, 4) previous actions -> (B, 22) observations."""
    B = state.shape[0]
    return torch.cat([
        state[:, POS] - ref_position,
        quat_to_rotmat(state[:, QUAT]).reshape(B, 9),
        state[:, VEL] - ref_velocity,
        state[:, OMEGA],
        previous_action,
    ], dim=-1)


PRIVILEGED_DIM = 14


# Reference scales of the privileged features (a Crazyflie-sized quad maps to about 0).
MASS_REF, INERTIA_REF, ARM_REF = 0.03, 1e-5, 0.04  # kg, kg m^2, m


def privileged_observation(state: torch.Tensor, params) -> torch.Tensor:
    """(B, 14) privileged features for an asymmetric critic (never for a deployable actor).

    Motor states (4) in [-1, 1]; log(mass / 30 g); thrust-to-weight; hover command in [-1, 1];
    log(principal inertia diagonal / 1e-5 kg m^2) (3); mean rising and falling motor time
    constants (s, x10); mean torque constant (m, x100); log(arm length / 4 cm). Each is O(1) over
    robo's randomization range, so none swamps the critic's first layer.
    """
    from sims.quadrotor.dynamics import MOTOR

    g = params.gravity.norm(dim=-1)
    max_thrust = params.thrust_curve.sum(dim=(1, 2))
    J = torch.diagonal(params.inertia, dim1=-2, dim2=-1)
    return torch.cat([
        2 * state[:, MOTOR] - 1,
        (params.mass / MASS_REF).log()[:, None],
        (max_thrust / (params.mass * g))[:, None],
        (2 * params.hover_command() - 1)[:, None],
        (J / INERTIA_REF).log(),
        10 * params.tau_rising.mean(-1, keepdim=True),
        10 * params.tau_falling.mean(-1, keepdim=True),
        100 * params.torque_constant.mean(-1, keepdim=True),
        (params.rotor_positions.norm(dim=-1).mean(-1, keepdim=True) / ARM_REF).log(),
    ], dim=-1)
