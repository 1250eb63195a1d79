"""Config of ``robo foundation`` (mirrored by ``configs/foundation.yaml``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from sims.envs import make_task_config
from sims.quadrotor.randomization import RandomizationConfig


@dataclass
class RayConfig:
    """Where teachers run. ``address: null`` starts Ray on this machine with ``num_cpus``;
    ``address: auto`` joins the cluster of ``ray start --head`` (``num_cpus`` is then ignored).
    (Ray 2.x has no ``local_mode`` any more; tests use a one-CPU local Ray instead.)
    A teacher that raises is resubmitted up to ``max_retries`` times (it resumes from its last
    checkpoint); a worker that dies is retried by Ray itself, also up to ``max_retries``."""

    address: str | None = None
    num_cpus: int = 2
    cpus_per_teacher: float = 1.0
    max_retries: int = 2


@dataclass
class TeacherConfig:
    """One RL run per quadrotor: ``configs/train.yaml`` with ``overrides`` (Hydra syntax, e.g.
    ``["algo=td3", "curriculum=l2f"]``), the robot replaced by the sampled quadrotor. ``trim``: before
    distillation, remove each teacher's steady-state hover offset on its own quadrotor
    (``robo.foundation.trim``). ``init_from``: another foundation run folder with the same quadrotors
    (same ``teachers``, ``seed`` and ``randomization``); each teacher starts from the networks of that
    run's teacher for its quadrotor (e.g. hover teachers fine-tuned on moving references)."""

    overrides: list[str] = field(default_factory=list)
    total_steps: int = 300_000
    eval_every: int = 50_000
    checkpoint_every: int = 50_000
    eval_envs: int = 64
    trim: bool = True
    init_from: str | None = None
    population: int = 0  # > 0: teachers train this many at a time in one process (robo train population=N's
                         # trainer, SAC), instead of one Ray task each


@dataclass
class DaggerConfig:
    """DAgger distillation. Each iteration the students fly ``envs_per_teacher`` copies of every
    teacher's quadrotor for ``steps_per_iteration`` steps (episodes end and restart inside),
    executing the teacher's action instead of their own with probability
    ``beta = beta_start * beta_decay ** iteration`` per env and step; every visited observation is
    labelled with that env's teacher's action. The student then trains ``epochs`` passes over the
    last ``buffer_iterations`` iterations' sequences with truncated BPTT windows of ``bptt`` steps, at
    ``learning_rate``.
    ``gru_hidden``: the GRU student's width (Dense H -> GRU H -> Dense 4; RAPTOR's is 16).
    ``validation_quadrotors`` (0: off) drawn with ``validation_seed`` from the teachers' ranges score
    the student's hover after every iteration (``eval.starts`` starts each); the best iteration's
    student is kept. With ``validation_figure_eight`` they fly the figure-eight too, and among iterations
    that hover equally well the one with the fewest figure-eight crashes, then the lowest RMSE, is kept
    (otherwise the lowest median hover error; ``robo.foundation.dagger.validation_score``).
    ``restarts`` > 1 distils that many students (seeds ``seed``, ``seed + 1``, ...)
    and keeps the one that validates best (needs validation quadrotors); with ``ensemble`` > 1 the
    restarts are of the refinement (each of the E students is distilled once).
    ``ensemble`` E > 1 distils E students (seeds ``seed`` ... ``seed + E - 1``) and then ``refine``s their
    mean action into one fresh student (seed ``seed``; with restarts, seeds ``seed`` ... ``seed + restarts
    - 1``) over ``refine_quadrotors`` new quadrotors from the teachers' ranges, drawn with ``refine_seed``,
    one env each per entry of ``tasks`` (``robo.foundation.pipeline.distil``); E + restarts x the DAgger
    time. ``refine_feedforward`` (s^2, 0: off) is ``label_feedforward`` for the students' labels in that
    run; with ``refine_trim`` the students' mean is trimmed on each new quadrotor first, as the teachers
    are on theirs (``robo.foundation.trim.trimmed_students``).
    ``tasks``: what the students fly in DAgger, as overrides of the teachers' task config (e.g.
    ``{name: figure_eight, figure_eight_period: 8.0}`` for a moving reference, ``{init: {velocity: 2.0}}``
    for faster starts: the teachers' train-time task, which these override, already starts within 1 m/s
    and 1 rad/s of rest, configs/train_shaping/hover.yaml); each teacher's envs are split evenly among
    them, so ``envs_per_teacher`` must be a multiple of ``len(tasks)``. ``[{}]``: the
    teachers' own task only (the default). Adding a figure-eight (1.2 m, 5 s) did not help on balance: over
    DAgger seeds 0-2 it raised held-out hover success 0.80 -> 0.91 with the 16 lightest of 32 teachers, but
    lowered it 0.88 -> 0.83 with 16 mass-spread ones, and raised figure-eight RMSE at 32
    (docs/experiments/foundation.md).
    ``ema_decay`` (None or 0: off) keeps an exponential moving average of the student's weights over its
    optimizer steps (``policies.ema``: the decay warms up to ``ema_decay``); the average is what is
    validated, kept and returned, while the raw student flies to collect the data. At 64 teachers it
    raised held-out hover success over DAgger seeds 0-4 from a mean of 0.75 to 0.89 in 10
    iterations, 0.95 in 15 (docs/experiments/foundation.md).
    ``label_feedforward`` (s^2, 0: off): on a moving reference (a figure-eight in ``tasks``) the teachers
    label as if they aimed that many times the reference's acceleration ahead
    (``robo.foundation.fleet.feedforward_observations``), which removes most of their tracking lag; the
    student still reads the plain errors and must infer the lead from its history."""

    envs_per_teacher: int = 16
    iterations: int = 15
    steps_per_iteration: int = 500
    beta_start: float = 1.0
    beta_decay: float = 0.5
    epochs: int = 4
    bptt: int = 50
    batch_envs: int = 64
    learning_rate: float = 3e-3
    buffer_iterations: int = 4
    gru_hidden: int = 16
    validation_quadrotors: int = 0
    validation_seed: int = 200_000
    validation_figure_eight: bool = False
    restarts: int = 1
    ensemble: int = 1
    refine_quadrotors: int = 192
    refine_seed: int = 300_000
    device: str = "cpu"  # robo.device: where the students train (they fly the sim on the CPU); the run's device
    refine_feedforward: float = 0.0
    refine_trim: bool = False
    mlp_hidden: list[int] = field(default_factory=lambda: [64, 64])
    tasks: list[dict] = field(default_factory=lambda: [{}])
    ema_decay: float | None = 0.999
    label_feedforward: float = 0.0
    seed: int = 0


