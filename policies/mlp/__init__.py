"""MLP policy: RL actors and non-recurrent students (optionally integrating their position error)."""

from .configuration_mlp import INTEGRAL_DIM, MLPConfig
from .modeling_mlp import MLPActor, MLPIntegralStep, MLPPolicy, integrate_position

__all__ = ["INTEGRAL_DIM", "MLPActor", "MLPConfig", "MLPIntegralStep", "MLPPolicy", "integrate_position"]
