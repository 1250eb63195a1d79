"""A run folder: everything needed to reproduce and inspect a run, written atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file and ``os.replace`` (no torn files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_resolved_config(run_dir: str | Path, cfg) -> Path:
    """Save the fully resolved config as ``config.yaml`` (the run can be redone from it)."""
    from omegaconf import OmegaConf

    return atomic_write_text(Path(run_dir) / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
