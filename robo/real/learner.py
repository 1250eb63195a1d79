"""The learner process of real-robot fine-tuning: off-policy SAC (stable-baselines3) fed by the actor.

Runs in its own process (``multiprocessing``, spawn): it receives transitions on ``transitions``,
adds them to SAC's replay buffer, takes gradient steps, sends the actor's weights back on
``updates`` every ``sync_every`` transitions, and checkpoints atomically (``robo.run_dir.checkpoint``:
``sb3.zip``, ``replay_buffer.pkl``, ``demos.npz`` (the transitions a human intervened on) and
``state.json`` with the number of transitions it holds) every ``checkpoint_every`` transitions.
Killed at any moment, it restarts from the last checkpoint; the actor re-sends what came after.

DSRL hook: the learner only sees (obs, learner action, reward); what a learner action means on
the robot is the actor's ``ActionAdapter`` (residual on a base policy here; DSRL's latent-noise
steering of a diffusion policy plugs in there, with the same learner).
"""

from __future__ import annotations

import copy
import os
import queue
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from policies.checkpoint import remove_unfinished
from robo.device import sb3_device
from robo.run_dir import LATEST, checkpoint, read_state, seed_run


@dataclass
class LearnerConfig:
    """SAC settings (SB3 ``SAC`` keyword arguments where named alike); sync_every / checkpoint_every /
    snapshot_every in transitions; log_std_init: initial log std of the learner's actions (small:
    gentle exploration). Snapshots (``snapshots/<n>.safetensors``, the actor alone) are what
    ``robo.twin.select`` scores in the calibrated twin to pick the actor to deploy. prior_ratio: with
    prior data in the replay buffer (``MixedReplayBuffer``, e.g. from ``robo.twin.pretrain``), the
    share of every batch drawn from it (RLPD / SERL use 0.5); None samples both in proportion to size.
    twin_gate: with it, the actor's weights go to the robot only when the calibrated twin admits them
    (``TwinGate``: scored every ``twin_gate.every`` transitions, default ``snapshot_every`` or 250, and
    within ``tolerance`` of the best admitted); each check is reported as ``("gate", n, score, admitted)``.
    The bar is checkpointed: a restarted learner's actor must pass it too (until one does, the robot flies
    the last admitted actor, or the base policy in a new actor process). Without a bar yet, the first
    actor sets it."""

    learning_rate: float = 1e-3
    batch_size: int = 128
    gamma: float = 0.98
    tau: float = 0.01
    learning_starts: int = 200
    gradient_steps: int = 1
    net_arch: tuple[int, ...] = (64, 64)
    ent_coef: str | float = "auto_0.01"
    log_std_init: float = -1.5
    sync_every: int = 50
    checkpoint_every: int = 200
    snapshot_every: int = 0  # keep the actor every this many transitions in snapshots/ (0: never)
    prior_ratio: float | None = None  # share of each batch from prior data (e.g. the twin's); None: by size
    twin_gate: dict | None = None  # robo.twin.select.TwinGate.from_config: only actors the twin admits fly
    seed: int = 0
    obs_dim: int = 22
    action_dim: int = 4
    device: str = "cpu"  # robo.device: where SAC trains (auto | cpu | cuda | cuda:N); snapshots load on the CPU

    def __post_init__(self) -> None:
        for k in ("batch_size", "sync_every", "checkpoint_every", "obs_dim", "action_dim"):
            if int(getattr(self, k)) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        if self.learning_starts < 0 or self.gradient_steps < 0:
            raise ValueError("learning_starts and gradient_steps must be >= 0")
        if self.prior_ratio is not None and not 0.0 <= self.prior_ratio <= 1.0:
            raise ValueError(f"prior_ratio must be in [0, 1] or null, got {self.prior_ratio}")


