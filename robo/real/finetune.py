"""Real-robot fine-tuning: an actor on the robot, an off-policy learner in another process (SERL-style).

The actor (this process) runs the policy on the robot through the safety layer (a ``RobotEnv``)
at the control rate, and never waits for the learner: it sends each transition on a queue and
picks up new actor weights when they arrive. The learner (``robo.real.learner``, SB3 SAC in a
spawned process) trains and checkpoints atomically. If the learner dies, the actor restarts it
from the last checkpoint and re-sends the transitions that came after it; if the actor dies,
running ``finetune`` again on the same folder resumes both from the last checkpoint.

What a learner action means is the ``ActionAdapter``'s business: ``ResidualAdapter`` adds a
scaled residual to a base policy (RAPTOR or any robo checkpoint). DSRL plugs in here: an adapter
that feeds the learner's action as the initial noise of a diffusion policy (``robo.steer``),
with the same learner and loop.

Episodes start with a reset (``FlyBack``: the base policy flies to the start point; or
``HumanPrompt``: a person puts the robot back), human interventions (a callback that may
override the action) are executed, flagged and kept as demos, and ``total_steps`` caps the
real steps over all runs of a folder.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
import torch

from hardware.drivers.base import RobotError
from policies.base import Policy
from robo.real.learner import LearnerConfig, build_sac, learner_main
from robo.real.robot_env import RobotEnv

Intervention = Callable[[np.ndarray, np.ndarray], "np.ndarray | None"]  # (obs (22,), action (4,)) -> override


class ActionAdapter(Protocol):
    """Maps a learner action u (4,) in [-1, 1] to a robot action, and a robot action back (interventions)."""

    def reset(self) -> None: ...

    def __call__(self, obs: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def inverse(self, base_action: np.ndarray, action: np.ndarray) -> np.ndarray: ...


class ResidualAdapter:
    """action = clip(base(obs) + scale * u, -1, 1); returns (action, base action)."""

    def __init__(self, base: Policy, scale: float = 0.2):
        if not scale > 0:
            raise ValueError(f"residual scale must be > 0, got {scale}")
        self.base, self.scale = base, float(scale)

    def reset(self) -> None:
        self.base.reset()

    def __call__(self, obs: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        base = np.asarray(self.base.act(obs[None].astype(np.float32))[0], dtype=np.float64)
        return np.clip(base + self.scale * u, -1.0, 1.0), base

    def inverse(self, base_action: np.ndarray, action: np.ndarray) -> np.ndarray:
        return np.clip((action - base_action) / self.scale, -1.0, 1.0)


class FlyBack:
    """Reset controller: ``policy`` flies the robot to ``start`` for ``steps`` ticks (a RobotEnv of its own
    over the same safety layer, so the safety limits hold during resets too). When the robot cannot
    be armed (after a crash or a tilt fault it lies outside the arming checks), before or after the
    fly-back, ``fallback`` (e.g. a ``HumanPrompt``) resets it; without one the arming error is raised
    by the next arming. ``fallbacks`` counts the calls."""

    def __init__(self, policy: Policy, start, steps: int = 200,
                 fallback: Callable[[RobotEnv], None] | None = None):
        self.policy, self.start, self.steps = policy, tuple(float(x) for x in start), int(steps)
        self.fallback = fallback
        self.fallbacks = 0

    @torch.no_grad()
    def __call__(self, env: RobotEnv) -> None:
        back = RobotEnv(env.safety, replace(env.config, hover_position=self.start, max_steps=self.steps))
        try:
            obs, _ = back.reset()
        except RobotError:
            if self.fallback is None:
                raise
            self._fall_back(env)
            obs, _ = back.reset()
        self.policy.reset()
        for _ in range(self.steps):
            obs, _, terminated, truncated, _ = back.step(self.policy.act(obs[None])[0])
            if terminated or truncated:
                break
        env.safety.clear_faults()  # as the next RobotEnv.reset does
        if env.safety.arming_problem() is not None:  # crashed, tilted: the person puts it back
            self._fall_back(env)

    def _fall_back(self, env: RobotEnv) -> None:
        if self.fallback is None:
            return  # nothing to do: the next arming check decides
        self.fallbacks += 1
        self.fallback(env)


class HumanPrompt:
    """Reset by a person: stops the motors, then calls ``prompt(message)`` (default ``input``) and waits."""

    def __init__(self, prompt: Callable[[str], object] = input):
        self.prompt = prompt

    def __call__(self, env: RobotEnv) -> None:
        env.safety.stop("reset by a human")
        self.prompt("put the robot at the start point, then press Enter")


@dataclass
class FinetuneConfig:
    """total_steps: cap on real steps (all episodes, all runs of the folder); residual_scale: size of the
    learner's correction; max_learner_restarts; learner: ``LearnerConfig`` fields."""

    total_steps: int = 2000
    residual_scale: float = 0.2
    max_learner_restarts: int = 5
    start_timeout: float = 600.0  # s for the first learner start (imports torch + SB3 in a new process)
    seed: int = 0
    learner: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {self.total_steps}")


