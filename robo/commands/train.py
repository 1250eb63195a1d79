"""``robo train``: RL from scratch on the batched quadrotor sim, or imitation (``policy=diffusion``); resumable."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robo.evaluate import rollout
from robo.factory import make_policy
from robo.imitation.distributed import Ranks
from robo.media import write_flight_media
from robo.plots import plot_learning_curve
from robo.rl.trainer import BEST, LATEST, Trainer
from robo.run_dir import saved_config, start_run, with_run_groups, write_json, write_resolved_config

log = logging.getLogger(__name__)
RESUMABLE_CHANGES = {"total_steps", "threads", "video", "plot_envs", "device"}  # what resume=<run> may change
rewrite_overrides = with_run_groups  # resume=<run>: compose with the run's own config groups
IMITATION_ONLY = ("dataset", "extra_dataset", "demos")  # train.yaml keys that RL training does not read
SUMMARY_KEYS = {"step": "step", "median_position_error": "final_median_position_error", "crashes": "crashes",
                "success_rate": "success_rate"}  # summary name -> evaluation key


def run(cfg: DictConfig, run_dir: Path) -> dict:
    from robo.commands.imitation import is_imitation, run as run_imitation

    if is_imitation(saved_config(cfg.resume, "train") if cfg.resume else cfg):
        return run_imitation(cfg, run_dir)
    if Ranks.from_env().world > 1:
        raise ValueError("torchrun trains imitation policies (policy=diffusion|energy ...); RL training is one "
                         "process: run robo train without torchrun")
    cfg, run_dir = start_run(cfg, run_dir, RESUMABLE_CHANGES, "train")  # resume=<run>: the run's own config
    given = [k for k in IMITATION_ONLY if cfg.get(k) is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: imitation settings, but task {cfg.task.name!r} is learned by RL "
                         f"(choose an imitation policy and task, e.g. policy=energy task=pusht)")
    c = OmegaConf.to_container(cfg, resolve=True)
    write_resolved_config(run_dir, cfg)
    if int(c.get("population", 1)) < 1:
        raise ValueError(f"population={c['population']} must be at least 1 (1: a single run)")
    if int(c.get("population", 1)) > 1:
        from robo.rl.population_trainer import PopulationTrainer

        result = PopulationTrainer(c, run_dir).train(resume=bool(cfg.resume))
        log.info("run folder: %s", run_dir)
        return {k: v for k, v in result.items() if k != "members"}
    trainer = Trainer(c, run_dir)
    final = trainer.train(resume=bool(cfg.resume))
    write_json(run_dir / "eval_history.json", trainer.history)
    plot_learning_curve(trainer.history, run_dir / "plots" / "learning_curve.png",
                        title=f"{c['algo']['name']} on {c['task']['name']} ({c['robot']['preset']})")
    policy, which = deployed_actor(trainer, run_dir, final["step"])
    task = trainer.evaluation_task()
    r = rollout(policy, task, float(c["eval"]["seconds"]))
    write_flight_media(run_dir, task, r, f"{c['task']['name']}: {c['algo']['name']} on {c['robot']['preset']}, "
                       f"{which}", int(c["plot_envs"]), c["video"])
    result = summary(trainer.best, final, run_dir)
    write_json(run_dir / "metrics.json", {"deployed_policy": result["deployed_policy"], "best": trainer.best,
                                          "last_actor": final})
    log.info("run folder: %s", run_dir)
    return result


def deployed_actor(trainer: Trainer, run_dir: Path, last_step: int) -> tuple:
    """(policy, words for a title): the kept best actor (``checkpoints/best/policy``, loaded as ``robo eval``
    loads it), or, when no evaluation kept one, the last actor as evaluations fly it."""
    best = run_dir / "checkpoints" / BEST / "policy"
    if trainer.best is not None and best.exists():
        return make_policy({"kind": "checkpoint", "path": str(best)}), f"best actor from step {trainer.best['step']}"
    return trainer.deployed_policy()[0], f"last actor, step {last_step} (no best kept)"


def summary(best: dict | None, last: dict, run_dir: Path) -> dict:
    """What ``robo train`` prints: the deployed policy's folder and evaluation (the kept best), then the last
    actor's, each as step, median final position error (m), crashes and success rate."""
    def scores(m: dict, prefix: str) -> dict:
        return {f"{prefix}{name}": m[k] for name, k in SUMMARY_KEYS.items() if k in m}

    if best is None:
        return {"deployed_policy": str(run_dir / "checkpoints" / LATEST / "policy"), **scores(last, "last_actor_")}
    return {"deployed_policy": str(run_dir / "checkpoints" / BEST / "policy"), **scores(best, "best_"),
            **scores(last, "last_actor_")}
