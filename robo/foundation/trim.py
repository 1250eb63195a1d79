"""Trimmed teachers: each foundation teacher trimmed on its own quadrotor (``robo.rl.trim``), once.

``load_trimmed`` measures a teacher's trim the first time and keeps it in ``<teacher dir>/trim.json``;
``trimmed_variants`` trims each teacher on perturbed variants of its quadrotor, all in one batched sim,
as per-env shifts of a ``Labeller`` (``dagger.variants_per_teacher``). The student, which learns from
the trimmed teachers' labels, never sees a trim.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from policies.mlp import MLPPolicy
from robo.evaluate import make_fleet_task, rollout
from robo.foundation.fleet import Labeller, TeacherEnsemble
from robo.rl.trim import refine_trims, settled_offsets, shifted, trim_policy
from robo.run_dir import write_json
from sims.quadrotor.params import QuadrotorParams
from sims.quadrotor.randomization import perturbed_params

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


def trimmed_variants(ensemble: TeacherEnsemble, quads: list[QuadrotorParams], variants: int, scale: float,
                     starts: int = 16, iterations: int = 2, seconds: float = 5.0, settle: float = 1.0,
                     seed: int = 0) -> tuple[list[QuadrotorParams], np.ndarray]:
    """``variants`` quadrotors per teacher (teacher-major: its own ``quads[i]`` first, then
    ``perturbed_params`` of it within ``scale``) and the trim of each teacher on each variant,
    (N * variants, 3) m, as a ``Labeller``'s shift. Trimmed like ``trim_policy``, all variants in one
    batched sim (``refine_trims``): a variant's shift grows only while it lowers that variant's median
    hover error, and stays 0 where the teacher crashes from every start."""
    if variants < 1:
        raise ValueError(f"variants must be >= 1, got {variants}")
    rng = np.random.default_rng(seed)
    fleet = [v for q in quads for v in [q] + [perturbed_params(q, scale, rng, name=f"{q.name}_v{j}")
                                              for j in range(1, variants)]]
    task = make_fleet_task("hover", fleet, starts, seed)
    settle_steps = int(round(settle / task.dt))

    def measure(shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = rollout(Labeller(ensemble, np.repeat(shift, starts, axis=0)), task, seconds)
        return settled_offsets(r, len(fleet), settle_steps)

    total, before, best = refine_trims(measure, len(fleet), iterations)
    log.info("trimmed %d variants of %d teachers: median error %.3f -> %.3f m (median over variants)", len(fleet),
             len(quads), float(np.median(before)), float(np.median(best)))
    return fleet, total
