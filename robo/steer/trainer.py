"""SAC over a chunk wrapper (DSRL, residual RL or plain actions), or DSRL-NA, with an env-step budget.

Run folder: ``config.yaml``, ``train.log``, TensorBoard events, ``checkpoints/latest``
(``sb3.zip`` + ``replay_buffer.pkl``, or ``dsrl_na.pt`` for DSRL-NA; ``state.json`` and, for
latent steering, ``policy/``: the steered policy as one robo checkpoint) and, for latent steering,
``checkpoints/best/policy``: the deployed policy. During training it holds the steered policy at its
best evaluation; at the end the deploy gate (``robo/steer/gate.py``, config ``deploy``) scores that one,
the final one and the base on fresh validation episodes and keeps a steered one only if it beats the
base by a confidence bound, else the base itself (``state.json``: the decision). ``train(resume=True)``
continues from ``latest``.

Devices (``device``): SAC's networks train there, and the chunk envs decode SAC's noise through a copy of the base
on it (``steering_decoder``; the env itself, MuJoCo or gym, stays on the CPU, crossed once per decision). The base
that the steered policy holds stays on the CPU: checkpoints, the deploy gate and its evaluations use it there.
DSRL-NA's networks run on the CPU, and so does its base.
"""

from __future__ import annotations

import copy
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv
from tqdm import tqdm

from policies.chunked import ChunkedPolicy
from policies.mlp import MLPActor
from policies.steered import GaussianNoiseActor, SteeredConfig, SteeredPolicy
from robo.rl.asymmetric import export_actor
from robo.rl.callbacks import DivergenceError, parameters_finite
from policies.registry import load_policy
from robo.device import sb3_device
from robo.imitation.evaluate import evaluate_chunked_policy
from robo.run_dir import BEST, LATEST, checkpoint, read_state, write_checkpoint

from .critics import LayerNormCriticSACPolicy
from .dsrl_na import DSRLNA, DSRLNAConfig
from .gate import Decision, gate
from .envs import ActionChunkEnv, ChunkEnv, LatentNoiseEnv, ResidualChunkEnv, steering_decoder

log = logging.getLogger(__name__)
NA_STATE = "dsrl_na.pt"
MODES = ("latent", "residual", "action")
WARMUPS = ("uniform", "base")  # warm-up decisions: uniform in the action box, or the base policy's noise
ACTIVATIONS = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}
DEPLOY_DEFAULTS = {"gate": True, "episodes": 200, "seed": None, "confidence": 0.95, "margin": 0.0}  # configs/steer.yaml


def make_chunk_env(mode: str, env: gym.Env, base: ChunkedPolicy | None, a: dict,
                   device: str | torch.device = "cpu") -> ChunkEnv:
    """``a``: the algo config (noise_bound, residual_scale, n_action_steps, reward, reward_offset,
    max_env_steps); ``device``: where ``base``'s weights are and it decodes (``steering_decoder``)."""
    common = dict(reward=a.get("reward", "env"), reward_offset=float(a.get("reward_offset", 0.0)),
                  failure_reward=float(a.get("failure_reward", 0.0)), max_env_steps=a.get("max_env_steps"))
    n_act = a.get("n_action_steps")
    if mode == "latent":
        return LatentNoiseEnv(env, base, float(a.get("noise_bound", 1.5)), n_act, device=device, **common)
    if mode == "residual":
        return ResidualChunkEnv(env, base, float(a.get("residual_scale", 0.05)), n_act, device=device, **common)
    if mode == "action":
        return ActionChunkEnv(env, int(a.get("n_obs_steps", 1)), int(n_act or 1), **common)
    raise ValueError(f"unknown steering mode {mode!r}; choose one of {list(MODES)}")