@dataclass
class HeldOutConfig:
    """The zero-shot evaluation: ``quadrotors`` drawn with ``seed`` (not the teachers' seed) from
    ``randomization`` (default: the training ranges), each flown from ``starts`` random starts.
    A quadrotor hovers successfully if its median final error < ``success_radius`` and none of
    its starts crashes. The push is a horizontal velocity change of ``push_velocity`` m/s over
    0.1 s at ``push_at`` s."""

    quadrotors: int = 32
    seed: int = 100_000
    starts: int = 4
    hover_seconds: float = 5.0
    figure_eight_seconds: float = 12.0
    push_velocity: float = 1.0
    push_at: float = 1.0
    success_radius: float = 0.10
    randomization: dict | None = None
    raptor: bool = True


@dataclass
class FoundationRunConfig:
    """``robo foundation``: sample ``teachers`` quadrotors, train a teacher each (on Ray), distil
    a GRU student (and an MLP baseline) with DAgger, evaluate on held-out quadrotors."""

    teachers: int = 16
    seed: int = 0
    device: str = "auto"  # robo/device.py: the DAgger student's and the teachers' device
    threads: int = 1
    randomization: dict = field(default_factory=lambda: RandomizationConfig().to_dict())
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    dagger: DaggerConfig = field(default_factory=DaggerConfig)
    eval: HeldOutConfig = field(default_factory=HeldOutConfig)
    resume: str | None = None
    command: str = "foundation"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the key when a value cannot work."""
        RandomizationConfig.from_dict(dict(self.randomization))
        if self.eval.randomization is not None:
            RandomizationConfig.from_dict(dict(self.eval.randomization))
        positive = {key: _get(self, key) for key in (
            "teachers", "teacher.total_steps", "teacher.eval_envs", "ray.num_cpus", "dagger.envs_per_teacher",
            "dagger.gru_hidden", "dagger.restarts", "dagger.ensemble", "dagger.refine_quadrotors", "dagger.iterations",
            "dagger.steps_per_iteration", "dagger.bptt", "dagger.batch_envs", "dagger.buffer_iterations",
            "eval.quadrotors", "eval.starts")}
        for key, v in positive.items():
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{key} must be a positive integer, got {v!r}")
        if not (isinstance(self.teacher.population, int) and self.teacher.population >= 0):
            raise ValueError(f"teacher.population must be 0 (one Ray task per teacher) or a positive integer, got "
                             f"{self.teacher.population!r}")
        if self.ray.max_retries < 0:
            raise ValueError(f"ray.max_retries must be >= 0, got {self.ray.max_retries}")
        if not 0 < self.ray.cpus_per_teacher <= max(self.ray.num_cpus, 1) and self.ray.address is None:
            raise ValueError(f"ray.cpus_per_teacher={self.ray.cpus_per_teacher} must be in (0, ray.num_cpus="
                             f"{self.ray.num_cpus}]")
        if not (0.0 <= self.dagger.beta_start <= 1.0 and 0.0 <= self.dagger.beta_decay <= 1.0):
            raise ValueError(f"dagger.beta_start and dagger.beta_decay must lie in [0, 1], got "
                             f"{self.dagger.beta_start}, {self.dagger.beta_decay}")
        validate_task_overrides(self.dagger.tasks)
        if self.dagger.envs_per_teacher % len(self.dagger.tasks):
            raise ValueError(f"dagger.envs_per_teacher={self.dagger.envs_per_teacher} must be a multiple of "
                             f"len(dagger.tasks) = {len(self.dagger.tasks)}")
        if self.dagger.ema_decay is not None and not 0.0 <= self.dagger.ema_decay < 1.0:
            raise ValueError(f"dagger.ema_decay must lie in [0, 1) or be null, got {self.dagger.ema_decay}")
        for key in ("label_feedforward", "refine_feedforward"):
            if not 0.0 <= getattr(self.dagger, key) < float("inf"):
                raise ValueError(f"dagger.{key} must be finite and >= 0 (s^2), got {getattr(self.dagger, key)}")
        if not self.dagger.learning_rate > 0:
            raise ValueError(f"dagger.learning_rate must be positive, got {self.dagger.learning_rate}")
        if self.dagger.validation_quadrotors < 0:
            raise ValueError(f"dagger.validation_quadrotors must be >= 0, got {self.dagger.validation_quadrotors}")
        if self.dagger.validation_quadrotors and self.dagger.validation_seed in (self.seed, self.eval.seed):
            raise ValueError(f"dagger.validation_seed ({self.dagger.validation_seed}) must differ from seed and "
                             f"eval.seed: validation quadrotors are neither the teachers' nor the held-out ones")
        if self.dagger.restarts > 1 and not self.dagger.validation_quadrotors:
            raise ValueError("dagger.restarts > 1 needs dagger.validation_quadrotors > 0 to choose among the "
                             "students")
        if self.dagger.ensemble > 1 and self.dagger.refine_seed in (
                self.seed, self.eval.seed, self.dagger.validation_seed):
            raise ValueError(f"dagger.refine_seed ({self.dagger.refine_seed}) must differ from seed, eval.seed and "
                             f"dagger.validation_seed: the refined student flies new quadrotors")
        if self.dagger.validation_figure_eight and not self.dagger.validation_quadrotors:
            raise ValueError("dagger.validation_figure_eight needs dagger.validation_quadrotors > 0 to fly it on")
        if self.eval.success_radius <= 0:
            raise ValueError(f"eval.success_radius must be positive (m), got {self.eval.success_radius}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FoundationRunConfig":
        """Build from a plain dict (e.g. a resolved Hydra node), rejecting unknown keys by name."""
        return _from_dict(cls, dict(d))

    @classmethod
    def from_overrides(cls, overrides: list[str]) -> "FoundationRunConfig":
        """``configs/foundation.yaml`` with Hydra ``overrides`` (e.g. ``["teachers=4", "dagger.seed=3",
        "+experiment=foundation_tracking"]``), as ``robo foundation`` composes it."""
        return cls.from_dict(composed("foundation", overrides))


def composed(name: str, overrides: list[str]) -> dict:
    """``configs/<name>.yaml`` composed with Hydra ``overrides`` (``robo.run_dir.compose``), resolved to a plain
    dict."""
    from robo.run_dir import compose

    return OmegaConf.to_container(compose(name, overrides), resolve=True)


def merged_task(task: str | dict, overrides: dict) -> dict:
    """The task config ``task`` (a name or dict, see ``sims.envs.make_task_config``) with ``overrides``
    merged in at any depth (e.g. ``{"init": {"velocity": 1.0}}`` keeps the other ``init`` keys)."""
    base = dataclasses.asdict(make_task_config(task))
    return OmegaConf.to_container(OmegaConf.merge(base, dict(overrides)), resolve=True)


def validate_task_overrides(tasks) -> None:
    """``dagger.tasks`` must be a non-empty list of dicts that each make a valid task config."""
    if not isinstance(tasks, (list, tuple)) or not tasks:
        raise ValueError(f"dagger.tasks must be a non-empty list of task overrides (e.g. [{{}}]), got {tasks!r}")
    for i, overrides in enumerate(tasks):
        if not isinstance(overrides, dict):
            raise ValueError(f"dagger.tasks[{i}] must be a dict of task-config overrides, got {overrides!r}")
        try:
            make_task_config(merged_task("hover", overrides))
        except (ValueError, TypeError) as e:
            raise ValueError(f"dagger.tasks[{i}] = {overrides!r} is not a valid task: {e}") from e


def _get(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


SECTIONS = {"teacher": TeacherConfig, "ray": RayConfig, "dagger": DaggerConfig, "eval": HeldOutConfig}


def _from_dict(cls, d: dict, path: str = ""):
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown config key(s) {[path + k for k in unknown]} for {cls.__name__}; "
                         f"known: {sorted(known)}")
    kwargs = {}
    for k, v in d.items():
        sub = SECTIONS.get(k) if cls is FoundationRunConfig else None
        kwargs[k] = _from_dict(sub, dict(v), f"{path}{k}.") if sub is not None else v
    return cls(**kwargs)
