"""The foundation policy: a tiny recurrent (GRU) quadrotor controller, after RAPTOR."""

from __future__ import annotations

from dataclasses import asdict

import torch
from torch import nn

from ..base import ArrayLike, as_obs_tensor, like_input
from ..checkpoint import TorchPolicyCheckpointing
from ..registry import register
from .configuration_foundation import FoundationConfig

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "identity": nn.Identity}


def _activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


class FoundationGRU(nn.Module):
    """Dense -> GRU cell -> Dense. ``forward(obs (B, obs_dim), h (B, H)) -> (action (B, A), h')``.

    The GRU follows torch's ``GRUCell`` equations (gates r, z, n), which are also RLtools'.
    ``initial_hidden`` (H,) is a learned initial state.
    """

    def __init__(self, config: FoundationConfig):
        super().__init__()
        self.config = config
        self.input_layer = nn.Linear(config.obs_dim, config.hidden_dim)
        self.input_activation = _activation(config.input_activation)
        self.gru = nn.GRUCell(config.hidden_dim, config.hidden_dim)
        self.output_layer = nn.Linear(config.hidden_dim, config.action_dim)
        self.output_activation = _activation(config.output_activation)
        self.initial_hidden = nn.Parameter(torch.zeros(config.hidden_dim))

    def initial_state(self, batch_size: int) -> torch.Tensor:
        return self.initial_hidden.detach().expand(batch_size, -1).clone()

    def forward(self, obs: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.input_activation(self.input_layer(obs))
        h = self.gru(x, h)
        a = self.output_activation(self.output_layer(h))
        if self.config.clip_actions:
            a = a.clamp(-1.0, 1.0)
        return a, h


@register
class FoundationPolicy(TorchPolicyCheckpointing):
    """``Policy`` wrapper around ``FoundationGRU`` holding the per-environment hidden state."""

    config_class = FoundationConfig
    kind = "foundation"

    def __init__(self, config: FoundationConfig | None = None, model: FoundationGRU | None = None):
        self.config = config or (model.config if model is not None else FoundationConfig())
        self.model = model if model is not None else FoundationGRU(self.config)
        self.model.eval()
        self.obs_dim = self.config.obs_dim
        self.action_dim = self.config.action_dim
        self.hidden: torch.Tensor | None = None  # (B, H)

    def reset(self, mask: ArrayLike | None = None) -> None:
        if mask is None or self.hidden is None:
            self.hidden = None
            return
        m = torch.as_tensor(mask, dtype=torch.bool)
        if m.shape != (self.hidden.shape[0],):
            raise ValueError(f"reset mask has shape {tuple(m.shape)}, expected ({self.hidden.shape[0]},)")
        self.hidden[m] = self.model.initial_hidden.detach().to(self.hidden.dtype)

    @torch.no_grad()
    def act(self, obs: ArrayLike) -> ArrayLike:
        x = as_obs_tensor(obs, self.obs_dim, dtype=self.model.input_layer.weight.dtype)
        if self.hidden is None or self.hidden.shape[0] != x.shape[0]:
            self.hidden = self.model.initial_state(x.shape[0])
        action, self.hidden = self.model(x, self.hidden)
        return like_input(action, obs)

    def __repr__(self) -> str:
        return f"FoundationPolicy({asdict(self.config)}, parameters={self.num_parameters})"

