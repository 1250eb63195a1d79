"""Config of the MLP policy (RL actors, distilled students)."""

from __future__ import annotations

from dataclasses import dataclass, field

INTEGRAL_DIM = 3  # the position integral's floats: one per world axis


@dataclass
class MLPConfig:
    """obs (B, obs_dim) -> [Linear -> activation] x len(hidden_dims) -> Linear(action_dim) -> tanh.

    Observations are normalized with ``(obs - obs_mean) / obs_std`` stored in the checkpoint
    (identity by default). Actions lie in [-1, 1].

    ``position_integral`` > 0 (m s) gives the policy a state, as a GRU's hidden state: the integral ``I`` (B, 3) of
    its observed position error obs[:, 0:3] (m), each axis clipped to +-``position_integral``. The network reads
    ``[obs, I]`` (``input_dim = obs_dim + 3`` floats, so its normalization stats and first layer do), then
    ``I <- clip(I + integral_dt * obs[:, 0:3])``; ``I = 0`` at reset. ``obs_dim`` stays the observation the policy
    is given (robo's 22 floats for a quadrotor). 0 (the default): stateless.
    """

    obs_dim: int = 22
    action_dim: int = 4
    hidden_dims: list[int] = field(default_factory=lambda: [64, 64])
    activation: str = "relu"  # relu | tanh
    squash: str = "tanh"  # tanh | clip
    position_integral: float = 0.0  # m s, the clip of each axis of the integral; 0: no integral
    integral_dt: float = 0.01  # s, the control period the integral sums over

    def __post_init__(self) -> None:
        if not self.position_integral >= 0:
            raise ValueError(f"position_integral must be >= 0 (m s; 0: no integral), got {self.position_integral}")
        if not self.integral_dt > 0:
            raise ValueError(f"integral_dt must be positive (s, the control period), got {self.integral_dt}")
        if self.position_integral > 0 and self.obs_dim < INTEGRAL_DIM:
            raise ValueError(f"a position integral needs the position error in obs[0:3], but obs_dim={self.obs_dim}")

    @property
    def input_dim(self) -> int:
        """The network's input size: ``obs_dim``, and the integral's 3 floats with ``position_integral`` > 0."""
        return self.obs_dim + (INTEGRAL_DIM if self.position_integral > 0 else 0)
