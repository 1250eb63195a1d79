"""``robo imagine evaluate|train|synthesize``: use a learned world model instead of the simulator.

- ``evaluate``: rank ``checkpoints`` by imagined success (optionally also in the sim, with Spearman).
- ``train``: SAC (``train.algo=sac``) or DSRL steering of a frozen chunked policy (``train.algo=dsrl``,
  ``train.base=<checkpoint>``) on real and imagined envs (``train.imagined_fraction``); the result
  is scored in the sim.
- ``synthesize``: BC on a few demos, fine-tuned on successful segments from a policy-guided
  trajectory diffusion model; both scored in the sim. With ``synthesize.base=<chunked checkpoint>``
  instead: that policy acts in the world model, and is fine-tuned on its imagined successes (and its
  demos) and saved; base and fine-tuned policy are scored in the sim (Ctrl-World's loop).

The world model is loaded from ``model.path`` or fitted on behaviour data (or, ``model.data=demos``, on
the task's demos) and saved in the run. It fits, predicts and imagines on ``device`` (numpy only at SB3's and the
tasks' boundary), and so do the chunk policies that act in it (ranked checkpoints, ``synthesize.base``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from policies.world_model import EnsembleDynamics
from robo.device import resolve_device, sb3_device
from robo.run_dir import seed_run, write_json, write_resolved_config

from robo.world_model.imagined_env import ImaginedEnv, MixedVectorEnv, SingleImaginedEnv
from robo.world_model.policies import NoisyPolicy, PushTExpertPolicy
from robo.world_model.rollout import imagine_rollout, spearman
from robo.world_model.tasks import ImagineTask, ensemble_config, from_demos, make_real_vec_env, make_task, transitions

log = logging.getLogger(__name__)
MODES = ("evaluate", "train", "synthesize")


def model_setting(task: ImagineTask, m: dict, key: str) -> int:
    """``m[key]`` (``data_episodes`` or ``fit_steps``), or the task's default where it is null."""
    value = m.get(key)
    return int(task.model_size[key] if value is None else value)


def model_data(task: ImagineTask, task_cfg: dict, m: dict, seed: int) -> list:
    """The episodes the ensemble is fitted on (and imagined episodes start from): ``m["data"]`` is
    ``behaviour`` (``m["data_episodes"]`` episodes of the task's mixed-quality policy, run in the sim)
    or ``demos`` (the task's scripted-expert demos, ``m["demos"]`` of them with ``m["demo_seed"]``: the
    data a policy was imitated from, so no new env steps)."""
    kind = m.get("data", "behaviour")
    if kind == "behaviour":
        return task.collect(task.behaviour(seed), model_setting(task, m, "data_episodes"), seed=seed)[0]
    if kind == "demos":
        from robo.imitation.sources import load_episodes

        return from_demos(load_episodes(task_cfg, None, m.get("demos"), int(m.get("demo_seed") or 0)))
    raise ValueError(f"model.data={kind!r}; choose 'behaviour' or 'demos'")


def world_model(task: ImagineTask, m: dict, run_dir: Path, seed: int,
                task_cfg: dict | None = None, device: str = "cpu") -> tuple[EnsembleDynamics, list]:
    """Load ``m["path"]`` or fit a new ensemble on ``model_data`` (on ``device``); returns it, on ``device`` where
    it predicts, and that data."""
    data = model_data(task, task_cfg or {"name": task.name}, m, seed)
    if m.get("path"):
        model = EnsembleDynamics.load(m["path"])
        if (model.obs_dim, model.action_dim) != (task.obs_dim, task.action_dim):
            raise ValueError(f"{m['path']} models obs/action dims {(model.obs_dim, model.action_dim)}, task "
                             f"{task.name} has {(task.obs_dim, task.action_dim)}")
        return model.to(resolve_device(device)), data
    model = EnsembleDynamics(ensemble_config(task, m["members"], m["hidden_dims"], m.get("object_frame", True)))
    stats = model.fit(transitions(data), steps=model_setting(task, m, "fit_steps"), seed=seed,
                      device=resolve_device(device))
    log.info("world model fitted: %s", stats)
    model.save(run_dir / "world_model")
    return model.to(resolve_device(device)), data


