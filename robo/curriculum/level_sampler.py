"""Prioritized level replay over domain-randomized quadrotors: a level is a seed of the
randomization sampler, so a hard quadrotor can be drawn again."""

from __future__ import annotations

import numpy as np
import torch

from sims.quadrotor.dynamics import ParamsBatch
from sims.quadrotor.randomization import RandomizationConfig, sample_params

from .level_replay import PrioritizedLevelReplay


class LevelReplayParamSampler:
    """A task ``param_sampler`` ``(n, rng) -> ParamsBatch`` whose draws are PLR levels.

    Level ``k`` is the quadrotor ``sample_params(randomization, 1, seed=base_seed + k)``.
    ``last_levels`` holds the levels of the latest call (the task stores them per env);
    ``update(level, score)`` feeds a finished episode's score back to the replay.
    """

    def __init__(self, randomization: RandomizationConfig, replay: PrioritizedLevelReplay, base_seed: int = 0,
                 dtype: torch.dtype = torch.float32):
        self.randomization, self.replay, self.base_seed, self.dtype = randomization, replay, base_seed, dtype
        self.last_levels = np.empty(0, dtype=np.int64)

    def level_params(self, levels: np.ndarray) -> ParamsBatch:
        parts = [sample_params(self.randomization, 1, seed=self.base_seed + int(k), dtype=self.dtype) for k in levels]
        return ParamsBatch(**{name: (parts[0].dt if name == "dt" else torch.cat([getattr(p, name) for p in parts]))
                              for name in vars(parts[0])})

    def __call__(self, n: int, rng: np.random.Generator) -> ParamsBatch:
        self.last_levels = self.replay.sample(n)
        return self.level_params(self.last_levels)

    def update(self, level: int, score: float) -> None:
        self.replay.update(level, score)
