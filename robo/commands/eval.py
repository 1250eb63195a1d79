"""``robo eval``: fly a policy in the batched sim, score it, write the run folder."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from robo.evaluate import flight_metrics, rollout
from robo.factory import make_policy, make_task
from robo.run_dir import write_json, write_resolved_config

log = logging.getLogger(__name__)


def run(cfg: DictConfig, run_dir: Path) -> dict:
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    torch.manual_seed(cfg.seed)
    write_resolved_config(run_dir, cfg)
    c = OmegaConf.to_container(cfg, resolve=True)
    task = make_task(c["task"], c["robot"], c["sim"], int(cfg.num_envs), seed=int(cfg.seed))
    policy = make_policy(c["policy"])
    policy.save(run_dir / "checkpoints" / "policy")
    log.info("flying %s on %d x %s, task %s, %.1f s", c["policy"]["kind"], cfg.num_envs, c["robot"]["preset"],
             c["task"]["name"], cfg.seconds)
    r = rollout(policy, task, float(cfg.seconds), progress=True)
    metrics = flight_metrics(r, float(cfg.success_radius))
    metrics.update(task=c["task"]["name"], robot=c["robot"]["preset"], policy=c["policy"]["kind"])
    write_json(run_dir / "metrics.json", metrics)
    _write_media(cfg, task, r, run_dir)
    for k, v in metrics.items():
        log.info("%-30s %s", k, v)
    return metrics


def _write_media(cfg: DictConfig, task, r, run_dir: Path) -> None:
    from sims.quadrotor.render import plot_trajectories_png, render_flight_mp4

    n = min(int(cfg.plot_envs), r.states.shape[1])
    plot_trajectories_png(r.times, r.states[:, :n, :3], run_dir / "plots" / "trajectories.png",
                          targets=r.reference[:, 0], title=f"{cfg.task.name} — {cfg.policy.kind} on {cfg.robot.preset}")
    if cfg.video.enabled:
        i = int(cfg.video.env_index)
        stride = max(1, int(round(1.0 / (task.dt * cfg.video.fps))))
        render_flight_mp4(task.sim.params.to_params(i, name=cfg.robot.preset), r.states[::stride, i],
                          run_dir / "videos" / "flight.mp4", fps=cfg.video.fps, width=cfg.video.width,
                          height=cfg.video.height, target=r.reference[::stride, i])
    log.info("run folder: %s", run_dir)