class _Learner:
    """The learner process and its queues; restartable."""

    def __init__(self, directory: Path, config: LearnerConfig):
        self.directory, self.config = directory, config
        self.ctx = mp.get_context("spawn")
        self.restarts = -1

    def start(self, wait: float | None = None) -> int | None:
        """Start the process; with ``wait`` (s), block until it is ready and return the transitions it holds."""
        self.restarts += 1
        self.transitions, self.updates = self.ctx.Queue(), self.ctx.Queue()
        self.process = self.ctx.Process(target=learner_main, name="robo-learner", daemon=True,
                                        args=(str(self.directory), asdict(self.config), self.transitions,
                                              self.updates))
        self.process.start()
        if wait is None:
            return None
        msg = self._get(timeout=wait)
        if msg[0] != "ready":
            raise RuntimeError(f"learner sent {msg[0]!r} before 'ready'")
        return int(msg[1])

    def _get(self, timeout: float):
        try:
            return self.updates.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"the learner process (pid {self.process.pid}) did not answer in {timeout} s; "
                               f"see {self.directory}") from None

    def poll(self) -> list:
        out = []
        while True:
            try:
                out.append(self.updates.get_nowait())
            except queue.Empty:
                return out

    def kill(self) -> None:
        """End the process now (the actor failed): its last checkpoint stays; exit does not wait on its queues."""
        for q in (self.transitions, self.updates):
            q.cancel_join_thread()
        self.process.terminate()
        self.process.join(timeout=10.0)

    def stop(self, timeout: float, on_message: Callable[[tuple], None] | None = None) -> int:
        """Ask the learner to checkpoint and exit; returns the transitions it holds. Messages it sends
        meanwhile go to ``on_message``."""
        self.transitions.put(("stop",))
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.updates.get(timeout=1.0)
            except queue.Empty:
                if not self.process.is_alive():
                    self.kill()
                    raise RuntimeError(f"the learner process died while stopping; its last checkpoint is in "
                                       f"{self.directory}") from None
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"the learner process (pid {self.process.pid}) did not stop in {timeout} s; "
                                       f"its last checkpoint is in {self.directory}") from None
                continue
            if msg[0] == "stopped":
                self.process.join(timeout=10.0)
                return int(msg[1])
            if on_message is not None:
                on_message(msg)


@torch.no_grad()
def finetune(env: RobotEnv, adapter: ActionAdapter, directory: str | Path, config: FinetuneConfig | None = None,
             reset: Callable[[RobotEnv], None] | None = None, intervention: Intervention | None = None,
             on_step: Callable[[int, _Learner], None] | None = None) -> dict:
    """Fine-tune on ``env`` until ``config.total_steps`` real steps are in ``directory``; returns a summary."""
    c = config or FinetuneConfig()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lc = LearnerConfig(**{"seed": c.seed, **c.learner})
    torch.manual_seed(c.seed)
    learner = _Learner(directory, lc)
    step = learner.start(wait=c.start_timeout)  # transitions already in the folder's checkpoint (resuming) or 0
    try:
        summary = _run_actor(env, adapter, learner, step, c, reset, intervention, on_step)
    except BaseException:
        learner.kill()  # its last checkpoint stays; running again on the folder resumes from it
        raise
    return summary


