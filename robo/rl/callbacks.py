"""SB3 callbacks of robo's trainer: progress, periodic evaluation, curriculum, checkpoints,
divergence guard."""

from __future__ import annotations

import copy
import logging
import math
import time
from collections import deque
from typing import Callable

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from tqdm import tqdm

log = logging.getLogger(__name__)


class DivergenceError(RuntimeError):
    """Training produced non-finite numbers; the last good checkpoint is kept."""


def parameters_finite(parameters) -> bool:
    """Whether every tensor in ``parameters`` (e.g. ``model.policy.parameters()``) is finite (one reduction over
    all of them: the max-abs norm is inf or nan exactly when an entry is)."""
    with torch.no_grad():
        return bool(torch.isfinite(torch.nn.utils.get_total_norm(list(parameters), float("inf"))))


def _host(x) -> np.ndarray:
    """A tensor (any device) or array-like as a numpy array."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)




def step_arrays(local_vars: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(rewards, dones, position errors m or None, curriculum levels or None), each (n_envs,), of one vectorized
    step from an algorithm's callback locals: SB3's per-env ``infos`` list, or the batched info dict of tensors
    that robo's fast algorithms pass (``robo.rl.fast_off_policy``)."""
    infos = local_vars["infos"]
    if isinstance(infos, dict):
        errors, levels = infos.get("position_error"), infos.get("level")
    else:
        errors = [i["position_error"] for i in infos] if all("position_error" in i for i in infos) else None
        levels = [i.get("level", -1) for i in infos]
    return (_host(local_vars["rewards"]), _host(local_vars["dones"]).astype(bool),
            None if errors is None else _host(errors), None if levels is None else _host(levels))


