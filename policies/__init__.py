"""Policy models and checkpoints (foundation GRU; diffusion, energy and MLP to come)."""
