"""Training windows for chunked policies, cut from demonstration episodes.

An episode is a dict of equal-length arrays: ``obs`` (T, obs_dim), ``action`` (T, action_dim),
optionally ``image`` (T, 3, H, W) (uint8 in [0, 255] or float in [0, 1]) and ``reward`` (T,).
A window starting at step s holds obs[s : s + n_obs_steps] and action[s : s + horizon], with
indices clamped to the episode (its first / last step repeated), for s from -(n_obs_steps - 1)
to T - horizon + n_action_steps - 1 (Diffusion Policy's padding). An episode recorded from a
chunked policy may carry ``plan`` (T,) bool, the steps where the policy planned a new chunk: then
only the windows whose first executed step (s + n_obs_steps - 1) is a planning step are kept: each
window's executed actions then come from one plan, not from two, between which a stochastic policy
may have switched to another way of doing the task.
"""

from __future__ import annotations

import numpy as np
import torch

Episode = dict[str, np.ndarray]


def check_episodes(episodes: list[Episode]) -> None:
    """Raise a clear error on missing keys, mismatched lengths or dims, or NaN."""
    if not episodes:
        raise ValueError("no demonstration episodes given")
    dims = {}
    for i, ep in enumerate(episodes):
        for key in ("obs", "action"):
            if key not in ep:
                raise KeyError(f"episode {i} has no {key!r} array (has {sorted(ep)})")
        T = len(ep["obs"])
        for key, arr in ep.items():
            arr = np.asarray(arr)
            if len(arr) != T:
                raise ValueError(f"episode {i}: {key!r} has {len(arr)} steps but 'obs' has {T}")
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise ValueError(f"episode {i}: {key!r} contains NaN or inf")
            shape = arr.shape[1:]
            if dims.setdefault(key, shape) != shape:
                raise ValueError(f"episode {i}: {key!r} has per-step shape {shape}, earlier episodes {dims[key]}")


def compute_stats(episodes: list[Episode]) -> dict[str, dict[str, torch.Tensor]]:
    """{"obs"|"action": {"min", "max", "mean", "std"}} over all steps, each (dim,)."""
    check_episodes(episodes)
    stats = {}
    for key in ("obs", "action"):
        x = np.concatenate([np.asarray(ep[key], np.float64) for ep in episodes])
        stats[key] = {k: torch.as_tensor(v, dtype=torch.float32)
                      for k, v in (("min", x.min(0)), ("max", x.max(0)), ("mean", x.mean(0)), ("std", x.std(0)))}
    return stats


class ChunkWindows:
    """All training windows of a set of episodes; ``batch(ids)`` gathers them as torch tensors:
    {"obs": (B, n_obs_steps, obs_dim), "action": (B, horizon, action_dim)[, "image": (B, To, 3, H, W)]}."""

    def __init__(self, episodes: list[Episode], n_obs_steps: int, horizon: int, n_action_steps: int):
        check_episodes(episodes)
        self.n_obs_steps, self.horizon = n_obs_steps, horizon
        keys = [k for k in ("obs", "action", "image") if k in episodes[0]]
        self.data = {k: torch.as_tensor(np.concatenate([np.asarray(ep[k]) for ep in episodes])) for k in keys}
        starts, offsets = [], 0
        for ep in episodes:
            T = len(ep["obs"])
            s = np.arange(-(n_obs_steps - 1), max(T - horizon + n_action_steps, -(n_obs_steps - 1) + 1))
            if "plan" in ep:
                s = s[np.asarray(ep["plan"], bool)[np.clip(s + n_obs_steps - 1, 0, T - 1)]]
            idx = np.clip(s[:, None] + np.arange(horizon)[None], 0, T - 1) + offsets
            starts.append(idx)
            offsets += T
        self.index = torch.as_tensor(np.concatenate(starts), dtype=torch.long)  # (W, horizon) into data

    def __len__(self) -> int:
        return len(self.index)

    def batch(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        idx = self.index[ids]
        obs_idx = idx[:, : self.n_obs_steps]
        out = {"obs": self.data["obs"][obs_idx].float(), "action": self.data["action"][idx].float()}
        if "image" in self.data:
            img = self.data["image"][obs_idx]
            out["image"] = img.float() / 255.0 if img.dtype == torch.uint8 else img.float()
        return out
