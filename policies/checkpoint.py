"""Checkpoints on disk: a folder with ``model.safetensors`` and ``config.json``.

``config.json`` holds the policy kind, its config dataclass and free-form metadata
(normalization statistics live in the safetensors file beside the weights, as in
LeRobot). Folders are written atomically: a complete temporary folder is renamed
into place, so a killed process never leaves a half-written checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors.torch import load_file, save_file

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT_VERSION = 1


@contextmanager
def atomic_directory(directory: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``directory``; on success it replaces ``directory``
    by rename, on error it is removed and ``directory`` is left untouched."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        yield tmp
        old = None
        if directory.exists():
            old = directory.parent / f".{directory.name}.old-{os.getpid()}"
            os.replace(directory, old)
        os.replace(tmp, directory)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_unfinished(directory: str | Path) -> None:
    """Clear what an ``atomic_directory(directory)`` killed midway left beside ``directory``: its temporary
    folders, and, where it died between its two renames, the previous version (put back as ``directory``)."""
    directory = Path(directory)
    for stale in directory.parent.glob(f".{directory.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for old in sorted(directory.parent.glob(f".{directory.name}.old-*")):
        if directory.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, directory)


def save_checkpoint(directory: str | Path, kind: str, config: Any, tensors: dict[str, torch.Tensor],
                    metadata: dict | None = None) -> Path:
    """Atomically write ``tensors`` and ``config`` (a dataclass or dict) into ``directory``."""
    cfg = asdict(config) if is_dataclass(config) else dict(config)
    with atomic_directory(directory) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp / WEIGHTS))
        doc = {"format_version": FORMAT_VERSION, "kind": kind, "config": cfg, "metadata": metadata or {}}
        with open(tmp / CONFIG, "w") as f:
            json.dump(doc, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
    return Path(directory)


def load_checkpoint(directory: str | Path) -> tuple[str, dict, dict[str, torch.Tensor], dict]:
    """Read a checkpoint folder -> (kind, config dict, tensors, metadata)."""
    directory = Path(directory)
    for name in (CONFIG, WEIGHTS):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{directory} is not a robo checkpoint: {name} is missing")
    try:
        with open(directory / CONFIG) as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{directory / CONFIG} is corrupt ({e}); save the policy again") from e
    if doc.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{directory}: checkpoint format {doc.get('format_version')} is not {FORMAT_VERSION}")
    try:
        tensors = load_file(str(directory / WEIGHTS))
    except Exception as e:  # safetensors raises its own SafetensorError (truncated or not a safetensors file)
        raise ValueError(f"{directory / WEIGHTS} is corrupt or truncated ({e}); save the policy again") from e
    return doc["kind"], doc["config"], tensors, doc.get("metadata", {})


class TorchPolicyCheckpointing:
    """``save``/``load``/``num_parameters`` for policies made of a config dataclass and a torch
    module: subclasses set ``kind`` and ``config_class`` and hold ``self.config``, ``self.model``."""

    kind: str
    config_class: type

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def inference_model(self) -> torch.nn.Module:
        """The weights that act and are saved (a subclass may keep an average of ``model``'s)."""
        return self.model

    def weight_copies(self) -> list[torch.nn.Module]:
        """Every module holding the policy's weights: a load fills them all."""
        return [self.model]

    def save(self, directory: str | Path) -> Path:
        return save_checkpoint(directory, self.kind, self.config, self.inference_model.state_dict(),
                               {"num_parameters": self.num_parameters})

    @classmethod
    def config_from_saved(cls, saved: dict):
        """The config dataclass of a checkpoint's saved config fields."""
        return cls.config_class(**saved)

    @classmethod
    def load(cls, directory: str | Path):
        kind, cfg, tensors, _ = load_checkpoint(directory)
        if kind != cls.kind:
            raise ValueError(f"{directory} holds a {kind!r} policy, not {cls.kind!r}")
        policy = cls(cls.config_from_saved(cfg))
        for module in policy.weight_copies():
            module.load_state_dict(tensors)
        return policy
