"""Adaptive curriculum: one difficulty in [0, 1] moves with the recent success rate."""

from __future__ import annotations


class AdaptiveCurriculum:
    """Parameters interpolate between an easy and a hard value with the difficulty ``d``.

    After each update with ``stats[metric]`` (e.g. the success rate of recent episodes),
    ``d`` rises by ``step_size`` when the metric is at least ``promote_above`` and falls
    by ``step_size`` when it is below ``demote_below``.

    Args:
        parameters: ``{name: (easy, hard)}``.
    """

    def __init__(self, parameters: dict[str, tuple[float, float] | list[float]], metric: str = "success_rate",
                 promote_above: float = 0.8, demote_below: float = 0.4, step_size: float = 0.1,
                 initial_difficulty: float = 0.0):
        if not 0 <= demote_below <= promote_above <= 1:
            raise ValueError("need 0 <= demote_below <= promote_above <= 1")
        if not 0 < step_size <= 1:
            raise ValueError(f"step_size must lie in (0, 1], got {step_size}")
        self.parameters = {k: (float(v[0]), float(v[1])) for k, v in parameters.items()}
        self.metric, self.promote_above, self.demote_below = metric, promote_above, demote_below
        self.step_size = step_size
        self.difficulty = float(initial_difficulty)

    def values(self) -> dict[str, float]:
        d = self.difficulty
        return {k: easy + d * (hard - easy) for k, (easy, hard) in self.parameters.items()}

    def update(self, step: int, stats: dict[str, float] | None = None) -> dict[str, float]:
        if stats and self.metric in stats:
            m = stats[self.metric]
            if m >= self.promote_above:
                self.difficulty = min(1.0, self.difficulty + self.step_size)
            elif m < self.demote_below:
                self.difficulty = max(0.0, self.difficulty - self.step_size)
        return self.values()

    def state_dict(self) -> dict:
        return {"difficulty": self.difficulty}

    def load_state_dict(self, state: dict) -> None:
        self.difficulty = float(state["difficulty"])
