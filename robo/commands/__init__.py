"""CLI commands: each is ``run(cfg) -> dict`` over a Hydra config named like the command."""
