"""Trimming a policy: remove its steady-state hover offset on a quadrotor.

An RL actor flies its quadrotor smoothly but can settle centimetres off the reference, the same few
centimetres from every start (measured on a foundation teacher: 7.7 cm median error, an offset of
(0.3, 2.8, -7.0) cm that varies by 0.3 cm across 64 starts). Like a pilot trimming an aircraft,
``trim_policy`` measures that offset ``b`` (m, world FLU) and makes the policy read its position error
as ``p - p_ref + b``: it then settles where ``p - p_ref + b = b``, on the reference. The shift is folded
into the policy's input (``shifted``: an ``MLPPolicy``'s normalization mean, a ``FoundationPolicy``'s
input bias), so a trimmed policy is the same kind of policy. The RL trainer deploys trimmed actors
(``trim.starts``); the foundation pipeline trims its teachers (``robo.foundation.trim``).
"""

from __future__ import annotations

import copy
import logging

import numpy as np
import torch

from policies.base import Policy
from policies.foundation import FoundationGRU
from policies.mlp import MLPActor
from robo.evaluate import Rollout, make_fleet_task, rollout
from sims.envs.observation import OBS_SLICES
from sims.quadrotor.dynamics import POS
from sims.quadrotor.params import QuadrotorParams

log = logging.getLogger(__name__)
POSITION = OBS_SLICES["position_error"]


def settled_offsets(r: Rollout, groups: int, settle_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group of a teacher-major rollout (B envs, ``groups`` groups of B / groups starts): the offset
    (groups, 3) m, the mean of ``p - p_ref`` over the last ``settle_steps`` steps of the flights that did
    not crash (NaN where all crashed), and the median final position error (groups,) m (inf where all
    crashed)."""
    alive = (r.crashed_at < 0).reshape(groups, -1)
    delta = (r.states[-settle_steps:, :, POS] - r.reference[-settle_steps:]).mean(axis=0).reshape(groups, -1, 3)
    with np.errstate(invalid="ignore"):
        offsets = (delta * alive[..., None]).sum(axis=1) / alive.sum(axis=1)[:, None]
    final = np.where(alive, r.position_error[-1].reshape(groups, -1), np.inf)
    return offsets, np.median(final, axis=1)


def hover_offset(policy: Policy, quad: QuadrotorParams, starts: int = 16, seconds: float = 5.0,
                 settle: float = 1.0, seed: int = 0) -> tuple[np.ndarray, float]:
    """Fly ``policy`` on ``quad`` from ``starts`` random hover starts. Returns the offset (3,) m: the mean
    of ``p - p_ref`` over the last ``settle`` s of the flights that did not crash (NaN if all crashed),
    and the median final position error, m (inf if all crashed)."""
    task = make_fleet_task("hover", [quad], starts, seed)
    offsets, errors = settled_offsets(rollout(policy, task, seconds), 1, int(round(settle / task.dt)))
    return offsets[0], float(errors[0])


def shifted(policy: Policy, offset: np.ndarray) -> Policy:
    """A copy of ``policy`` that reads its position error as ``p - p_ref + offset`` (offset (3,) m), the
    shift folded into its input: an ``MLPPolicy``'s normalization mean (its first 3 inputs, the position error,
    also with a position integral, which keeps summing the unshifted error), a ``FoundationPolicy``'s input
    bias."""
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


def refine_trims(measure, n: int, iterations: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Trim ``n`` flyers at once. ``measure(shift (n, 3) m) -> (offsets (n, 3) m, median errors (n,) m)``
    flies them with those shifts. A flyer's shift grows by its measured offset ``iterations`` times and
    stops at the first step that does not lower its median error (or where its offset is not finite:
    it crashed from every start). Returns (shift (n, 3), error before, error after), each per flyer."""
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    total = np.zeros((n, 3))
    offsets, best = measure(total)
    before, best = np.asarray(best, float).copy(), np.asarray(best, float).copy()
    active = np.isfinite(offsets).all(axis=1)
    for _ in range(iterations):
        if not active.any():
            break
        candidate = total + np.where(active[:, None], np.nan_to_num(offsets), 0.0)
        new_offsets, errors = measure(candidate)
        better = active & (errors < best)
        total[better], best[better], offsets[better] = candidate[better], errors[better], new_offsets[better]
        active = better & np.isfinite(offsets).all(axis=1)
    return total, before, best


def trim_policy(policy: Policy, quad: QuadrotorParams, iterations: int = 2, starts: int = 16,
                 seed: int = 0) -> tuple[Policy, dict]:
    """``policy`` trimmed on ``quad`` (offset measured and removed ``iterations`` times), and a record
    ``{"offset_m": [x, y, z], "median_error_m": before, "trimmed_median_error_m": after}``.

    The trim is kept only if it lowers the median final hover error; a policy that crashes from
    every start is returned unchanged (there is no offset to measure)."""
    def measure(shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flyer = policy if not shift.any() else shifted(policy, shift[0])
        offset, error = hover_offset(flyer, quad, starts, seed=seed)
        return offset[None].copy(), np.array([error])

    total, before, best = refine_trims(measure, 1, iterations)
    total, before, best = total[0], float(before[0]), float(best[0])
    trimmed = shifted(policy, total) if total.any() else policy
    record = {"offset_m": [float(x) for x in total], "median_error_m": before, "trimmed_median_error_m": best}
    if np.isfinite(before):
        log.info("trim %.3f kg: offset %s cm, median error %.3f -> %.3f m", quad.mass, np.round(total * 100, 2),
                 before, best)
    else:
        log.info("trim %.3f kg: no offset to measure (more than half of %d starts crashed)", quad.mass, starts)
    return trimmed, record
