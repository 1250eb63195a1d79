"""Policy models and their checkpoints: one folder per policy (``diffusion``, ``energy``, ``foundation``,
``mlp``, ``steered``), each a config dataclass beside its model, all implementing ``base.Policy``.

A policy class registers itself with ``@registry.register`` where it is defined;
``registry.load_policy(dir)`` loads any saved kind. ``world_model`` holds the world models."""
