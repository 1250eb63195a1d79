"""An MLP energy over (flattened observation window, flattened action chunk): implicit BC's model,
and the energy policy's ``backbone: mlp``."""

from __future__ import annotations

import torch
from torch import nn

from ..normalize import Normalizer


class EnergyMLP(nn.Module):
    """``forward(obs_n (B, T, obs_dim), chunk (B, H, action_dim)) -> energy (B,)``: an MLP on the concatenation.
    (``out_dim`` > 1: ``forward`` returns the MLP's (B, out_dim) output, for energies built on it.)

    ``config`` needs the chunk shapes, ``obs_norm`` and ``hidden_dims``; ``activation`` builds each
    hidden layer's nonlinearity (ReLU for implicit BC's derivative-free search; a smooth one where
    actions come from gradient descent on the energy, since a ReLU net's dE/da is piecewise constant).
    """

    def __init__(self, config, activation: type[nn.Module] = nn.ReLU, out_dim: int = 1):
        super().__init__()
        config.validate()
        self.config = config
        self.obs_normalizer = Normalizer(config.obs_dim, config.obs_norm)
        self.action_normalizer = Normalizer(config.action_dim, "min_max")
        dims = [config.n_obs_steps * config.obs_dim + config.horizon * config.action_dim, *config.hidden_dims]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), activation()]
        self.net = nn.Sequential(*layers, nn.Linear(dims[-1], out_dim))

    def forward(self, obs_n: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """obs_n (B, T, obs_dim), chunk (B, H, action_dim) -> energy (B,)."""
        return self.biased_energy(obs_n, chunk, 0.0)

    def biased_energy(self, obs_n: torch.Tensor, chunk: torch.Tensor,
                      first_layer_bias: torch.Tensor | float) -> torch.Tensor:
        """``forward`` with ``first_layer_bias`` ((hidden_dims[0],) or a scalar) added to the first
        layer's pre-activation. Not a ``forward`` argument: an exporter would make it a model input."""
        x = torch.cat([obs_n.flatten(1), chunk.flatten(1)], dim=1)
        out = self.net[1:](self.net[0](x) + first_layer_bias)
        return out.squeeze(-1) if out.shape[-1] == 1 else out
