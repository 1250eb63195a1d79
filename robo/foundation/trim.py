"""Trimmed teachers: each foundation teacher trimmed on its own quadrotor (``robo.rl.trim``), once.

``load_trimmed`` measures a teacher's trim the first time and keeps it in ``<teacher dir>/trim.json``;
``trimmed_students`` trims the mean of several students on any quadrotors, all in one batched sim, as
per-env shifts of a ``StudentLabeller`` (``dagger.refine_trim``). The student, which learns from
trimmed labels, never sees a trim.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from policies.mlp import MLPPolicy
from robo.evaluate import make_fleet_task, rollout
from robo.foundation.fleet import StudentLabeller
from robo.rl.trim import refine_trims, settled_offsets, shifted, trim_policy
from robo.run_dir import write_json
from sims.quadrotor.params import QuadrotorParams

log = logging.getLogger(__name__)
TRIM_FILE = "trim.json"


def load_trimmed(teacher: dict, policy: MLPPolicy, quad: QuadrotorParams) -> MLPPolicy:
    """The manifest entry ``teacher``'s ``policy`` trimmed on ``quad``. The trim is measured once and kept in
    ``<teacher dir>/trim.json`` (with the checkpoint it belongs to); later loads reuse it."""
    path = Path(teacher["dir"]) / TRIM_FILE
    if path.exists():
        record = json.loads(path.read_text())
        if record.get("checkpoint") == teacher["checkpoint"]:
            return shifted(policy, np.asarray(record["offset_m"]))
    trimmed, record = trim_policy(policy, quad)
    write_json(path, {"checkpoint": teacher["checkpoint"], **record})
    return trimmed


def trim_record(teacher: dict) -> dict | None:
    """The trim measured for the manifest entry ``teacher`` (see ``load_trimmed``), or None."""
    path = Path(teacher["dir"]) / TRIM_FILE
    return json.loads(path.read_text()) if path.exists() else None


def trimmed_students(students: list, quads: list[QuadrotorParams], starts: int = 16, iterations: int = 2,
                     seconds: float = 5.0, settle: float = 1.0, seed: int = 0) -> np.ndarray:
    """The trim of the ``students``' mean action (``StudentLabeller``) on each of ``quads``, (N, 3) m, as
    a ``StudentLabeller``'s shift with one env per quadrotor: the labels of ``dagger.refine_trim``."""
    return trim_fleet(lambda s: StudentLabeller(students, s), quads, starts, iterations, seconds, settle, seed)


def trim_fleet(labeller, fleet: list[QuadrotorParams], starts: int, iterations: int, seconds: float,
               settle: float, seed: int) -> np.ndarray:
    """Trim ``labeller(shift (B, 3)) -> policy`` on every quadrotor of ``fleet`` at once, ``starts`` hover
    starts each in one batched sim (``refine_trims``: a quadrotor's shift grows only while it lowers its
    median hover error, and stays 0 where every start crashes). Returns the shift per quadrotor, (N, 3) m."""
    task = make_fleet_task("hover", fleet, starts, seed)
    settle_steps = int(round(settle / task.dt))

    def measure(shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = rollout(labeller(np.repeat(shift, starts, axis=0)), task, seconds)
        return settled_offsets(r, len(fleet), settle_steps)

    total, before, best = refine_trims(measure, len(fleet), iterations)
    log.info("trimmed %d quadrotors: median error %.3f -> %.3f m (median over quadrotors)", len(fleet),
             float(np.median(before)), float(np.median(best)))
    return total
