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


def _why(e: BaseException) -> str:
    """An error's type and message, on one line."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def load_checkpoint(directory: str | Path) -> tuple[str, dict, dict[str, torch.Tensor], dict]:
    """Read a checkpoint folder -> (kind, config dict, tensors, metadata).

    Raises FileNotFoundError if a file is missing, a one-line ValueError naming the file if one is corrupt."""
    directory = Path(directory)
    for name in (CONFIG, WEIGHTS):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{directory} is not a robo checkpoint: {name} is missing")
    try:
        doc = json.loads((directory / CONFIG).read_bytes())
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, nesting past the stack
        raise ValueError(f"{directory / CONFIG} is corrupt ({_why(e)}); save the policy again") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{directory / CONFIG} holds a JSON {type(doc).__name__}, not an object; "
                         "save the policy again")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{directory}: checkpoint format {doc.get('format_version')!r} is not {FORMAT_VERSION}")
    kind, config, metadata = doc.get("kind"), doc.get("config"), doc.get("metadata", {})
    if not (isinstance(kind, str) and isinstance(config, dict) and isinstance(metadata, dict)):
        raise ValueError(f"{directory / CONFIG} needs a string 'kind' and objects 'config' and 'metadata', got "
                         f"{type(kind).__name__}, {type(config).__name__}, {type(metadata).__name__}; "
                         "save the policy again")
    try:
        tensors = load_file(str(directory / WEIGHTS))
    except Exception as e:  # safetensors raises its own SafetensorError (truncated or not a safetensors file)
        raise ValueError(f"{directory / WEIGHTS} is corrupt or truncated ({_why(e)}); save the policy again") from e
    return kind, config, tensors, metadata


def check_state_dict(module: torch.nn.Module, tensors: dict[str, torch.Tensor], where: Path) -> None:
    """ValueError naming ``where`` unless ``tensors`` has exactly ``module``'s state-dict keys and shapes."""
    want = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in tensors.items()}
    if want != have:
        missing, unexpected = sorted(want.keys() - have.keys()), sorted(have.keys() - want.keys())
        shapes = [f"{k} {have[k]} (the config makes {want[k]})" for k in sorted(want.keys() & have.keys())
                  if want[k] != have[k]]
        raise ValueError(f"{where} does not match its config: missing {missing[:4]}, unexpected {unexpected[:4]}, "
                         f"shapes {shapes[:4]}; save the policy again")


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
        """The policy saved in ``directory``; a one-line ValueError if its config does not make a policy of this
        kind or its weights do not fit it (checked on the meta device first, so that a corrupt config allocates
        nothing)."""
        directory = Path(directory)
        kind, cfg, tensors, _ = load_checkpoint(directory)
        if kind != cls.kind:
            raise ValueError(f"{directory} holds a {kind!r} policy, not {cls.kind!r}")

        def unfit(e: Exception) -> ValueError:  # wrong types in config.json fail anywhere in a constructor
            return ValueError(f"{directory / CONFIG}: its config does not make a {cls.kind!r} policy ({_why(e)}); "
                              "save the policy again")

        try:
            config = cls.config_from_saved(cfg)
        except Exception as e:
            raise unfit(e) from None
        try:
            with torch.device("meta"):
                probe = cls(config)
        except Exception:  # checked below, on the real device
            probe = None
        for module in probe.weight_copies() if probe is not None else []:
            check_state_dict(module, tensors, directory / WEIGHTS)
        try:
            policy = cls(config)
        except Exception as e:
            raise unfit(e) from None
        for module in policy.weight_copies():
            check_state_dict(module, tensors, directory / WEIGHTS)
            module.load_state_dict(tensors)
        return policy
