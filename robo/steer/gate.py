"""Deploy a steered policy only when it beats its base by a confidence bound.

One evaluation of 20 episodes swings by +-20 success points, so "the steered policy scored higher once"
deploys worse policies about as often as better ones. The gate scores every candidate and the base on
the same fresh validation episodes (env seeds that no training evaluation used) and deploys the best
candidate only if the one-sided lower confidence bound on ``success(candidate) - success(base)`` is
above ``margin``; otherwise it deploys the base itself (N(0, I) noise, the policy the user started
from). The bound is Newcombe's hybrid score interval built from Wilson score bounds, Bonferroni-split
over the candidates so that picking the best of several does not loosen it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from statistics import NormalDist

log = logging.getLogger(__name__)


def wilson_bounds(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval (low, high) of a success rate from ``successes`` of ``n`` episodes."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got successes={successes}, n={n}")
    p = successes / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, center - half), min(1.0, center + half)


def difference_lower_bound(k_new: int, k_base: int, n: int, confidence: float = 0.95) -> float:
    """One-sided lower bound (at ``confidence``) on ``p_new - p_base`` from ``k_new`` and ``k_base``
    successes of ``n`` episodes each (Newcombe's hybrid score method)."""
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    z = NormalDist().inv_cdf(confidence)
    p1, p2 = k_new / n, k_base / n
    l1, _ = wilson_bounds(k_new, n, z)
    _, u2 = wilson_bounds(k_base, n, z)
    return p1 - p2 - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)


@dataclass
class Decision:
    """What the gate deployed (``deployed``: a candidate's name or ``"base"``) and why."""

    deployed: str
    base_success: float
    candidates: dict[str, float]  # name -> validation success
    lower_bound: float            # of (best candidate - base), at the Bonferroni-split confidence
    episodes: int
    seed: int
    confidence: float
    margin: float

    def as_dict(self) -> dict:
        return asdict(self)

    def message(self) -> str:
        best = max(self.candidates, key=self.candidates.get)
        verdict = (f"deployed the steered policy ({self.deployed})" if self.deployed != "base" else
                   "kept the base policy: steering did not beat it by the confidence bound")
        return (f"{verdict}; validation on {self.episodes} episodes from env seed {self.seed}: base "
                f"{self.base_success:.3f}, {best} {self.candidates[best]:.3f}, lower bound on the gain "
                f"{self.lower_bound:+.3f} (one-sided {self.confidence:.0%}, margin {self.margin:+.3f})")


def choose(base_success: float, candidates: dict[str, float], episodes: int, seed: int,
           confidence: float = 0.95, margin: float = 0.0) -> Decision:
    """The gate's decision from validation success rates (each of ``episodes`` episodes)."""
    if not candidates:
        raise ValueError("the gate needs at least one steered candidate")
    best = max(candidates, key=candidates.get)
    split = 1 - (1 - confidence) / len(candidates)  # Bonferroni over the candidates
    k = {name: round(s * episodes) for name, s in candidates.items()}
    lower = difference_lower_bound(k[best], round(base_success * episodes), episodes, split)
    return Decision(best if lower > margin else "base", base_success, dict(candidates), lower, episodes, seed,
                    confidence, margin)


def gate(base, candidates: dict, score: Callable[[object, int, int], float], episodes: int, seed: int,
         confidence: float = 0.95, margin: float = 0.0) -> tuple[Decision, object]:
    """Score the base and each candidate policy with ``score(policy, episodes, seed) -> success rate`` on
    the same validation episodes; returns the decision and the policy to deploy."""
    base_success = score(base, episodes, seed)
    scores = {name: score(p, episodes, seed) for name, p in candidates.items()}
    d = choose(base_success, scores, episodes, seed, confidence, margin)
    log.info("deploy gate: %s", d.message())
    return d, base if d.deployed == "base" else candidates[d.deployed]