def _run_actor(env: RobotEnv, adapter: ActionAdapter, learner: _Learner, step: int, c: FinetuneConfig, reset,
               intervention: Intervention | None, on_step) -> dict:
    actor = build_sac(learner.config).actor
    pending: dict[int, tuple] = {}
    summary = {"episodes": 0, "interventions": 0, "safety_faults": 0, "returns": [], "start_step": step,
               "gate": []}
    while step < c.total_steps:
        if reset is not None:
            reset(env)
        obs, _ = env.reset(seed=c.seed + summary["episodes"])
        adapter.reset()
        ret, done = 0.0, False
        while not done and step < c.total_steps:
            _sync(learner, actor, pending, c, summary)
            u = actor(torch.as_tensor(obs)[None], deterministic=False)[0].numpy().astype(np.float64)
            action, base = adapter(obs, u)
            override = intervention(obs, action) if intervention is not None else None
            if override is not None:
                action = np.clip(np.asarray(override, dtype=np.float64), -1.0, 1.0)
                u = adapter.inverse(base, action)
                summary["interventions"] += 1
            next_obs, reward, terminated, truncated, info = env.step(action)
            msg = ("t", step, obs, u.astype(np.float32), float(reward), next_obs, bool(terminated),
                   override is not None)
            pending[step] = msg
            learner.transitions.put(msg)
            summary["safety_faults"] += int(terminated)
            obs, ret, step, done = next_obs, ret + reward, step + 1, terminated or truncated
            if on_step is not None:
                on_step(step, learner)
        summary["episodes"] += 1
        summary["returns"].append(ret)
    env.safety.stop("fine-tuning done")
    _sync(learner, actor, pending, c, summary)
    summary.update(steps=step, held=learner.stop(c.start_timeout, lambda msg: _gate_check(msg, summary)),
                   learner_restarts=learner.restarts)
    return summary


def _sync(learner: _Learner, actor, pending: dict, c: FinetuneConfig, summary: dict) -> None:
    """New weights in; forget transitions a checkpoint holds; restart a dead learner and re-send
    everything after the last checkpoint it confirmed (it drops what it already holds); the twin
    gate's checks go to ``summary["gate"]`` as (transitions, score m, admitted)."""
    if not learner.process.is_alive():
        if learner.restarts >= c.max_learner_restarts:
            raise RuntimeError(f"the learner died {learner.restarts + 1} times; see its checkpoints in "
                               f"{learner.directory}")
        learner.start()  # no waiting: the robot keeps flying; the new learner skips what its checkpoint holds
        for i in sorted(pending):
            learner.transitions.put(pending[i])
    for msg in learner.poll():
        if msg[0] == "weights":
            actor.load_state_dict({k: torch.as_tensor(v) for k, v in msg[2].items()})
        elif msg[0] == "gate":
            _gate_check(msg, summary)
        elif msg[0] == "checkpoint":
            for i in [k for k in pending if k < msg[1]]:
                del pending[i]


def _gate_check(msg: tuple, summary: dict) -> None:
    if msg[0] == "gate":
        summary["gate"].append(tuple(msg[1:]))


def load_finetuned_actor(directory: str | Path, config: LearnerConfig | None = None):
    """The learner's actor from ``directory/latest`` (for evaluation: ``actor(obs, deterministic=True)``)."""
    from robo.real.learner import load_learner

    model, _, _ = load_learner(Path(directory), config or LearnerConfig())
    return model.actor.cpu()  # flown on the CPU, wherever it trained


@torch.no_grad()
def fly_episode(env: RobotEnv, adapter: ActionAdapter, actor=None, seed: int = 0) -> dict:
    """One deterministic episode (``actor`` None = the base policy alone): mean and final position error
    (measured, m), steps, safety faults."""
    obs, info = env.reset(seed=seed)
    adapter.reset()
    errors, faults = [info["position_error"]], 0
    while True:
        u = np.zeros(4) if actor is None else actor(torch.as_tensor(obs)[None], deterministic=True)[0].numpy()
        obs, _, terminated, truncated, info = env.step(adapter(obs, u.astype(np.float64))[0])
        errors.append(info["position_error"])
        faults += int(terminated)
        if terminated or truncated:
            break
    e = np.asarray(errors)
    return {"mean_error": float(e.mean()), "final_error": float(e[-max(1, len(e) // 10):].mean()),
            "steps": len(e) - 1, "faults": faults, "pid": os.getpid()}
