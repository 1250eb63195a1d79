"""Train a quadrotor policy from scratch with stable-baselines3 on the batched sim.

Checkpoint folder ``checkpoints/latest`` (replaced atomically each time):
``policy/`` (the deployable actor as a robo ``MLPPolicy``: safetensors + config),
``sb3.zip`` (optimizer and networks), ``replay_buffer.pkl`` (off-policy algorithms: its filled rows, the run's
only copy, for resume),
``state.json`` (env steps, evaluation history, curriculum state).

Checkpoint folder ``checkpoints/best``: the deployable actor (``policy/``) of the best
evaluation so far (fewest crashes, then lowest median final position error) and its
``metrics.json``; written atomically after every evaluation that beats it.

Devices (``device``): SB3's networks train there; with sac_fast / td3_fast the training env's batched sim lives
there too (SB3's sac, td3 and ppo read numpy: their env stays on the CPU); evaluations fly the exported actor on
the device. Checkpoints are device-free (safetensors and SB3's zip load on the CPU).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from stable_baselines3 import PPO, SAC, TD3
from stable_baselines3.common.noise import NormalActionNoise, VectorizedActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

from robo.curriculum import (AdaptiveCurriculum, CurriculumLog, PrioritizedLevelReplay, ScheduledCurriculum,
                             apply)
from robo.curriculum.level_sampler import LevelReplayParamSampler
from robo.device import sb3_device
from robo.evaluate import describe, flight_device, flight_metrics, rollout
from robo.rl.asymmetric import POLICY_CLASSES, export_actor
from robo.rl.callbacks import ActorAverage, DivergenceError, TrainingCallback
from robo.rl.fast_off_policy import BASE_ALGORITHM, FAST_ALGORITHMS
from robo.rl.replay_file import load_filled, save_filled
from robo.rl.sb3_vec_env import SB3VecEnvAdapter
from robo.rl.trim import trim_policy
from robo.run_dir import BEST, LATEST, checkpoint, read_state, write_checkpoint
from sims.envs import OBS_DIM, QuadrotorVectorEnv, make_batched_task
from sims.envs.config import QuadrotorTaskConfig
from sims.envs.quadrotor_env import make_robot, make_task_config
from sims.quadrotor.randomization import RandomizationConfig

log = logging.getLogger(__name__)
ALGORITHMS = {"td3": TD3, "sac": SAC, "ppo": PPO, **FAST_ALGORITHMS}  # sac_fast / td3_fast: robo.rl.fast_off_policy
ACTIVATIONS = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}
AVERAGE_FILE = "actor_average.safetensors"


def evaluation_key(m: dict) -> tuple[int, float]:
    """Order of evaluations, smaller is better: crashes, then median final position error (m)."""
    return int(m["crashes"]), float(m["final_median_position_error"])


def make_curriculum(c: dict | None):
    """``{kind: none|scheduled|adaptive, ...}`` -> a curriculum or None (level replay is a
    parameter sampler instead: ``make_level_sampler``)."""
    if not c or c.get("kind", "none") in ("none", "level_replay"):
        return None
    kind = c["kind"]
    if kind == "scheduled":
        return ScheduledCurriculum(c["schedules"])
    if kind == "adaptive":
        return AdaptiveCurriculum(c["parameters"], metric=c.get("metric", "success_rate"),
                                  promote_above=c.get("promote_above", 0.8), demote_below=c.get("demote_below", 0.4),
                                  step_size=c.get("step_size", 0.1))
    raise ValueError(f"unknown curriculum kind {kind!r}; choose none, scheduled or adaptive")


def make_level_sampler(c: dict | None, seed: int) -> LevelReplayParamSampler | None:
    """``{kind: level_replay, randomization: {...}, replay: {...}}`` -> a PLR parameter sampler."""
    if not c or c.get("kind") != "level_replay":
        return None
    replay = PrioritizedLevelReplay(**{**(c.get("replay") or {}), "seed": seed})
    return LevelReplayParamSampler(RandomizationConfig.from_dict(dict(c["randomization"])), replay, base_seed=seed)


def init_actor_at_hover(model, hover_action: float) -> None:
    """Start the actor's output at the hover command (bias = atanh(hover action)), so early
    rollouts hover-ish instead of dropping; the weights stay random."""
    h = math.atanh(max(min(hover_action, 0.999), -0.999))
    p = model.policy
    if hasattr(p, "actor") and hasattr(p.actor, "mu"):  # TD3 / SAC
        nets = [p.actor.mu] + ([p.actor_target.mu] if hasattr(p, "actor_target") else [])
        for net in nets:
            last = net if isinstance(net, torch.nn.Linear) else [m for m in net if isinstance(m, torch.nn.Linear)][-1]
            last.bias.data.fill_(h)
    elif hasattr(p, "action_net"):  # PPO: the mean is clipped, not squashed
        p.action_net.bias.data.fill_(hover_action)


def load_weights(model, checkpoint: Path) -> None:
    """Start ``model`` from the networks, optimizers and entropy coefficient of another run's
    checkpoint folder (``checkpoints/latest``, holding ``sb3.zip``), e.g. a hover teacher to be
    fine-tuned on a moving reference; its replay buffer and step count are not carried over."""
    from stable_baselines3.common.save_util import load_from_zip_file, recursive_setattr

    path = Path(checkpoint) / "sb3.zip"
    if not path.exists():
        raise FileNotFoundError(f"init_from: no sb3.zip in {checkpoint} (give a run's checkpoints/latest folder)")
    _, params, variables = load_from_zip_file(str(path), load_data=False)
    try:
        model.set_parameters(params, exact_match=True)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"init_from: {path} does not fit this run's networks (algo, sizes or observation): {e}") from e
    for name, value in (variables or {}).items():  # SAC's log_ent_coef: set_parameters leaves it at its start
        if value is not None:
            recursive_setattr(model, f"{name}.data", value.data)


def evaluation_task(c: dict, task_config, step_backend: str = "torch", device: str | torch.device = "cpu",
                    copies: int = 1):
    """The seeded evaluation task of ``c["eval"]`` flying ``task_config`` on ``device``: ``num_envs`` random starts
    at rest within ``position_radius`` m and ``angle_deg``, whatever distribution training starts from (the same
    starts on every device: the task draws them on the host); ``copies`` > 1: that many times ``num_envs`` envs,
    group-major, each group with starts of its own."""
    e = c["eval"]
    task = make_batched_task(task_config, c["robot"], int(e["num_envs"]) * int(copies), step_backend=step_backend,
                             device=device)
    init = task.config.init
    init.position_radius, init.angle_deg = float(e["position_radius"]), float(e["angle_deg"])
    init.velocity = init.angular_velocity = init.guidance = 0.0
    task.seed(int(e["seed"]))
    return task


class Trainer:
    """One training run in ``run_dir`` from a resolved config dict ``c`` (see configs/train.yaml)."""

    def __init__(self, c: dict[str, Any], run_dir: Path):
        self.c, self.run_dir = c, Path(run_dir)
        self.device = sb3_device(c.get("device", "auto"))  # SB3's networks
        self.ckpt_dir = self.run_dir / "checkpoints"
        algo = c["algo"]
        if algo["name"] not in ALGORITHMS:
            raise ValueError(f"unknown algo {algo['name']!r}; choose one of {sorted(ALGORITHMS)}")
        self.step_backend = (c.get("sim") or {}).get("step_backend", "torch")
        self.sim_device = self._sim_device(algo["name"])
        self.robot = make_robot(c["robot"])
        self.level_sampler = make_level_sampler(c.get("curriculum"), int(c["seed"]))
        self.venv = QuadrotorVectorEnv(int(c["num_envs"]), c["task"], c["robot"], param_sampler=self.level_sampler,
                                       privileged=bool(c["privileged_critic"]), step_backend=self.step_backend,
                                       device=self.sim_device)
        self.venv.reset(seed=int(c["seed"]))
        self.sb3_env = VecMonitor(SB3VecEnvAdapter(self.venv))
        if c["algo"].get("normalize_observations", False):
            # running mean/std of observations; the exported actor carries the actor slice's stats
            self.sb3_env = VecNormalize(self.sb3_env, norm_obs=True, norm_reward=False, clip_obs=1e6)
        self.actor_obs_dim = self.venv.core.config.actor_obs_dim
        self.curriculum = make_curriculum(c.get("curriculum"))
        self.curriculum_log = CurriculumLog()
        self.history: list[dict] = []
        self.best: dict | None = None  # metrics of the policy in checkpoints/best
        self.flown = None  # (actor, trim record) the last evaluate() flew, until _keep_if_best takes it
        self.family = BASE_ALGORITHM.get(algo["name"], algo["name"])  # the SB3 algorithm: sac_fast is a SAC
        horizon = c["algo"].get("average_actor_steps")
        if horizon and self.family not in ("td3", "sac"):
            raise ValueError(f"algo.average_actor_steps needs td3 or sac, not {c['algo']['name']}; set it to null")
        self.actor_average = ActorAverage(int(horizon)) if horizon else None
        self.model = None

    def _sim_device(self, algo: str) -> torch.device:
        """Where the training env's batched sim lives. sac_fast / td3_fast step its tensors themselves: on SB3's
        device, so rollouts, replay and updates stay there. SB3's own algorithms (sac, td3, ppo) read and store
        numpy each step (``SB3VecEnvAdapter``, SB3's numpy buffers): a sim on the GPU would only add a copy out per
        step, so it stays on the CPU. The C step (``sim.step_backend=c``) runs on the CPU only: the env and the
        evaluations stay there (as ``robo eval`` does, ``robo.evaluate.flight_device``), SB3's networks do not."""
        device = torch.device(self.device)
        if device.type == "cpu":
            return device
        if self.step_backend == "c":
            log.warning("device=%s: sim.step_backend=%s runs on the CPU; the env and evaluations fly there, "
                        "the networks train on %s", device, self.step_backend, device)
            return torch.device("cpu")
        return device if algo in FAST_ALGORITHMS else torch.device("cpu")

    # Model -------------------------------------------------------------------
    def _build_model(self):
        algo = self.c["algo"]
        kwargs = dict(algo.get("kwargs") or {})
        schedule = algo.get("lr_schedule", "constant")
        if schedule == "linear":  # decays to 0 at total_steps: the last policy is a settled one
            kwargs["learning_rate"] = LinearSchedule(float(kwargs.get("learning_rate", 1e-3)), 0.0, 1.0)
        elif schedule != "constant":
            raise ValueError(f"algo.lr_schedule={schedule!r}; choose 'constant' or 'linear'")
        if algo.get("action_noise_std") and self.family in ("td3", "sac"):
            kwargs["action_noise"] = NormalActionNoise(np.zeros(4), float(algo["action_noise_std"]) * np.ones(4))
        policy_kwargs = dict(algo.get("policy_kwargs") or {})
        activation = algo.get("activation", "relu")
        if activation not in ACTIVATIONS:
            raise ValueError(f"algo.activation={activation!r}; choose one of {sorted(ACTIVATIONS)}")
        policy_kwargs["activation_fn"] = ACTIVATIONS[activation]
        if self.c["privileged_critic"]:
            policy, policy_kwargs["actor_obs_dim"] = POLICY_CLASSES[self.family], self.actor_obs_dim
        else:
            policy = "MlpPolicy"
        model = ALGORITHMS[algo["name"]](policy, self.sb3_env, seed=int(self.c["seed"]), policy_kwargs=policy_kwargs,
                                         tensorboard_log=str(self.run_dir / "tensorboard"), verbose=0,
                                         device=self.device, **kwargs)
        if algo.get("init_at_hover", True):
            init_actor_at_hover(model, self.robot.hover_action)
        return model

    # Evaluation ----------------------------------------------------------------
    def flown_task_config(self) -> QuadrotorTaskConfig:
        """The training task as the deployed actor flies it: without the observed position integral
        (``task.position_integral``), which the exported policy keeps itself (``policies.mlp``)."""
        return make_task_config(self.c["task"], position_integral=0.0)

    def evaluation_task(self, device: str | torch.device = "cpu"):
        """``evaluation_task`` of this run's config, observed as the deployed actor reads it
        (``flown_task_config``)."""
        return evaluation_task(self.c, self.flown_task_config(), self.step_backend, device)

    def evaluate(self) -> dict:
        """Fly the deployable actor (``deployed_policy``) on the evaluation task, on the run's device where the
        actor and the sim can fly there (``robo.evaluate.flight_device``; robo's MLP actor can), else the CPU."""
        e = self.c["eval"]
        policy, trim = self.flown = self.deployed_policy()
        spec = "cpu" if self.step_backend == "c" else self.c.get("device", "auto")  # C step: warned in __init__
        device = flight_device(spec, policy, {"step_backend": self.step_backend})  # moves policy there
        m = flight_metrics(rollout(policy, self.evaluation_task(device), float(e["seconds"])),
                           float(e["success_radius"]))
        return m if trim is None else {**m, "trim_offset_m": trim["offset_m"]}

    def deployed_policy(self) -> tuple:
        """(policy, trim record or None): ``policy()``, trimmed when ``trim.starts`` > 0. A trim measures the
        actor's steady hover offset on the nominal robot from ``trim.starts`` random starts (seed ``trim.seed``,
        not the evaluation's) and shifts its position input to remove it (``robo.rl.trim``); the same actor
        always gets the same trim."""
        t = self.c.get("trim") or {}
        if int(t.get("starts", 0)) <= 0:
            return self.policy(), None
        if self.flown_task_config().actor_obs_dim != OBS_DIM:
            raise ValueError(f"trim flies the {OBS_DIM}-float hover observation; set task.action_history=0 or "
                             "trim.starts=0")
        return trim_policy(self.policy(), self.robot, int(t.get("iterations", 2)), int(t["starts"]),
                           int(t.get("seed", 0)))

    def _on_eval(self, step: int, m: dict) -> None:
        m = {"step": step, **m}
        self.history.append(m)
        log.info("step %d: %s%s", step, describe(m), f", return {m['train_return']:.1f}" if "train_return" in m else "")
        self._keep_if_best(m)
        if self.curriculum is not None:
            values = self.curriculum.update(step, m)
            self._apply_curriculum(values)
            self.curriculum_log.record(step, values, {"success_rate": m["success_rate"]})
            for k, v in values.items():
                self.model.logger.record(f"curriculum/{k}", v)

    def _apply_curriculum(self, values: dict[str, float]) -> None:
        """Task parameters (``reward.position``, ``init.angle_deg``, ...) go into the task config;
        ``exploration.noise_std`` sets the std of TD3/SAC's Gaussian action noise."""
        values = dict(values)
        noise_std = values.pop("exploration.noise_std", None)
        if noise_std is not None:
            noise = getattr(self.model, "action_noise", None)
            noises = noise.noises if isinstance(noise, VectorizedActionNoise) else [noise]
            if not all(isinstance(n, NormalActionNoise) for n in noises):
                raise ValueError("curriculum parameter exploration.noise_std needs an algo with action_noise_std")
            for n in noises:
                n._sigma = np.full_like(n._sigma, float(noise_std))
        apply(values, self.venv.core.config)

    # Checkpoints ---------------------------------------------------------------
    def _keep_if_best(self, m: dict) -> None:
        """Write the actor of evaluation ``m`` to ``checkpoints/best`` if ``m`` beats the best so far: the actor
        ``evaluate()`` flew (trimmed or not), else the current ``deployed_policy()``."""
        flown, self.flown = self.flown, None
        if self.best is not None and evaluation_key(m) >= evaluation_key(self.best):
            return
        self.best = m
        write_checkpoint(self.ckpt_dir / BEST, (flown if flown is not None else self.deployed_policy())[0], m,
                         "metrics.json")
        log.info("new best at step %d: %s -> %s", m["step"], describe(m), f"{self.ckpt_dir.name}/{BEST}")

    def save_checkpoint(self, step: int) -> Path:
        state = {"step": step, "history": self.history, "curriculum_log": self.curriculum_log.rows,
                 "curriculum": self.curriculum.state_dict() if self.curriculum else None,
                 "level_replay": self.level_sampler.replay.state_dict() if self.level_sampler else None,
                 "task_config": _task_state(self.venv)}
        with checkpoint(self.ckpt_dir / LATEST, self.policy(), state) as tmp:
            self.model.save(tmp / "sb3.zip")
            if isinstance(self.model, OffPolicyAlgorithm):
                save_filled(self.model, tmp / "replay_buffer.pkl")
            if isinstance(self.sb3_env, VecNormalize):
                self.sb3_env.save(str(tmp / "vec_normalize.pkl"))
            if self.actor_average is not None:
                save_file(self.actor_average.actor.state_dict(), tmp / AVERAGE_FILE)
        return self.ckpt_dir / LATEST

    def _load_checkpoint(self, path: Path) -> int:
        cls = ALGORITHMS[self.c["algo"]["name"]]
        self.model = cls.load(path / "sb3.zip", env=self.sb3_env, tensorboard_log=str(self.run_dir / "tensorboard"),
                              device=self.device)
        if (path / "replay_buffer.pkl").exists() and isinstance(self.model, OffPolicyAlgorithm):
            load_filled(self.model, path / "replay_buffer.pkl")
        if self.actor_average is not None:
            self.actor_average.attach(self.model)
            self.actor_average.actor.load_state_dict(load_file(path / AVERAGE_FILE))
        self._load_observation_stats(path)
        state = read_state(path)
        self.history = state["history"]
        self.best = read_state(self.ckpt_dir / BEST, "metrics.json")  # may be newer than this checkpoint
        self.curriculum_log.rows = state["curriculum_log"]
        if self.curriculum and state["curriculum"] is not None:
            self.curriculum.load_state_dict(state["curriculum"])
        if self.level_sampler and state.get("level_replay") is not None:
            self.level_sampler.replay.load_state_dict(state["level_replay"])
        _restore_task_state(self.venv, state["task_config"])
        return int(state["step"])

    def _load_observation_stats(self, path: Path) -> None:
        """With ``algo.normalize_observations``, the running observation statistics saved in ``path``."""
        if isinstance(self.sb3_env, VecNormalize):
            stats = VecNormalize.load(str(path / "vec_normalize.pkl"), self.sb3_env.venv)
            self.sb3_env.obs_rms = stats.obs_rms

    # Run -----------------------------------------------------------------------
    def train(self, resume: bool = False, progress: bool = True) -> dict:
        total = int(self.c["total_steps"])
        latest = self.ckpt_dir / LATEST
        start = 0
        if resume and (latest / "sb3.zip").exists():
            start = self._load_checkpoint(latest)
            log.info("resumed from %s at env step %d", latest, start)
        else:
            self.model = self._build_model()
            if self.c.get("init_from"):
                load_weights(self.model, Path(self.c["init_from"]))
                self._load_observation_stats(Path(self.c["init_from"]))  # the networks' input scaling
                log.info("networks initialized from %s", self.c["init_from"])
        if self.actor_average is not None:
            self.actor_average.attach(self.model)
        if self.curriculum is not None:  # the values in force from the first step on
            self._apply_curriculum(self.curriculum.update(start, None))
        cb = TrainingCallback(total, self.evaluate, self._on_eval, self.save_checkpoint,
                              int(self.c["eval_every"]), int(self.c["checkpoint_every"]), progress, self._stop_rule(),
                              self.level_sampler.update if self.level_sampler else None)
        try:
            if total > start:
                callbacks = [self.actor_average, cb] if self.actor_average is not None else [cb]
                self.model.learn(total - start, callback=callbacks, reset_num_timesteps=False, progress_bar=False)
        except DivergenceError as e:
            raise DivergenceError(f"training diverged: {e}. Last good checkpoint: {latest}") from e
        if self.model.num_timesteps > start or start == 0:  # a finished run resumed: its checkpoint is already this
            self.save_checkpoint(self.model.num_timesteps)
        final = {"step": self.model.num_timesteps, **self.evaluate()}
        if not self.history or self.history[-1]["step"] != final["step"]:
            self.history.append(final)
            self._keep_if_best(final)
        if self.curriculum_log.rows:
            self.curriculum_log.write_csv(self.run_dir / "curriculum.csv")
        return final

    def _stop_rule(self):
        """Stop early once the evaluation reaches ``stop.median_position_error`` with at most
        ``stop.crashes`` crashes (``stop.median_position_error: null`` never stops)."""
        rule = self.c.get("stop") or {}
        target = rule.get("median_position_error")
        if target is None:
            return None
        max_crashes = int(rule.get("crashes", 0))
        return lambda m: m["final_median_position_error"] < target and m["crashes"] <= max_crashes

    def policy(self, averaged: bool = True):
        """The deployable actor (reads the first ``actor_obs_dim`` raw observation floats, less the position
        integral's 3, which it keeps itself): the weight average of ``algo.average_actor_steps`` when set and
        ``averaged``, else the current one."""
        actor = self.actor_average.actor if averaged and self.actor_average is not None else None
        task = self.venv.core  # a position-integral actor integrates its own error at the task's control rate
        policy = export_actor(self.model, self.actor_obs_dim, actor=actor,
                              position_integral=task.config.position_integral, integral_dt=task.dt)
        if isinstance(self.sb3_env, VecNormalize):
            rms, n = self.sb3_env.obs_rms, self.actor_obs_dim
            policy.model.obs_mean.copy_(torch.as_tensor(rms.mean[:n], dtype=torch.float32))
            std = np.sqrt(rms.var[:n] + self.sb3_env.epsilon)
            policy.model.obs_std.copy_(torch.as_tensor(std, dtype=torch.float32))
        return policy


def _task_state(venv) -> dict:
    from dataclasses import asdict

    return asdict(venv.core.config)


def _restore_task_state(venv, state: dict) -> None:
    """Put back curriculum-changed task values (init ranges, reward weights) from a checkpoint."""
    cfg = venv.core.config
    for group in ("init", "reward", "termination"):
        for k, v in state[group].items():
            setattr(getattr(cfg, group), k, v)
