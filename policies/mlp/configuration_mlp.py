"""Config of the MLP policy (RL actors, distilled students)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MLPConfig:
    """obs (B, obs_dim) -> [Linear -> activation] x len(hidden_dims) -> Linear(action_dim) -> tanh.

    Observations are normalized with ``(obs - obs_mean) / obs_std`` stored in the checkpoint
    (identity by default). Actions lie in [-1, 1].
    """

    obs_dim: int = 22
    action_dim: int = 4
    hidden_dims: list[int] = field(default_factory=lambda: [64, 64])
    activation: str = "relu"  # relu | tanh
    squash: str = "tanh"  # tanh | clip
