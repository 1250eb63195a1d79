"""The one device setting of every command: ``device: auto | cpu | cuda | cuda:N``.

``auto`` is CUDA when torch sees a GPU, else the CPU; ``cuda`` is the current CUDA device, ``cuda:N`` the N-th.
Asking for CUDA where torch has none is a one-line ``ValueError`` (``robo.validation`` reports it as a config
error before a run folder is made). Checkpoints are written from CPU copies (safetensors, ``policies.checkpoint``)
and read back with ``map_location``, so a policy trained on one device loads on any.
"""

from __future__ import annotations

import re
from typing import Any

import torch

SPEC = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """``"auto"`` (or None) -> ``cuda`` when available, else ``cpu``; ``"cpu"``, ``"cuda"``, ``"cuda:N"`` as
    given, checked against the GPUs torch sees."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    spec = "auto" if spec is None else str(spec).strip().lower()
    if not SPEC.match(spec):
        raise ValueError(f"device={spec!r}: choose auto, cpu, cuda or cuda:N")
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"device={spec}: torch sees no CUDA GPU (torch {torch.__version__}); use device=cpu or auto")
    index = int(spec.split(":")[1]) if ":" in spec else None
    if index is not None and index >= torch.cuda.device_count():
        raise ValueError(f"device={spec}: only {torch.cuda.device_count()} CUDA GPU(s) visible; use cuda:0 .. "
                         f"cuda:{torch.cuda.device_count() - 1}")
    return torch.device(spec)


def indexed(device: str | torch.device) -> torch.device:
    """``device`` as a torch device, ``cuda`` as the ``cuda:N`` it means (tensors report their index; SB3 and a bare
    ``device=cuda`` do not), other devices as they are."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def same_device(a: str | torch.device, b: str | torch.device) -> bool:
    """Whether ``a`` and ``b`` name one device (``cuda`` is ``cuda:<current>``; CUDA is asked only when one of two
    CUDA devices has no index)."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    return a.index == b.index or indexed(a) == indexed(b)


def sb3_device(spec: str | torch.device | None) -> str:
    """The device string stable-baselines3 takes (``"cpu"``, ``"cuda"``, ``"cuda:1"``) for ``spec``."""
    return str(resolve_device(spec))


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """A dict of tensors moved to ``device`` (non-blocking from pinned memory); other values as they are."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def pin(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The tensors of ``batch`` in page-locked memory when ``device`` is CUDA (faster, asynchronous copies)."""
    if device.type != "cuda":
        return batch
    return {k: v.pin_memory() if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v
            for k, v in batch.items()}


def move_policy(policy, device: torch.device):
    """``policy`` with every module holding its weights (``weight_copies``, else ``model``) on ``device``."""
    modules = policy.weight_copies() if hasattr(policy, "weight_copies") else [policy.model]
    for m in modules:
        m.to(device)
    ema = getattr(policy, "ema", None)
    if ema is not None:
        ema.to(device)  # the AveragedModel's own step counter buffer
    return policy
