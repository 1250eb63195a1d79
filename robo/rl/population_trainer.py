"""``robo train population=N``: N independent SAC policies trained in one process (``robo.rl.population``).

Member ``m`` (seed ``seed + m``) flies ``num_envs`` envs of one batched task (``num_envs * N`` in all, the C step
with ``sim.step_backend=c``): every member the run's ``robot``, or, with ``population_airframes`` (a
``sims.quadrotor.randomization.RandomizationConfig``), a quadrotor of its own drawn from that family (seed ``seed``,
sorted by mass; ``members/<m>/robot.json``), as the foundation pipeline's teachers are. It keeps its own replay, is evaluated every ``eval_every`` env steps (its own env steps:
each member gets ``total_steps``, as a single run does) and keeps its own best actor. The run folder:

    members/<m>/checkpoints/best/policy    member m's deployed actor (robo MLPPolicy) and metrics.json
    members/<m>/eval_history.json          its evaluations during training
    checkpoints/latest/                    population.safetensors (weights, targets, Adam), replay.safetensors
                                           (every member's filled rows), state.json: what resume=<run> continues
    population.json                        per member: the best actor's step and the deployed actor flown on the
                                           evaluation task as robo eval flies it (on its own quadrotor); the
                                           population's timings

During training a member is scored on ``eval.num_envs`` random starts of its own, all members in one batched
flight (groups of ``eval_group`` members); at the end each member's kept actor is flown as a single run's is
(``robo.rl.trainer.evaluation_task``: the main job's seeded starts, the exported MLPPolicy keeping its own
position integral), and those are the numbers reported. A resumed run starts fresh episodes (the task's
episodes in flight are not saved); its weights, optimizer state, replay and evaluation history continue.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from robo.evaluate import Rollout, describe, flight_metrics, rollout
from robo.factory import make_policy
from robo.foundation.teachers import sample_quadrotors
from robo.rl.population import PopulationReplay, PopulationSAC, PopulationSACConfig
from robo.rl.trainer import evaluation_key, evaluation_task
from robo.run_dir import BEST, LATEST, checkpoint, read_state, write_checkpoint, write_json
from sims.envs import make_batched_task
from sims.envs.quadrotor_env import autoreset_step, make_robot, make_task_config
from sims.quadrotor.dynamics import ParamsBatch
from sims.quadrotor.params import QuadrotorParams

log = logging.getLogger(__name__)
SUPPORTED = ("sac", "sac_fast")


class PopulationActor:
    """The deterministic actors of members ``members`` as one ``Policy`` over their envs (group-major,
    ``envs`` each): what evaluations fly. The position integral, if any, comes from the task's observation."""

    def __init__(self, sac: PopulationSAC, members: slice, envs: int):
        self.sac, self.members, self.envs = sac, members, envs
        self.k = len(range(*members.indices(sac.n)))

    def reset(self, mask=None) -> None:
        pass

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        obs = torch.as_tensor(obs, dtype=torch.float32)
        return self.sac.deterministic(obs.reshape(self.k, self.envs, -1), self.members).reshape(self.k * self.envs, -1)


def member_rollout(r: Rollout, i: int, envs: int) -> Rollout:
    """Group ``i``'s envs of a group-major rollout."""
    cols = slice(i * envs, (i + 1) * envs)
    return Rollout(r.times, r.states[:, cols], r.reference[:, cols], r.actions[:, cols], r.crashed_at[cols])


