"""Fly a policy in the batched quadrotor task and score it."""

from __future__ import annotations

import copy
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
from tqdm import tqdm

from policies.base import Policy
from policies.foundation import FoundationPolicy
from sims.envs import OBS_SLICES, make_batched_task
from sims.envs.task import BatchedQuadrotorTask
from sims.quadrotor import ParamsBatch
from sims.quadrotor.params import QuadrotorParams

log = logging.getLogger(__name__)


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


def previous_action_convention(policy: Policy) -> str:
    """The previous-action observation ``policy`` expects (``sims.envs.config.QuadrotorTaskConfig.previous_action``):
    ``raw_motor_state`` for RAPTOR-compatible policies (``FoundationPolicy``: RAPTOR's released GRU and robo's
    foundation GRUs, which imitate it), as RLtools l2f fed RAPTOR in training; ``clipped_hover`` for the rest
    (robo's SAC/TD3/PPO actors and imitation policies, trained in robo's tasks); an export's own, from its
    deployment manifest (``hardware.export.runtime.ExportedPolicy.manifest``), where it says."""
    manifest = getattr(policy, "manifest", None)
    if manifest is not None and manifest.previous_action is not None:
        return manifest.previous_action
    return "raw_motor_state" if isinstance(policy, FoundationPolicy) else "clipped_hover"


def resolve_previous_action(setting: str, policy: Policy) -> str:
    """A task's or robot env's ``previous_action`` setting for a flight of ``policy``: ``auto`` becomes the policy's
    own (``previous_action_convention``); ``clipped_hover`` and ``raw_motor_state`` stay as they are."""
    return previous_action_convention(policy) if setting == "auto" else setting


@contextmanager
def previous_action_for(policy: Policy, env) -> Iterator[str]:
    """While inside, ``env`` (a ``BatchedQuadrotorTask`` or a ``robo.real.RobotEnv``) reports the previous action the
    way ``policy`` expects when its config says ``previous_action: auto`` (an explicit setting is kept); its own mode
    comes back afterwards. Yields the mode flown. Reset ``env`` inside, so the first observation follows it."""
    before = env.previous_action_mode
    env.previous_action_mode = resolve_previous_action(env.config.previous_action, policy)
    try:
        yield env.previous_action_mode
    finally:
        env.previous_action_mode = before


def flown_policy(name: str, previous_action: str = "auto", path: str | None = None) -> Policy:
    """``robo.factory.policy_by_name(name)`` (``raptor``, ``robo_foundation`` or a robo checkpoint folder) as a flight
    with the ``previous_action`` setting flies it, as ``robo eval`` does: RAPTOR's released policy gives its raw,
    unclipped output where the flight feeds it L2F's convention (``auto``, which resolves to ``raw_motor_state`` for
    it, or ``raw_motor_state``), the output L2F fed back to it in training; under ``clipped_hover`` it clips, as
    ``load_raptor`` does by default. The sim's step or the robot's safety layer clips the command it applies either
    way: only the observation's previous action differs. Checkpoints, robo's foundation policy included, load as
    saved. ``path``: RAPTOR's HDF5 checkpoint (None: the released one)."""
    from policies.foundation import load_raptor
    from robo.factory import policy_by_name
    from sims.envs.config import check_previous_action

    check_previous_action(previous_action)
    if name == "raptor":
        return load_raptor(path, clip_actions=previous_action == "clipped_hover")
    return policy_by_name(name)


def clipped_hover_observations(obs: np.ndarray, hover_action: np.ndarray, action_history: int = 0) -> np.ndarray:
    """The observations ``clipped_hover`` reports for a flight flown under ``raw_motor_state``.

    obs: (T, B, D) float32, one flight from a reset at t = 0 with no reset during it; hover_action: (B,) each env's
    hover command in [-1, 1]; action_history: the task's. The previous action (floats 18:22) and the
    ``action_history`` older ones after it (4 floats each) become the commands the steps applied (the raw ones
    clipped to [-1, 1]), and the entries from before the first step (the reset's motor states) the hover command;
    the rest is the same under both conventions. Returns a new (T, B, D) array."""
    out = np.array(obs, copy=True)
    start = OBS_SLICES["previous_action"].start
    if out.ndim != 3 or out.shape[-1] < start + 4 * (action_history + 1):
        raise ValueError(f"obs has shape {out.shape}, expected (T, B, >= {start + 4 * (action_history + 1)})")
    hover = np.asarray(hover_action, dtype=out.dtype).reshape(1, -1, 1)
    for k in range(action_history + 1):  # slot k holds the action of step t - 1 - k: the reset's for t <= k
        cols = slice(start + 4 * k, start + 4 * (k + 1))
        out[:, :, cols] = np.clip(out[:, :, cols], -1.0, 1.0)
        out[:k + 1, :, cols] = hover
    return out


