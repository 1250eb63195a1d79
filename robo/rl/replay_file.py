"""An off-policy model's replay buffer on disk, holding only the rows it has filled.

SB3's ``save_replay_buffer`` pickles the whole allocation: a 1M-transition SAC buffer of the 36-float privileged
observation is 316 MB from the first step on. ``save_filled`` writes the rows filled so far (all ``buffer_size``
once it has wrapped around; about 316 bytes a transition with that observation); ``load_filled`` reads either
kind of file back at the full capacity. Both take SB3's numpy ``ReplayBuffer`` and robo's
``TensorReplayBuffer`` (rows as torch tensors; its pickle holds them as numpy arrays).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.save_util import save_to_pkl

ROW_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
"""The per-row storage of SB3's ReplayBuffer and DictReplayBuffer: arrays (dicts of arrays for dict
observations) of ``buffer_size`` rows (numpy arrays, or torch tensors in ``TensorReplayBuffer``);
``next_observations`` is None with ``optimize_memory_usage``."""


def _map_rows(buffer, fn) -> None:
    """Replace each row field ``a`` of ``buffer`` by ``fn(a)`` (each array of a dict field)."""
    for k in ROW_FIELDS:
        v = getattr(buffer, k, None)
        if isinstance(v, dict):
            setattr(buffer, k, {n: fn(a) for n, a in v.items()})
        elif isinstance(v, (np.ndarray, torch.Tensor)):
            setattr(buffer, k, fn(v))


def save_filled(model: OffPolicyAlgorithm, path: str | Path) -> None:
    """Pickle ``model.replay_buffer`` to ``path`` with its arrays cut to the filled rows (and the row after the
    last, which holds its next observation with ``optimize_memory_usage``)."""
    buffer = model.replay_buffer
    if not buffer.full:
        buffer = copy.copy(buffer)  # shallow: the model's buffer keeps its arrays; the copy gets views of them
        _map_rows(buffer, lambda a: a[:buffer.pos + 1])
    save_to_pkl(path, buffer)


def load_filled(model: OffPolicyAlgorithm, path: str | Path) -> None:
    """``model.load_replay_buffer(path)`` of a file ``save_filled`` or SB3 wrote, grown to ``buffer_size`` rows."""
    model.load_replay_buffer(path)
    size = model.replay_buffer.buffer_size

    def grown(a: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        if a.shape[0] == size:
            return a
        shape = (size, *a.shape[1:])
        if isinstance(a, torch.Tensor):
            full = torch.zeros(shape, dtype=a.dtype, device=a.device)
        else:
            full = np.zeros(shape, dtype=a.dtype)
        full[:len(a)] = a
        return full

    _map_rows(model.replay_buffer, grown)
