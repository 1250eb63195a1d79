"""Gymnasium VectorEnvs backed by a learned dynamics model, and a real + imagined mixture.

``ImaginedEnv`` steps B imagined episodes through ``EnsembleDynamics`` in one batched call,
starting from observations drawn from real data. An episode is cut (truncated, so value
bootstrapping continues as in MBPO) where the ensemble's disagreement exceeds
``disagreement_threshold``. Autoreset is SAME_STEP with ``info["final_obs"]``, like
``QuadrotorVectorEnv``, so SB3 (through ``SB3VecEnvAdapter``) and any gymnasium trainer use it
unchanged. ``MixedVectorEnv`` concatenates a real and an imagined VectorEnv, so a trainer's data
has a chosen imagined fraction: ``imagined_envs / (real_envs + imagined_envs)``.

The model predicts on its own device (``EnsembleDynamics.to``); the env's state stays numpy on the host, SB3's
side, so each step copies the batch's (obs, action, previous obs) to the model once and its predictions back once
(``EnsembleDynamics.predict_numpy``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from policies.world_model import EnsembleDynamics

ObsFn = Callable[[np.ndarray], np.ndarray]  # obs (B, D) -> (B,) bool or float


class ImaginedEnv(VectorEnv):
    """B imagined episodes. obs (B, obs_dim) float32, actions (B, action_dim).

    Args:
        model: the dynamics ensemble.
        start_obs: (N, obs_dim) real observations episodes start from (drawn uniformly).
        num_envs: B.
        action_space: the single-env action Box (actions are clipped into it).
        max_episode_steps: truncation length.
        disagreement_threshold: cut an episode when the ensemble disagreement exceeds it.
        success_fn: obs (B, D) -> (B,) bool; a success terminates the episode (as does the model's
            predicted termination) and sets ``info["is_success"]``. Leave it None for tasks whose
            success is not terminal (quadrotor hover).
        reward_fn: (obs, action, next_obs) -> (B,) reward; default: the model's predicted reward.
        sample: ``"member"`` (MBPO: a random member and Gaussian draw per step) or ``"mean"``.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, model: EnsembleDynamics, start_obs, num_envs: int, action_space: gym.spaces.Box,
                 max_episode_steps: int, disagreement_threshold: float = float("inf"),
                 success_fn: ObsFn | None = None, reward_fn: Callable | None = None, sample: str = "member",
                 observation_space: gym.spaces.Box | None = None, seed: int | None = None):
        start = np.asarray(start_obs, dtype=np.float32)
        if start.ndim != 2 or start.shape[1] != model.obs_dim or len(start) == 0:
            raise ValueError(f"start_obs has shape {start.shape}, expected (N >= 1, {model.obs_dim})")
        if not np.all(np.isfinite(start)):
            raise ValueError("start_obs contains NaN or inf")
        if action_space.shape != (model.action_dim,):
            raise ValueError(f"action_space has shape {action_space.shape}, the model takes ({model.action_dim},)")
        if num_envs < 1 or max_episode_steps < 1:
            raise ValueError(f"need num_envs >= 1 and max_episode_steps >= 1, got {num_envs}, {max_episode_steps}")
        if not disagreement_threshold > 0:
            raise ValueError(f"disagreement_threshold must be > 0, got {disagreement_threshold}")
        self.model, self.start_obs, self.num_envs = model, start, num_envs
        self.max_episode_steps, self.threshold = int(max_episode_steps), float(disagreement_threshold)
        self.success_fn, self.reward_fn, self.sample = success_fn, reward_fn, sample
        self.single_observation_space = observation_space or gym.spaces.Box(-np.inf, np.inf, (model.obs_dim,),
                                                                             np.float32)
        self.single_action_space = action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(action_space, num_envs)
        self._seed_all(seed)
        self.obs = np.zeros((num_envs, model.obs_dim), np.float32)
        self.prev_obs = self.obs.copy()  # one step before obs (obs itself at an episode's start)
        self.steps = np.zeros(num_envs, np.int64)
        self.cuts = 0  # episodes cut for disagreement since construction

    def _seed_all(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(int(self.rng.integers(2**62)))

    def _draw_starts(self, n: int) -> np.ndarray:
        return self.start_obs[self.rng.integers(len(self.start_obs), size=n)].copy()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._seed_all(seed)
        self.obs = self._draw_starts(self.num_envs)
        self.prev_obs = self.obs.copy()
        self.steps[:] = 0
        return self.obs.copy(), {}

    def step(self, actions):
        a = np.asarray(actions, dtype=np.float32)
        if a.shape != (self.num_envs, self.model.action_dim):
            raise ValueError(f"actions have shape {a.shape}, expected ({self.num_envs}, {self.model.action_dim})")
        if not np.all(np.isfinite(a)):
            raise ValueError("actions contain NaN or inf")
        a = np.clip(a, self.single_action_space.low, self.single_action_space.high)
        p = self.model.predict_numpy(self.obs, a, sample=self.sample, generator=self.generator,
                                     prev_obs=self.prev_obs)
        nxt = p["next_obs"].astype(np.float32)
        low, high = self.single_observation_space.low, self.single_observation_space.high
        nxt = np.clip(nxt, low, high)
        reward = (p["reward"] if self.reward_fn is None else np.asarray(self.reward_fn(self.obs, a, nxt)))
        success = (np.asarray(self.success_fn(nxt), bool) if self.success_fn is not None
                   else np.zeros(self.num_envs, bool))
        terminated = success | p["terminated"]
        disagreement = p["disagreement"]
        self.steps += 1
        cut = disagreement > self.threshold
        truncated = (self.steps >= self.max_episode_steps) | cut
        self.cuts += int((cut & ~terminated).sum())
        info: dict[str, Any] = {"disagreement": disagreement, "is_success": success, "cut": cut & ~terminated}
        done = terminated | truncated
        self.prev_obs, self.obs = self.obs, nxt
        out = nxt.copy()
        if done.any():
            info["final_obs"], info["_final_obs"] = nxt.copy(), done.copy()
            out[done] = self.obs[done] = self._draw_starts(int(done.sum()))
            self.prev_obs[done] = self.obs[done]
            self.steps[done] = 0
        return out, reward.astype(np.float32), terminated, truncated, info


class MixedVectorEnv(VectorEnv):
    """A real and an imagined SAME_STEP VectorEnv side by side: envs [0, real.num_envs) are real.

    ``real_steps`` counts the real env steps taken (what sample efficiency is measured in)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, real: VectorEnv, imagined: VectorEnv):
        for env in (real, imagined):
            if env.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
                raise ValueError(f"{type(env).__name__} must autoreset in the same step (AutoresetMode.SAME_STEP)")
        if real.single_observation_space.shape != imagined.single_observation_space.shape or \
                real.single_action_space.shape != imagined.single_action_space.shape:
            raise ValueError("real and imagined envs must have the same observation and action shapes")
        self.real, self.imagined = real, imagined
        self.num_envs = real.num_envs + imagined.num_envs
        self.single_observation_space = imagined.single_observation_space
        self.single_action_space = real.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.real_steps = 0

    @property
    def imagined_fraction(self) -> float:
        return self.imagined.num_envs / self.num_envs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        o1, _ = self.real.reset(seed=seed)
        o2, _ = self.imagined.reset(seed=None if seed is None else seed + 1)
        return np.concatenate([o1, o2]).astype(np.float32), {}

    def step(self, actions):
        a = np.asarray(actions, dtype=np.float32)
        n = self.real.num_envs
        r1, r2 = self.real.step(a[:n]), self.imagined.step(a[n:])
        self.real_steps += n
        obs, reward, term, trunc = (np.concatenate([x, y]) for x, y in zip(r1[:4], r2[:4]))
        info: dict[str, Any] = {"imagined": np.r_[np.zeros(n, bool), np.ones(self.imagined.num_envs, bool)]}
        done = term | trunc
        if done.any():
            final = obs.astype(np.float32).copy()
            for (lo, hi), i in (((0, n), r1[4]), ((n, self.num_envs), r2[4])):
                if "_final_obs" in i:
                    m = np.asarray(i["_final_obs"], bool)
                    final[lo:hi][m] = np.asarray(i["final_obs"])[m]
            info["final_obs"], info["_final_obs"] = final, done
        return obs.astype(np.float32), reward.astype(np.float32), term, trunc, info

    def close(self, **kwargs) -> None:
        self.real.close()
        self.imagined.close()


class SingleImaginedEnv(gym.Env):
    """One imagined episode as a plain ``gym.Env`` (an ``ImaginedEnv`` with ``num_envs=1``), for
    trainers that wrap single envs, such as DSRL's ``LatentNoiseEnv``. When the episode ends the
    final observation is returned (not the next start) and ``reset()`` is required.
    ``info["is_success"]`` comes from the model's ``success_fn``."""

    metadata = {"render_modes": []}

    def __init__(self, imagined: ImaginedEnv):
        if imagined.num_envs != 1:
            raise ValueError(f"SingleImaginedEnv needs an ImaginedEnv with num_envs=1, got {imagined.num_envs}")
        self.imagined = imagined
        self.observation_space = imagined.single_observation_space
        self.action_space = imagined.single_action_space
        self.render_mode = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, _ = self.imagined.reset(seed=seed)
        return obs[0], {}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.imagined.step(np.asarray(action, np.float32)[None])
        done = bool(terminated[0] or truncated[0])
        out = info["final_obs"][0] if done else obs[0]
        return out, float(reward[0]), bool(terminated[0]), bool(truncated[0]), {
            "is_success": bool(info["is_success"][0]), "disagreement": float(info["disagreement"][0]),
            "cut": bool(info["cut"][0])}