def make_checkpoint_policy(entry: dict, task: ImagineTask, seed: int, device: str | None = "cpu"):
    """``{path: raptor | expert | <checkpoint dir>, noise: float}`` -> (name, policy); a chunk policy acts on
    ``device`` (``robo.imitation.evaluate.acting_device``), any other on the CPU."""
    path, noise = str(entry["path"]), float(entry.get("noise", 0.0))
    if path == "expert":
        return f"expert+random{noise:g}", PushTExpertPolicy(noise, seed=seed)
    if path == "raptor":
        from policies.foundation import load_raptor

        base = load_raptor()
    else:
        from policies.registry import load_policy

        base = load_policy(path)
        on_device(base, device)
    low, high = float(task.action_space.low.min()), float(task.action_space.high.max())
    return f"{path}+noise{noise:g}", NoisyPolicy(base, noise, low, high, seed=seed)


def on_device(policy, device: str | None):
    """``policy`` moved to ``device`` when it acts there from host observations (a chunk policy), else left on the
    CPU (``robo.imitation.evaluate.acting_device``); returns it."""
    from policies.chunked import QueuedActing
    from robo.device import move_policy
    from robo.imitation.evaluate import acting_device

    if not isinstance(policy, QueuedActing):
        return policy
    target = acting_device(policy, device)
    return move_policy(policy, target) if target.type != "cpu" else policy


def start_states(data: list) -> np.ndarray:
    """The behaviour episodes' first observations (N, obs_dim): where imagined episodes start."""
    return np.stack([ep["obs"][0] for ep in data])


def evaluate(c: dict, task: ImagineTask, model: EnsembleDynamics, data: list, run_dir: Path) -> dict:
    e = c["evaluate"]
    pols = [make_checkpoint_policy(dict(x), task, c["seed"] + i, c.get("device", "auto"))
            for i, x in enumerate(e["checkpoints"])]
    if not pols:
        raise ValueError("imagine evaluate needs evaluate.checkpoints: [{path: ..., noise: ...}, ...]")
    start = start_states(data)[: int(e["episodes"])]
    rows = []
    for name, pol in pols:
        r = imagine_rollout(model, pol, start, task.episode_steps, task,
                            disagreement_threshold=float(c["disagreement_threshold"]))
        row = {"name": name, "imagined_success": float(r["success"].mean()), "cut_fraction": float(r["cut"].mean())}
        if e["compare_sim"]:
            _, ok = task.collect(pol, int(e["episodes"]), seed=c["seed"] + 20_000)
            row["sim_success"] = float(ok.mean())
        rows.append(row)
        log.info("%s", row)
    rows.sort(key=lambda r: -r["imagined_success"])
    write_json(run_dir / "ranking.json", rows)
    out = {"best": rows[0]["name"], "best_imagined_success": rows[0]["imagined_success"]}
    if e["compare_sim"]:
        out["spearman"] = spearman([r["imagined_success"] for r in rows], [r["sim_success"] for r in rows])
    return out


def split_envs(t: dict) -> tuple[int, int]:
    """``train`` config -> (real envs, imagined envs) with ``imagined_fraction`` of them imagined."""
    frac = float(t["imagined_fraction"])
    if not 0.0 <= frac < 1.0:
        raise ValueError(f"train.imagined_fraction must lie in [0, 1), got {frac}")
    real_envs = int(t["real_envs"])
    return real_envs, int(round(real_envs * frac / (1 - frac)))


def train_sac(c: dict, task: ImagineTask, model: EnsembleDynamics, data: list, run_dir: Path) -> dict:
    """SB3 SAC on a mixed real/imagined VectorEnv; the deployable MLP actor is scored in the sim."""
    from stable_baselines3 import SAC

    from robo.rl.asymmetric import export_actor
    from robo.rl.sb3_vec_env import SB3VecEnvAdapter

    t = c["train"]
    real_envs, n_imagined = split_envs(t)
    real = make_real_vec_env(task, real_envs, seed=int(c["seed"]))
    start = start_states(data)
    env = real if n_imagined == 0 else MixedVectorEnv(real, ImaginedEnv(
        model, start, n_imagined, task.action_space, int(t["imagined_horizon"]), float(c["disagreement_threshold"]),
        observation_space=task.observation_space, seed=int(c["seed"])))
    sac = SAC("MlpPolicy", SB3VecEnvAdapter(env), seed=int(c["seed"]), verbose=0, device=sb3_device(c.get("device")),
              policy_kwargs={"net_arch": list(t["net_arch"])}, **dict(t["sac_kwargs"]))
    sac.learn(total_timesteps=int(t["total_steps"]))
    policy = export_actor(sac, env.single_observation_space.shape[0])
    policy.save(run_dir / "checkpoints" / "policy")
    _, ok = task.collect(policy, int(t["eval_episodes"]), seed=c["seed"] + 20_000)
    real_steps = env.real_steps if isinstance(env, MixedVectorEnv) else int(t["total_steps"])
    return {"sim_success": float(ok.mean()), "real_env_steps": int(real_steps), "imagined_envs": n_imagined,
            "real_envs": real_envs}


