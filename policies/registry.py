"""The one table of policy kinds. A policy class registers itself where it is defined::

    @register(trainable=True)
    class DiffusionPolicy(...):
        kind = "diffusion"
        config_class = DiffusionConfig

``load_policy(dir)`` finds the class by the ``kind`` in the checkpoint's ``config.json``;
``policy_class(kind, trainable=True)`` is what ``robo train policy=<kind>`` builds from its config
dataclass (the fields of ``configs/policy/<kind>.yaml`` plus the data's shapes).

This module imports no policy: the policy packages import it to register, and the first lookup
imports every subpackage of ``policies/`` once, so each class is registered before it is looked up.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

from .base import Policy
from .checkpoint import load_checkpoint

_CLASSES: dict[str, type] = {}  # kind -> policy class
_TRAINABLE: set[str] = set()  # kinds built from their config dataclass by `robo train`
_imported = False


def register(cls: type | None = None, *, trainable: bool = False) -> type | Callable[[type], type]:
    """Class decorator: add ``cls`` to the registry under ``cls.kind``.

    ``cls`` sets ``kind`` (str, the name saved in checkpoints) and ``config_class`` (its config
    dataclass) and implements ``Policy`` (``load(dir)`` included). ``trainable``: ``robo train`` builds it as
    ``cls(cls.config_class(**fields, obs_dim=..., action_dim=..., image_shape=...))``.
    Use as ``@register`` or ``@register(trainable=True)``."""

    def add(c: type) -> type:
        kind = getattr(c, "kind", None)
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"{c.__qualname__} needs a class attribute kind = '<name>' to be registered")
        if not dataclasses.is_dataclass(getattr(c, "config_class", None)):
            raise TypeError(f"{c.__qualname__} needs a class attribute config_class = <its config dataclass>")
        old = _CLASSES.get(kind)
        if old is not None and (old.__module__, old.__qualname__) != (c.__module__, c.__qualname__):
            raise ValueError(f"policy kind {kind!r} is registered twice: {old.__module__}.{old.__qualname__} "
                             f"and {c.__module__}.{c.__qualname__}; give one of them another kind")
        _CLASSES[kind] = c
        if trainable:
            _TRAINABLE.add(kind)
        return c

    return add if cls is None else add(cls)


def _import_policy_packages() -> None:
    """Import every subpackage of ``policies/`` once, so that each policy class has registered itself."""
    global _imported
    if not _imported:
        for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
            if module.ispkg:
                importlib.import_module(f"{__package__}.{module.name}")
        _imported = True


def known_kinds(trainable: bool = False) -> list[str]:
    """The registered kinds (only those ``robo train`` builds when ``trainable``), sorted."""
    _import_policy_packages()
    return sorted(_TRAINABLE if trainable else _CLASSES)


def policy_class(kind: str, trainable: bool = False) -> type:
    """The class registered as ``kind``; with ``trainable``, only a kind ``robo train`` builds.
    Raises a one-line ValueError naming the known kinds otherwise."""
    known = known_kinds(trainable)
    if kind not in known:
        what = "a policy kind robo train builds" if trainable else "a registered policy kind"
        raise ValueError(f"policy kind {kind!r} is not {what}; choose one of {known}")
    return _CLASSES[kind]


def load_policy(directory: str | Path) -> Policy:
    """Load the policy saved in ``directory`` (any registered kind)."""
    kind, _, _, _ = load_checkpoint(directory)
    try:
        cls = policy_class(kind)
    except ValueError as e:
        raise ValueError(f"{directory}: {e}") from None
    return cls.load(directory)
