"""Check a composed command config before anything is run or written, so that a bad input ends in one
line that says what is wrong and what to do (``robo.cli`` prints it and exits with code 2).

The checks are by key name over the whole config, so they hold for every command and every config group:
durations, counts and learning rates must be positive (or at least not negative), and the folders a command
reads (checkpoints, run folders to resume, datasets) must exist and hold what the command needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Keys that must be > 0 wherever they appear (last part of the dotted key).
POSITIVE = re.compile(r"^(seconds|\w+_seconds|episodes|num_envs|total_steps|total_env_steps|learning_rate|lr|"
                      r"\w+_lr|batch_size|attempts|teachers|epochs|iterations|fps|width|height|quadrotors)$")
# Keys that must be >= 0 (0 means "off" or "never" for most of them).
NON_NEGATIVE = re.compile(r"(steps|every|seconds|episodes|envs|epochs|iterations|threads|starts|radius|"
                          r"learning_rate|_lr|^lr$|batch|size|demos|members|restarts|ensemble)")
# Keys that name a folder the command reads; values that are names, not paths, are left alone.
READ_PATHS = {"policy.path", "base", "resume", "init_from", "dataset", "extra_dataset", "convert", "train.base",
              "synthesize.base", "model.path", "distill.teacher", "twin_pretrain.identify_policy"}
SHIPPED_POLICIES = ("raptor", "robo_foundation")  # policies that come with the install, named instead of a folder
NAMES = {*SHIPPED_POLICIES, "expert"}


class ConfigError(ValueError):
    """A config value that cannot work; the message says which key and what to do."""


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` for every non-container value of a nested dict / list."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, f"{prefix}{k}.")
    elif isinstance(node, list):
        return  # lists hold ranges and shapes (e.g. mass: [0.02, 3.0]), checked where they are read
    else:
        yield prefix[:-1], node


def check_numbers(c: dict) -> None:
    """Durations, counts and learning rates: > 0 for ``POSITIVE`` keys, >= 0 for ``NON_NEGATIVE`` ones."""
    for key, v in leaves(c):
        name = key.rsplit(".", 1)[-1]
        if isinstance(v, str) and (POSITIVE.match(name) or NON_NEGATIVE.search(name)):
            raise ConfigError(f"{key}={v!r}: must be a number")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if v != v or v in (float("inf"), float("-inf")):
            raise ConfigError(f"{key}={v}: must be a finite number")
        if POSITIVE.match(name) and v <= 0:
            raise ConfigError(f"{key}={v}: must be > 0")
        if NON_NEGATIVE.search(name) and v < 0:
            raise ConfigError(f"{key}={v}: must be >= 0")


def check_paths(c: dict, command: str) -> None:
    """Every folder the command reads exists; checkpoints load; a run folder to resume has its config."""
    values = dict(leaves(c))
    for key in sorted(READ_PATHS & values.keys()):
        v = values[key]
        if not isinstance(v, str) or not v or v in NAMES or v == "???":
            continue
        if key == "policy.path" and (c.get("policy") or {}).get("kind") != "checkpoint":
            continue
        path = Path(v).expanduser()
        if not path.exists():
            raise ConfigError(f"{key}={v}: no such file or folder")
        if key == "resume":
            if not (path / "config.yaml").is_file():
                raise ConfigError(f"resume={v}: not a robo {command} run folder (config.yaml is missing)")
        elif key in ("policy.path", "base", "train.base", "synthesize.base", "distill.teacher",
                     "twin_pretrain.identify_policy") and path.is_dir() and (path / "config.json").exists():
            check_checkpoint(path, key)


def check_checkpoint(path: Path, key: str) -> None:
    """Open a policy checkpoint folder fully (config and weights); a corrupt one is a ConfigError."""
    from policies.checkpoint import load_checkpoint

    try:
        load_checkpoint(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{key}={path}: {e}") from e


def check_required(c: dict) -> None:
    """``???`` values (Hydra's mandatory marker) that were not given."""
    for key, v in leaves(c):
        if v == "???":
            raise ConfigError(f"{key} is required: add {key}=<value> to the command")


def validate(command: str, cfg) -> None:
    """Raise ``ConfigError`` for the first problem found in a composed config (a DictConfig or dict)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        try:
            c = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
        except Exception as e:  # an interpolation that cannot resolve
            raise ConfigError(f"config does not resolve: {one_line(str(e))}") from e
    else:
        c = dict(cfg)
    c.pop("hydra", None)
    check_required(c)
    check_numbers(c)
    check_devices(c)
    check_paths(c, command)


def check_devices(c: dict) -> None:
    """Every ``device`` key is ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, and CUDA where asked for exists."""
    from robo.device import resolve_device

    for key, v in leaves(c):
        if key.rsplit(".", 1)[-1] == "device" and v is not None:
            try:
                resolve_device(v)
            except ValueError as e:
                raise ConfigError(str(e).replace("device=", f"{key}=", 1)) from e


def one_line(text: str) -> str:
    """Fold a multi-line message into one line."""
    return "; ".join(part.strip() for part in str(text).strip().splitlines() if part.strip())