def train_dsrl(c: dict, task: ImagineTask, model: EnsembleDynamics, data: list, run_dir: Path) -> dict:
    """DSRL (``robo.steer``, configs/algo/dsrl.yaml) over the frozen chunked policy ``train.base``:
    ``real_envs`` simulator envs beside imagined ones (the world model behind the same latent-noise
    wrapper, one ``SingleImaginedEnv`` each). ``total_steps`` is shared out like the envs; only the
    real share is the budget. The steered policy is saved in ``checkpoints/latest/policy``."""
    from policies.registry import load_policy
    from robo.steer import SteerTrainer
    from robo.commands.steer import algo_config

    t = c["train"]
    real_envs, n_imagined = split_envs(t)
    budget = int(round(int(t["total_steps"]) * real_envs / (real_envs + n_imagined)))
    start = start_states(data)
    seed = int(c["seed"])

    def imagined() -> SingleImaginedEnv:
        return SingleImaginedEnv(ImaginedEnv(model, start, 1, task.action_space, int(t["imagined_horizon"]),
                                             float(c["disagreement_threshold"]), success_fn=task.success_fn,
                                             observation_space=task.observation_space, seed=seed))

    steer = {"algo": algo_config("dsrl"), "total_env_steps": budget, "num_envs": real_envs, "seed": seed,
             "device": c.get("device", "auto"),
             "imagined_envs": n_imagined, "eval_every": int(t.get("eval_every") or budget), "checkpoint_every": budget,
             "eval": {"episodes": int(t["eval_episodes"]), "episodes_during_training": int(t["eval_episodes"]),
                      "seed": seed + 20_000}}
    trainer = SteerTrainer(steer, run_dir, load_policy(t["base"]), task.make_env, progress=False,
                           make_imagined_env=imagined if n_imagined else None)
    final = trainer.train()
    write_json(run_dir / "eval_history.json", trainer.history)
    source, steps = c["model"].get("data", "behaviour"), int(sum(len(ep["obs"]) for ep in data))
    # demos are the base's imitation data, spent before steering with or without imagination: no new steps
    best = max(trainer.history, key=lambda h: h["success_rate"])  # the best of all evaluations, the final included
    return {"sim_success": final["success_rate"], "best_sim_success": best["success_rate"],
            "best_at_real_env_steps": best["env_steps"], "real_env_steps": trainer.env_steps,
            "imagined_env_steps": trainer.imagined_env_steps, "imagined_envs": n_imagined, "real_envs": real_envs,
            "model_data": source, "model_data_env_steps": 0 if source == "demos" else steps,
            "model_data_transitions": steps}


# trainers f(cfg, task, world model, behaviour data, run_dir) -> metrics, by train.algo
TRAINERS = {"sac": train_sac, "dsrl": train_dsrl}


def check_train(t: dict, task: ImagineTask) -> None:
    """Reject a bad ``train`` config before any data is collected or model fitted."""
    if t["algo"] not in TRAINERS:
        raise ValueError(f"train.algo={t['algo']!r}; choose one of {sorted(TRAINERS)}")
    split_envs(t)
    if t["algo"] == "sac" and not ((task.action_space.low == -1).all() and (task.action_space.high == 1).all()):
        raise ValueError(f"train.algo=sac needs actions in [-1, 1]; task {task.name} has {task.action_space} "
                         "(use task=hover)")
    if t["algo"] == "dsrl" and task.make_env is None:
        raise ValueError(f"train.algo=dsrl wraps single gym envs; task {task.name} has none (use task=pusht or "
                         "task=obstacle_reach)")
    if t["algo"] == "dsrl" and not t.get("base"):
        raise ValueError("train.algo=dsrl steers a frozen chunked policy: pass train.base=<policy checkpoint folder>")