class PopulationTrainer:
    """A population run in ``run_dir`` from a resolved ``robo train`` config ``c`` with ``population`` >= 1."""

    def __init__(self, c: dict, run_dir: Path, robots: list[QuadrotorParams] | None = None,
                 seeds: list[int] | None = None):
        """``robots`` and ``seeds`` (one each per member): given quadrotors and seeds instead of ``c``'s
        (``population_airframes`` or ``robot``, and ``seed + m``), e.g. the foundation pipeline's teachers."""
        self.c, self.run_dir = c, Path(run_dir)
        algo = c["algo"]
        if algo["name"] not in SUPPORTED:
            raise ValueError(f"population={c['population']} trains SAC members: give algo=sac_fast (or sac), "
                             f"not {algo['name']}")
        for key in ("average_actor_steps", "action_noise_std"):
            if algo.get(key):
                raise ValueError(f"population training does not support algo.{key}; set it to null")
        if algo.get("normalize_observations"):
            raise ValueError("population training does not normalize observations; set "
                             "algo.normalize_observations=false")
        if (c.get("curriculum") or {}).get("kind", "none") != "none" or int((c.get("trim") or {}).get("starts", 0)):
            raise ValueError("population training runs without a curriculum and trim: set curriculum=none "
                             "trim.starts=0")
        if c.get("init_from"):
            raise ValueError("population training starts from scratch; init_from is for single runs")
        self.n, self.envs = int(c["population"]), int(c["num_envs"])
        if self.n < 1:
            raise ValueError(f"population={self.n} must be at least 1")
        self.step_backend = (c.get("sim") or {}).get("step_backend", "torch")
        self.robot = make_robot(c["robot"])
        self.task = make_batched_task(c["task"], c["robot"], self.n * self.envs, privileged=bool(c["privileged_critic"]),
                                      step_backend=self.step_backend)
        self.task.seed(int(c["seed"]))
        if robots is not None and len(robots) != self.n or seeds is not None and len(seeds) != self.n:
            raise ValueError(f"a population of {self.n} needs {self.n} robots and seeds")
        self.robots = list(robots) if robots is not None else self._robots(c.get("population_airframes"))
        self._fly(self.task, self.robots, self.envs)
        kwargs, arch = dict(algo.get("kwargs") or {}), dict((algo.get("policy_kwargs") or {}).get("net_arch") or {})
        if algo.get("activation", "relu") != "relu" or kwargs.get("ent_coef", "auto") != "auto" \
                or int(kwargs.get("train_freq", 1)) != 1:
            raise ValueError("population training runs SAC with relu networks, ent_coef=auto and train_freq=1")
        self.total = int(c["total_steps"])
        self.config = PopulationSACConfig(
            obs_dim=self.task.obs_dim, actor_obs_dim=self.task.config.actor_obs_dim, action_dim=4,
            pi=list(arch.get("pi", [64, 64])), qf=list(arch.get("qf", [64, 64])),
            learning_rate=float(kwargs.get("learning_rate", 1e-3)), lr_schedule=algo.get("lr_schedule", "constant"),
            buffer_size=min(int(kwargs.get("buffer_size", 1_000_000)), self.total),
            batch_size=int(kwargs.get("batch_size", 256)), gamma=float(kwargs.get("gamma", 0.99)),
            tau=float(kwargs.get("tau", 0.005)), learning_starts=int(kwargs.get("learning_starts", 100)),
            gradient_steps=int(kwargs.get("gradient_steps", 1)),
            hover_action=[q.hover_action for q in self.robots] if algo.get("init_at_hover", True) else None)
        self.seeds = [int(x) for x in seeds] if seeds is not None else [int(c["seed"]) + m for m in range(self.n)]
        self.sac = PopulationSAC(self.config, self.seeds)
        self.replay = PopulationReplay(self.n, self.config.buffer_size, self.task.obs_dim, 4)
        self.sample_rng = torch.Generator().manual_seed(int(c["seed"]) + 104729)
        self.history: list[list[dict]] = [[] for _ in range(self.n)]
        self.best: list[dict | None] = [None] * self.n
        self.steps = 0  # env steps of each member
        self.seconds = {"rollout": 0.0, "update": 0.0, "evaluation": 0.0}

    # Members ---------------------------------------------------------------------------------------------
    def _robots(self, airframes: dict | None) -> list[QuadrotorParams]:
        """Each member's quadrotor: the run's robot, or one drawn per member from ``airframes``, sorted by mass."""
        if not airframes:
            return [self.robot] * self.n
        quads = sample_quadrotors(airframes, self.n, int(self.c["seed"]))
        return [q if q.dt == self.robot.dt else QuadrotorParams.from_dict({**q.to_dict(), "dt": self.robot.dt})
                for q in quads]

    def _fly(self, task, robots: list[QuadrotorParams], envs: int) -> None:
        """``task``'s envs (made for the run's ``robot``), group-major, fly ``robots`` (``envs`` each)."""
        if any(r is not self.robot for r in robots):
            task.sim.set_params(ParamsBatch.from_params([r for r in robots for _ in range(envs)],
                                                        dtype=task.sim.params.mass.dtype, device=task.device))

    def member_dir(self, m: int) -> Path:
        return self.run_dir / "members" / f"{m:03d}"

    def policy(self, m: int):
        """Member ``m``'s deployable actor now (an MLPPolicy keeping the task's position integral itself)."""
        t = self.task.config
        return self.sac.member_policy(m, t.position_integral, self.task.dt)

    def evaluate(self) -> list[dict]:
        """Every member's current actor on ``eval.num_envs`` random starts of its own (groups of
        ``eval_group`` members in one batched flight)."""
        t0, out = time.perf_counter(), []
        e, group = self.c["eval"], max(1, int(self.c.get("eval_group") or 16))
        for lo in range(0, self.n, group):
            members = slice(lo, min(lo + group, self.n))
            k = members.stop - members.start
            task = evaluation_task(self.c, make_task_config(self.c["task"]), self.step_backend, copies=k)
            self._fly(task, self.robots[members], int(e["num_envs"]))
            task.seed(int(e["seed"]) + lo)
            r = rollout(PopulationActor(self.sac, members, int(e["num_envs"])), task, float(e["seconds"]))
            out += [flight_metrics(member_rollout(r, i, int(e["num_envs"])), float(e["success_radius"]))
                    for i in range(k)]
        self.seconds["evaluation"] += time.perf_counter() - t0
        return out

    def _on_eval(self, metrics: list[dict]) -> None:
        for m, metric in enumerate(metrics):
            metric = {"step": self.steps, **metric}
            self.history[m].append(metric)
            if self.best[m] is None or evaluation_key(metric) < evaluation_key(self.best[m]):
                self.best[m] = metric
                write_checkpoint(self.member_dir(m) / "checkpoints" / BEST, self.policy(m), metric, "metrics.json")
        errors = np.array([h[-1]["final_median_position_error"] for h in self.history])
        crashes = np.array([h[-1]["crashes"] for h in self.history])
        kept = np.array([b["final_median_position_error"] for b in self.best])
        log.info("step %d: median over members of their median error %.2f cm (best member %.2f cm), members "
                 "without a crash %d of %d; kept actors: median %.2f cm", self.steps, 100 * np.median(errors),
                 100 * errors.min(), int((crashes == 0).sum()), self.n, 100 * np.median(kept))

    # Checkpoints -----------------------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        state = {"step": self.steps, "history": self.history, "seeds": self.seeds, "seconds": self.seconds,
                 "sample_rng": self.sample_rng.get_state().tolist()}
        with checkpoint(self.run_dir / "checkpoints" / LATEST, None, state) as tmp:
            save_file(self.sac.state_dict(), tmp / "population.safetensors")
            save_file(self.replay.state_dict(), tmp / "replay.safetensors")
        return self.run_dir / "checkpoints" / LATEST

    def load_checkpoint(self) -> bool:
        latest = self.run_dir / "checkpoints" / LATEST
        state = read_state(latest)
        if state is None:
            return False
        if state["seeds"] != self.seeds:
            raise ValueError(f"{latest} holds a population of seeds {state['seeds']}, not {self.seeds}")
        self.sac.load_state_dict(load_file(latest / "population.safetensors"))
        self.replay.load_state_dict(load_file(latest / "replay.safetensors"))
        self.sample_rng.set_state(torch.tensor(state["sample_rng"], dtype=torch.uint8))
        self.steps, self.history, self.seconds = int(state["step"]), state["history"], state["seconds"]
        self.best = [read_state(self.member_dir(m) / "checkpoints" / BEST, "metrics.json") for m in range(self.n)]
        log.info("resumed the population of %d from %s at env step %d per member", self.n, latest, self.steps)
        return True

    # Run -------------------------------------------------------------------------------------------------
    def train(self, resume: bool = False) -> dict:
        c, cfg, n, e = self.c, self.config, self.n, self.envs
        if resume:
            self.load_checkpoint()
        every, ckpt_every = int(c["eval_every"]), int(c["checkpoint_every"])
        next_eval, next_ckpt = (self.steps // every + 1) * every, (self.steps // ckpt_every + 1) * ckpt_every
        obs = self.task.reset().reshape(n, e, -1)
        t_start = time.perf_counter()
        while self.steps < self.total:
            t0 = time.perf_counter()
            with torch.no_grad():
                if self.steps < cfg.learning_starts:
                    actions = torch.rand(n, e, 4) * 2 - 1
                else:
                    actions = self.sac.sample(obs)[0]
            new_obs, final_obs, rewards, terminated, _, _ = autoreset_step(self.task, actions.reshape(n * e, 4))
            if not bool(torch.isfinite(final_obs).all()):
                raise FloatingPointError(f"non-finite observations at env step {self.steps}; last good checkpoint: "
                                         f"{self.run_dir / 'checkpoints' / LATEST}")
            self.replay.add(obs, final_obs.reshape(n, e, -1), actions, rewards.reshape(n, e),
                            terminated.reshape(n, e))
            self.steps += e
            obs = new_obs.reshape(n, e, -1)
            t1 = time.perf_counter()
            self.seconds["rollout"] += t1 - t0
            if self.steps > cfg.learning_starts:
                stats = self.sac.train(self.replay.sample(cfg.gradient_steps, cfg.batch_size, self.sample_rng),
                                       1.0 - self.steps / self.total)
                if not bool(torch.isfinite(stats).all()):
                    raise FloatingPointError(f"training diverged at env step {self.steps} (non-finite losses); "
                                             f"last good checkpoint: {self.run_dir / 'checkpoints' / LATEST}")
                self.seconds["update"] += time.perf_counter() - t1
            if self.steps >= next_eval or self.steps >= self.total:
                self._on_eval(self.evaluate())
                next_eval += every
            if self.steps >= next_ckpt:
                self.save_checkpoint()
                next_ckpt += ckpt_every
        self.save_checkpoint()
        return self.finish(time.perf_counter() - t_start)

    def finish(self, seconds: float) -> dict:
        """Each member's kept actor flown as a single run's is; population.json."""
        members = []
        for m in range(self.n):
            folder = self.member_dir(m)
            write_json(folder / "eval_history.json", self.history[m])
            policy = make_policy({"kind": "checkpoint", "path": str(folder / "checkpoints" / BEST / "policy")})
            task = evaluation_task(self.c, make_task_config(self.c["task"], position_integral=0.0),
                                   self.step_backend)
            if self.robots[m] is not self.robot:
                task.sim.set_params(ParamsBatch.from_params(self.robots[m], task.num_envs,
                                                            dtype=task.sim.params.mass.dtype))
                write_json(folder / "robot.json", self.robots[m].to_dict())
            deployed = flight_metrics(rollout(policy, task, float(self.c["eval"]["seconds"])),
                                      float(self.c["eval"]["success_radius"]))
            members.append({"member": m, "seed": self.seeds[m], "best_step": self.best[m]["step"],
                            "mass_kg": float(self.robots[m].mass), "deployed": deployed})
            log.info("member %d (seed %d): deployed actor of step %d: %s", m, self.seeds[m], self.best[m]["step"],
                     describe(deployed))
        train_seconds = sum(v for k, v in self.seconds.items() if k != "evaluation")
        steps = self.n * self.steps
        summary = {"population": self.n, "env_steps_per_member": self.steps, "seconds": self.seconds,
                   "train_seconds_per_member": train_seconds / self.n,
                   "env_steps_per_second": steps / max(self.seconds["rollout"] + self.seconds["update"], 1e-9),
                   "gradient_steps_per_second": self.sac.updates * self.n / max(self.seconds["update"], 1e-9),
                   "members": members}
        ok = [x for x in members if x["deployed"]["crashes"] == 0
              and x["deployed"]["final_median_position_error"] < 0.05]
        summary["members_under_5cm_without_crash"] = len(ok)
        write_json(self.run_dir / "population.json", summary)
        log.info("%d of %d members deploy < 5 cm with 0 crashes; %.1f s of training per member (rollouts %.0f s, "
                 "updates %.0f s, evaluations %.0f s in all)", len(ok), self.n, summary["train_seconds_per_member"],
                 self.seconds["rollout"], self.seconds["update"], self.seconds["evaluation"])
        return summary
