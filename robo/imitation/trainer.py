"""Generic imitation trainer for any ``ChunkedPolicy`` (diffusion, energy-based).

AdamW + warm-up/cosine LR (diffusers' ``get_scheduler``), gradient clipping, an EMA update after
each step when the policy has ``update_ema``, a tqdm bar with the loss, TensorBoard scalars and a
CSV log, periodic evaluation, and atomic checkpoints in ``checkpoints/latest``:
``policy/`` (the deployable policy, ``policy.save``) and ``training_state.pt`` (trained weights,
EMA, optimizer, LR scheduler, step, RNG states, evaluation history); with ``keep_every`` = N also the
policy of every N-th step in ``checkpoints/step_<N>/policy``. ``train(resume=True)``
continues from it bit-for-bit; a NaN/inf loss stops training with ``TrainingDiverged`` and
leaves the last good checkpoint in place.

Device (``robo.device``): the policy trains on ``device`` (batches gathered on the CPU, pinned and copied
asynchronously when it is CUDA), optionally under bf16 autocast (``train.amp: bf16``) and with its modules
compiled (``train.compile``). Evaluations fly the policy where it trains (the task envs stay on the CPU; the
evaluators copy each step's batch of observations over once, ``robo.imitation.evaluate``), and ``train``'s return
leaves the policy on the CPU. Under ``torchrun`` each rank trains on its slice of a global batch of
``world_size * batch_size`` windows (``robo.imitation.distributed``); rank 0 alone writes checkpoints, logs and
evaluations, and a resume loads the same checkpoint on every rank.
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
from robo.device import move_policy, pin, resolve_device, to_device
from robo.run_dir import LATEST, checkpoint, rng_state, set_rng_state, write_checkpoint

from .data import ChunkWindows
from .distill import TeacherLabels
from .distributed import barrier, data_parallel, init_ranks, rank_slice

log = logging.getLogger(__name__)
STATE = "training_state.pt"


AMP = {None: None, "bf16": torch.bfloat16}


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
    amp: str | None = None  # "bf16": bfloat16 autocast of the loss (CUDA, or recent CPUs); None: float32
    compile: bool = False  # torch.compile the policy's modules in place (the first steps then take longer)
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
        if self.amp not in AMP:
            raise ValueError(f"train.amp={self.amp!r}: choose bf16 or null")


class ImitationTrainer:
    """Train ``policy`` on ``windows`` (``ChunkWindows``, or anything with ``len`` and ``batch(ids)``, e.g.
    ``distill.TeacherLabels``) in ``run_dir``. ``evaluate(policy, step) -> dict`` (optional) is called
    every ``eval_every`` steps and at the end, with the policy on the run's device; its results form
    ``history``. ``device``: ``robo.device``'s setting; under torchrun the process group is joined here."""

    def __init__(self, policy: ChunkedPolicy, windows: ChunkWindows | TeacherLabels, config: TrainConfig,
                 run_dir: str | Path,
                 evaluate: Callable[[ChunkedPolicy, int], dict] | None = None,
                 on_step: Callable[[int], None] | None = None, device: str | torch.device = "cpu"):
        self.policy, self.windows, self.c = policy, windows, config
        self.ranks, self.device = init_ranks(resolve_device(device))
        move_policy(policy, self.device)
        if config.compile:
            for module in policy.model.children():
                module.compile()
        self.loss_fn = data_parallel(policy, self.ranks, self.device)
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
        """Rank 0 writes ``checkpoints/latest`` (the others only wait for it)."""
        if not self.ranks.main:
            barrier(self.ranks)
            return self.latest
        ema = getattr(self.policy, "ema", None)
        state = {"step": self.step, "model": self.policy.model.state_dict(),
                 "ema": ema.state_dict() if ema is not None else None, "optimizer": self.optimizer.state_dict(),
                 "lr_scheduler": self.lr_scheduler.state_dict(), "rng": rng_state(self.sampler),
                 "history": self.history, "wall_time": self.wall_time}
        with checkpoint(self.latest, self.policy) as tmp:
            torch.save(state, tmp / STATE)
        barrier(self.ranks)
        return self.latest

    def keep_policy(self) -> Path:
        """Keep the deployable policy of this step in ``checkpoints/step_<step>/policy`` (atomic; rank 0)."""
        if not self.ranks.main:
            return self.run_dir / "checkpoints" / f"step_{self.step:07d}"
        return write_checkpoint(self.run_dir / "checkpoints" / f"step_{self.step:07d}", self.policy)

    def load_checkpoint(self, path: Path | None = None) -> int:
        path = Path(path or self.latest)
        if not (path / STATE).is_file():
            raise FileNotFoundError(f"cannot resume: {path / STATE} not found (no checkpoint was saved yet)")
        state = torch.load(path / STATE, weights_only=False, map_location=self.device)
        self.policy.model.load_state_dict(state["model"])
        if state["ema"] is not None:
            self.policy.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        set_rng_state(state["rng"], self.sampler)
        self.step, self.history, self.wall_time = int(state["step"]), state["history"], float(state["wall_time"])
        if self.ranks.main:
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
        """Rank 0 evaluates the policy where it trains (the evaluators fly it on its weights' device, the task envs
        on the CPU); the others wait."""
        if self.evaluate_fn is None:
            return None
        if not self.ranks.main:
            barrier(self.ranks)
            return None
        m = {"step": self.step, "wall_time": self.wall_time, **self.evaluate_fn(self.policy, self.step)}
        barrier(self.ranks)
        self.history.append(m)
        for k, v in m.items():
            if isinstance(v, (int, float)) and k != "step":
                tb.add_scalar(f"eval/{k}", v, self.step)
        log.info("step %d: %s", self.step, {k: round(v, 4) if isinstance(v, float) else v for k, v in m.items()})
        return m

    # Run ---------------------------------------------------------------------------------
    def next_batch(self) -> dict[str, torch.Tensor]:
        """This rank's part of the next global batch of ``world_size * batch_size`` windows, on the device."""
        ids = torch.randint(len(self.windows), (self.c.batch_size * self.ranks.world,), generator=self.sampler)
        batch = self.windows.batch(rank_slice(ids, self.ranks))
        return to_device(pin(batch, self.device), self.device)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The policy's loss on ``batch`` (through DDP on several ranks), under autocast with ``train.amp``."""
        dtype = AMP[self.c.amp]
        with torch.autocast(self.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            return self.loss_fn(batch).float()

    def train(self, resume: bool = False, progress: bool = True) -> dict:
        """Train up to ``config.steps``; returns the last evaluation (or {"step", "loss"})."""
        from torch.utils.tensorboard import SummaryWriter

        move_policy(self.policy, self.device)  # a previous train() left it on the CPU
        if resume:
            self.load_checkpoint()
            log.info("resumed from %s at step %d", self.latest, self.step)
        main = self.ranks.main
        tb = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=self.step if resume else None) if main \
            else NoWriter()
        params = list(self.policy.model.parameters())
        c, losses, last = self.c, [], None
        bar = tqdm(total=c.steps, initial=self.step, desc="train", disable=not (progress and main), dynamic_ncols=True)
        try:
            while self.step < c.steps:
                t0 = time.perf_counter()
                loss = self.loss(self.next_batch())
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
                    if main:
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
            evaluated = bool(self.history) and self.history[-1]["step"] == self.step  # alike on every rank
            final = self.history[-1] if evaluated else self._evaluate(tb)
            if self.evaluate_fn is not None and not evaluated:
                self.save_checkpoint()
        finally:
            bar.close()
            tb.close()
            move_policy(self.policy, torch.device("cpu"))
        return final or {"step": self.step, "loss": last["loss"] if last else float("nan")}


class NoWriter:
    """A TensorBoard writer that writes nothing (the ranks other than 0)."""

    def add_scalar(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass
