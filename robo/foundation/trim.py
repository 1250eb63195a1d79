"""Trimming a teacher: remove its steady-state hover offset on its own quadrotor.

An RL teacher flies its quadrotor smoothly but settles a few centimetres off the reference, the same
few centimetres from every start (measured: 7.7 cm median error, an offset of (0.3, 2.8, -7.0) cm
that varies by 0.3 cm across 64 starts). Like a pilot trimming an aircraft, ``trim_teacher``
measures that offset ``b`` (m, world FLU) and makes the teacher read its position error as
``p - p_ref + b``: it then settles where ``p - p_ref + b = b``, on the reference. The shift is
folded into the actor's input normalization (``obs_mean[0:3] -= b``), so a trimmed teacher is a
plain ``MLPPolicy``; the student, which learns from its labels, never sees the trim.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import numpy as np
import torch

from policies.base import Policy
from policies.foundation import FoundationGRU
from policies.mlp import MLPActor, MLPPolicy
from robo.evaluate import rollout
from robo.foundation.dagger import make_dagger_task
from robo.run_dir import write_json
from sims.envs.observation import OBS_SLICES
from sims.quadrotor.dynamics import POS
from sims.quadrotor.params import QuadrotorParams

log = logging.getLogger(__name__)
POSITION = OBS_SLICES["position_error"]
TRIM_FILE = "trim.json"


def hover_offset(policy: Policy, quad: QuadrotorParams, starts: int = 16, seconds: float = 5.0,
                 settle: float = 1.0, seed: int = 0) -> tuple[np.ndarray, float]:
    """Fly ``policy`` on ``quad`` from ``starts`` random hover starts. Returns the offset (3,) m: the mean
    of ``p - p_ref`` over the last ``settle`` s of the flights that did not crash (NaN if all crashed),
    and the median final position error, m (inf if all crashed)."""
    task = make_dagger_task("hover", [quad], starts, seed)
    r = rollout(policy, task, seconds)
    alive = r.crashed_at < 0
    if not alive.any():
        return np.full(3, np.nan), float("inf")
    tail = int(round(settle / task.dt))
    offset = (r.states[-tail:, alive, POS] - r.reference[-tail:, alive]).mean(axis=(0, 1))
    final = np.where(alive, r.position_error[-1], np.inf)
    return offset, float(np.median(final))


def shifted(policy: Policy, offset: np.ndarray) -> Policy:
    """A copy of ``policy`` that reads its position error as ``p - p_ref + offset`` (offset (3,) m), the
    shift folded into its input: an ``MLPPolicy``'s normalization mean, a ``FoundationPolicy``'s input bias."""
    out = copy.deepcopy(policy)
    model = getattr(out, "model", None)
    with torch.no_grad():
        if isinstance(model, MLPActor):
            model.obs_mean[POSITION] -= torch.as_tensor(np.asarray(offset), dtype=model.obs_mean.dtype)
        elif isinstance(model, FoundationGRU):
            w = model.input_layer.weight
            model.input_layer.bias += w[:, POSITION] @ torch.as_tensor(np.asarray(offset), dtype=w.dtype)
        else:
            raise TypeError(f"cannot trim a {type(policy).__name__}: it needs an MLPPolicy or a FoundationPolicy")
    return out


def trim_teacher(policy: Policy, quad: QuadrotorParams, iterations: int = 2, starts: int = 16,
                 seed: int = 0) -> tuple[Policy, dict]:
    """``policy`` trimmed on ``quad`` (offset measured and removed ``iterations`` times), and a record
    ``{"offset_m": [x, y, z], "median_error_m": before, "trimmed_median_error_m": after}``.

    The trim is kept only if it lowers the median final hover error; a teacher that crashes from
    every start is returned unchanged (there is no offset to measure)."""
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    offset, before = hover_offset(policy, quad, starts, seed=seed)
    total, best, trimmed = np.zeros(3), before, policy
    for _ in range(iterations):
        if not np.isfinite(offset).all():
            break
        candidate_total = total + offset
        candidate = shifted(policy, candidate_total)
        offset, after = hover_offset(candidate, quad, starts, seed=seed)
        if after >= best:
            break
        total, best, trimmed = candidate_total, after, candidate
    record = {"offset_m": [float(x) for x in total], "median_error_m": before, "trimmed_median_error_m": best}
    log.info("trim %.3f kg: offset %s cm, median error %.3f -> %.3f m", quad.mass, np.round(total * 100, 2),
             before, best)
    return trimmed, record


def load_trimmed(teacher: dict, policy: MLPPolicy, quad: QuadrotorParams) -> MLPPolicy:
    """The manifest entry ``teacher``'s ``policy`` trimmed on ``quad``. The trim is measured once and kept in
    ``<teacher dir>/trim.json`` (with the checkpoint it belongs to); later loads reuse it."""
    path = Path(teacher["dir"]) / TRIM_FILE
    if path.exists():
        record = json.loads(path.read_text())
        if record.get("checkpoint") == teacher["checkpoint"]:
            return shifted(policy, np.asarray(record["offset_m"]))
    trimmed, record = trim_teacher(policy, quad)
    write_json(path, {"checkpoint": teacher["checkpoint"], **record})
    return trimmed


def trim_record(teacher: dict) -> dict | None:
    """The trim measured for the manifest entry ``teacher`` (see ``load_trimmed``), or None."""
    path = Path(teacher["dir"]) / TRIM_FILE
    return json.loads(path.read_text()) if path.exists() else None
