"""Scheduled curriculum: parameters ramp with env steps (as in Learning to Fly in Seconds)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Schedule:
    """``start`` until ``begin_step``, then to ``end`` at ``end_step`` along ``shape``
    (``linear``, or ``exponential`` = geometric interpolation, needs same-sign non-zero ends)."""

    start: float
    end: float
    begin_step: int = 0
    end_step: int = 100_000
    shape: str = "linear"

    def __post_init__(self) -> None:
        if self.end_step < self.begin_step:
            raise ValueError(f"end_step ({self.end_step}) must not precede begin_step ({self.begin_step})")
        if self.shape not in ("linear", "exponential"):
            raise ValueError(f"unknown schedule shape {self.shape!r}; choose 'linear' or 'exponential'")
        if self.shape == "exponential" and (self.start * self.end <= 0):
            raise ValueError("an exponential schedule needs start and end of the same sign, both non-zero")

    def __call__(self, step: int) -> float:
        span = max(self.end_step - self.begin_step, 1)
        x = min(max((step - self.begin_step) / span, 0.0), 1.0)
        if self.shape == "linear":
            return self.start + x * (self.end - self.start)
        return self.start * math.exp(x * math.log(self.end / self.start))


class ScheduledCurriculum:
    """Named parameters, each following its ``Schedule`` of env steps."""

    def __init__(self, schedules: dict[str, Schedule | dict]):
        self.schedules = {k: (v if isinstance(v, Schedule) else Schedule(**v)) for k, v in schedules.items()}

    def update(self, step: int, stats: dict[str, float] | None = None) -> dict[str, float]:
        return {name: s(step) for name, s in self.schedules.items()}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None
