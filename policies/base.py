"""The ``Policy`` protocol every robo policy implements."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor


@runtime_checkable
class Policy(Protocol):
    """A policy maps batched observations to batched actions.

    ``act(obs)``: obs (B, obs_dim) float32 -> actions (B, action_dim) float32, returned as the
    same array type it was given (numpy in, numpy out; torch in, torch out).
    Recurrent policies keep per-environment state; ``reset(mask)`` clears it for the
    environments where ``mask`` (B,) is true, or for all when ``mask`` is None.
    """

    obs_dim: int
    action_dim: int

    def reset(self, mask: ArrayLike | None = None) -> None: ...

    def act(self, obs: ArrayLike) -> ArrayLike: ...

    def save(self, directory: str | Path) -> Path: ...

    @classmethod
    def load(cls, directory: str | Path) -> "Policy": ...


def as_obs_tensor(obs: ArrayLike, obs_dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Validate a (B, obs_dim) observation batch and return it as a torch tensor."""
    t = torch.as_tensor(obs, dtype=dtype)
    if t.ndim != 2 or t.shape[1] != obs_dim:
        raise ValueError(f"observation has shape {tuple(t.shape)}, expected (B, {obs_dim})")
    if not bool(torch.isfinite(t).all()):
        raise ValueError("observation contains NaN or inf")
    return t


def like_input(action: torch.Tensor, obs: ArrayLike) -> ArrayLike:
    """Return ``action`` as numpy if ``obs`` was numpy, else as a tensor on ``obs``'s device (a policy whose
    weights sit on another device hands its answer back where the caller holds its observations)."""
    if isinstance(obs, np.ndarray):
        return action.detach().cpu().numpy()
    return action.to(obs.device) if isinstance(obs, torch.Tensor) else action


def weights_device(policy) -> torch.device:
    """The device of a policy's acting weights (``inference_model``, else ``model``; a module works too), or the
    CPU for a policy without torch weights (a scripted expert)."""
    module = policy
    if not isinstance(module, torch.nn.Module):
        module = getattr(policy, "inference_model", None)
        module = getattr(policy, "model", None) if module is None else module
    if not isinstance(module, torch.nn.Module):
        return torch.device("cpu")
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return torch.device("cpu")
