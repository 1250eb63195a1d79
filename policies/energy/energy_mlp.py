"""An MLP energy over (flattened observation window, flattened action chunk): implicit BC's model,
and the energy policy's ``backbone: mlp``."""

from __future__ import annotations

import torch
from torch import nn

from ..diffusion.vision import image_encoder_for, window_features
from ..normalize import Normalizer


class ChunkInputs:
    """Mixin for networks over (observation window, action chunk): ``_init_inputs`` makes their
    ``obs_normalizer`` / ``action_normalizer`` (what the policy normalizes with and saves) and, for image
    observations, their ``image_encoder``; ``features`` turns a window into what the network reads, and
    ``flat_width`` / ``flatten`` give the concatenated input of the MLP-style ones.

    The networks' ``obs_n`` argument is that feature window, (B, T, ``config.obs_feature_dim``): the
    normalized state, followed by the image's features when there is an image."""

    def _init_inputs(self, config) -> None:
        self.obs_normalizer = Normalizer(config.obs_dim, config.obs_norm)
        self.action_normalizer = Normalizer(config.action_dim, "min_max")
        self.image_encoder = image_encoder_for(config)

    def features(self, state_n: torch.Tensor, image: torch.Tensor | None = None) -> torch.Tensor:
        """state_n (B, T, obs_dim) normalized, image (B, T, 3, H, W) in [0, 1] (image policies) -> obs_n
        (B, T, obs_feature_dim). Computed once per window: the descent differentiates the energy, not this."""
        return window_features(state_n, image, self.image_encoder)

    @staticmethod
    def flat_width(config) -> int:
        """Width of ``flatten``'s output: n_obs_steps * obs_feature_dim + horizon * action_dim."""
        return config.n_obs_steps * config.obs_feature_dim + config.horizon * config.action_dim

    @staticmethod
    def flatten(obs_n: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """obs_n (B, T, obs_feature_dim), chunk (B, H, action_dim) -> (B, T * obs_feature_dim + H * action_dim)."""
        return torch.cat([obs_n.flatten(1), chunk.flatten(1)], dim=1)


class EnergyMLP(ChunkInputs, nn.Module):
    """``forward(obs_n (B, T, obs_feature_dim), chunk (B, H, action_dim)) -> energy (B,)``: an MLP on the concatenation.

    ``config`` needs the chunk shapes, ``obs_norm`` and ``hidden_dims``; ``activation`` builds each
    hidden layer's nonlinearity (ReLU for implicit BC's derivative-free search; a smooth one where
    actions come from gradient descent on the energy, since a ReLU net's dE/da is piecewise constant).
    """

    def __init__(self, config, activation: type[nn.Module] = nn.ReLU):
        super().__init__()
        config.validate()
        self.config = config
        self._init_inputs(config)
        dims = [self.flat_width(config), *config.hidden_dims]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), activation()]
        self.net = nn.Sequential(*layers, nn.Linear(dims[-1], 1))

    def forward(self, obs_n: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """obs_n (B, T, obs_feature_dim), chunk (B, H, action_dim) -> energy (B,)."""
        return self.net(self.flatten(obs_n, chunk)).squeeze(-1)
