"""Distil a noise-conditioned teacher (a diffusion policy) into a few-step energy policy.

The teacher's chunk is a deterministic function of (observation window, initial noise z ~ N(0, I)).
The student learns that map on the demonstrations' windows: each window gets ``guesses_per_window``
guesses ``u ~ U(-1, 1)^(horizon x action_dim)`` (the energy policy's guesses live in the action box),
the teacher denoises ``z = sqrt(2) erfinv(u)`` (exactly N(0, I): the normal CDF maps it to u), and the
student's descent from ``u`` regresses onto that chunk (``EnergyPolicy`` trains on (guess, chunk)
pairs). Each guess names one sample of the teacher, so the student should keep the teacher's modes
instead of averaging the demos, with 2 gradient steps instead of the teacher's 10 denoising steps. It
does on a 2-D toy; on push-T a 68.6k-parameter student copied its teacher only loosely (docs/experiments/imitation.md).
The labels are computed once and kept in the run folder (``teacher_labels.pt``, written atomically),
so a resumed run does not relabel.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from policies.chunked import ChunkedPolicy, standard_noise
from robo.run_dir import atomic_torch_save

from .data import ChunkWindows

log = logging.getLogger(__name__)
LABELS = "teacher_labels.pt"
EDGE = 1e-6  # keeps u off +-1, where erfinv is infinite


@dataclass
class DistillConfig:
    """``teacher``: a saved noise-conditioned policy (``load_policy`` folder; null: learn from demos).
    ``guesses_per_window``: teacher samples per demo window; ``label_batch``: windows per teacher call;
    ``seed``: draws the guesses."""

    teacher: str | None = None
    guesses_per_window: int = 4
    label_batch: int = 512
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("guesses_per_window", "label_batch"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"distill.{name} must be >= 1, got {getattr(self, name)}")


def gaussian_from_uniform(u: torch.Tensor) -> torch.Tensor:
    """u in (-1, 1) -> z = Phi^-1((u + 1) / 2) = sqrt(2) erfinv(u): U(-1, 1) maps to N(0, 1)."""
    return 2 ** 0.5 * torch.erfinv(u.clamp(-1 + EDGE, 1 - EDGE))


def check_compatible(student: ChunkedPolicy, teacher: ChunkedPolicy) -> None:
    """Raise naming the setting when the student cannot learn the teacher's chunks one for one."""
    for name in ("obs_dim", "action_dim", "n_obs_steps", "horizon"):
        s, t = getattr(student, name), getattr(teacher, name)
        if s != t:
            raise ValueError(f"the student's {name}={s} differs from the teacher's {name}={t}: set policy.{name}={t}")
    if getattr(getattr(teacher, "config", None), "image_shape", None):
        raise ValueError("the teacher reads images; distillation needs a state-observation teacher")


class TeacherLabels:
    """Windows labelled by the teacher, like ``ChunkWindows``: ``batch(ids)`` ->
    {"obs": (B, n_obs_steps, obs_dim) raw, "action": (B, horizon, action_dim) the teacher's chunk, raw,
    "init": (B, horizon, action_dim) the student's guess in [-1, 1]}."""

    def __init__(self, obs: torch.Tensor, init: torch.Tensor, action: torch.Tensor):
        if not len(obs) == len(init) == len(action):
            raise ValueError(f"obs, init and action differ in length: {len(obs)}, {len(init)}, {len(action)}")
        self.obs, self.init, self.action = obs, init, action

    def __len__(self) -> int:
        return len(self.obs)

    def batch(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"obs": self.obs[ids], "action": self.action[ids], "init": self.init[ids]}

    def save(self, path: Path) -> None:
        atomic_torch_save({"obs": self.obs, "init": self.init, "action": self.action}, path)

    @classmethod
    def load(cls, path: Path) -> "TeacherLabels":
        d = torch.load(path, weights_only=True)
        return cls(d["obs"], d["init"], d["action"])


@torch.no_grad()
def label_windows(teacher: ChunkedPolicy, windows: ChunkWindows, cfg: DistillConfig,
                  progress=None) -> TeacherLabels:
    """Every window's observations x ``cfg.guesses_per_window`` guesses, labelled by ``teacher``;
    ``progress(done, total)`` is called after each teacher batch."""
    k = int(cfg.guesses_per_window)
    obs = windows.batch(torch.arange(len(windows)))["obs"].repeat_interleave(k, 0)  # (W * k, To, O)
    gen = torch.Generator().manual_seed(int(cfg.seed))
    init = standard_noise("uniform", (len(obs), *teacher.noise_shape), gen)
    chunks = []
    for i in range(0, len(obs), int(cfg.label_batch)):
        sl = slice(i, i + int(cfg.label_batch))
        chunks.append(torch.as_tensor(teacher.predict_chunk(obs[sl], noise=gaussian_from_uniform(init[sl]))))
        if progress is not None:
            progress(min(i + int(cfg.label_batch), len(obs)), len(obs))
    return TeacherLabels(obs, init, torch.cat(chunks).float())


def teacher_labels(teacher_dir: str, student: ChunkedPolicy, windows: ChunkWindows, cfg: DistillConfig,
                   run_dir: Path) -> TeacherLabels:
    """The run's labels: read back from ``run_dir/teacher_labels.pt``, or made by the teacher and saved."""
    from policies.registry import load_policy

    path = Path(run_dir) / LABELS
    if path.is_file():
        labels = TeacherLabels.load(path)
        log.info("read %d teacher-labelled windows from %s", len(labels), path)
        return labels
    if not Path(teacher_dir).exists():
        raise FileNotFoundError(f"distill.teacher={teacher_dir!r} does not exist; give a saved policy folder "
                                f"(e.g. runs/train/<time>/checkpoints/latest/policy)")
    teacher = load_policy(teacher_dir)
    check_compatible(student, teacher)
    log.info("labelling %d windows x %d guesses with the teacher %s", len(windows), cfg.guesses_per_window,
             teacher_dir)
    with tqdm(total=len(windows) * cfg.guesses_per_window, desc="label", unit="chunk", dynamic_ncols=True) as bar:
        labels = label_windows(teacher, windows, cfg, progress=lambda done, total: bar.update(done - bar.n))
    labels.save(path)
    return labels
