"""Pre-train the real-robot fine-tuning learner in the calibrated twin (Real-is-Sim, then SERL).

``robo.real.finetune`` learns a residual on the robot with an SB3 SAC learner. From scratch, that
learner explores on the hardware: early on its random residual tilts the robot into safety faults.
With the twin's identified parameters (``DigitalTwin.calibrated_params()``) the same residual can
first be learned in robo's batched simulator, where steps are cheap and faults harmless; the
learner folder it writes (actor, critic and the simulated transitions, as the prior data of a
``MixedReplayBuffer``)
is what ``finetune`` then resumes from on the robot, to close the rest of the gap (latency,
sensor noise, what the twin does not model). Real steps counted by ``finetune`` start at 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from gymnasium.vector import VectorEnv
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback

from hardware.safety import SafetyConfig
from policies.base import Policy
from robo.real.learner import (LATEST, LearnerConfig, MixedReplayBuffer, build_sac, load_snapshots,
                               save_learner, save_snapshot)
from robo.real.robot_env import RobotEnv
from robo.rl.sb3_vec_env import SB3VecEnvAdapter
from robo.run_dir import seed_run
from robo.twin.runner import TwinFlight, fly_with_twin
from robo.twin.select import best_in_twin
from sims.envs import QuadrotorTaskConfig, QuadrotorVectorEnv, make_task_config
from sims.quadrotor import QuadrotorParams
from sims.twin import DigitalTwin, TwinConfig


class Dithered:
    """``policy`` plus Gaussian action noise of std ``noise`` (excitation for identification), clipped."""

    def __init__(self, policy: Policy, noise: float = 0.05, seed: int = 0):
        self.policy, self.noise = policy, float(noise)
        self.rng = np.random.default_rng(seed)

    def reset(self, mask=None):
        self.policy.reset(mask)

    def act(self, obs):
        a = torch.as_tensor(self.policy.act(torch.as_tensor(obs, dtype=torch.float32)))
        a = (a + torch.as_tensor(self.rng.normal(0.0, self.noise, tuple(a.shape)), dtype=a.dtype)).clamp(-1, 1)
        return a.numpy() if isinstance(obs, np.ndarray) else a


def identify(env: RobotEnv, policy: Policy, nominal: str | dict, steps: int = 1000, noise: float = 0.05,
             seed: int = 0) -> tuple[DigitalTwin, TwinFlight]:
    """Fly ``policy`` (dithered by ``noise``) twin-in-the-loop for one episode of ``steps`` ticks on the
    robot; returns the twin, whose ``calibrated_params()`` hold the identified mass and thrust scale,
    and the flight's record."""
    twin = DigitalTwin(TwinConfig(robot=nominal))
    env = RobotEnv(env.safety, replace(env.config, max_steps=int(steps)))
    return twin, fly_with_twin(env, twin, Dithered(policy, noise, seed), "twin_in_the_loop", steps)


class ResidualVecEnv(VectorEnv):
    """``venv`` whose (N, 4) actions u in [-1, 1] become ``clip(base(obs) + scale * u, -1, 1)``
    (``robo.real.finetune.ResidualAdapter``, batched). The base is reset where episodes end."""

    def __init__(self, venv: VectorEnv, base: Policy, scale: float):
        if not scale > 0:
            raise ValueError(f"residual scale must be > 0, got {scale}")
        self.venv, self.base, self.scale = venv, base, float(scale)
        self.num_envs = venv.num_envs
        self.metadata = venv.metadata
        self.single_observation_space, self.observation_space = venv.single_observation_space, venv.observation_space
        self.single_action_space, self.action_space = venv.single_action_space, venv.action_space
        self._obs: np.ndarray | None = None

    def reset(self, *, seed=None, options=None):
        self._obs, info = self.venv.reset(seed=seed, options=options)
        self.base.reset()
        return self._obs, info

    @torch.no_grad()
    def step(self, actions):
        u = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, -1)
        base = np.asarray(torch.as_tensor(self.base.act(torch.as_tensor(self._obs))), dtype=np.float32)
        obs, reward, terminated, truncated, info = self.venv.step(np.clip(base + self.scale * u, -1.0, 1.0))
        done = terminated | truncated
        if done.any():
            self.base.reset(torch.as_tensor(done))
        self._obs = obs
        return obs, reward, terminated, truncated, info

    def close(self, **kwargs):
        self.venv.close()


