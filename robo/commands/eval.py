"""``robo eval``: fly a policy in the batched sim, score it, write the run folder."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from robo.evaluate import flight_metrics, rollout
from robo.factory import make_policy, make_task
from robo.media import write_flight_media
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
    write_flight_media(run_dir, task, r, f"{c['task']['name']}: {c['policy']['kind']} on {c['robot']['preset']}",
                       int(cfg.plot_envs), c["video"])
    log.info("run folder: %s", run_dir)
    for k, v in metrics.items():
        log.info("%-30s %s", k, v)
    return metrics
