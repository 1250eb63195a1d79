from .configuration_steered import SteeredConfig
from .modeling_steered import GaussianNoiseActor, SteeredPolicy

__all__ = ["GaussianNoiseActor", "SteeredConfig", "SteeredPolicy"]
