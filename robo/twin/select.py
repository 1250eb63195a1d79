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


class TwinGate:
    """Real-is-Sim's gate on what flies: the learner's actor goes to the robot only if the calibrated
    twin scores it (``score_in_twin``) within ``tolerance`` (a fraction) of the best actor admitted
    so far; the first actor scored sets the bar. SAC's actor drifts between updates; a drifted
    actor then never reaches the robot, where it would tilt past the safety limits.

    ``gate(actor) -> (score m, admitted)``."""

    def __init__(self, base: Policy, params, start: Sequence[float], scale: float, tolerance: float = 0.1,
                 hover: Sequence[float] = (0.0, 0.0, 1.0), steps: int = 200, starts: int = 16):
        if tolerance < 0:
            raise ValueError(f"gate tolerance must be >= 0, got {tolerance}")
        self.base, self.params, self.start, self.scale = base, params, tuple(start), float(scale)
        self.tolerance, self.hover, self.steps, self.starts = float(tolerance), tuple(hover), int(steps), int(starts)
        self.best = np.inf

    @staticmethod
    def config(base: str, robot: dict, start: Sequence[float], scale: float, tolerance: float,
               **optional) -> dict:
        """The ``LearnerConfig.twin_gate`` dict that ``from_config`` reads: ``base`` (raptor or a
        checkpoint folder), ``robot`` (a robot entry, e.g. the identified one), ``start`` (m), residual
        ``scale``, ``tolerance``; ``optional`` (``hover``, ``steps``, ``starts``, ``every``) where not None."""
        return {"base": base, "robot": robot, "start": tuple(start), "scale": float(scale),
                "tolerance": float(tolerance), **{k: v for k, v in optional.items() if v is not None}}

    @classmethod
    def from_config(cls, d: dict) -> "TwinGate":
        """From ``LearnerConfig.twin_gate``: ``{base: raptor | <checkpoint folder>, robot: <robot config,
        e.g. the identified robot's entry>, start, scale}`` plus any optional argument (``every`` is the
        learner's: transitions between gate checks)."""
        from robo.factory import policy_by_name

        d = {k: v for k, v in d.items() if k != "every"}
        missing = sorted({"base", "robot", "start", "scale"} - set(d))
        if missing:
            raise ValueError(f"twin_gate needs {missing}")
        return cls(policy_by_name(d.pop("base")), d.pop("robot"), **d)

    def __call__(self, actor) -> tuple[float, bool]:
        score = score_in_twin(self.base, {"actor": actor}, self.params, self.start, self.scale, hover=self.hover,
                              steps=self.steps, starts=self.starts)["actor"]
        admitted = bool(np.isfinite(score) and score <= self.best * (1.0 + self.tolerance))
        if admitted:
            self.best = min(self.best, score)
        return score, admitted
