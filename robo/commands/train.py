"""``robo train``: RL from scratch on the batched quadrotor sim, or imitation (``policy=diffusion``); resumable."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from robo.evaluate import flight_metrics, rollout
from robo.media import write_flight_media
from robo.plots import plot_learning_curve
from robo.rl.trainer import Trainer
from robo import run_dir as run_dir_module
from robo.run_dir import write_json, write_resolved_config

log = logging.getLogger(__name__)
RESUMABLE_CHANGES = {"resume", "total_steps", "threads", "video", "plot_envs"}
IMITATION_ONLY = ("dataset", "extra_dataset", "demos")  # train.yaml keys that RL training does not read


def check_resume_config(run_dir: Path, c: dict) -> None:
    """Refuse to resume ``run_dir`` with a config that differs from the one it was started with."""
    run_dir_module.check_resume_config(run_dir, c, RESUMABLE_CHANGES, "train")


def run(cfg: DictConfig, run_dir: Path) -> dict:
    from robo.commands.imitation import is_imitation, run as run_imitation

    if is_imitation(cfg):
        return run_imitation(cfg, run_dir)
    given = [k for k in IMITATION_ONLY if cfg.get(k) is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: imitation settings, but task {cfg.task.name!r} is learned by RL "
                         f"(choose an imitation policy and task, e.g. policy=energy task=pusht)")
    torch.set_num_threads(int(cfg.threads) or torch.get_num_threads())
    torch.manual_seed(int(cfg.seed))
    c = OmegaConf.to_container(cfg, resolve=True)
    if cfg.resume:
        run_dir = Path(cfg.resume)
        check_resume_config(run_dir, c)
        log.info("resuming %s", run_dir)
    write_resolved_config(run_dir, cfg)
    trainer = Trainer(c, run_dir)
    final = trainer.train(resume=bool(cfg.resume))
    write_json(run_dir / "eval_history.json", trainer.history)
    plot_learning_curve(trainer.history, run_dir / "plots" / "learning_curve.png",
                        title=f"{c['algo']['name']} on {c['task']['name']} ({c['robot']['preset']})")
    task = trainer.evaluation_task()
    r = rollout(trainer.policy(), task, float(c["eval"]["seconds"]))
    write_flight_media(run_dir, task, r, f"{c['task']['name']}: {c['algo']['name']} on {c['robot']['preset']}",
                       int(c["plot_envs"]), c["video"])
    metrics = {**final, **{f"task_{k}": v for k, v in flight_metrics(r).items()}}
    write_json(run_dir / "metrics.json", metrics)
    log.info("run folder: %s", run_dir)
    result = {k: metrics[k] for k in ("step", "final_median_position_error", "crashes", "success_rate", "wall_time")
              if k in metrics}
    if trainer.best is not None:  # checkpoints/best: the best evaluation's actor
        result.update(best_step=trainer.best["step"],
                      best_median_position_error=trainer.best["final_median_position_error"],
                      best_crashes=trainer.best["crashes"])
    return result