def evaluate_agent(model: SAC | DSRLNA | None, make_env: Callable[[], ChunkEnv], episodes: int,
                   seed: int, deterministic: bool = True) -> dict[str, float]:
    """Episodes of the agent (``None``: zero actions; ``deterministic=False``: actions sampled from
    the agent's policy) in fresh wrapper envs seeded ``seed + i``; returns success_rate,
    mean_return (wrapper reward), mean_env_steps, episodes."""
    env = make_env()
    succ, rets, steps = [], [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, ret, info = False, 0.0, {}
        while not done:
            a = (model.predict(obs, deterministic=deterministic)[0] if model is not None
                 else np.zeros(env.action_space.shape, np.float32))
            obs, r, term, trunc, info = env.step(a)
            ret, done = ret + r, term or trunc
        succ.append(bool(info.get("is_success", False)))
        rets.append(ret)
        steps.append(env.episode_env_steps)
    env.close()
    return {"success_rate": float(np.mean(succ)), "mean_return": float(np.mean(rets)),
            "mean_env_steps": float(np.mean(steps)), "episodes": episodes}


class SteerSAC(SAC):
    """SB3 SAC whose warm-up decisions (before ``learning_starts``) can come from the base policy.

    With ``warmup_std`` set, warm-up actions are ``clip(warmup_std * N(0, I), -1, 1)`` instead of
    uniform samples of the box. For DSRL with ``warmup_std = 1 / noise_bound`` that is the frozen
    policy's own noise distribution, so the replay buffer starts with base-policy rollouts (as
    DSRL does); uniform noise in the whole box decodes to worse-than-base chunks.
    """

    warmup_std: float | None = None

    def _sample_action(self, learning_starts: int, action_noise=None, n_envs: int = 1):
        if self.warmup_std is not None and self.num_timesteps < learning_starts:
            shape = (n_envs, *self.action_space.shape)
            a = np.clip(self.warmup_std * np.random.standard_normal(shape), -1.0, 1.0).astype(np.float32)
            return a, a
        return super()._sample_action(learning_starts, action_noise, n_envs)


class EnvStepCallback(BaseCallback):
    """Progress bar, evaluation, checkpoints and the stop, all counted in *env* steps."""

    def __init__(self, trainer: "SteerTrainer"):
        super().__init__()
        self.t = trainer
        self.bar: tqdm | None = None
        self._next_eval = self._next_ckpt = 0

    def _on_training_start(self) -> None:
        n, c = self.t.env_steps, self.t.c
        self._next_eval = (n // int(c["eval_every"]) + 1) * int(c["eval_every"])
        self._next_ckpt = (n // int(c["checkpoint_every"]) + 1) * int(c["checkpoint_every"])
        self.bar = tqdm(total=self.t.budget, initial=n, unit="env step", disable=not self.t.progress,
                        dynamic_ncols=True, desc=f"steer ({self.t.mode})")

    def _on_step(self) -> bool:
        if not np.all(np.isfinite(self.locals["rewards"])):
            raise DivergenceError(f"non-finite reward at env step {self.t.env_steps}")
        return self.tick()

    def tick(self) -> bool:
        """Progress, evaluation and checkpoints due at the current env step; False at the budget."""
        n = self.t.env_steps
        if self.bar is not None:
            self.bar.n = min(n, self.t.budget)
            self.bar.refresh()
        if n >= self._next_eval:
            self._next_eval += int(self.t.c["eval_every"])
            self.t.record_eval(self.t.evaluate(int(self.t.c["eval"]["episodes_during_training"]),
                                               self.t.validation_seed))
        if n >= self._next_ckpt:
            self._next_ckpt += int(self.t.c["checkpoint_every"])
            self.t.save_checkpoint()
        return n < self.t.budget

    def _on_training_end(self) -> None:
        if self.bar is not None:
            self.bar.close()


class SteerTrainer:
    """``c``: the resolved ``robo steer`` config as a dict (keys: algo, task, total_env_steps,
    num_envs, eval_every, checkpoint_every, eval, seed); ``base``: the frozen chunked policy
    (None for ``algo.mode=action``); ``make_env``: ``() -> gym.Env`` of the task."""

    def __init__(self, c: dict[str, Any], run_dir: str | Path, base: ChunkedPolicy | None,
                 make_env: Callable[[], gym.Env], progress: bool = True,
                 make_imagined_env: Callable[[], gym.Env] | None = None):
        self.c, self.run_dir, self.base, self._make_task_env = c, Path(run_dir), base, make_env
        self.algo = c["algo"]
        self.mode = self.algo.get("mode", "latent")
        self.stochastic = bool(self.algo.get("stochastic", False))  # evaluate and deploy SAC's sampled noise
        if self.mode != "action" and base is None:
            raise ValueError(f"algo.mode={self.mode} steers a base policy: pass base=<policy checkpoint folder>")
        self.budget, self.progress = int(c["total_env_steps"]), progress
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.device = sb3_device(c.get("device"))  # SAC's networks
        # the envs decode SAC's noise with a copy of the base on SAC's device (the base itself on the CPU);
        # DSRL-NA's networks are CPU-only, so is its base; algo.mode=action decodes nothing
        cpu = base is None or self.mode == "action" or self.algo.get("name") == "dsrl_na"
        self.decoder, self.decode_device = (base, torch.device("cpu")) if cpu else steering_decoder(base, self.device)
        self.envs = [self.make_env() for _ in range(int(c.get("num_envs", 1)))]
        # imagined envs (a world model behind the same chunk wrapper) add data but no real env steps
        n_imagined = int(c.get("imagined_envs", 0))
        if n_imagined and make_imagined_env is None:
            raise ValueError(f"imagined_envs={n_imagined} needs make_imagined_env (a world-model env factory)")
        self.imagined_envs = [make_chunk_env(self.mode, make_imagined_env(), self.decoder, self.algo,
                                             self.decode_device) for _ in range(n_imagined)]
        self.venv = DummyVecEnv([lambda e=e: e for e in self.envs + self.imagined_envs])
        self.venv.seed(int(c["seed"]))
        self.model: SAC | None = None
        self.history: list[dict] = []
        self.final_policy_metrics: dict[str, float] | None = None  # evaluate_final's chunked metrics (latent mode)
        self._env_step_offset = 0
        self.start_time = time.time()

    def make_env(self) -> ChunkEnv:
        return make_chunk_env(self.mode, self._make_task_env(), self.decoder, self.algo, self.decode_device)

    @property
    def env_steps(self) -> int:
        """Real env steps (imagined ones are not counted against the budget)."""
        return self._env_step_offset + sum(e.total_env_steps for e in self.envs)

    @property
    def imagined_env_steps(self) -> int:
        return sum(e.total_env_steps for e in self.imagined_envs)

    def _build_model(self) -> SAC | DSRLNA:
        a = self.algo
        if a.get("name") == "dsrl_na":
            if self.stochastic:
                raise ValueError("algo=dsrl_na deploys its actor's mean: algo.stochastic=true is for SAC-based DSRL")
            if self.mode != "latent" or len(self.envs) != 1 or self.imagined_envs:
                raise ValueError("algo=dsrl_na steers the latent noise (mode: latent) with num_envs=1")
            return DSRLNA(self.envs[0], DSRLNAConfig(**(a.get("dsrl_na") or {})), seed=int(self.c["seed"]))
        pk = dict(a.get("policy_kwargs") or {})
        pk["activation_fn"] = ACTIVATIONS[a.get("activation", "relu")]
        policy = LayerNormCriticSACPolicy if a.get("critic_layer_norm", False) else "MlpPolicy"
        model = SteerSAC(policy, self.venv, policy_kwargs=pk, seed=int(self.c["seed"]), verbose=0,
                         tensorboard_log=str(self.run_dir / "tensorboard"), device=self.device,
                         **(a.get("kwargs") or {}))
        warmup = a.get("warmup", "uniform")
        if warmup not in WARMUPS:
            raise ValueError(f"unknown algo.warmup {warmup!r}; choose one of {list(WARMUPS)}")
        if warmup == "base":
            if self.mode != "latent":
                raise ValueError("algo.warmup=base samples the base policy's noise: it needs algo.mode=latent")
            model.warmup_std = 1.0 / self.envs[0].noise_bound
        return model

    # evaluation ---------------------------------------------------------------------------
    @property
    def validation_seed(self) -> int:
        """First env seed of the evaluations during training, which pick ``checkpoints/best``:
        ``eval.validation_seed``, by default right after the final evaluation's seeds
        (``eval.seed`` .. ``eval.seed + eval.episodes - 1``), so that the best is not picked on them."""
        e = self.c["eval"]
        seed = e.get("validation_seed")
        return int(e["seed"]) + int(e["episodes"]) if seed is None else int(seed)

    def evaluate(self, episodes: int, seed: int | None = None) -> dict:
        """``episodes`` episodes of the agent from env seed ``seed`` (default: ``eval.seed``)."""
        seed = int(self.c["eval"]["seed"]) if seed is None else int(seed)
        m = evaluate_agent(self.model, self.make_env, episodes, seed, deterministic=not self.stochastic)
        return {"env_steps": self.env_steps, "wall_time": time.time() - self.start_time, **m}

    def record_eval(self, m: dict) -> None:
        """Log an evaluation; one during training that beats the earlier ones also saves
        ``checkpoints/best``. The final evaluation (``m["final"]``), on the reported seeds, saves it
        only when no evaluation during training did (a run shorter than ``eval_every``)."""
        self.history.append(m)
        log.info("env step %d: %s", m["env_steps"], {k: round(v, 4) if isinstance(v, float) else v
                                                       for k, v in m.items()})
        if isinstance(self.model, SAC):
            for k in ("success_rate", "mean_return"):
                if k in m:
                    self.model.logger.record(f"eval/{k}", m[k])
        earlier = [h["success_rate"] for h in self.history[:-1] if not h.get("final")]
        if self.mode == "latent" and (not earlier or (not m.get("final") and m["success_rate"] > max(earlier))):
            # steering's evaluations can dip late in training: keep the best steered policy too
            write_checkpoint(self.ckpt_dir / BEST, self.steered_policy())

    # the deployable policy ----------------------------------------------------------------
    def steered_policy(self) -> SteeredPolicy:
        """The SAC actor as a ``SteeredPolicy`` over the base (DSRL only): its mean, or with
        ``algo.stochastic`` its squashed Gaussian (the policy SAC trained and evaluates)."""
        if self.mode != "latent":
            raise ValueError(f"only algo.mode=latent yields a steered policy, not {self.mode!r}")
        if isinstance(self.model, DSRLNA):
            return self.model.steered_policy()
        env = self.envs[0]
        mlp = export_actor(self.model, env.observation_space.shape[0])
        center, scale = env.window_normalization()
        mlp.model.obs_mean.copy_(torch.as_tensor(center, dtype=torch.float32))
        mlp.model.obs_std.copy_(torch.as_tensor(scale, dtype=torch.float32))
        c = mlp.config
        cfg = SteeredConfig(obs_dim=self.base.obs_dim, action_dim=self.base.action_dim,
                            n_obs_steps=self.base.n_obs_steps, noise_shape=list(self.base.noise_shape),
                            noise_bound=env.noise_bound, hidden_dims=c.hidden_dims, activation=c.activation,
                            stochastic=self.stochastic)
        actor: MLPActor = mlp.model
        if self.stochastic:
            return SteeredPolicy(self.base, cfg, GaussianNoiseActor(actor, copy.deepcopy(self.model.actor.log_std)))
        return SteeredPolicy(self.base, cfg, actor)

    def chunked_metrics(self, policy, episodes: int, seed: int) -> dict[str, float]:
        """A chunked policy on ``episodes`` task episodes from env seed ``seed``, batched, its noise seeded per
        episode (``evaluate_chunked_policy``, as ``robo eval`` scores any chunked policy)."""
        t = (self.c.get("task") or {}).get("eval") or {}
        return evaluate_chunked_policy(policy, lambda render_mode=None: self._make_task_env(), episodes, seed=seed,
                                       num_envs=int(t.get("num_envs", 50)), max_steps=t.get("max_steps"))

    def evaluate_final(self) -> dict:
        """The final evaluation, ``eval.episodes`` episodes from ``eval.seed``: a steered policy (algo.mode=latent)
        through ``chunked_metrics`` (its ``mean_env_steps`` is the episode length; no ``mean_return``: the wrapper's
        reward is not the task's), the other modes' agents through their wrapper env (``evaluate``)."""
        e = self.c["eval"]
        if self.mode != "latent":
            return {**self.evaluate(int(e["episodes"])), "final": True}
        m = self.chunked_metrics(self.steered_policy(), int(e["episodes"]), int(e["seed"]))
        self.final_policy_metrics = m  # deployed_metrics reports these when the final policy is deployed
        return {"env_steps": self.env_steps, "wall_time": time.time() - self.start_time,
                "success_rate": m["success_rate"], "mean_env_steps": m["mean_length"], "episodes": int(e["episodes"]),
                "final": True}

    def deployed_metrics(self, final: dict) -> dict[str, float]:
        """The deployed policy (latent mode) on the final evaluation's episodes, as ``robo eval`` scores it, given
        ``train()``'s result: the final evaluation's own metrics where the deployed policy is the final one (the
        gate's pick ``final``, or no gate: ``checkpoints/latest``), else ``checkpoints/best`` scored again."""
        if final.get("deploy", {}).get("deployed", "final") == "final":
            return self.final_policy_metrics
        e = self.c["eval"]
        return self.chunked_metrics(load_policy(self.ckpt_dir / BEST / "policy"), int(e["episodes"]), int(e["seed"]))

    # deployment ---------------------------------------------------------------------------
    def score(self, policy, episodes: int, seed: int) -> float:
        """Success rate of a chunked policy on ``episodes`` episodes from env seed ``seed`` (batched)."""
        return float(self.chunked_metrics(policy, episodes, seed)["success_rate"])

    def deploy(self) -> Decision | None:
        """Write ``checkpoints/best``: the steered policy (the best during training or the final one) if it
        beats the base on the gate's validation episodes by its confidence bound, else the base itself.
        ``deploy.gate: false`` keeps the best during training, as scored (no gate); returns None then."""
        d = {**DEPLOY_DEFAULTS, **(self.c.get("deploy") or {})}
        if self.mode != "latent" or not d["gate"]:
            return None
        seed = int(self.c["eval"]["seed"]) + 1_000_000 if d["seed"] is None else int(d["seed"])
        candidates = {"final": self.steered_policy()}
        best = self.ckpt_dir / BEST / "policy"
        if best.is_dir():
            kept = load_policy(best)
            if getattr(kept, "kind", None) == "steered":  # a resumed run's gate may have kept the base
                candidates["best during training"] = kept
        decision, policy = gate(self.base, candidates, self.score, int(d["episodes"]), seed,
                                float(d["confidence"]), float(d["margin"]))
        write_checkpoint(self.ckpt_dir / BEST, policy, {"env_steps": self.env_steps, "deploy": decision.as_dict()})
        return decision

    # checkpoints --------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        na = isinstance(self.model, DSRLNA)
        if not parameters_finite(self.model.actor.parameters() if na else self.model.policy.parameters()):
            raise DivergenceError(f"non-finite network parameters at env step {self.env_steps}")
        policy = self.steered_policy() if self.mode == "latent" else None
        with checkpoint(self.ckpt_dir / LATEST, policy, {"env_steps": self.env_steps, "history": self.history}) as tmp:
            if na:
                torch.save(self.model.state_dict(), tmp / NA_STATE)
            else:
                self.model.save(tmp / "sb3.zip")
                self.model.save_replay_buffer(tmp / "replay_buffer.pkl")
        return self.ckpt_dir / LATEST

    def _load_checkpoint(self, path: Path) -> None:
        if (path / NA_STATE).exists():
            self.model = self._build_model()
            self.model.load_state_dict(torch.load(path / NA_STATE, weights_only=False))
        else:
            with warnings.catch_warnings():  # n-step returns: the saved NStepReplayBuffer carries n_steps and gamma
                warnings.filterwarnings("ignore", message=r"`n_steps=\d+` is ignored because a custom")
                self.model = SteerSAC.load(path / "sb3.zip", env=self.venv, device=self.device,
                                           tensorboard_log=str(self.run_dir / "tensorboard"))
            self.model.load_replay_buffer(path / "replay_buffer.pkl")
        state = read_state(path)
        self._env_step_offset = int(state["env_steps"]) - sum(e.total_env_steps for e in self.envs)
        self.history = state["history"]

    def _learn_na(self) -> None:
        """DSRL-NA one decision at a time, with the same evaluation/checkpoint cadence as SB3's."""
        ticks = EnvStepCallback(self)
        ticks._on_training_start()
        try:
            while True:
                self.model.learn(1)
                if not np.isfinite(self.model.last_losses.get("q_action", 0.0)):
                    raise DivergenceError(f"non-finite critic loss at env step {self.env_steps}")
                if not ticks.tick():
                    break
        finally:
            ticks._on_training_end()

    def train(self, resume: bool = False) -> dict:
        """Run SAC until ``total_env_steps`` env steps; returns the final evaluation."""
        latest = self.ckpt_dir / LATEST
        if resume and ((latest / "sb3.zip").exists() or (latest / NA_STATE).exists()):
            self._load_checkpoint(latest)
            log.info("resumed from %s at env step %d", latest, self.env_steps)
        else:
            self.model = self._build_model()
        if self.env_steps < self.budget:
            try:  # SB3 counts agent decisions; the callback stops at the env-step budget
                if isinstance(self.model, DSRLNA):
                    self._learn_na()
                else:
                    self.model.learn(10 * self.budget, callback=EnvStepCallback(self), reset_num_timesteps=False,
                                     progress_bar=False)
            except DivergenceError as e:
                raise DivergenceError(f"training diverged: {e}. Last good checkpoint: {latest}") from e
        elif isinstance(self.model, SAC):  # resumed at its budget: no learn() set SB3's logger up
            log.info("the run is already at total_env_steps=%d: only the final evaluation", self.budget)
            self.model.set_logger(Logger(folder=None, output_formats=[]))
        self.save_checkpoint()
        final = self.evaluate_final()
        self.record_eval(final)
        decision = self.deploy()
        if decision is not None:
            final["deploy"] = decision.as_dict()
        return final
