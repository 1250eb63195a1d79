"""Foundation (RAPTOR-style GRU) quadrotor policy."""

from .configuration_foundation import FoundationConfig
from .modeling_foundation import FoundationGRU, FoundationPolicy
from .raptor import load_raptor, raptor_checkpoint_path
from .robo_foundation import load_robo_foundation, robo_foundation_path

__all__ = ["FoundationConfig", "FoundationGRU", "FoundationPolicy", "load_raptor", "load_robo_foundation",
           "raptor_checkpoint_path", "robo_foundation_path"]
