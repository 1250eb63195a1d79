"""Pick the actor to deploy by scoring candidates in the calibrated twin (Real-is-Sim's offline
evaluation): SAC's policy quality swings from one checkpoint to the next, and trying each on the
robot would cost real flights. Every candidate flies the same starts, all at once, in one batched sim."""

from __future__ import annotations

import copy
from typing import Mapping, Sequence

import numpy as np
import torch

from policies.base import Policy
from robo.twin.offline import evaluate_in_twin, hover_scores
from sims.quadrotor import QuadrotorParams


class ResidualPolicy:
    """``clip(base(obs) + scale * actor(obs), -1, 1)`` with the actor's deterministic action: the
    ``ResidualAdapter``'s action as a batched robo policy. ``actor``: an SB3 SAC actor."""

    def __init__(self, base: Policy, actor, scale: float):
        self.base, self.actor, self.scale = copy.deepcopy(base), actor, float(scale)  # own base state (GRUs)

    def reset(self, mask=None) -> None:
        self.base.reset(mask)

    @torch.no_grad()
    def act(self, obs):
        o = torch.as_tensor(obs, dtype=torch.float32)
        a = (torch.as_tensor(self.base.act(o)) + self.scale * self.actor(o, deterministic=True)).clamp(-1, 1)
        return a.numpy() if isinstance(obs, np.ndarray) else a


def score_in_twin(base: Policy, actors: Mapping[str, object], params: QuadrotorParams | str | dict,
                  start: Sequence[float], scale: float, hover: Sequence[float] = (0.0, 0.0, 1.0), steps: int = 200,
                  starts: int = 16, jitter: float = 0.1, seed: int = 0) -> dict[str, float]:
    """{name: mean tracking error (m)} of base + each residual actor, flown from the same ``starts``
    starts (``start`` +- ``jitter`` m) for ``steps`` ticks in the twin with ``params``."""
    if not actors:
        raise ValueError("no actors to score")
    policies = [ResidualPolicy(base, a, scale) for a in actors.values()]
    errors = evaluate_in_twin(policies, params, start, hover, steps, envs_per_policy=starts, start_jitter=jitter,
                              seed=seed)
    return {name: float(hover_scores(errors[:, i])["mean_error"].mean()) for i, name in enumerate(actors)}


def best_in_twin(base: Policy, actors: Mapping[str, object], params, start, scale: float, **kwargs):
    """(name, scores) of the actor with the lowest mean error in the twin (``score_in_twin``)."""
    scores = score_in_twin(base, actors, params, start, scale, **kwargs)
    return min(scores, key=scores.get), scores
