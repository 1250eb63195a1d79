"""Demonstrations of gym-pusht by the adapted expert, as the episode dicts of ``sims.pusht.demos``.

Each episode holds, per control step t: ``obs`` (T, 5) float32 robo state (or (T, 2) agent position for image
observations), ``action`` (T, 2) float32 pusher target (m, robo frame), ``reward`` (T,), ``state`` (T, 5),
``coverage`` (T,) after action t, and for image observations ``image`` (T, 3, 96, 96) uint8 (gym-pusht's own).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import gymnasium as gym

from .demos import Episode, kept_rollouts
from .gym_pusht import MAKE_ID
from .gym_pusht_expert import GYM_PUSHT_EXPERT, GymPushTExpert


def iter_demos(n: int, seed: int = 0, obs_type: str = "state", keep_failures: bool = False,
               max_attempts: int | None = None, expert: dict | None = None) -> Iterator[tuple[Episode, int]]:
    """Yield ``n`` (episode, attempt index) pairs in gym-pusht; failures are skipped unless ``keep_failures``.

    Attempt i resets gym-pusht with seed ``seed + i`` and seeds the expert's strategy from ``(seed, i)``, as
    ``sims.pusht.demos.iter_demos`` does in robo's push-T. ``expert``: ``ExpertConfig`` field overrides of
    ``GYM_PUSHT_EXPERT``. Raises RuntimeError after ``max_attempts`` (default 2n + 10).
    """
    if n < 1:
        raise ValueError(f"need n >= 1 episodes, got {n}")
    if obs_type not in ("state", "image"):
        raise ValueError(f"obs_type={obs_type!r}; choose 'state' or 'image'")
    env = gym.make(MAKE_ID, obs_type="state" if obs_type == "state" else "pixels_agent_pos", render_mode=None)
    ex = GymPushTExpert(replace(GYM_PUSHT_EXPERT, **(expert or {})))
    try:
        yield from kept_rollouts(env, ex, n, seed, keep_failures, max_attempts, who="the gym-pusht expert")
    finally:
        env.close()


def generate_demos(n: int, seed: int = 0, obs_type: str = "state", keep_failures: bool = False,
                   **kwargs) -> list[Episode]:
    """``n`` gym-pusht expert episodes (see ``iter_demos``); ``obs_type``: ``"state"`` or ``"image"``: the
    task's ``demo_generator`` (``configs/task/gym_pusht.yaml``)."""
    return [ep for ep, _ in iter_demos(n, seed, obs_type, keep_failures, **kwargs)]
