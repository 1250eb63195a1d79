"""``robo foundation``: RAPTOR-style foundation policy (teachers on Ray, DAgger GRU student)."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robo.foundation.config import FoundationRunConfig
from robo.foundation.pipeline import run_pipeline
from robo.run_dir import seed_run, write_resolved_config

log = logging.getLogger(__name__)


def run(cfg: DictConfig, run_dir: Path) -> dict:
    if importlib.util.find_spec("ray") is None:
        raise ImportError("ray is not installed (the teachers run as Ray tasks); pip install 'robo[scale]'")
    c = FoundationRunConfig.from_dict(OmegaConf.to_container(cfg, resolve=True))
    seed_run(int(c.seed), int(c.threads))
    if c.resume:  # continue a run: teachers already done in its manifest are kept
        run_dir = Path(c.resume)
        if not (run_dir / "manifest.json").exists():
            raise FileNotFoundError(f"cannot resume: {run_dir / 'manifest.json'} not found")
    write_resolved_config(run_dir, cfg)
    summary = run_pipeline(c, run_dir)
    log.info("run folder: %s", run_dir)
    return summary
