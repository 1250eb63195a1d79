"""Generic imitation trainer for any ``ChunkedPolicy`` (diffusion, energy-based).

AdamW + warm-up/cosine LR (diffusers' ``get_scheduler``), gradient clipping, an EMA update after
each step when the policy has ``update_ema``, a tqdm bar with the loss, TensorBoard scalars and a
CSV log, periodic evaluation, and atomic checkpoints in ``checkpoints/latest``:
``policy/`` (the deployable policy, ``policy.save``) and ``training_state.pt`` (trained weights,
EMA, optimizer, LR scheduler, step, RNG states, evaluation history); with ``keep_every`` = N also the
policy of every N-th step in ``checkpoints/step_<N>/policy``. ``train(resume=True)``
continues from it bit-for-bit; a NaN/inf loss stops training with ``TrainingDiverged`` and
leaves the last good checkpoint in place.
"""

from __future__ import annotations

import csv
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from diffusers.optimization import get_scheduler
from tqdm import tqdm

from policies.chunked import ChunkedPolicy
from robo.run_dir import LATEST, checkpoint, rng_state, set_rng_state, write_checkpoint

from .data import ChunkWindows
from .distill import TeacherLabels

log = logging.getLogger(__name__)
STATE = "training_state.pt"


class TrainingDiverged(RuntimeError):
    """The loss became NaN or inf."""


