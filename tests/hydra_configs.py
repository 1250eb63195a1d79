"""The Hydra configs as the ``robo`` command composes them, for tests."""

from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf


def composed(name: str, *overrides: str) -> DictConfig:
    """``configs/<name>.yaml`` (``train``, ``foundation``, ``imagine``, ...) with Hydra ``overrides``."""
    with initialize_config_module("robo.configs", version_base="1.3"):
        return compose(name, overrides=list(overrides))


def composed_dict(name: str, *overrides: str) -> dict:
    """``composed(name, *overrides)`` resolved to a plain dict."""
    return OmegaConf.to_container(composed(name, *overrides), resolve=True)
