"""Config of the steered policy: a frozen chunked policy plus a latent-noise actor (DSRL)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SteeredConfig:
    """The noise actor maps the flattened observation window (n_obs_steps * obs_dim,) to the base
    policy's initial noise (horizon, action_dim): ``noise = noise_bound * tanh(MLP(window))``.

    ``obs_dim``/``action_dim``/``n_obs_steps``/``noise_shape`` must match the base policy saved
    beside it (checked on load). The window normalization lives in the actor's weights.
    ``stochastic``: draw the noise from the actor's squashed Gaussian, ``noise_bound *
    tanh(MLP(window) + exp(log_std(window)) * N(0, I))`` (SAC's policy; the actor also holds the
    log-std layer), instead of taking its mean.
    """

    obs_dim: int = 5
    action_dim: int = 2
    n_obs_steps: int = 2
    noise_shape: list[int] = field(default_factory=lambda: [16, 2])
    noise_bound: float = 1.5
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"  # relu | tanh
    stochastic: bool = False

    def __post_init__(self) -> None:
        self.noise_shape = [int(s) for s in self.noise_shape]
        self.hidden_dims = [int(h) for h in self.hidden_dims]
        for name in ("obs_dim", "action_dim", "n_obs_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if len(self.noise_shape) != 2 or min(self.noise_shape) < 1:
            raise ValueError(f"noise_shape must be (horizon, action_dim), got {self.noise_shape}")
        if not self.noise_bound > 0:
            raise ValueError(f"noise_bound must be > 0, got {self.noise_bound}")

    @property
    def window_dim(self) -> int:
        return self.n_obs_steps * self.obs_dim

    @property
    def noise_dim(self) -> int:
        return self.noise_shape[0] * self.noise_shape[1]
