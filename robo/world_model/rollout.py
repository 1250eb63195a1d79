"""Policies in imagination: batched rollouts through the dynamics model, imagined success, ranking
checkpoints, and multi-step prediction error against recorded real episodes.

The model predicts on its own device (``EnsembleDynamics.to``); policies and tasks see numpy, one copy to the
model and one back per step (``EnsembleDynamics.predict_numpy``)."""

from __future__ import annotations

import numpy as np
import torch

from policies.world_model import EnsembleDynamics

from .tasks import Episode, ImagineTask


@torch.no_grad()
def imagine_rollout(model: EnsembleDynamics, policy, start_obs, steps: int, task: ImagineTask,
                    sample: str = "mean", disagreement_threshold: float = float("inf"),
                    seed: int = 0) -> dict[str, np.ndarray]:
    """Roll ``policy`` out in the model from ``start_obs`` (B, D) for ``steps`` steps.

    An episode ends when the model predicts termination (a failure), when ``task.success_fn`` holds
    (``success_at="any"``), or is cut when disagreement exceeds the threshold (a failure).
    Returns success (B,) bool, cut (B,) bool, length (B,), max_reward (B,) (the best predicted
    reward, a graded score where imagined success is rare), obs (T + 1, B, D) and action (T, B, A),
    T <= steps; episode i's own steps are obs[:length[i] + 1] and action[:length[i]]."""
    obs = np.asarray(start_obs, np.float32).copy()
    B = len(obs)
    gen = torch.Generator().manual_seed(seed)
    policy.reset()
    alive, success, cut = np.ones(B, bool), np.zeros(B, bool), np.zeros(B, bool)
    length = np.zeros(B, int)
    best = np.full(B, -np.inf)
    low, high = task.action_space.low, task.action_space.high
    traj, actions = [obs.copy()], []
    prev = obs.copy()
    for _ in range(steps):
        a = np.clip(np.asarray(policy.act(obs), np.float32), low, high)
        actions.append(a)
        p = model.predict_numpy(obs, a, sample=sample, generator=gen, prev_obs=prev)
        nxt = p["next_obs"]
        if task.observation_space is not None:
            nxt = np.clip(nxt, task.observation_space.low, task.observation_space.high)
        prev = obs
        obs = np.where(alive[:, None], nxt, obs).astype(np.float32)
        length += alive
        best = np.where(alive, np.maximum(best, p["reward"]), best)
        failed = p["terminated"] | (p["disagreement"] > disagreement_threshold)
        cut |= alive & (p["disagreement"] > disagreement_threshold)
        if task.success_at == "any":
            won = alive & task.success_fn(obs)
            success |= won
            alive &= ~won
        alive &= ~failed
        traj.append(obs.copy())
        if not alive.any():
            break
    if task.success_at == "final":
        success = alive & task.success_fn(obs)
    return {"success": success, "cut": cut, "length": length, "max_reward": best, "obs": np.stack(traj),
            "action": np.stack(actions)}


def spearman(x, y) -> float:
    """Spearman rank correlation (average ranks for ties); nan when either side is constant."""
    def ranks(v):
        v = np.asarray(v, float)
        order = v.argsort()
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        for u in np.unique(v):
            r[v == u] = r[v == u].mean()
        return r
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def rank_policies(model: EnsembleDynamics, policies: list[tuple[str, object]], start_obs, task: ImagineTask,
                  steps: int | None = None, **kwargs) -> list[dict]:
    """Imagined success rate of each (name, policy) from the same ``start_obs``, best first."""
    rows = []
    for name, pol in policies:
        r = imagine_rollout(model, pol, start_obs, steps or task.episode_steps, task, **kwargs)
        rows.append({"name": name, "imagined_success": float(r["success"].mean()),
                     "cut_fraction": float(r["cut"].mean())})
    return sorted(rows, key=lambda r: -r["imagined_success"])


@torch.no_grad()
def open_loop_error(model: EnsembleDynamics, episodes: list[Episode], horizon: int,
                    angle_dims: list[int] = ()) -> np.ndarray:
    """Replay each recorded episode's actions through the model from its first observation.

    Returns (horizon,) mean absolute error per step over episodes at least ``horizon`` long and
    over observation dims (angles wrapped). Step k's error compares the k-step prediction."""
    eps = [e for e in episodes if len(e["obs"]) >= horizon]
    if not eps:
        raise ValueError(f"no episode is at least {horizon} steps long")
    obs = np.stack([e["obs"][0] for e in eps])
    prev = obs
    errs = []
    for k in range(horizon):
        a = np.stack([e["action"][k] for e in eps])
        obs, prev = model.predict_numpy(obs, a, prev_obs=prev)["next_obs"], obs
        d = obs - np.stack([e["next_obs"][k] for e in eps])
        for i in angle_dims:
            d[:, i] = (d[:, i] + np.pi) % (2 * np.pi) - np.pi
        errs.append(np.abs(d).mean())
    return np.asarray(errs)
