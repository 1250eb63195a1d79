"""The Meta-World tasks robo benchmarks, by difficulty.

The groups are those of Seo et al. (2022), which DP3 (Ze et al. 2024) reports Meta-World by; robo's benchmark
(``benchmarks/metaworld.py``) runs these eight of them, named as the ``metaworld`` package names its v3 envs.
"""

from __future__ import annotations

DIFFICULTY = {
    "reach-v3": "easy", "button-press-v3": "easy", "drawer-open-v3": "easy", "door-open-v3": "easy",
    "peg-insert-side-v3": "medium", "hammer-v3": "medium",
    "pick-place-v3": "hard", "assembly-v3": "hard",
}
GROUPS = {g: [n for n, d in DIFFICULTY.items() if d == g] for g in ("easy", "medium", "hard")}
GROUPS["all"] = list(DIFFICULTY)


def select_tasks(spec: str, known: list[str] | None = None) -> list[str]:
    """``"easy" | "medium" | "hard" | "all"`` or comma-separated env names (any of ``known``, default the
    eight) -> the env names, in order, without repeats."""
    names: list[str] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        group = GROUPS.get(part)
        if group is None and part not in (known or DIFFICULTY):
            raise ValueError(f"task {part!r} is neither a group {sorted(GROUPS)} nor a Meta-World env name "
                             f"(e.g. {', '.join(DIFFICULTY)})")
        names += [n for n in (group or [part]) if n not in names]
    if not names:
        raise ValueError(f"no tasks in {spec!r}; give a group {sorted(GROUPS)} or env names")
    return names
