"""Improve a chunked policy on its own successful imagined rollouts (Ctrl-World's fine-tuning loop).

The policy acts in the world model from real start observations, ``attempts`` times per start; the
episodes the model judges successful become imitation data, and the policy's training continues on
them (with or without its demos). ``replay_in_sim`` checks that data: it re-runs each kept episode's
actions open loop in the simulator from the same start, so a model that is exploited shows up as
imagined successes that do not reproduce.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from policies.world_model import EnsembleDynamics

from .rollout import imagine_rollout
from .tasks import Episode, ImagineTask

SELECT = ("all", "shortest")


def imagined_successes(model: EnsembleDynamics, policy, start_obs, task: ImagineTask, attempts: int = 1,
                       select: str = "all", seed: int = 0) -> tuple[list[Episode], dict]:
    """Roll ``policy`` out ``attempts`` times from each row of ``start_obs`` (S, D) in ``model`` for
    ``task.episode_steps`` steps and keep the successful episodes.

    ``select``: ``"all"`` successful attempts, or ``"shortest"``: one per start, its fastest success.
    Each kept episode is ``{"obs" (T + 1, D): start .. first successful observation, "action" (T + 1, A):
    the executed actions, the last one repeated (one row per observation, as imitation windows
    expect), "start" (): the start's row}``, and for a chunked policy (``n_action_steps``) ``"plan"``
    (T + 1,) bool: the steps where it planned a chunk (every ``n_action_steps`` from the start), which
    ``robo.imitation.data.ChunkWindows`` aligns its training windows to.
    Stats: imagined_success (rate over all rollouts), starts_with_a_success, rollouts, kept."""
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    if select not in SELECT:
        raise ValueError(f"select={select!r}; choose one of {list(SELECT)}")
    start = np.asarray(start_obs, np.float32)
    if start.ndim != 2 or start.shape[1] != task.obs_dim:
        raise ValueError(f"start_obs has shape {start.shape}, expected (S, {task.obs_dim})")
    r = imagine_rollout(model, policy, np.repeat(start, attempts, axis=0), task.episode_steps, task, seed=seed)
    won = r["success"].reshape(len(start), attempts)
    stats = {"imagined_success": float(won.mean()), "starts_with_a_success": float(won.any(1).mean()),
             "rollouts": int(won.size)}
    if select == "shortest":
        length = np.where(won, r["length"].reshape(won.shape), np.iinfo(int).max)
        first = np.zeros_like(won)
        first[np.arange(len(won)), length.argmin(1)] = True
        won &= first
    episodes = []
    for i in np.flatnonzero(won.ravel()):
        T = int(r["length"][i])
        actions = r["action"][:T, i]
        e = {"obs": r["obs"][:T + 1, i], "action": np.concatenate([actions, actions[-1:]]),
             "start": np.asarray(i // attempts)}
        if getattr(policy, "n_action_steps", None):
            e["plan"] = plan_steps(T + 1, policy.n_action_steps)
        episodes.append(e)
    return episodes, {**stats, "kept": len(episodes)}


def plan_steps(length: int, n_action_steps: int) -> np.ndarray:
    """(length,) bool: the steps where a chunked policy that executes ``n_action_steps`` actions per
    plan planned, from an episode's start."""
    return np.arange(length) % n_action_steps == 0


def replay_in_sim(make_env: Callable[[], gym.Env], episodes: list[Episode], start_seeds) -> np.ndarray:
    """Re-run each episode's actions open loop in the simulator, reset with its start's seed
    (``start_seeds[episode["start"]]``) -> (N,) bool: reached success (``info["is_success"]``).
    Raises if a reset does not reproduce the episode's first observation."""
    ok = np.zeros(len(episodes), bool)
    for n, e in enumerate(episodes):
        env = make_env()
        obs, _ = env.reset(seed=int(start_seeds[int(e["start"])]))
        if not np.allclose(obs, e["obs"][0], atol=1e-4):
            raise ValueError(f"episode {n}: the reset with seed {start_seeds[int(e['start'])]} gives {obs}, "
                             f"the imagined episode starts at {e['obs'][0]}")
        for a in e["action"][:-1]:
            obs, _, terminated, truncated, info = env.step(a)
            if terminated or truncated:
                ok[n] = bool(info.get("is_success", False))
                break
        env.close()
    return ok


def finetune(policy, episodes: list[Episode], steps: int, lr: float = 1e-4, batch_size: int = 256,
             warmup_steps: int = 50, seed: int = 0, run_dir=None, device: str | torch.device = "cpu"):
    """Continue the imitation training of a chunked ``policy`` (in place; its normalization is kept)
    on ``episodes`` (demos and / or imagined successes; windows of those with ``plan`` start at its
    planning steps) for ``steps`` steps with ``robo.imitation``'s trainer on ``device``; returns the policy (on the
    CPU, as the trainer hands it back)."""
    from robo.imitation.data import ChunkWindows
    from robo.imitation.trainer import ImitationTrainer, TrainConfig

    keys = ("obs", "action", "plan")  # not the episode's other arrays (images, rewards, its start)
    windows = ChunkWindows([{k: e[k] for k in keys if k in e} for e in episodes], policy.n_obs_steps,
                           policy.horizon, policy.n_action_steps)
    config = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=warmup_steps, checkpoint_every=steps,
                         seed=seed)
    with tempfile.TemporaryDirectory(prefix="finetune_") as tmp:
        ImitationTrainer(policy, windows, config, run_dir or tmp, device=device).train(progress=False)
    return policy
