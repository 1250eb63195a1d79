"""A feed-forward policy: the deployable actor of RL-trained quadrotor controllers."""

from __future__ import annotations

import torch
from torch import nn

from ..base import ArrayLike, as_obs_tensor, like_input
from ..checkpoint import TorchPolicyCheckpointing
from ..registry import register
from .configuration_mlp import INTEGRAL_DIM, MLPConfig

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}


class MLPActor(nn.Module):
    """``forward(x (B, input_dim)) -> action (B, action_dim)`` in [-1, 1], with input normalization.

    ``x`` is the observation, followed by the position integral (3 floats, m s) when ``config.position_integral``
    > 0 (``MLPIntegralStep`` and ``MLPPolicy`` append it)."""

    def __init__(self, config: MLPConfig):
        super().__init__()
        if config.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {config.activation!r}; choose one of {sorted(ACTIVATIONS)}")
        if config.squash not in ("tanh", "clip"):
            raise ValueError(f"unknown squash {config.squash!r}; choose 'tanh' or 'clip'")
        self.config = config
        dims = [config.input_dim, *config.hidden_dims]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), ACTIVATIONS[config.activation]()]
        layers += [nn.Linear(dims[-1], config.action_dim)]
        if config.squash == "tanh":
            layers.append(nn.Tanh())
        self.net = nn.Sequential(*layers)
        self.register_buffer("obs_mean", torch.zeros(config.input_dim))
        self.register_buffer("obs_std", torch.ones(config.input_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        a = self.net((obs - self.obs_mean) / self.obs_std)
        return a.clamp(-1.0, 1.0) if self.config.squash == "clip" else a


def integrate_position(integral: torch.Tensor, obs: torch.Tensor, limit: float, dt: float) -> torch.Tensor:
    """``clip(integral + dt * obs[:, 0:3], -limit, limit)``: integral (B, 3) m s, obs (B, D) with the position
    error (m) first, limit m s, dt s -> the next integral (B, 3) m s."""
    return (integral + dt * obs[:, :INTEGRAL_DIM]).clamp(-limit, limit)


class MLPIntegralStep(nn.Module):
    """One step of a position-integral ``MLPActor`` with its state explicit (what ONNX and TorchScript export):
    ``forward(obs (B, obs_dim), integral (B, 3) m s) -> (action (B, action_dim), integral_next (B, 3) m s)``;
    the action reads ``[obs, integral]``, then the integral takes this step's position error."""

    def __init__(self, actor: MLPActor):
        super().__init__()
        if not actor.config.position_integral > 0:
            raise ValueError("MLPIntegralStep needs an actor with config.position_integral > 0")
        self.actor = actor

    def forward(self, obs: torch.Tensor, integral: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.actor.config
        action = self.actor(torch.cat([obs, integral], -1))
        return action, integrate_position(integral, obs, c.position_integral, c.integral_dt)


@register
class MLPPolicy(TorchPolicyCheckpointing):
    """``Policy`` around ``MLPActor``: stateless (``reset`` does nothing), or, with ``config.position_integral``
    > 0, holding the per-environment position integral ``integral`` (B, 3) float32 m s on the model's device."""

    config_class = MLPConfig
    kind = "mlp"

    def __init__(self, config: MLPConfig | None = None, model: MLPActor | None = None):
        self.config = config or (model.config if model is not None else MLPConfig())
        self.model = model if model is not None else MLPActor(self.config)
        self.model.eval()
        self.obs_dim = self.config.obs_dim
        self.action_dim = self.config.action_dim
        self.integral: torch.Tensor | None = None  # (B, 3) m s, with a position integral; None: zeros at next act

    @property
    def integrates(self) -> bool:
        """Whether the policy keeps a position integral (``config.position_integral`` > 0)."""
        return self.config.position_integral > 0

    def reset(self, mask: ArrayLike | None = None) -> None:
        """Zero the position integral of every env, or of those where ``mask`` (B,) is true."""
        if self.integral is None:
            return None
        if mask is None:
            self.integral.zero_()
            return None
        m = torch.as_tensor(mask, dtype=torch.bool).to(self.integral.device)
        if m.shape != (self.integral.shape[0],):
            raise ValueError(f"reset mask has shape {tuple(m.shape)}, expected ({self.integral.shape[0]},)")
        self.integral[m] = 0.0
        return None

    @torch.no_grad()
    def act(self, obs: ArrayLike) -> ArrayLike:
        x = as_obs_tensor(obs, self.obs_dim)
        if not self.integrates:
            return like_input(self.model(x), obs)
        x = x.to(self.model.obs_mean.device)
        if self.integral is None or self.integral.shape[0] != x.shape[0] or self.integral.device != x.device:
            self.integral = torch.zeros(x.shape[0], INTEGRAL_DIM, dtype=torch.float32, device=x.device)
        c = self.config
        action = self.model(torch.cat([x, self.integral], -1))
        self.integral = integrate_position(self.integral, x, c.position_integral, c.integral_dt)
        return like_input(action, obs)
