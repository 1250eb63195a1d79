"""Load any robo policy checkpoint by the kind recorded in its ``config.json``."""

from __future__ import annotations

from pathlib import Path

from .base import Policy
from .checkpoint import load_checkpoint
from .diffusion import DiffusionPolicy
from .energy import EnergyPolicy, ImplicitBCPolicy
from .foundation import FoundationPolicy
from .mlp import MLPPolicy
from .steered import SteeredPolicy

POLICY_CLASSES = {cls.kind: cls for cls in (DiffusionPolicy, EnergyPolicy, FoundationPolicy, ImplicitBCPolicy,
                                             MLPPolicy, SteeredPolicy)}


def load_policy(directory: str | Path) -> Policy:
    """Load the policy saved in ``directory`` (any registered kind)."""
    kind, _, _, _ = load_checkpoint(directory)
    if kind not in POLICY_CLASSES:
        raise ValueError(f"{directory}: unknown policy kind {kind!r}; known: {sorted(POLICY_CLASSES)}")
    return POLICY_CLASSES[kind].load(directory)
