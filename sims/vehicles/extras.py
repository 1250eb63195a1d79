"""The optional packages of ``robo[hardware]``, imported with the install line in the error when missing."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str) -> ModuleType:
    """Import ``module`` (pymavlink, cflib, pymsp, serial ...) or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{module.split('.')[0]} is not installed; pip install 'robo[hardware]'") from e
