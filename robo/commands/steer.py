"""``robo steer base=<policy checkpoint> task=<imitation task>``: improve a frozen chunked policy
with SAC over its latent noise (DSRL; ``algo=residual_sac`` or ``algo=sac_actions`` for the
baselines); resumable with ``resume=<run folder>``. A latent run deploys (``checkpoints/best``) the steered
policy only if the deploy gate finds it better than the base on fresh validation episodes, else the base;
the summary's ``deployed`` says which."""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

import gymnasium as gym
from omegaconf import DictConfig, OmegaConf

from policies.registry import load_policy
from robo.imitation.evaluate import evaluate_chunked_policy
from robo.plots import plot_learning_curve
from robo.run_dir import start_run, with_run_groups, write_json, write_resolved_config

from robo.steer.trainer import SteerTrainer

log = logging.getLogger(__name__)
ALGO_CONFIGS = resources.files("robo.configs") / "algo"  # the repository's configs/algo
# what resume=<run> may change
RESUMABLE_CHANGES = {"threads", "total_env_steps", "eval", "deploy", "video", "progress", "device"}
rewrite_overrides = with_run_groups  # resume=<run>: compose with the run's own config groups


def algo_config(name: str, overrides: list[str] | None = None) -> dict:
    """configs/algo/<name>.yaml merged over its defaults, then ``overrides`` (dotted key=value), as
    Hydra composes ``algo=<name>`` (for benchmarks and tests that build a trainer directly)."""
    cfg = OmegaConf.create((ALGO_CONFIGS / f"{name}.yaml").read_text())
    parents = [d for d in cfg.pop("defaults", []) if d != "_self_"]
    merged = OmegaConf.merge(*(OmegaConf.create(algo_config(p)) for p in parents), cfg,
                             OmegaConf.from_dotlist(overrides or []))
    return OmegaConf.to_container(merged, resolve=True)


def task_env_factory(task: dict):
    """``() -> gym.Env`` of an imitation task's env (``task.env_id``, ``task.env_kwargs``)."""
    import sims  # noqa: F401  (registers the robo/ envs)

    if not task.get("env_id"):
        raise ValueError(f"task {task.get('name')!r} has no env_id; robo steer needs a gymnasium task (task=pusht)")
    kwargs = {**(task.get("env_kwargs") or {}), "render_mode": None}
    return lambda: gym.make(task["env_id"], **kwargs)


def run(cfg: DictConfig, run_dir: Path) -> dict:
    cfg, run_dir = start_run(cfg, run_dir, RESUMABLE_CHANGES, "steer")  # resume=<run>: its config, base included
    c = OmegaConf.to_container(cfg, resolve=True)
    mode = c["algo"].get("mode", "latent")
    if mode != "action" and not c.get("base"):
        raise ValueError("robo steer needs the frozen policy to steer: base=<policy checkpoint folder> "
                         "(e.g. runs/train/<time>/checkpoints/latest/policy)")
    base = load_policy(c["base"]) if c.get("base") else None
    write_resolved_config(run_dir, cfg)
    task = c["task"]
    trainer = SteerTrainer(c, run_dir, base, task_env_factory(task), progress=bool(c.get("progress", True)))
    final = trainer.train(resume=bool(cfg.resume))
    metrics = {"mode": mode, **final}
    if "deploy" in final:
        metrics["deployed"] = final["deploy"]["deployed"]
    if mode == "latent":  # the deployed policy (the gate's pick) through the same path as any chunked policy
        video = run_dir / "videos" / "steered.mp4" if c.get("video", {}).get("enabled", False) else None
        if video is None:
            m = trainer.deployed_metrics(final)
        else:  # the same episodes again, recorded
            folder = "best" if "deploy" in final else "latest"
            policy = load_policy(run_dir / "checkpoints" / folder / "policy")
            e, te = c["eval"], task["eval"]
            m = evaluate_chunked_policy(policy, task["env_id"], int(e["episodes"]), seed=int(e["seed"]),
                                        num_envs=int(te.get("num_envs", 50)), max_steps=te.get("max_steps"),
                                        video_path=video, env_kwargs=task.get("env_kwargs") or {})
        metrics.update({f"policy_{k}": v for k, v in m.items()})
    write_json(run_dir / "eval_history.json", trainer.history)
    write_json(run_dir / "metrics.json", metrics)
    plot_learning_curve([{**h, "step": h["env_steps"]} for h in trainer.history],
                        run_dir / "plots" / "learning_curve.png", title=f"robo steer ({mode}) on {task['name']}")
    keys = ("env_steps", "success_rate", "mean_return", "deployed", "policy_success_rate", "wall_time")
    return {k: metrics[k] for k in keys if k in metrics}
