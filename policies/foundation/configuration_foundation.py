"""Config of the foundation policy: Dense -> GRU -> Dense, as in RAPTOR."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FoundationConfig:
    """RAPTOR-style recurrent quadrotor policy.

    obs (B, obs_dim) -> Dense(hidden_dim, input_activation) -> GRU(hidden_dim) -> Dense(action_dim)
    -> clipped to [-1, 1]. RAPTOR's released policy: 22 -> 16 -> GRU 16 -> 4, ReLU, 2,084 parameters.
    """

    obs_dim: int = 22
    hidden_dim: int = 16
    action_dim: int = 4
    input_activation: str = "relu"  # relu | tanh | identity
    output_activation: str = "identity"  # identity | tanh
    clip_actions: bool = True
