"""MLP policy: RL actors and non-recurrent students."""

from .configuration_mlp import MLPConfig
from .modeling_mlp import MLPActor, MLPPolicy

__all__ = ["MLPActor", "MLPConfig", "MLPPolicy"]