@dataclass
class TwinPretrainConfig:
    """steps: simulated env steps; num_envs: batched quadrotors; gradient_steps: SAC updates per batched
    step; learning_rate (the learner's other settings are the ``LearnerConfig``'s); task: the sim task
    (its reward is the ``RobotEnv``'s default, the same ``quadrotor_reward``); residual_scale: as
    ``FinetuneConfig``'s. SAC's quality swings between checkpoints: with ``select_start`` (world FLU m,
    the robot's episode start; ``select_hover`` its reference) every snapshot is scored in the twin
    (``robo.twin.select``) and the learner continues from the best actor."""

    steps: int = 50_000
    num_envs: int = 16
    gradient_steps: int = 4  # per batched step of num_envs transitions
    learning_rate: float | None = None  # None: the LearnerConfig's
    snapshot_every: int = 10_000  # sim steps between actor snapshots (snapshots/sim-<steps>)
    select_start: tuple[float, float, float] | None = None  # score the snapshots from here in the twin, keep the best
    select_hover: tuple[float, float, float] = (0.0, 0.0, 1.0)
    task: str | dict = "hover"
    residual_scale: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.num_envs < 1:
            raise ValueError(f"steps and num_envs must be >= 1, got {self.steps}, {self.num_envs}")


def single_env_buffer(buffer, n_envs: int):
    """The first ``pos`` rows of an SB3 ``ReplayBuffer`` of ``n_envs`` envs as a one-env buffer (the real
    learner adds one transition at a time). Returns a new buffer of the same capacity in transitions."""
    n = (buffer.buffer_size if buffer.full else buffer.pos) * n_envs
    out = ReplayBuffer(max(buffer.buffer_size * n_envs, n + 1), buffer.observation_space, buffer.action_space,
                       device=buffer.device, n_envs=1)
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        src = getattr(buffer, name)
        rows = src if buffer.full else src[:buffer.pos]
        getattr(out, name)[:n] = rows.reshape(n, 1, *src.shape[2:])
    out.pos, out.full = n, False
    return out


def safe_task(task: str | dict, safety: SafetyConfig) -> QuadrotorTaskConfig:
    """``task`` whose episodes end where the safety layer would fault on the robot (tilt, body rate)."""
    t = make_task_config(task)
    term = replace(t.termination, tilt_deg=min(t.termination.tilt_deg, safety.max_tilt_deg),
                   angular_velocity=min(t.termination.angular_velocity, safety.max_body_rate))
    return replace(t, termination=term)


def pretrain_in_twin(base: Policy, params: QuadrotorParams | str | dict, directory: str | Path,
                     config: TwinPretrainConfig | None = None, learner: LearnerConfig | None = None,
                     safety: SafetyConfig | None = None) -> dict:
    """Learn the residual on ``base`` in a batched sim with ``params`` (the calibrated twin) and write
    the learner folder ``finetune`` resumes from. With ``safety`` (the robot's limits) a simulated
    episode ends, with the termination penalty, where the robot's safety layer would fault.
    Returns {steps, wall_s, transitions} (+ selected, scores with ``config.select_start``)."""
    c, lc = config or TwinPretrainConfig(), learner or LearnerConfig()
    if (Path(directory) / LATEST).exists():
        raise FileExistsError(f"{directory} already holds a learner; pre-train into a new folder")
    seed_run(c.seed)
    task = safe_task(c.task, safety) if safety is not None else make_task_config(c.task)
    venv = QuadrotorVectorEnv(c.num_envs, task, robot=params)
    env = SB3VecEnvAdapter(ResidualVecEnv(venv, base, c.residual_scale))
    env.seed(c.seed)
    lr = lc.learning_rate if c.learning_rate is None else c.learning_rate
    model = build_sac(replace(lc, gradient_steps=c.gradient_steps, learning_rate=lr), env=env)
    t0 = time.monotonic()
    model.learn(total_timesteps=c.steps, progress_bar=False, callback=_Snapshots(Path(directory), c.snapshot_every))
    out = {"steps": int(model.num_timesteps), "wall_s": time.monotonic() - t0}
    if c.select_start is not None:
        actors = {k: v for k, v in load_snapshots(Path(directory), lc).items() if k.startswith("sim-")}
        best, scores = best_in_twin(base, actors, params, c.select_start, c.residual_scale, hover=c.select_hover)
        model.actor.load_state_dict(actors[best].state_dict())
        out.update(selected=best, scores=scores)
    prior = single_env_buffer(model.replay_buffer, c.num_envs)
    model.replay_buffer = MixedReplayBuffer(1_000_000, prior.observation_space, prior.action_space, prior=prior,
                                            prior_ratio=lc.prior_ratio, device=model.device)
    model.n_envs = 1
    save_learner(Path(directory), model, 0, [], lc)
    return {**out, "transitions": int(prior.size())}


class _Snapshots(BaseCallback):
    """Save the actor every ``every`` env steps and at the end as ``snapshots/sim-<steps>``."""

    def __init__(self, directory: Path, every: int):
        super().__init__()
        self.directory, self.every, self.saved = directory, int(every), 0
        self.last = -1  # env step of the newest snapshot

    def _save(self) -> None:
        save_snapshot(self.directory, f"sim-{self.num_timesteps:09d}", self.model)
        self.last = self.num_timesteps

    def _on_step(self) -> bool:
        if self.every > 0 and self.num_timesteps // self.every > self.saved:
            self.saved = self.num_timesteps // self.every
            self._save()
        return True

    def _on_training_end(self) -> None:
        if self.last != self.num_timesteps:  # the final actor, unless just saved
            self._save()
