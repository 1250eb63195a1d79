"""Build tasks and policies from (Hydra) config nodes. The one place that wires
``sims`` and ``policies`` together."""

from __future__ import annotations

from typing import Any

import torch

from policies.base import Policy
from policies.foundation import load_raptor, load_robo_foundation
from policies.registry import known_kinds, load_policy
from robo.device import resolve_device
from robo.validation import SHIPPED_POLICIES
from sims.envs import BatchedQuadrotorTask, make_batched_task

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def make_task(task: dict[str, Any], robot: dict[str, Any], sim: dict[str, Any], num_envs: int,
              seed: int | None = None, device: str | torch.device | None = "cpu") -> BatchedQuadrotorTask:
    """A seeded batched task of ``num_envs`` quadrotors from task, robot and sim config nodes, on ``device``
    (a run config's ``device``: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``, see ``robo.device``)."""
    if sim.get("backend", "batched") != "batched":
        raise ValueError(f"sim.backend={sim.get('backend')!r}: only 'batched' can fly batched tasks")
    if sim.get("dtype", "float32") not in DTYPES:
        raise ValueError(f"sim.dtype={sim.get('dtype')!r}; choose one of {sorted(DTYPES)}")
    t = make_batched_task(dict(task), dict(robot), num_envs, dtype=DTYPES[sim.get("dtype", "float32")],
                          randomization=sim.get("randomization"), step_backend=sim.get("step_backend", "torch"),
                          device=resolve_device(device))
    t.seed(seed)
    return t


def make_policy(policy: dict[str, Any]) -> Policy:
    """``{kind: raptor, path: null}`` (RAPTOR's released policy), ``{kind: robo_foundation, path: null}`` (robo's
    shipped foundation student), ``{kind: checkpoint, path: DIR}`` (any kind in ``policies.registry``, read from the
    folder's ``config.json``) or ``{kind: export, path: DIR}`` (a C export and its manifest,
    ``hardware.export.runtime.ExportedPolicy``) -> a loaded policy."""
    kind = policy.get("kind")
    if kind == "raptor":
        return load_raptor(policy.get("path"))
    if kind == "robo_foundation":
        return load_robo_foundation(policy.get("path"))
    if kind == "checkpoint":
        if not policy.get("path"):
            raise ValueError("policy.kind=checkpoint needs policy.path=<checkpoint folder>")
        return load_policy(policy["path"])
    if kind == "export":  # the C of `robo export format=c`, run as the flight controller runs it
        from hardware.export.runtime import ExportedPolicy

        if not policy.get("path"):
            raise ValueError("policy.kind=export needs policy.path=<folder of robo export format=c>")
        return ExportedPolicy(policy["path"])
    if kind in known_kinds():
        raise ValueError(f"policy.kind={kind!r} describes a policy to train, not a saved one; "
                         f"load a saved {kind} policy with policy=checkpoint policy.path=<its folder>")
    raise ValueError(f"unknown policy kind {kind!r}; choose 'raptor', 'checkpoint' (with policy.path=<folder>), "
                     f"'export' (policy.path=<folder of robo export format=c>) or 'robo_foundation' (robo's shipped "
                     f"foundation policy)")


def policy_by_name(name: str) -> Policy:
    """``raptor`` (RAPTOR's released policy), ``robo_foundation`` (robo's shipped one) or a robo checkpoint folder
    -> a loaded policy (the ``base=`` of ``robo finetune`` and its twin gate)."""
    return make_policy({"kind": name} if name in SHIPPED_POLICIES else {"kind": "checkpoint", "path": name})
