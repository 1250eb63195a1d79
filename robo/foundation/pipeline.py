"""The whole pipeline in one call: teachers (Ray) -> DAgger students -> held-out evaluation.

Run folder::

    manifest.json              teachers: quadrotor, status, attempts, checkpoint, score, wall time
    teachers/<i>/              each teacher's RL run (checkpoints/latest/policy is an MLPPolicy)
    students/gru, students/mlp the distilled students (robo policies: load_policy, export)
    dagger_<kind>.json         per-iteration DAgger history
    eval.json, eval.md         the held-out table (students, RAPTOR, an untrained GRU)
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Callable

import numpy as np

from policies.mlp import MLPPolicy
from robo.evaluate import flown_policy
from robo.foundation.config import FoundationRunConfig
from robo.foundation.dagger import STUDENTS, as_policy, best_of_restarts, distill, distill_best, make_student, refine
from robo.foundation.evaluate import evaluate_policy, figure_eight_metrics, hover_metrics
from robo.foundation.teachers import (Manifest, run_teachers, sample_quadrotors, teacher_specs, teacher_summary,
                                      train_teacher)
from robo.foundation.trim import load_trimmed, trimmed_students
from robo.run_dir import atomic_write_text, write_json
from sims.envs import make_robot
from sims.quadrotor.params import QuadrotorParams

log = logging.getLogger(__name__)


def load_teachers(manifest: Manifest, count: int | None = None,
                  trim: bool = False) -> tuple[list[MLPPolicy], list[QuadrotorParams]]:
    """The done teachers' policies and quadrotors; ``count`` picks that many spread evenly over
    the (mass-sorted) list, so a subset still spans the mass range. ``trim``: each teacher trimmed on
    its own quadrotor (``robo.foundation.trim``; measured once per teacher, then read back)."""
    done = sorted(manifest.done(), key=lambda t: t["mass"])
    if count is not None:
        if not 1 <= count <= len(done):
            raise ValueError(f"asked for {count} teachers, {len(done)} are done")
        done = [done[i] for i in np.unique(np.linspace(0, len(done) - 1, count).round().astype(int))]
    policies, quads = [MLPPolicy.load(t["checkpoint"]) for t in done], [make_robot(t["robot"]) for t in done]
    if trim:
        policies = [load_trimmed(t, p, q) for t, p, q in zip(done, policies, quads)]
    return policies, quads


def validator(cfg: FoundationRunConfig):
    """``validate(policy)`` for ``distill``: the hover test on ``dagger.validation_quadrotors``
    quadrotors from the teachers' ranges, with ``dagger.validation_figure_eight`` the figure-eight
    on them too (None when 0)."""
    n = cfg.dagger.validation_quadrotors
    if not n:
        return None
    quads = sample_quadrotors(cfg.randomization, n, cfg.dagger.validation_seed)
    tests = [hover_metrics] + ([figure_eight_metrics] if cfg.dagger.validation_figure_eight else [])
    return lambda policy: {k: v for test in tests for k, v in test(policy, quads, cfg.eval).items()}


def distil(kind: str, teachers: list[MLPPolicy], quads: list[QuadrotorParams], task: dict | str,
           cfg: FoundationRunConfig, progress=None):
    """The ``kind`` student of ``teachers`` (``teachers[i]`` flies ``quads[i]``): ``distill_best``, or with
    ``dagger.ensemble`` E > 1, E students (DAgger seeds ``seed`` ... ``seed + E - 1``) whose mean action
    ``refine`` distils into one over ``dagger.refine_quadrotors`` new quadrotors (drawn with
    ``dagger.refine_seed`` from the teachers' ranges; the students label with ``dagger.refine_feedforward``,
    with ``dagger.refine_trim`` trimmed on each of them once),
    ``dagger.restarts`` times (refine seeds ``seed``, ``seed + 1``, ...), the best validated refinement kept.
    Validation as configured for every DAgger run.
    Returns the policy and the history; with an ensemble its rows name their ``member`` (the refined
    student's: ``"refined"``)."""
    d, validate = dataclasses.replace(cfg.dagger, device=cfg.device), validator(cfg)
    if d.ensemble == 1:
        return distill_best(kind, teachers, quads, task, d, validate=validate, progress=progress)
    members, history = [], []
    for i in range(d.ensemble):
        policy, rows = distill(kind, teachers, quads, task, dataclasses.replace(d, seed=d.seed + i), progress, validate)
        members.append(policy)
        history += [{**row, "member": i} for row in rows]
    fresh = sample_quadrotors(cfg.randomization, d.refine_quadrotors, d.refine_seed)
    shift = trimmed_students(members, fresh, seed=d.seed) if d.refine_trim else None
    policy, rows = best_of_restarts(
        lambda c: refine(kind, members, fresh, task, c, progress, validate, d.refine_feedforward, shift), d, validate)
    return policy, history + [{**row, "member": "refined"} for row in rows]


def held_out_quadrotors(cfg: FoundationRunConfig) -> list[QuadrotorParams]:
    """The fixed evaluation set: ``eval.quadrotors`` drawn with ``eval.seed`` from ``eval.randomization``
    (default: the teachers' ranges, so the whole mass range)."""
    if cfg.eval.seed == cfg.seed:
        raise ValueError(f"eval.seed equals seed ({cfg.seed}): the held-out quadrotors would be the teachers'")
    return sample_quadrotors(cfg.eval.randomization or cfg.randomization, cfg.eval.quadrotors, cfg.eval.seed)


def markdown_table(rows: dict[str, dict[str, float]]) -> str:
    """``{policy: {metric: value}}`` -> a markdown table, one row per policy."""
    metrics = list(next(iter(rows.values())))
    lines = ["| policy | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for name, m in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{m[k]:.3f}" for k in metrics) + " |")
    return "\n".join(lines) + "\n"


