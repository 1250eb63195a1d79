"""Foundation (RAPTOR-style GRU) quadrotor policy."""

from .configuration_foundation import FoundationConfig
from .modeling_foundation import FoundationGRU, FoundationPolicy
from .raptor import load_raptor, raptor_checkpoint_path

__all__ = ["FoundationConfig", "FoundationGRU", "FoundationPolicy", "load_raptor", "raptor_checkpoint_path"]
