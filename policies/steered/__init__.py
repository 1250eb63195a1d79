"""Steered policy (DSRL): a frozen chunked policy whose initial noise a learned actor chooses."""

from .configuration_steered import SteeredConfig
from .modeling_steered import GaussianNoiseActor, SteeredPolicy

__all__ = ["GaussianNoiseActor", "SteeredConfig", "SteeredPolicy"]