@torch.no_grad()
def rollout(policy: Policy, task: BatchedQuadrotorTask, seconds: float, progress: bool = False) -> Rollout:
    """Reset ``task`` and fly ``policy`` for ``seconds`` without automatic resets.

    Environments that crash are frozen where they crashed and recorded in ``crashed_at``. The flight stays on
    the task's device (``task.device``; the policy's actions are moved there) and is copied to the host once,
    at the end. A task with ``previous_action: auto`` reports the previous action the way ``policy`` expects
    (``previous_action_for``: RAPTOR's and L2F's ``raw_motor_state`` for RAPTOR-compatible policies).
    """
    with previous_action_for(policy, task):
        return _rollout(policy, task, seconds, progress)


def _rollout(policy: Policy, task: BatchedQuadrotorTask, seconds: float, progress: bool) -> Rollout:
    steps = int(round(seconds / task.dt))
    B, device = task.num_envs, task.device
    obs = task.reset()
    policy.reset()
    alive = torch.ones(B, dtype=torch.bool, device=device)
    crashed_at = torch.full((B,), -1, dtype=torch.long, device=device)
    states, refs, actions = [task.state.clone()], [task.reference()[0].clone()], []
    for k in tqdm(range(steps), desc="rollout", disable=not progress, leave=False):
        obs = torch.where(alive[:, None], obs, torch.zeros_like(obs))
        action = torch.as_tensor(policy.act(obs), dtype=task.state.dtype, device=device)
        frozen = task.state.clone()
        result = task.step(action)
        newly = result.terminated & alive
        crashed_at = torch.where(newly, k + 1, crashed_at)
        alive &= ~result.terminated
        # envs that crashed earlier stay where they crashed; those crashing now keep their crash state
        task.sim.state = torch.where((~alive & ~newly)[:, None], frozen, task.sim.state)
        obs = result.obs
        states.append(task.state.clone())
        refs.append(task.reference()[0].clone())
        actions.append(action.clone())
    nan_or_zero = torch.full_like(actions[-1], float("nan")) if actions else torch.zeros(B, 4, device=device)
    actions.append(nan_or_zero)
    return Rollout(
        times=np.arange(steps + 1) * task.dt,
        states=torch.stack(states).cpu().numpy(),
        reference=torch.stack(refs).cpu().numpy(),
        actions=torch.stack(actions).cpu().numpy(),
        crashed_at=crashed_at.cpu().numpy(),
    )


def flight_device(spec: str | torch.device | None, policy: Policy, task_sim: dict) -> torch.device:
    """The device ``robo eval`` flies on: ``spec`` resolved (``robo.device``), or the CPU where the flight cannot
    run there: the C step backend (``sim.step_backend=c``) is CPU-only, and a policy flies on the device only when
    its ``act`` of a device tensor answers on that device once its weights are moved there (``move_policy``, tried
    on a copy; robo's MLP and foundation/RAPTOR policies do). ``policy`` is moved to the returned device."""
    from robo.device import move_policy, resolve_device

    device = resolve_device(spec)
    if device.type == "cpu":
        return device
    if task_sim.get("step_backend", "torch") == "c":  # the compiled (torch.compile) step runs on any device
        log.warning("device=%s: sim.step_backend=%s runs on the CPU; flying there", device, task_sim["step_backend"])
        return torch.device("cpu")
    try:  # on a copy, so that a policy that cannot fly there is left as it was
        probe = move_policy(copy.deepcopy(policy), device).act(torch.zeros(1, policy.obs_dim, device=device))
        ok = isinstance(probe, torch.Tensor) and probe.device.type == device.type
    except (AttributeError, RuntimeError, TypeError, ValueError) as e:
        ok = False
        log.debug("probe flight on %s failed: %s", device, e)
    if not ok:
        log.warning("device=%s: %s does not act on %s tensors; flying on the CPU", device, type(policy).__name__,
                    device.type)
        return torch.device("cpu")
    move_policy(policy, device)
    return device


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
    task_.sim.set_params(ParamsBatch.from_params([q for q in quads for _ in range(k)], device=task_.device))
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
