"""Fly a policy in the batched quadrotor task and score it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from policies.base import Policy
from sims.envs import make_batched_task
from sims.envs.task import BatchedQuadrotorTask
from sims.quadrotor import ParamsBatch
from sims.quadrotor.params import QuadrotorParams


@dataclass
class Rollout:
    """A recorded batched flight.

    times: (T,) s; states: (T, B, 17); reference: (T, B, 3) world m; actions: (T, B, 4);
    crashed_at: (B,) index of the step at which the env terminated, -1 if it never did.
    Index 0 holds the initial state (actions[0] is the first action applied).
    """

    times: np.ndarray
    states: np.ndarray
    reference: np.ndarray
    actions: np.ndarray
    crashed_at: np.ndarray

    @property
    def position_error(self) -> np.ndarray:
        """(T, B) distance to the reference, m; inf after a crash."""
        err = np.linalg.norm(self.states[:, :, :3] - self.reference, axis=-1)
        T = len(self.times)
        for b in np.nonzero(self.crashed_at >= 0)[0]:
            err[self.crashed_at[b]:T, b] = np.inf
        return err

    def flight_rmse(self) -> np.ndarray:
        """(B,) root-mean-square distance to the reference over the second half of each flight, m;
        inf for flights that crashed."""
        half = self.position_error[len(self.times) // 2:]
        return np.sqrt((half ** 2).mean(axis=0))


@torch.no_grad()
def rollout(policy: Policy, task: BatchedQuadrotorTask, seconds: float, progress: bool = False) -> Rollout:
    """Reset ``task`` and fly ``policy`` for ``seconds`` without automatic resets.

    Environments that crash are frozen where they crashed and recorded in ``crashed_at``.
    """
    steps = int(round(seconds / task.dt))
    B = task.num_envs
    obs = task.reset()
    policy.reset()
    alive = torch.ones(B, dtype=torch.bool)
    crashed_at = np.full(B, -1)
    states, refs, actions = [task.state.clone()], [task.reference()[0].clone()], []
    for k in tqdm(range(steps), desc="rollout", disable=not progress, leave=False):
        obs = torch.where(alive[:, None], obs, torch.zeros_like(obs))
        action = torch.as_tensor(policy.act(obs), dtype=task.state.dtype)
        frozen = task.state.clone()
        result = task.step(action)
        newly = result.terminated & alive
        crashed_at[newly.numpy()] = k + 1
        alive &= ~result.terminated
        dead = ~alive
        if bool(dead.any()):
            task.sim.state[dead] = torch.where(newly[dead, None], task.sim.state[dead], frozen[dead])
        obs = result.obs
        states.append(task.state.clone())
        refs.append(task.reference()[0].clone())
        actions.append(action.clone())
    actions.append(torch.full_like(actions[-1], float("nan")) if actions else torch.zeros(B, 4))
    return Rollout(
        times=np.arange(steps + 1) * task.dt,
        states=torch.stack(states).numpy(),
        reference=torch.stack(refs).numpy(),
        actions=torch.stack(actions).numpy(),
        crashed_at=crashed_at,
    )


def flight_metrics(r: Rollout, success_radius: float = 0.10) -> dict[str, float]:
    """Scores of a rollout (errors in m, over all B envs; crashed envs count as infinite error).

    - ``final_median_position_error``: median distance to the reference at the last step.
    - ``rmse``: root-mean-square distance over the second half of the flight, non-crashed envs.
    - ``success_rate``: fraction of envs with final error < ``success_radius`` and no crash.
    """
    err = r.position_error
    final = err[-1]
    alive = r.crashed_at < 0
    half = err[len(err) // 2:, alive]
    return {
        "num_envs": int(err.shape[1]),
        "seconds": float(r.times[-1]),
        "final_median_position_error": float(np.median(final)),
        "final_mean_position_error": float(final[alive].mean()) if alive.any() else float("inf"),
        "final_p90_position_error": float(np.percentile(final, 90, method="nearest")),
        "rmse": float(np.sqrt((half ** 2).mean())) if alive.any() else float("inf"),
        "crashes": int((~alive).sum()),
        "success_rate": float(((final < success_radius) & alive).mean()),
    }


def make_fleet_task(task: dict | str, quads: list[QuadrotorParams], k: int, seed: int) -> BatchedQuadrotorTask:
    """A batched task with ``k`` envs per quadrotor, group-major (env b flies ``quads[b // k]``), seeded."""
    task_ = make_batched_task(task, quads[0], len(quads) * k)
    task_.sim.set_params(ParamsBatch.from_params([q for q in quads for _ in range(k)]))
    task_.seed(seed)
    return task_


def describe(m: dict) -> str:
    """One line for a log of an evaluation ``m`` (``flight_metrics``, or any dict with ``crashes`` and
    ``final_median_position_error`` in m): "median error 0.42 cm, 0 crashes, success 0.98"; "all 256 crashed"
    when no env survived, and "200 of 256 crashed (no median error)" when more than half did (the median is inf)."""
    crashes, n, median = int(m["crashes"]), m.get("num_envs"), float(m["final_median_position_error"])
    if n is not None and crashes >= int(n):
        return f"all {crashes} crashed"
    if not np.isfinite(median):
        return f"{crashes}{'' if n is None else f' of {n}'} crashed (no median error)"
    text = f"median error {100 * median:.2f} cm, {crashes} crash{'' if crashes == 1 else 'es'}"
    return text + (f", success {m['success_rate']:.2f}" if "success_rate" in m else "")