def train(c: dict, task: ImagineTask, model: EnsembleDynamics, data: list, run_dir: Path) -> dict:
    return TRAINERS[c["train"]["algo"]](c, task, model, data, run_dir)


# synthesize.* keys of the fine-tuning of a chunked base on its imagined successes
ROLLOUT_KEYS = ("base", "attempts", "select", "with_demos", "finetune_steps", "finetune_lr", "finetune_batch")


def synthesize_cmd(c: dict, task: ImagineTask, model: EnsembleDynamics, data: list, run_dir: Path) -> dict:
    from robo.world_model.synthesize import synthesis_experiment

    s = dict(c["synthesize"])
    rollout = {k: s.pop(k) for k in ROLLOUT_KEYS if k in s}
    if rollout.get("base"):
        return improve_on_imagined(c, task, model, data, run_dir, rollout, int(s["eval_episodes"]))
    return synthesis_experiment(task, data, seed=int(c["seed"]), device=resolve_device(c.get("device", "auto")), **s)


def improve_on_imagined(c: dict, task: ImagineTask, model: EnsembleDynamics, data: list, run_dir: Path, r: dict,
                        eval_episodes: int) -> dict:
    """``synthesize.base``: roll the chunked policy out in the model from the data's start states
    (``attempts`` per start), fine-tune a copy on its imagined successes (``select``: all | shortest)
    plus, with ``with_demos``, the task's demos (``model.demos`` / ``model.demo_seed``), save it in
    ``checkpoints/latest/policy`` and score base and fine-tuned policy in the sim on the same seeds."""
    from policies.registry import load_policy

    from robo.world_model.self_improve import finetune, imagined_successes

    seed, device = int(c["seed"]), c.get("device", "auto")
    base = load_policy(r["base"])
    if not hasattr(base, "n_action_steps"):
        raise ValueError(f"synthesize.base={r['base']} is a {base.kind!r} policy; the fine-tuning continues a chunked "
                         "policy's imitation training (diffusion or energy)")
    imagined, stats = imagined_successes(model, on_device(base, device), start_states(data), task,
                                         int(r["attempts"]), r["select"], seed=seed)
    log.info("imagined rollouts: %s", stats)
    demos = []
    if r["with_demos"]:
        from robo.imitation.sources import load_episodes

        m = c["model"]
        demos = load_episodes(c["task"], None, m.get("demos"), int(m.get("demo_seed") or 0))
    if not imagined and not demos:
        raise ValueError(f"no imagined episode of {r['base']} succeeded ({stats['rollouts']} rollouts) and "
                         "synthesize.with_demos is false: nothing to fine-tune on")
    policy = finetune(load_policy(r["base"]), demos + imagined, int(r["finetune_steps"]), float(r["finetune_lr"]),
                      int(r["finetune_batch"]), seed=seed, run_dir=run_dir / "finetune",
                      device=resolve_device(device))
    policy.save(run_dir / "checkpoints" / "latest" / "policy")
    _, ok_base = task.collect(base, eval_episodes, seed=seed + 20_000)
    _, ok = task.collect(policy, eval_episodes, seed=seed + 20_000)
    return {**stats, "demos": len(demos), "base_sim_success": float(ok_base.mean()), "sim_success": float(ok.mean()),
            "gain": float(ok.mean() - ok_base.mean())}


def run(cfg: DictConfig, run_dir: Path) -> dict:
    c = OmegaConf.to_container(cfg, resolve=True)
    if c["mode"] not in MODES:
        raise ValueError(f"unknown mode {c['mode']!r}: use robo imagine {'|'.join(MODES)}")
    seed_run(int(c["seed"]), int(c["threads"]))
    write_resolved_config(run_dir, cfg)
    task = (make_task(c["task"]["name"], c["task"].get("env_kwargs")) if isinstance(c["task"], dict)
            else make_task(c["task"]))
    if c["mode"] == "train":
        check_train(c["train"], task)
    model, data = world_model(task, c["model"], run_dir, int(c["seed"]),
                              c["task"] if isinstance(c["task"], dict) else None, c.get("device", "auto"))
    fn = {"evaluate": evaluate, "train": train, "synthesize": synthesize_cmd}[c["mode"]]
    result = {"mode": c["mode"], "task": task.name, **fn(c, task, model, data, run_dir)}
    write_json(run_dir / "metrics.json", result)
    return result