class TrainingCallback(BaseCallback):
    """Everything robo's trainer does between SB3's environment steps.

    Args:
        total_steps: env steps of the whole run (for the progress bar).
        evaluate: ``() -> metrics dict`` scoring the current actor (run every ``eval_every`` env steps).
        on_eval: ``(step, metrics) -> None`` after each evaluation (curriculum, history, plots).
        checkpoint: ``(step) -> None`` writing a checkpoint (every ``checkpoint_every`` env steps before
            ``total_steps``: the caller writes the final one after the last gradient steps).
        progress: show a tqdm bar with the recent return and position error.
        stop: ``(metrics) -> bool``; training ends after an evaluation for which it is true.
        on_episode_end: ``(level, score) -> None`` for every finished episode that played a
            curriculum level (``info["level"] >= 0``); score = the episode's mean position error, m.
    """

    def __init__(self, total_steps: int, evaluate: Callable[[], dict], on_eval: Callable[[int, dict], None],
                 checkpoint: Callable[[int], None], eval_every: int, checkpoint_every: int, progress: bool = True,
                 stop: Callable[[dict], bool] | None = None,
                 on_episode_end: Callable[[int, float], None] | None = None):
        super().__init__()
        self.on_episode_end = on_episode_end
        self.stop = stop
        self.stopped_early = False
        self.total_steps, self.eval_every, self.checkpoint_every = total_steps, eval_every, checkpoint_every
        self.evaluate, self.on_eval, self.checkpoint = evaluate, on_eval, checkpoint
        self.progress = progress
        self.returns: deque[float] = deque(maxlen=100)
        self.errors: deque[float] = deque(maxlen=100)
        self._ep_return: np.ndarray | None = None
        self._next_eval = self._next_ckpt = 0
        self._parameters: list[torch.Tensor] = []
        self.bar: tqdm | None = None
        self.start_time = time.time()

    def _on_training_start(self) -> None:
        self._parameters = list(self.model.policy.parameters())  # checked for divergence; loads keep the objects
        n = self.num_timesteps
        self._next_eval = (n // self.eval_every + 1) * self.eval_every
        self._next_ckpt = (n // self.checkpoint_every + 1) * self.checkpoint_every
        self._ep_return = np.zeros(self.training_env.num_envs)
        self._ep_error = np.zeros(self.training_env.num_envs)
        self._ep_len = np.zeros(self.training_env.num_envs)
        self.bar = tqdm(total=self.total_steps, initial=n, unit="step", disable=not self.progress,
                        dynamic_ncols=True, desc="train")

    def _on_rollout_start(self) -> None:
        # runs after every gradient phase, before the actor drives the envs again
        if not parameters_finite(self._parameters):
            raise DivergenceError(f"non-finite network parameters at env step {self.num_timesteps}")

    def _on_step(self) -> bool:
        rewards, dones, errors, levels = step_arrays(self.locals)
        obs = self.locals.get("new_obs")
        if not np.all(np.isfinite(rewards)) or (obs is not None and not np.all(np.isfinite(_host(obs)))):
            raise DivergenceError(f"non-finite reward or observation at env step {self.num_timesteps}")
        self._ep_return += rewards
        if errors is not None:
            self._ep_error += errors
        self._ep_len += 1
        for i in np.flatnonzero(dones):
            self.returns.append(float(self._ep_return[i]))
            level = int(levels[i]) if levels is not None else -1
            if self.on_episode_end is not None and level >= 0:
                self.on_episode_end(level, float(self._ep_error[i] / self._ep_len[i]))
            self._ep_return[i] = self._ep_error[i] = self._ep_len[i] = 0.0
        if errors is not None:
            self.errors.append(float(np.mean(errors)))
        if self.bar is not None:
            self.bar.n = self.num_timesteps
            if self.n_calls % 20 == 0:
                self.bar.set_postfix(ret=f"{np.mean(self.returns):.1f}" if self.returns else "-",
                                     err=f"{np.mean(self.errors):.3f}m" if self.errors else "-", refresh=False)
                self.bar.refresh()
        if self.num_timesteps >= self._next_eval:
            self._next_eval += self.eval_every
            metrics = self._evaluate()
            if self.stop is not None and self.stop(metrics):
                self.stopped_early = True
                return False
        if self.num_timesteps >= self._next_ckpt:
            self._next_ckpt += self.checkpoint_every
            if self.num_timesteps < self.total_steps:
                self._checkpoint()
        return True

    def _evaluate(self) -> dict:
        if not parameters_finite(self._parameters):
            raise DivergenceError(f"non-finite network parameters at env step {self.num_timesteps}")
        m = self.evaluate()
        m["wall_time"] = time.time() - self.start_time
        if self.returns:
            m["train_return"] = float(np.mean(self.returns))
        for k, v in m.items():
            if isinstance(v, (int, float)) and math.isfinite(v):
                self.logger.record(f"eval/{k}", v)
        self.on_eval(self.num_timesteps, m)
        return m

    def _checkpoint(self) -> None:
        if not parameters_finite(self._parameters):
            raise DivergenceError(f"non-finite network parameters at env step {self.num_timesteps}")
        self.checkpoint(self.num_timesteps)

    def _on_training_end(self) -> None:
        if self.bar is not None:
            self.bar.close()


class ActorAverage(BaseCallback):
    """Exponential moving average of the actor's weights over about ``horizon`` env steps.

    The behaviour policy keeps learning; the averaged actor (``self.actor``, a copy of
    ``model.actor``) is the one to deploy: between evaluations a TD3/SAC actor's hover point
    wanders by centimetres with every batch of updates, and the average cancels that wander.
    Updated after every vectorized env step with rate ``num_envs / horizon``.
    """

    def __init__(self, horizon: int):
        super().__init__()
        if horizon <= 0:
            raise ValueError(f"ActorAverage horizon must be a positive number of env steps, got {horizon}")
        self.horizon = horizon
        self.actor: torch.nn.Module | None = None

    def attach(self, model) -> None:
        """Start averaging ``model.actor`` (a fresh copy unless one is already attached)."""
        if self.actor is None:
            self.actor = copy.deepcopy(model.actor).requires_grad_(False)

    def _on_training_start(self) -> None:
        self.attach(self.model)

    def update(self, actor: torch.nn.Module, env_steps: int) -> None:
        """Move the average toward ``actor`` for ``env_steps`` more env steps."""
        rate = min(1.0, env_steps / self.horizon)
        with torch.no_grad():
            torch._foreach_lerp_(list(self.actor.parameters()), list(actor.parameters()), rate)

    def _on_step(self) -> bool:
        self.update(self.model.actor, self.training_env.num_envs)
        return True
