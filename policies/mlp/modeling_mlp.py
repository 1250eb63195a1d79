"""A feed-forward policy: the deployable actor of RL-trained quadrotor controllers."""

from __future__ import annotations

import torch
from torch import nn

from ..base import ArrayLike, as_obs_tensor, like_input
from ..checkpoint import TorchPolicyCheckpointing
from ..registry import register
from .configuration_mlp import MLPConfig

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}


class MLPActor(nn.Module):
    """``forward(obs (B, obs_dim)) -> action (B, action_dim)`` in [-1, 1], with input normalization."""

    def __init__(self, config: MLPConfig):
        super().__init__()
        if config.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {config.activation!r}; choose one of {sorted(ACTIVATIONS)}")
        if config.squash not in ("tanh", "clip"):
            raise ValueError(f"unknown squash {config.squash!r}; choose 'tanh' or 'clip'")
        self.config = config
        dims = [config.obs_dim, *config.hidden_dims]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), ACTIVATIONS[config.activation]()]
        layers += [nn.Linear(dims[-1], config.action_dim)]
        if config.squash == "tanh":
            layers.append(nn.Tanh())
        self.net = nn.Sequential(*layers)
        self.register_buffer("obs_mean", torch.zeros(config.obs_dim))
        self.register_buffer("obs_std", torch.ones(config.obs_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        a = self.net((obs - self.obs_mean) / self.obs_std)
        return a.clamp(-1.0, 1.0) if self.config.squash == "clip" else a


@register
class MLPPolicy(TorchPolicyCheckpointing):
    """``Policy`` around ``MLPActor`` (stateless: ``reset`` does nothing)."""

    config_class = MLPConfig
    kind = "mlp"

    def __init__(self, config: MLPConfig | None = None, model: MLPActor | None = None):
        self.config = config or (model.config if model is not None else MLPConfig())
        self.model = model if model is not None else MLPActor(self.config)
        self.model.eval()
        self.obs_dim = self.config.obs_dim
        self.action_dim = self.config.action_dim

    def reset(self, mask: ArrayLike | None = None) -> None:
        return None

    @torch.no_grad()
    def act(self, obs: ArrayLike) -> ArrayLike:
        x = as_obs_tensor(obs, self.obs_dim)
        return like_input(self.model(x), obs)

