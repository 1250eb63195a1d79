"""Batched policies used to build quality ladders and behaviour data for world models:
a policy with Gaussian action noise, and the push-T and obstacle-reach scripted experts with random
actions mixed in."""

from __future__ import annotations

import numpy as np
import torch

from policies.base import ArrayLike
from sims.pusht import PushTExpert
from sims.toy import expert_action


def mix_random_actions(actions: np.ndarray, prob, low: float, high: float, rng: np.random.Generator) -> np.ndarray:
    """Replace each row of ``actions`` (B, A) in place, with probability ``prob`` (scalar or (B,)),
    by a uniform random action in [low, high]^A; returns ``actions``."""
    rand = rng.uniform(size=len(actions)) < prob
    actions[rand] = rng.uniform(low, high, (int(rand.sum()), actions.shape[1]))
    return actions


class NoisyPolicy:
    """``policy``'s action plus N(0, std^2) noise, clipped to [low, high]. obs (B, D) -> (B, A) numpy."""

    def __init__(self, policy, std: float, low: float = -1.0, high: float = 1.0, seed: int = 0):
        if std < 0:
            raise ValueError(f"noise std must be >= 0, got {std}")
        self.policy, self.std, self.low, self.high = policy, float(std), low, high
        self.obs_dim, self.action_dim = policy.obs_dim, policy.action_dim
        self.rng = np.random.default_rng(seed)

    def reset(self, mask: ArrayLike | None = None) -> None:
        self.policy.reset(mask)

    def act(self, obs: ArrayLike) -> np.ndarray:
        a = np.asarray(torch.as_tensor(self.policy.act(torch.as_tensor(np.asarray(obs), dtype=torch.float32))))
        return np.clip(a + self.std * self.rng.normal(size=a.shape), self.low, self.high).astype(np.float32)


class PushTExpertPolicy:
    """B push-T scripted experts; each action is replaced by a uniform random pusher target with
    probability ``random_prob`` (the quality knob). obs (B, 5) state -> actions (B, 2) m."""

    obs_dim, action_dim = 5, 2

    def __init__(self, random_prob: float = 0.0, half_size: float = 0.256, seed: int = 0):
        if not 0.0 <= random_prob <= 1.0:
            raise ValueError(f"random_prob must lie in [0, 1], got {random_prob}")
        self.random_prob, self.half_size, self.seed = float(random_prob), half_size, seed
        self.rng = np.random.default_rng(seed)
        self.experts: list[PushTExpert] = []

    def reset(self, mask: ArrayLike | None = None) -> None:
        if mask is None:
            self.experts = []
            return
        for i in np.flatnonzero(np.asarray(mask)):
            if i < len(self.experts):
                self.experts[i].reset(seed=int(self.rng.integers(2**31)))

    def act(self, obs: ArrayLike) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float64)
        if obs.ndim != 2 or obs.shape[1] != 5:
            raise ValueError(f"obs has shape {obs.shape}, expected (B, 5) push-T states")
        while len(self.experts) < len(obs):
            self.experts.append(PushTExpert(seed=int(self.rng.integers(2**31))))
        a = np.stack([e.act(o) for e, o in zip(self.experts, obs)])
        return mix_random_actions(a, self.random_prob, -self.half_size, self.half_size, self.rng).astype(np.float32)


class ToyExpertPolicy:
    """B obstacle-reach scripted experts (each passes on a side drawn at its episode's start); each
    action is replaced by a uniform random target in [-1.5, 1.5]^2 m with probability ``random_prob``.
    obs (B, 2) positions, m -> actions (B, 2) target positions, m."""

    obs_dim, action_dim = 2, 2

    def __init__(self, random_prob: float = 0.0, seed: int = 0):
        if not 0.0 <= random_prob <= 1.0:
            raise ValueError(f"random_prob must lie in [0, 1], got {random_prob}")
        self.random_prob = float(random_prob)
        self.rng = np.random.default_rng(seed)
        self.sides = np.zeros(0)

    def reset(self, mask: ArrayLike | None = None) -> None:
        if mask is None:
            self.sides = np.zeros(0)
            return
        idx = np.flatnonzero(np.asarray(mask))
        idx = idx[idx < len(self.sides)]
        self.sides[idx] = self.rng.choice([-1.0, 1.0], len(idx))

    def act(self, obs: ArrayLike) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float64)
        if obs.ndim != 2 or obs.shape[1] != 2:
            raise ValueError(f"obs has shape {obs.shape}, expected (B, 2) positions")
        if len(self.sides) < len(obs):
            self.sides = np.concatenate([self.sides, self.rng.choice([-1.0, 1.0], len(obs) - len(self.sides))])
        a = np.stack([expert_action(o, s, self.rng) for o, s in zip(obs, self.sides)])
        return mix_random_actions(a, self.random_prob, -1.5, 1.5, self.rng).astype(np.float32)
