"""Zero-shot evaluation on a fixed, seeded set of held-out quadrotors across the mass range.

Three tests, each with ``starts`` random starts (at rest, within 0.5 m and 30 deg) per quadrotor:

- hover for ``hover_seconds``: a quadrotor succeeds if the median of its final position errors
  is below ``success_radius`` and none of its starts crashed; ``hover_success_rate`` is the
  fraction of quadrotors that succeed (also per mass band); ``hover_mean_error_m`` is a graded
  score: the error averaged over time and starts, 2 m (the termination radius) after a crash;
- figure-eight tracking for ``figure_eight_seconds``: RMSE over the second half of the flights
  that did not crash, and the crash fraction;
- push: hover, with a horizontal push of ``push_velocity`` m/s (force ``m dv / 0.1 s`` along +x
  for 0.1 s) at ``push_at`` s; recovered = back within ``success_radius`` at the end, no crash.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from policies.base import Policy
from robo.evaluate import flight_metrics, make_fleet_task, rollout
from robo.foundation.config import HeldOutConfig
from sims.envs.task import BatchedQuadrotorTask
from sims.quadrotor.params import QuadrotorParams

MASS_BANDS = {"light (<0.1 kg)": (0.0, 0.1), "medium (0.1-1 kg)": (0.1, 1.0), "heavy (>1 kg)": (1.0, np.inf)}
PUSH_SECONDS = 0.1
CRASH_ERROR = 2.0  # m: the error counted for every step after a crash (the task's termination radius)


@contextmanager
def pushed(task: BatchedQuadrotorTask, force: torch.Tensor, first_step: int, steps: int):
    """Apply the world-frame ``force`` (B, 3) N during steps [first_step, first_step + steps)."""
    original, counter = task.sim.step, {"k": 0}

    def step(action, validate=True):
        k = counter["k"]
        task.sim.external_force = force if first_step <= k < first_step + steps else None
        counter["k"] += 1
        return original(action, validate)

    task.sim.step = step
    try:
        yield task
    finally:
        task.sim.step = original
        task.sim.external_force = None


def _task(name: str, quads: list[QuadrotorParams], e: HeldOutConfig, seed_offset: int) -> BatchedQuadrotorTask:
    return make_fleet_task(name, quads, e.starts, e.seed + seed_offset)


def evaluate_policy(policy: Policy, quads: list[QuadrotorParams], e: HeldOutConfig) -> dict[str, float]:
    """Hover success, figure-eight RMSE and push recovery of ``policy`` on ``quads`` (see module doc)."""
    out = {**hover_metrics(policy, quads, e), **figure_eight_metrics(policy, quads, e)}
    # push
    task = _task("hover", quads, e, 2)
    mass = task.sim.params.mass
    force = torch.zeros(task.num_envs, 3, dtype=task.state.dtype)
    force[:, 0] = mass * e.push_velocity / PUSH_SECONDS
    with pushed(task, force, int(round(e.push_at / task.dt)), int(round(PUSH_SECONDS / task.dt))):
        r = rollout(policy, task, e.hover_seconds)
    final, alive = r.position_error[-1], r.crashed_at < 0
    after = r.position_error[int(round(e.push_at / task.dt)):]
    out["push_recovery_rate"] = float(((final < e.success_radius) & alive).mean())
    out["push_max_deviation_m"] = float(np.median(after.max(axis=0)))
    return out


def figure_eight_metrics(policy: Policy, quads: list[QuadrotorParams], e: HeldOutConfig) -> dict[str, float]:
    """The figure-eight test alone (see module doc): RMSE of the flights that did not crash, crash rate."""
    m = flight_metrics(rollout(policy, _task("figure_eight", quads, e, 1), e.figure_eight_seconds))
    return {"figure_eight_rmse_m": m["rmse"], "figure_eight_crash_rate": m["crashes"] / m["num_envs"]}


def hover_metrics(policy: Policy, quads: list[QuadrotorParams], e: HeldOutConfig) -> dict[str, float]:
    """The hover test alone (see module doc): success rate (overall and by mass band), median final
    error, crash rate, graded mean error."""
    n, k = len(quads), e.starts
    out: dict[str, float] = {}
    r = rollout(policy, _task("hover", quads, e, 0), e.hover_seconds)
    final = r.position_error[-1].reshape(n, k)
    crashed = (r.crashed_at >= 0).reshape(n, k)
    ok = (np.median(final, axis=1) < e.success_radius) & ~crashed.any(axis=1)
    masses = np.array([q.mass for q in quads])
    out["hover_success_rate"] = float(ok.mean())
    out["hover_median_error_m"] = float(np.median(final))
    out["hover_crash_rate"] = float(crashed.mean())
    out["hover_mean_error_m"] = float(np.minimum(r.position_error, CRASH_ERROR).mean())
    for band, (lo, hi) in MASS_BANDS.items():
        sel = (masses >= lo) & (masses < hi)
        out[f"hover_success {band}"] = float(ok[sel].mean()) if sel.any() else float("nan")
    return out