class MixedReplayBuffer(ReplayBuffer):
    """SB3's ``ReplayBuffer`` for the robot's transitions plus a fixed ``prior`` buffer (e.g. the twin's
    simulated transitions): each batch takes ``prior_ratio`` of its rows from the prior (RLPD's
    symmetric sampling), or, with ``prior_ratio=None``, rows in proportion to the two sizes."""

    def __init__(self, buffer_size: int, observation_space, action_space, prior: ReplayBuffer | None = None,
                 prior_ratio: float | None = None, **kwargs):
        super().__init__(buffer_size, observation_space, action_space, **kwargs)
        self.prior, self.prior_ratio = prior, prior_ratio

    def sample(self, batch_size: int, env=None) -> ReplayBufferSamples:
        n_prior = 0 if self.prior is None else self.prior.size()
        if n_prior == 0:
            return super().sample(batch_size, env)
        if self.size() == 0:
            return self.prior.sample(batch_size, env)
        share = n_prior / (n_prior + self.size()) if self.prior_ratio is None else self.prior_ratio
        k = int(round(batch_size * share))
        parts = [b.sample(n, env) for b, n in ((self.prior, k), (super(), batch_size - k)) if n > 0]
        return ReplayBufferSamples(*(None if f[0] is None else torch.cat(f) for f in zip(*parts)))  # e.g. discounts


class SpacesEnv(gym.Env):
    """Carries the spaces SB3 needs; never stepped (transitions come from the robot)."""

    def __init__(self, obs_dim: int, action_dim: int):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)

    def reset(self, *, seed=None, options=None):  # pragma: no cover - never called by the learner
        raise RuntimeError("SpacesEnv only carries spaces; the robot produces the transitions")

    def step(self, action):  # pragma: no cover
        raise RuntimeError("SpacesEnv only carries spaces; the robot produces the transitions")


def build_sac(c: LearnerConfig, env=None):
    """A fresh SAC whose actor starts at zero mean action (a residual of 0 = the base policy). ``env``:
    an env to learn in (e.g. the twin, ``robo.twin.pretrain``); default: spaces only, for the robot."""
    from stable_baselines3 import SAC

    env = env if env is not None else SpacesEnv(c.obs_dim, c.action_dim)
    model = SAC("MlpPolicy", env, learning_rate=c.learning_rate,
                batch_size=c.batch_size, gamma=c.gamma, tau=c.tau, learning_starts=c.learning_starts,
                ent_coef=c.ent_coef, seed=c.seed, device=sb3_device(c.device), buffer_size=1_000_000,
                policy_kwargs={"net_arch": list(c.net_arch)})
    with torch.no_grad():
        model.actor.mu.weight.zero_()
        model.actor.mu.bias.zero_()
        model.actor.log_std.weight.zero_()
        model.actor.log_std.bias.fill_(c.log_std_init)
    return model


def actor_weights(model) -> dict[str, np.ndarray]:
    """The actor's weights as numpy arrays (plain pickles: torch tensors on a multiprocessing queue are
    shared through the sender's file descriptors, which die with a killed learner)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.actor.state_dict().items()}


SNAPSHOTS = "snapshots"


def save_snapshot(directory: Path, name: str, model) -> Path:
    """The actor's weights as ``directory/snapshots/<name>.safetensors`` (written atomically)."""
    from safetensors.torch import save_file

    path = Path(directory) / SNAPSHOTS / f"{name}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.detach().cpu().contiguous() for k, v in model.actor.state_dict().items()}, tmp)
    os.replace(tmp, path)
    return path


def load_snapshots(directory: Path, c: LearnerConfig) -> dict:
    """{name: actor} for every snapshot in ``directory/snapshots`` (sorted by name)."""
    from safetensors.torch import load_file

    paths = sorted((Path(directory) / SNAPSHOTS).glob("*.safetensors"))
    template = build_sac(replace(c, device="cpu")).actor if paths else None  # flown in the twin, on the CPU
    out = {}
    for path in paths:
        actor = copy.deepcopy(template)
        actor.load_state_dict(load_file(path))
        out[path.stem] = actor.eval()
    return out


def load_learner(directory: Path, c: LearnerConfig):
    """(model, transitions held, demos list) from ``directory/latest``, or a fresh model."""
    from stable_baselines3 import SAC

    latest = Path(directory) / LATEST
    remove_unfinished(latest)  # a checkpoint a killed learner never finished
    state = read_state(latest)
    if state is None:
        return build_sac(c), 0, []
    model = SAC.load(latest / "sb3.zip", env=SpacesEnv(c.obs_dim, c.action_dim), device=sb3_device(c.device))
    model.learning_rate = c.learning_rate  # this config's rate from here on (e.g. lower on the robot than in the twin)
    model._setup_lr_schedule()
    model.load_replay_buffer(latest / "replay_buffer.pkl")
    demos = np.load(latest / "demos.npz")["index"].tolist() if (latest / "demos.npz").exists() else []
    return model, int(state["transitions"]), demos


