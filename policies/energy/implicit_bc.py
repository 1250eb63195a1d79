"""Implicit behavioural cloning (Florence et al., CoRL 2021): the classic energy-based baseline.

An MLP scores (flattened observation window, flattened action chunk); training is InfoNCE
against counter-examples drawn uniformly in the normalized action box; inference is IBC's
derivative-free optimizer (iterative importance resampling with shrinking Gaussian noise).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..chunked import standard_noise
from ..registry import register
from .chunking import ChunkPolicyBase
from .configuration_energy import ImplicitBCConfig
from .energy_mlp import EnergyMLP


def energy_of_candidates(model: nn.Module, obs_n: torch.Tensor, chunks: torch.Tensor) -> torch.Tensor:
    """obs_n (B, T, O), chunks (B, N, H, A) -> energies (B, N), one batched forward."""
    b, n = chunks.shape[:2]
    obs_rep = obs_n[:, None].expand(-1, n, -1, -1).reshape(b * n, *obs_n.shape[1:])
    return model(obs_rep, chunks.reshape(b * n, *chunks.shape[2:])).view(b, n)


def info_nce(energy_pos: torch.Tensor, energy_neg: torch.Tensor) -> torch.Tensor:
    """InfoNCE with the positive at index 0: energy_pos (B,), energy_neg (B, N) -> scalar."""
    logits = -torch.cat([energy_pos[:, None], energy_neg], dim=1)
    return F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device))


@torch.no_grad()
def dfo_minimize(model: nn.Module, obs_n: torch.Tensor, population: torch.Tensor, iters: int,
                 noise_scale: float, noise_shrink: float, generator: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """IBC's derivative-free optimizer. population (B, N, H, A) in [-1, 1] -> (best chunk (B, H, A), its energy (B,)).

    Each round resamples the population in proportion to softmax(-energy), then perturbs it
    with N(0, scale^2) noise (clamped to the box) and shrinks the scale. The resampling and the noise are drawn
    by ``generator`` where it is (the CPU: the same draws whatever device the model is on) and copied over.
    """
    b, n = population.shape[:2]
    device = population.device
    rows = torch.arange(b, device=device)[:, None]
    scale = noise_scale
    for _ in range(iters):
        probs = torch.softmax(-energy_of_candidates(model, obs_n, population), dim=1)
        idx = torch.multinomial(probs.to(generator.device), n, replacement=True, generator=generator).to(device)
        noise = torch.randn(population.shape, generator=generator, device=generator.device).to(device)
        population = (population[rows, idx] + scale * noise).clamp(-1.0, 1.0)
        scale *= noise_shrink
    energy = energy_of_candidates(model, obs_n, population)
    best = energy.argmin(dim=1)
    return population[rows[:, 0], best], energy[rows[:, 0], best]


@register(trainable=True)
class ImplicitBCPolicy(ChunkPolicyBase):
    """``ChunkedPolicy`` around ``EnergyMLP``: kind "implicit_bc".

    ``noise`` (B, horizon, action_dim), when given, is the centre of the initial DFO population
    (``clamp(noise + noise_scale * N(0, 1))``, normalized action space); without it the
    population is uniform in [-1, 1]. ``last_energy`` (B,) is the energy of the chosen chunk.
    """

    config_class = ImplicitBCConfig
    kind = "implicit_bc"

    def __init__(self, config: ImplicitBCConfig | None = None, model: EnergyMLP | None = None):
        config = config or (model.config if model is not None else ImplicitBCConfig())
        super().__init__(config, model if model is not None else EnergyMLP(config))

    def _infer(self, obs_n: torch.Tensor, init: torch.Tensor | None, n_samples: int | None = None):
        cfg = self.config
        n = n_samples or cfg.n_samples
        gen = torch.Generator().manual_seed(cfg.seed)
        shape = (obs_n.shape[0], n, self.horizon, self.action_dim)
        if init is None:
            population = standard_noise("uniform", shape, gen).to(obs_n.device)
        else:
            population = (init[:, None] + cfg.noise_scale * torch.randn(shape, generator=gen).to(init.device)
                          ).clamp(-1.0, 1.0)
        return dfo_minimize(self.inference_model, obs_n, population, cfg.dfo_iters, cfg.noise_scale, cfg.noise_shrink,
                            gen)

    def _loss(self, obs_n: torch.Tensor, action_n: torch.Tensor) -> torch.Tensor:
        negatives = standard_noise("uniform", (action_n.shape[0], self.config.n_negatives, *action_n.shape[1:]),
                                   device=action_n.device)
        energies = energy_of_candidates(self.model, obs_n, torch.cat([action_n[:, None], negatives], dim=1))
        return info_nce(energies[:, 0], energies[:, 1:])
