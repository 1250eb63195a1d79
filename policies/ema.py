"""An exponential moving average of a network's weights, with Diffusion Policy's warm-up.

The average starts as a copy of the weights and follows them closely at first, its decay rising as
``1 - (1 + step) ** -power`` towards ``max_decay``; so short runs get a short average and long runs a long one.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel


def ema_decay(step: int, power: float = 0.75, max_decay: float = 0.9999) -> float:
    """Diffusion Policy's EMA warm-up: 0 at the first update, then 1 - (1 + step) ** -power, capped."""
    step = max(0, step - 1)
    return 0.0 if step <= 0 else min(max_decay, 1.0 - (1.0 + step) ** -power)


def make_ema(model: nn.Module, power: float = 0.75, max_decay: float = 0.9999) -> AveragedModel:
    """A frozen ``AveragedModel`` of ``model`` (its ``module`` is the averaged copy); call
    ``update_parameters(model)`` after every optimizer step."""

    def update(avg: list[torch.Tensor], cur: list[torch.Tensor], n_averaged) -> None:
        torch._foreach_lerp_(avg, cur, 1.0 - ema_decay(int(n_averaged), power, max_decay))

    ema = AveragedModel(model, multi_avg_fn=update)
    ema.requires_grad_(False)
    return ema


class AveragedWeights:
    """For policies that train ``self.model`` and may keep ``self.ema`` (``make_ema`` of it, or None):
    the averaged copy acts when it exists."""

    model: nn.Module
    ema: AveragedModel | None

    @property
    def inference_model(self) -> nn.Module:
        """The averaged weights when the policy keeps them, else the trained ones."""
        return self.ema.module if self.ema is not None else self.model

    def weight_copies(self) -> list[nn.Module]:
        """Every module holding the policy's weights (normalization stats and a load fill them all)."""
        return [self.model] if self.ema is None else [self.model, self.ema.module]

    @torch.no_grad()
    def update_ema(self) -> None:
        """Fold the current weights into the average (call after each optimizer step)."""
        if self.ema is not None:
            self.ema.update_parameters(self.model)
