"""Energy-based chunk policies: the EBT-style energy transformer ("energy") and implicit BC ("implicit_bc")."""

from .configuration_energy import ChunkConfig, EnergyConfig, ImplicitBCConfig
from .energy_mlp import EnergyMLP
from .implicit_bc import ImplicitBCPolicy, dfo_minimize
from .modeling_energy import EnergyPolicy, EnergyTransformer, descend

__all__ = ["ChunkConfig", "EnergyConfig", "EnergyMLP", "EnergyPolicy", "EnergyTransformer", "ImplicitBCConfig",
           "ImplicitBCPolicy", "descend", "dfo_minimize"]
