"""Multirotor physics: parameters, presets, batched RK4 dynamics, randomization, MuJoCo model."""

from .batched import BatchedQuadrotorSim
from .dynamics import ACTION_DIM, STATE_DIM, ParamsBatch, hover_state, rk4_step, state_derivative
from .params import MOTOR_ORDER, PRESETS, QuadrotorParams, preset

__all__ = [
    "ACTION_DIM", "STATE_DIM", "MOTOR_ORDER", "PRESETS", "BatchedQuadrotorSim", "ParamsBatch",
    "QuadrotorParams", "hover_state", "preset", "rk4_step", "state_derivative",
]
