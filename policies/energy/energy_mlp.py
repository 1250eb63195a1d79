"""An MLP energy over (flattened observation window, flattened action chunk): implicit BC's model,
and the energy policy's ``backbone: mlp``."""

from __future__ import annotations

import torch
from torch import nn

from ..normalize import Normalizer


class ChunkInputs:
    """Mixin for networks over (observation window, action chunk): ``_init_normalizers`` makes their
    ``obs_normalizer`` / ``action_normalizer`` (what the policy normalizes with and saves), and
    ``flat_width`` / ``flatten`` give the concatenated input of the MLP-style ones."""

    def _init_normalizers(self, config) -> None:
        self.obs_normalizer = Normalizer(config.obs_dim, config.obs_norm)
        self.action_normalizer = Normalizer(config.action_dim, "min_max")

    @staticmethod
    def flat_width(config) -> int:
        """Width of ``flatten``'s output: n_obs_steps * obs_dim + horizon * action_dim."""
        return config.n_obs_steps * config.obs_dim + config.horizon * config.action_dim

    @staticmethod
    def flatten(obs_n: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """obs_n (B, T, obs_dim), chunk (B, H, action_dim) -> (B, T * obs_dim + H * action_dim)."""
        return torch.cat([obs_n.flatten(1), chunk.flatten(1)], dim=1)


class EnergyMLP(ChunkInputs, nn.Module):
    """``forward(obs_n (B, T, obs_dim), chunk (B, H, action_dim)) -> energy (B,)``: an MLP on the concatenation.
    (``out_dim`` > 1: for energies built on the MLP's (B, out_dim) output, ``biased_output``.)

    ``config`` needs the chunk shapes, ``obs_norm`` and ``hidden_dims``; ``activation`` builds each
    hidden layer's nonlinearity (ReLU for implicit BC's derivative-free search; a smooth one where
    actions come from gradient descent on the energy, since a ReLU net's dE/da is piecewise constant).
    """

    def __init__(self, config, activation: type[nn.Module] = nn.ReLU, out_dim: int = 1):
        super().__init__()
        config.validate()
        self.config = config
        self._init_normalizers(config)
        dims = [self.flat_width(config), *config.hidden_dims]
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
        return self.biased_output(obs_n, chunk, first_layer_bias).squeeze(-1)

    def biased_output(self, obs_n: torch.Tensor, chunk: torch.Tensor,
                      first_layer_bias: torch.Tensor | float) -> torch.Tensor:
        """The MLP's raw output (B, out_dim), with ``first_layer_bias`` as in ``biased_energy``."""
        return self.net[1:](self.net[0](self.flatten(obs_n, chunk)) + first_layer_bias)
