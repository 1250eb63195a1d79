"""robo's own foundation policy, shipped inside the package: the best student of ``robo foundation``
(``+experiment=foundation_tracking``: Dense 32 -> GRU 32 -> Dense 4, trained on 48 teachers), as RAPTOR's
released policy ships inside ``foundation-policy``. Its training command and results are in
``robo_foundation/README.md`` beside the weights."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from policies.registry import load_policy

from .modeling_foundation import FoundationPolicy


def robo_foundation_path() -> Path:
    """The folder of the shipped checkpoint (``config.json`` + ``model.safetensors``)."""
    return Path(str(resources.files("policies.foundation").joinpath("robo_foundation")))


def load_robo_foundation(path: str | Path | None = None) -> FoundationPolicy:
    """The shipped student (or a ``robo foundation`` student folder at ``path``) as a ``FoundationPolicy``.
    Raises one line when the folder is missing or holds another kind of policy."""
    path = Path(path) if path is not None else robo_foundation_path()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"robo's foundation policy not found at {path} (config.json is missing); "
                                f"reinstall robo, or give the folder of a robo foundation student")
    policy = load_policy(path)
    if not isinstance(policy, FoundationPolicy):
        raise ValueError(f"{path} holds a {policy.kind!r} policy, not a foundation GRU student")
    return policy