@dataclass
class TrainConfig:
    steps: int = 20000
    batch_size: int = 64
    lr: float = 1e-4
    weight_decay: float = 1e-6
    betas: tuple[float, float] = (0.95, 0.999)
    lr_scheduler: str = "cosine"  # any diffusers.optimization scheduler name
    warmup_steps: int = 500
    grad_clip: float = 10.0
    log_every: int = 100
    eval_every: int = 0  # steps; 0: only when train() ends
    checkpoint_every: int = 1000
    keep_every: int = 0  # steps; > 0 also keeps checkpoints/step_<N>/policy (e.g. a weaker base for DSRL)
    seed: int = 0

    def __post_init__(self) -> None:
        self.betas = tuple(float(b) for b in self.betas)
        for name in ("steps", "batch_size", "log_every", "checkpoint_every"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if int(self.keep_every) < 0:
            raise ValueError(f"train.keep_every must be >= 0 (0: keep none), got {self.keep_every}")
        if not self.lr > 0:
            raise ValueError(f"train.lr must be > 0, got {self.lr}")


class ImitationTrainer:
    """Train ``policy`` on ``windows`` (``ChunkWindows``, or anything with ``len`` and ``batch(ids)``, e.g.
    ``distill.TeacherLabels``) in ``run_dir``. ``evaluate(policy, step) -> dict`` (optional) is called
    every ``eval_every`` steps and at the end; its results form ``history``."""

    def __init__(self, policy: ChunkedPolicy, windows: ChunkWindows | TeacherLabels, config: TrainConfig,
                 run_dir: str | Path,
                 evaluate: Callable[[ChunkedPolicy, int], dict] | None = None,
                 on_step: Callable[[int], None] | None = None):
        self.policy, self.windows, self.c = policy, windows, config
        self.run_dir = Path(run_dir)
        self.latest = self.run_dir / "checkpoints" / LATEST
        self.evaluate_fn, self.on_step = evaluate, on_step
        self.optimizer = torch.optim.AdamW(policy.model.parameters(), lr=config.lr, betas=config.betas,
                                           weight_decay=config.weight_decay)
        self.lr_scheduler = get_scheduler(config.lr_scheduler, self.optimizer, num_warmup_steps=config.warmup_steps,
                                          num_training_steps=config.steps)
        self.sampler = torch.Generator().manual_seed(config.seed)
        self.step = 0
        self.history: list[dict] = []
        self.wall_time = 0.0

    # Checkpoints -------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        ema = getattr(self.policy, "ema", None)
        state = {"step": self.step, "model": self.policy.model.state_dict(),
                 "ema": ema.state_dict() if ema is not None else None, "optimizer": self.optimizer.state_dict(),
                 "lr_scheduler": self.lr_scheduler.state_dict(), "rng": rng_state(self.sampler),
                 "history": self.history, "wall_time": self.wall_time}
        with checkpoint(self.latest, self.policy) as tmp:
            torch.save(state, tmp / STATE)
        return self.latest

    def keep_policy(self) -> Path:
        """Keep the deployable policy of this step in ``checkpoints/step_<step>/policy`` (atomic)."""
        return write_checkpoint(self.run_dir / "checkpoints" / f"step_{self.step:07d}", self.policy)

    def load_checkpoint(self, path: Path | None = None) -> int:
        path = Path(path or self.latest)
        if not (path / STATE).is_file():
            raise FileNotFoundError(f"cannot resume: {path / STATE} not found (no checkpoint was saved yet)")
        state = torch.load(path / STATE, weights_only=False)
        self.policy.model.load_state_dict(state["model"])
        if state["ema"] is not None:
            self.policy.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        set_rng_state(state["rng"], self.sampler)
        self.step, self.history, self.wall_time = int(state["step"]), state["history"], float(state["wall_time"])
        self._truncate_csv()
        return self.step

    def _truncate_csv(self) -> None:
        """Drop log rows written after the checkpoint (a resumed run logs them again)."""
        path = self.run_dir / "train_log.csv"
        if path.exists():
            with open(path, newline="") as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= self.step]
            path.unlink()
            for r in rows:
                self._csv(r)

    # Logging -----------------------------------------------------------------------------
    def _csv(self, row: dict) -> None:
        path = self.run_dir / "train_log.csv"
        new = not path.exists()
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            if new:
                w.writeheader()
            w.writerow(row)

    def _evaluate(self, tb) -> dict | None:
        if self.evaluate_fn is None:
            return None
        m = {"step": self.step, "wall_time": self.wall_time, **self.evaluate_fn(self.policy, self.step)}
        self.history.append(m)
        for k, v in m.items():
            if isinstance(v, (int, float)) and k != "step":
                tb.add_scalar(f"eval/{k}", v, self.step)
        log.info("step %d: %s", self.step, {k: round(v, 4) if isinstance(v, float) else v for k, v in m.items()})
        return m

    # Run ---------------------------------------------------------------------------------
    def train(self, resume: bool = False, progress: bool = True) -> dict:
        """Train up to ``config.steps``; returns the last evaluation (or {"step", "loss"})."""
        from torch.utils.tensorboard import SummaryWriter

        if resume:
            self.load_checkpoint()
            log.info("resumed from %s at step %d", self.latest, self.step)
        tb = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=self.step if resume else None)
        params = list(self.policy.model.parameters())
        c, losses, last = self.c, [], None
        bar = tqdm(total=c.steps, initial=self.step, desc="train", disable=not progress, dynamic_ncols=True)
        try:
            while self.step < c.steps:
                t0 = time.perf_counter()
                batch = self.windows.batch(torch.randint(len(self.windows), (c.batch_size,), generator=self.sampler))
                loss = self.policy.compute_loss(batch)
                if not bool(torch.isfinite(loss)):
                    raise TrainingDiverged(
                        f"loss is {loss.item()} at step {self.step}; training stopped. The last good checkpoint "
                        f"is {self.latest} (lower train.lr or check the data for outliers, then resume)")
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(params, c.grad_clip)
                self.optimizer.step()
                self.lr_scheduler.step()
                if hasattr(self.policy, "update_ema"):
                    self.policy.update_ema()
                self.step += 1
                self.wall_time += time.perf_counter() - t0
                losses.append(loss.item())
                bar.update(1)
                if self.step % c.log_every == 0 or self.step == c.steps:
                    row = {"step": self.step, "loss": float(np.mean(losses)), "lr": self.lr_scheduler.get_last_lr()[0],
                           "grad_norm": float(grad_norm), "wall_time": round(self.wall_time, 2)}
                    losses = []
                    bar.set_postfix(loss=f"{row['loss']:.4f}")
                    for k in ("loss", "lr", "grad_norm"):
                        tb.add_scalar(f"train/{k}", row[k], self.step)
                    self._csv(row)
                    last = row
                if c.eval_every and self.step % c.eval_every == 0 and self.step < c.steps:
                    self._evaluate(tb)
                if self.step % c.checkpoint_every == 0 or self.step == c.steps:
                    self.save_checkpoint()
                if c.keep_every and self.step % c.keep_every == 0:
                    self.keep_policy()
                if self.on_step is not None:
                    self.on_step(self.step)
            evaluated = self.history and self.history[-1]["step"] == self.step
            final = self.history[-1] if evaluated else self._evaluate(tb)
            if final is not None:
                self.save_checkpoint()
        finally:
            bar.close()
            tb.close()
        return final or {"step": self.step, "loss": last["loss"] if last else float("nan")}
