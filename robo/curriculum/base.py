"""What every curriculum shares: named parameters addressed by dotted paths, and a log.

A curriculum decides the value of named parameters (``"reward.action"``,
``"init.angle_deg"``, ``"randomization.mass_scale"``...) from the number of env steps and
recent training statistics. ``apply`` writes them into any config object (dataclasses or
dicts) by dotted path; ``history`` records what was in force when.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


def get_path(obj: Any, path: str) -> Any:
    for key in path.split("."):
        obj = obj[key] if isinstance(obj, dict) else getattr(obj, key)
    return obj


def set_path(obj: Any, path: str, value: Any) -> None:
    """Set ``obj.a.b = value`` for path ``"a.b"``; raise ``KeyError`` naming a missing key."""
    *parents, last = path.split(".")
    for key in parents:
        obj = obj[key] if isinstance(obj, dict) else getattr(obj, key)
    if isinstance(obj, dict):
        if last not in obj:
            raise KeyError(f"curriculum parameter {path!r}: no key {last!r}")
        obj[last] = value
    else:
        if not hasattr(obj, last):
            raise KeyError(f"curriculum parameter {path!r}: {type(obj).__name__} has no field {last!r}")
        setattr(obj, last, value)


class Curriculum(Protocol):
    def update(self, step: int, stats: dict[str, float]) -> dict[str, float]:
        """Values of the curriculum's parameters at env step ``step``."""
        ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class CurriculumLog:
    """What difficulty was in force when: rows of (step, parameter values, stats)."""

    rows: list[dict[str, float]] = field(default_factory=list)

    def record(self, step: int, values: dict[str, float], stats: dict[str, float] | None = None) -> None:
        self.rows.append({"step": step, **values, **{f"stat/{k}": v for k, v in (stats or {}).items()}})

    def write_csv(self, path: str | Path) -> Path:
        path = Path(path)
        keys = sorted({k for r in self.rows for k in r} - {"step"})
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, ["step", *keys])
            w.writeheader()
            w.writerows(self.rows)
        return path


def apply(values: dict[str, float], target: Any) -> None:
    """Write curriculum values into ``target`` by dotted path."""
    for path, value in values.items():
        set_path(target, path, value)
