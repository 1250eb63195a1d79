"""World models: a probabilistic dynamics ensemble (MBPO), a latent image model and a
policy-guided trajectory diffusion model (PGD). ``load_world_model(dir)`` loads any of them."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import load_checkpoint
from .configuration_world_model import EnsembleConfig, LatentConfig, TrajectoryDiffusionConfig
from .ensemble import EnsembleDynamics, Prediction, check_transitions
from .frames import PlanarFrame
from .latent import LatentWorldModel
from .trajectory_diffusion import TrajectoryDiffusion

WORLD_MODEL_CLASSES = {cls.kind: cls for cls in (EnsembleDynamics, LatentWorldModel, TrajectoryDiffusion)}


def load_world_model(directory: str | Path):
    """Load the world model saved in ``directory`` (any kind in ``WORLD_MODEL_CLASSES``)."""
    kind, _, _, _ = load_checkpoint(directory)
    if kind not in WORLD_MODEL_CLASSES:
        raise ValueError(f"{directory}: {kind!r} is not a world model; known: {sorted(WORLD_MODEL_CLASSES)}")
    return WORLD_MODEL_CLASSES[kind].load(directory)


__all__ = ["EnsembleConfig", "EnsembleDynamics", "LatentConfig", "LatentWorldModel", "PlanarFrame", "Prediction",
           "TrajectoryDiffusion", "TrajectoryDiffusionConfig", "WORLD_MODEL_CLASSES", "check_transitions",
           "load_world_model"]