def save_learner(directory: Path, model, transitions: int, demos: list, c: LearnerConfig,
                 gate_best: float | None = None) -> Path:
    """Checkpoint atomically; ``gate_best``: the twin gate's bar (the best admitted score), kept so
    that a restarted learner holds back an actor the gate would have rejected."""
    state = {"transitions": transitions, "config": asdict(c)}
    if gate_best is not None and np.isfinite(gate_best):
        state["gate_best"] = float(gate_best)
    with checkpoint(Path(directory) / LATEST, state=state) as tmp:
        model.save(tmp / "sb3.zip")
        model.save_replay_buffer(tmp / "replay_buffer.pkl")
        np.savez(tmp / "demos.npz", index=np.asarray(demos, dtype=np.int64))
    return Path(directory) / LATEST


def learner_main(directory: str, config: dict, transitions: "queue.Queue", updates: "queue.Queue") -> None:
    """Process entry point. Messages in: ``("t", index, obs, action, reward, next_obs, done, intervened)``,
    ``("stop",)``. Out: ``("ready", n)`` (n transitions held after resuming), ``("weights", n, state_dict)``,
    ``("checkpoint", n)``, ``("stopped", n)``, with a twin gate ``("gate", n, score, admitted)``."""
    from stable_baselines3.common.logger import configure

    c = LearnerConfig(**config)
    seed_run(c.seed, threads=1)
    model, n, demos = load_learner(Path(directory), c)
    model.set_logger(configure(None, []))
    if isinstance(model.replay_buffer, MixedReplayBuffer):
        model.replay_buffer.prior_ratio = c.prior_ratio  # this config's share
    model._current_progress_remaining = 1.0
    gate, gate_every = _gate(c, Path(directory))
    first_check = gate(model.actor) if gate is not None else None  # a fresh gate: sets the bar
    updates.put(("ready", n))
    if first_check is not None:
        updates.put(("gate", n, *first_check))
    if first_check is None or first_check[1]:  # held back: the actor keeps what it flies (or the base policy)
        updates.put(("weights", n, actor_weights(model)))

    def save() -> None:
        save_learner(Path(directory), model, n, demos, c, gate.best if gate else None)

    parent = os.getppid()
    while True:
        try:
            msg = transitions.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:  # the actor died: keep what we have and leave
                save()
                return
            continue
        if msg[0] == "stop":
            save()
            updates.put(("stopped", n))
            return
        _, index, obs, action, reward, next_obs, done, intervened = msg
        if index != n:  # already held (re-sent after a restart) or a gap: skip
            continue
        model.replay_buffer.add(obs[None], next_obs[None], action[None], np.array([reward]), np.array([done]),
                                [{}])
        if intervened:
            demos.append(n)
        n += 1
        model.num_timesteps = n
        if n > c.learning_starts and c.gradient_steps > 0:
            model.train(gradient_steps=c.gradient_steps, batch_size=c.batch_size)
        if gate is None and n % c.sync_every == 0:
            updates.put(("weights", n, actor_weights(model)))
        if gate is not None and n % gate_every == 0:
            score, admitted = gate(model.actor)
            updates.put(("gate", n, score, admitted))
            if admitted:
                updates.put(("weights", n, actor_weights(model)))
        if c.snapshot_every and n % c.snapshot_every == 0:
            save_snapshot(Path(directory), f"{n:09d}", model)
        if n % c.checkpoint_every == 0:
            save()
            updates.put(("checkpoint", n))


def _gate(c: LearnerConfig, directory: Path):
    """(TwinGate or None, transitions between checks) from ``c.twin_gate``, with the bar a previous
    learner of ``directory`` checkpointed."""
    if not c.twin_gate:
        return None, 0
    from robo.twin.select import TwinGate

    every = int(c.twin_gate.get("every") or c.snapshot_every or 250)
    if every < 1:
        raise ValueError(f"twin_gate.every must be >= 1, got {every}")
    gate = TwinGate.from_config(dict(c.twin_gate))
    state = read_state(directory / LATEST)
    if state is not None:
        gate.best = float(state.get("gate_best", np.inf))
    return gate, every
