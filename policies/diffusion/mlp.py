"""Residual MLP denoiser over a flattened action chunk (IDQL / DSRL's state-based diffusion
policies use such MLPs): a fraction of the U-Net's cost per step, which is what a CPU can train.

``forward(x (B, T, action_dim), t (B,) int, cond (B, cond_dim)) -> (B, T, action_dim)``, the same
signature as ``ConditionalUnet1d``.
"""

from __future__ import annotations

import torch
from torch import nn

from .unet import SinusoidalPosEmb


class ResidualBlock(nn.Module):
    """h + W2 Mish(W1 LayerNorm(h)), with (hidden,) features."""

    def __init__(self, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, 2 * hidden), nn.Mish(),
                                 nn.Linear(2 * hidden, hidden))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.net(h)


class ConditionalMlp(nn.Module):
    """Chunk (T * action_dim) + step embedding + condition -> ``n_blocks`` residual blocks -> chunk."""

    def __init__(self, action_dim: int, horizon: int, cond_dim: int, hidden: int = 512, n_blocks: int = 3,
                 step_embed_dim: int = 64):
        super().__init__()
        self.horizon, self.action_dim = horizon, action_dim
        d = step_embed_dim
        self.step_encoder = nn.Sequential(SinusoidalPosEmb(d), nn.Linear(d, 2 * d), nn.Mish(), nn.Linear(2 * d, d))
        self.inp = nn.Linear(horizon * action_dim + d + cond_dim, hidden)
        self.blocks = nn.Sequential(*[ResidualBlock(hidden) for _ in range(n_blocks)])
        self.out = nn.Sequential(nn.LayerNorm(hidden), nn.Mish(), nn.Linear(hidden, horizon * action_dim))

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        h = self.inp(torch.cat([x.flatten(1), self.step_encoder(t), cond], dim=-1))
        return self.out(self.blocks(h)).reshape(-1, self.horizon, self.action_dim)
