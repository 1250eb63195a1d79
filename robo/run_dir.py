"""A run folder: everything needed to reproduce and inspect a run, written atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable


def atomic_write(path: str | Path, write: Callable[[IO], Any], binary: bool = False) -> Path:
    """Call ``write(file)`` on a temporary file next to ``path``, then ``os.replace`` it (no torn files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (``atomic_write``)."""
    return atomic_write(path, lambda f: f.write(text))


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically (``atomic_write``)."""
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f), binary=True)


def write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_resolved_config(run_dir: str | Path, cfg) -> Path:
    """Save the fully resolved config as ``config.yaml`` (the run can be redone from it)."""
    from omegaconf import OmegaConf

    return atomic_write_text(Path(run_dir) / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))


def config_differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts."""
    keys = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += config_differences(a, b, f"{prefix}{k}.")
        elif a != b:
            keys.append(prefix + k)
    return keys


def check_resume_config(run_dir: str | Path, c: dict, resumable: set[str], command: str = "train") -> None:
    """Refuse to resume ``run_dir`` with a config ``c`` that differs from its saved ``config.yaml``,
    except in ``resumable`` keys (a dotted key, or a top-level key covering everything below it)."""
    from omegaconf import OmegaConf

    run_dir = Path(run_dir)
    saved = run_dir / "config.yaml"
    if not saved.exists():
        raise FileNotFoundError(f"cannot resume: {saved} not found (is {run_dir} a robo {command} run folder?)")
    old = OmegaConf.to_container(OmegaConf.load(saved), resolve=True)
    diff = [k for k in config_differences(old, c) if k not in resumable and k.split(".")[0] not in resumable]
    if diff:
        only_old = [k for k in diff if _has(old, k) and not _has(c, k)]
        only_new = [k for k in diff if _has(c, k) and not _has(old, k)]
        hint = "".join(f"; {what}: {keys}" for what, keys in (
            ("only in the checkpoint's config (removed since, e.g. by a newer robo; delete them from its "
             "config.yaml if they did not matter)", only_old),
            ("not in the checkpoint's config (added since)", only_new)) if keys)
        if only_new:
            hint += ("; to resume, add those to its config.yaml with values that keep the old behaviour "
                     "(a new option's default usually does)")
        raise ValueError(f"refusing to resume {run_dir}: config differs from the checkpoint's in {diff}{hint}")


def _has(d: dict, dotted: str) -> bool:
    """Whether the nested dict ``d`` holds the dotted key."""
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return False
        d = d[part]
    return True
