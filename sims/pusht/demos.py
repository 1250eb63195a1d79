"""Demonstrations of push-T by the scripted expert, as episode dicts.

An episode holds, for every control step t (the observation before action t):
``obs`` (T, 5) float32 state (or (T, 2) agent position for image observations), ``action`` (T, 2)
float32, ``reward`` (T,) float32 (received after action t), ``state`` (T, 5) float32 full state,
``coverage`` (T,) float32 after action t, and for image observations ``image`` (T, 3, 96, 96) uint8.
"""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import numpy as np

from . import ENV_ID
from .expert import ExpertConfig, PushTExpert

Episode = dict[str, np.ndarray]


def rollout_expert(env: gym.Env, expert: PushTExpert, seed: int) -> tuple[Episode, bool]:
    """Run one episode of ``expert`` in a push-T ``env`` (any obs_type) -> (episode, success)."""
    image = env.unwrapped.obs_type != "state"
    obs, info = env.reset(seed=seed)
    expert.reset()
    keys = ("obs", "action", "reward", "state", "coverage") + (("image",) if image else ())
    ep: dict[str, list] = {k: [] for k in keys}
    done = False
    while not done:
        state = info["state"]
        action = expert.act(state)
        ep["state"].append(state)
        if image:
            pixels = obs["pixels"] if isinstance(obs, dict) else obs
            ep["image"].append(np.ascontiguousarray(pixels.transpose(2, 0, 1)))
            ep["obs"].append(state[:2].copy())
        else:
            ep["obs"].append(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        ep["action"].append(action)
        ep["reward"].append(reward)
        ep["coverage"].append(info["coverage"])
        done = terminated or truncated
    out = {k: np.stack(v) if k in ("obs", "action", "state", "image") else np.asarray(v, np.float32)
           for k, v in ep.items()}
    return out, bool(info["is_success"])


def iter_demos(n: int, seed: int = 0, obs_type: str = "state", keep_failures: bool = False,
               max_attempts: int | None = None, expert: dict | None = None, env: dict | None = None
               ) -> Iterator[tuple[Episode, int]]:
    """Yield ``n`` (episode, attempt index) pairs; failures are skipped unless ``keep_failures``.

    Attempt i resets the env with seed ``seed + i`` and seeds the expert's strategy from
    ``(seed, i)``, so a dataset is reproducible. ``expert`` / ``env``: ``ExpertConfig`` /
    ``PushTConfig`` field overrides. Raises RuntimeError after ``max_attempts`` (default 2n + 10).
    """
    if n < 1:
        raise ValueError(f"need n >= 1 episodes, got {n}")
    e = gym.make(ENV_ID, obs_type="state" if obs_type == "state" else "pixels_agent_pos", render_mode=None,
                 config=env)
    ex = PushTExpert(ExpertConfig(**(expert or {})), e.unwrapped.cfg)
    yield from kept_rollouts(e, ex, n, seed, keep_failures, max_attempts)


def kept_rollouts(env: gym.Env, expert, n: int, seed: int, keep_failures: bool, max_attempts: int | None,
                  who: str = "the expert") -> Iterator[tuple[Episode, int]]:
    """``n`` (episode, attempt index) pairs of ``expert`` in ``env``: attempt i resets with seed ``seed + i`` and
    seeds the expert's strategy from ``(seed, i)``; failures skipped unless ``keep_failures``. RuntimeError after
    ``max_attempts`` (default 2n + 10)."""
    limit = max_attempts or 2 * n + 10
    kept = 0
    for attempt in range(limit):
        expert.rng = np.random.default_rng([seed, attempt])
        ep, success = rollout_expert(env, expert, seed + attempt)
        if success or keep_failures:
            kept += 1
            yield ep, attempt
            if kept == n:
                return
    raise RuntimeError(f"{who} succeeded in only {kept} of {limit} attempts, fewer than the {n} demos "
                       "asked for; pass keep_failures=True or raise max_attempts")


def generate_demos(n: int, seed: int = 0, obs_type: str = "state", keep_failures: bool = False,
                   **kwargs) -> list[Episode]:
    """``n`` expert episodes (see ``iter_demos``); ``obs_type``: ``"state"`` or ``"image"``."""
    return [ep for ep, _ in iter_demos(n, seed, obs_type, keep_failures, **kwargs)]