def run_pipeline(cfg: FoundationRunConfig, run_dir: Path, train_fn: Callable[[dict], dict] = train_teacher) -> dict:
    """Teachers, students, evaluation; returns a flat summary (teacher wall times, student scores)."""
    run_dir = Path(run_dir)
    t0 = time.time()
    manifest = run_teachers(cfg, run_dir, train_fn)
    teacher_wall = time.time() - t0
    teachers, quads = load_teachers(manifest, trim=cfg.teacher.trim)
    task = teacher_specs(cfg, run_dir)[0]["config"]["task"]
    students, timings = {}, {}
    for kind in STUDENTS:
        t = time.time()
        policy, history = distil(kind, teachers, quads, task, cfg)
        timings[f"dagger_{kind}_s"] = time.time() - t
        policy.save(run_dir / "students" / kind)
        write_json(run_dir / f"dagger_{kind}.json", history)
        students[kind] = policy
    rows = evaluate_all(cfg, {"student (GRU)": students["gru"], "student (MLP)": students["mlp"]})
    write_json(run_dir / "eval.json", rows)
    atomic_write_text(run_dir / "eval.md", markdown_table(rows))
    summary = {**teacher_summary(manifest), "teachers_wall_s": teacher_wall, **timings}
    for name, m in rows.items():
        summary[f"{name}: hover_success_rate"] = m["hover_success_rate"]
        summary[f"{name}: hover_median_error_m"] = m["hover_median_error_m"]
    write_json(run_dir / "summary.json", summary)
    return summary


def evaluate_all(cfg: FoundationRunConfig, policies: dict) -> dict[str, dict[str, float]]:
    """Held-out rows for ``policies`` plus RAPTOR's released policy (``eval.raptor``) and an untrained GRU.
    RAPTOR flies as ``robo eval`` flies it: L2F's previous action (the held-out tasks say ``auto``) and its
    unclipped output (``robo.evaluate.flown_policy``)."""
    quads = held_out_quadrotors(cfg)
    extra = {"RAPTOR (released)": flown_policy("raptor")} if cfg.eval.raptor else {}
    extra["untrained GRU"] = as_policy(make_student("gru", cfg.dagger))
    return {name: evaluate_policy(p, quads, cfg.eval) for name, p in {**policies, **extra}.items()}
