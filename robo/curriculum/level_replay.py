"""Prioritized level replay (PLR, Jiang et al. 2021) over environment parameters.

A *level* is an integer seed from which an environment's parameters are generated
deterministically (e.g. a domain-randomization draw), so levels can be revisited. With
probability ``replay_prob`` (once ``min_seen`` levels have scores) a seen level is replayed,
drawn from ``P = (1 - staleness_coef) * P_score + staleness_coef * P_stale`` with
``P_score ∝ rank(score)^(-1/temperature)`` and ``P_stale ∝ (now - last_sampled)``; otherwise
an unseen level is drawn. Scores measure learning potential: the positive value loss
(mean |TD/GAE error|) or a regret estimate of the level's last episode, averaged
with ``score_ema``. This is the replay half of PAIRED-style unsupervised environment
design: the curriculum emerges from which levels the agent currently finds hard.
"""

from __future__ import annotations

import numpy as np


class PrioritizedLevelReplay:
    def __init__(self, num_levels: int = 1000, replay_prob: float = 0.5, temperature: float = 0.3,
                 staleness_coef: float = 0.3, min_seen: int = 16, score_ema: float = 0.5, seed: int = 0):
        if num_levels < 1:
            raise ValueError(f"num_levels must be >= 1, got {num_levels}")
        for name, v in (("replay_prob", replay_prob), ("staleness_coef", staleness_coef), ("score_ema", score_ema)):
            if not 0 <= v <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {v}")
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.num_levels, self.replay_prob, self.temperature = num_levels, replay_prob, temperature
        self.staleness_coef, self.min_seen, self.score_ema = staleness_coef, min_seen, score_ema
        self.scores = np.zeros(num_levels)
        self.seen = np.zeros(num_levels, dtype=bool)
        self.last_sampled = np.zeros(num_levels, dtype=np.int64)
        self.clock = 0
        self.rng = np.random.default_rng(seed)

    def replay_distribution(self) -> np.ndarray:
        """(num_levels,) probabilities over seen levels (zeros for unseen)."""
        p = np.zeros(self.num_levels)
        idx = np.flatnonzero(self.seen)
        if len(idx) == 0:
            return p
        order = np.argsort(-self.scores[idx], kind="stable")
        ranks = np.empty(len(idx))
        ranks[order] = np.arange(1, len(idx) + 1)
        ps = ranks ** (-1.0 / self.temperature)
        ps /= ps.sum()
        stale = (self.clock - self.last_sampled[idx]).astype(float)
        pc = stale / stale.sum() if stale.sum() > 0 else np.full(len(idx), 1.0 / len(idx))
        p[idx] = (1 - self.staleness_coef) * ps + self.staleness_coef * pc
        return p

    def sample(self, n: int = 1) -> np.ndarray:
        """(n,) level ids to play next (an unseen level is not drawn twice in one call)."""
        out = np.empty(n, dtype=np.int64)
        for i in range(n):
            unseen = np.setdiff1d(np.flatnonzero(~self.seen), out[:i], assume_unique=True)
            replay = self.seen.sum() >= self.min_seen and (len(unseen) == 0 or self.rng.random() < self.replay_prob)
            if replay or len(unseen) == 0:
                level = int(self.rng.choice(self.num_levels, p=self.replay_distribution()))
            else:
                level = int(self.rng.choice(unseen))
            self.clock += 1
            self.last_sampled[level] = self.clock
            out[i] = level
        return out

    def update(self, level: int, score: float) -> None:
        """Record a finished episode's learning-potential score for ``level``."""
        if not np.isfinite(score):
            raise ValueError(f"level {level}: score must be finite, got {score}")
        if self.seen[level]:
            self.scores[level] = (1 - self.score_ema) * self.scores[level] + self.score_ema * score
        else:
            self.scores[level], self.seen[level] = score, True

    def state_dict(self) -> dict:
        return {"scores": self.scores.tolist(), "seen": self.seen.tolist(),
                "last_sampled": self.last_sampled.tolist(), "clock": self.clock,
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.scores = np.asarray(state["scores"], dtype=float)
        self.seen = np.asarray(state["seen"], dtype=bool)
        self.last_sampled = np.asarray(state["last_sampled"], dtype=np.int64)
        self.clock = int(state["clock"])
        self.rng.bit_generator.state = state["rng"]
