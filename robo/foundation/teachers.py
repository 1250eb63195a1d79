"""Teachers: one RL run per sampled quadrotor, as independent Ray tasks, recorded in a manifest.

``manifest.json`` (written atomically after every change) holds, per teacher: the quadrotor,
status (``pending | running | done | failed``), attempts, checkpoint (a robo ``MLPPolicy``
folder), score (the trainer's final evaluation on its own quadrotor) and wall time. A rerun on
the same run folder skips teachers already ``done``; a teacher that raised or whose worker died
is resubmitted and resumes from its ``checkpoints/latest`` (never from scratch, never lost).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from robo.foundation.config import FoundationRunConfig, composed
from robo.ray_tasks import Executor, RayExecutor, fan_out
from robo.run_dir import read_json, write_json
from sims.quadrotor.params import QuadrotorParams
from sims.quadrotor.randomization import RandomizationConfig, sample_param_list

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
STATUSES = ("pending", "running", "done", "failed")


def sample_quadrotors(randomization: RandomizationConfig | dict, n: int, seed: int) -> list[QuadrotorParams]:
    """``n`` quadrotors from the domain-randomization sampler, sorted by mass (same seed, same list)."""
    cfg = randomization if isinstance(randomization, RandomizationConfig) else RandomizationConfig.from_dict(
        dict(randomization))
    quads = sample_param_list(cfg, n, seed)
    return sorted(quads, key=lambda p: p.mass)


def robot_entry(params: QuadrotorParams, base: str) -> dict:
    """A JSON-able robot config (``{preset, **every field}``) that ``make_robot`` turns back into ``params``."""
    d = params.to_dict()
    d.pop("name", None)
    return {"preset": base, **d}


def train_config(overrides: list[str]) -> dict:
    """``configs/train.yaml`` composed with Hydra ``overrides``, resolved to a plain dict."""
    return composed("train", overrides)


def teacher_specs(cfg: FoundationRunConfig, run_dir: Path) -> list[dict]:
    """One JSON-able spec per teacher: index, folder and the full train config (``config``, the sampled
    quadrotor as its robot entry)."""
    t = cfg.teacher
    base = train_config([*t.overrides, f"total_steps={t.total_steps}", f"eval_every={t.eval_every}",
                         f"checkpoint_every={t.checkpoint_every}", f"eval.num_envs={t.eval_envs}",
                         "video.enabled=false", f"device={cfg.device}"])
    randomization = RandomizationConfig.from_dict(dict(cfg.randomization))
    specs = []
    for i, quad in enumerate(sample_quadrotors(randomization, cfg.teachers, cfg.seed)):
        c = json.loads(json.dumps(base))
        c["robot"] = robot_entry(quad, randomization.base)
        c["seed"] = int(cfg.seed) * 1000 + i
        c["threads"] = 1
        specs.append({"index": i, "dir": str(Path(run_dir).resolve() / "teachers" / f"{i:04d}"), "config": c})
    if t.init_from:
        _start_from_teachers(specs, Path(t.init_from))
    return specs


def _start_from_teachers(specs: list[dict], run: Path) -> None:
    """Point each spec's ``init_from`` at ``run``'s teacher for the same quadrotor (its ``checkpoints/latest``)."""
    from robo.rl.trainer import LATEST

    earlier = {t["index"]: t for t in Manifest.load(run / MANIFEST).teachers}
    for s in specs:
        t = earlier.get(s["index"])
        if t is None or t["robot"] != s["config"]["robot"]:
            raise ValueError(f"teacher.init_from: {run} has no teacher {s['index']} for the same quadrotor (its "
                             f"teachers, seed and randomization must match this run's)")
        s["config"]["init_from"] = str(Path(t["dir"]) / "checkpoints" / LATEST)


def train_teacher(spec: dict) -> dict:
    """Train (or resume) one teacher; returns its manifest fields. Runs inside a Ray worker. The
    teacher is the best-evaluated actor (``checkpoints/best``: SAC's quality drifts between
    evaluations, and a later actor is often worse), its score that evaluation's metrics."""
    from robo.rl.trainer import BEST, LATEST, Trainer

    torch.set_num_threads(1)
    t0 = time.time()
    folder = Path(spec["dir"])
    resumed_from = _steps_done(folder)
    trainer = Trainer(spec["config"], folder)
    final = trainer.train(resume=resumed_from > 0, progress=False)
    write_json(folder / "eval_history.json", trainer.history)
    best = folder / "checkpoints" / BEST
    chosen, score = (best, trainer.best) if trainer.best is not None and (best / "policy").exists() else (
        folder / "checkpoints" / LATEST, final)
    return {"checkpoint": str(chosen / "policy"), "score": {k: float(v) for k, v in score.items()},
            "wall_s": time.time() - t0, "resumed_from_step": resumed_from}


def _steps_done(folder: Path) -> int:
    from robo.rl.trainer import LATEST

    state = folder / "checkpoints" / LATEST / "state.json"
    return int(json.loads(state.read_text())["step"]) if state.exists() else 0


class Manifest:
    """The teachers' record in ``path`` (JSON); every ``update`` rewrites the file atomically."""

    def __init__(self, path: Path, teachers: list[dict]):
        self.path, self.teachers = Path(path), teachers

    @classmethod
    def open(cls, path: Path, specs: list[dict]) -> "Manifest":
        """Load ``path`` if it exists (checking it describes the same quadrotors), else start one."""
        path = Path(path)
        if path.exists():
            teachers = read_json(path)["teachers"]
            if [t["robot"] for t in teachers] != [s["config"]["robot"] for s in specs]:
                raise ValueError(f"{path} records other quadrotors than this config samples (teachers, seed or "
                                 f"randomization changed); use a new run folder")
            return cls(path, teachers)
        teachers = [{"index": s["index"], "dir": s["dir"], "robot": s["config"]["robot"],
                     "mass": s["config"]["robot"]["mass"], "status": "pending", "attempts": 0} for s in specs]
        m = cls(path, teachers)
        m.save()
        return m

    @classmethod
    def load(cls, path: Path) -> "Manifest":
        """An existing manifest as it is, e.g. another run's teachers to pool with this run's."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no teacher manifest at {path}")
        return cls(path, read_json(path)["teachers"])

    @classmethod
    def pooled(cls, manifests: list["Manifest"]) -> "Manifest":
        """The done teachers of several runs (e.g. runs with different seeds: more quadrotors), by mass;
        read-only (it has no file of its own)."""
        done = sorted((t for m in manifests for t in m.done()), key=lambda t: t["mass"])
        return cls(Path("/dev/null"), done)

    def save(self) -> None:
        write_json(self.path, {"teachers": self.teachers})

    def update(self, index: int, **fields: Any) -> None:
        if fields.get("status", "pending") not in STATUSES:
            raise ValueError(f"status {fields['status']!r}; choose one of {STATUSES}")
        self.teachers[index].update(fields)
        self.save()

    def done(self) -> list[dict]:
        return [t for t in self.teachers if t["status"] == "done"]


def train_population(specs: list[dict], folder: Path) -> list[dict]:
    """Train (or resume) the teachers ``specs`` together as one population (``robo.rl.population_trainer``) in
    ``folder``: member ``m`` is teacher ``specs[m]`` (its quadrotor and seed). Returns each one's manifest fields:
    its best-evaluated actor, that evaluation's metrics, and the population's wall time shared out."""
    from robo.rl.population_trainer import PopulationTrainer
    from robo.rl.trainer import BEST
    from sims.envs.quadrotor_env import make_robot

    t0 = time.time()
    c = json.loads(json.dumps(specs[0]["config"]))
    c["population"] = len(specs)
    trainer = PopulationTrainer(c, folder, robots=[make_robot(s["config"]["robot"]) for s in specs],
                                seeds=[int(s["config"]["seed"]) for s in specs])
    resumed_from = trainer.steps if trainer.load_checkpoint() else 0
    trainer.train()
    wall = (time.time() - t0) / len(specs)
    return [{"checkpoint": str(trainer.member_dir(m) / "checkpoints" / BEST / "policy"),
             "score": {k: float(v) for k, v in trainer.best[m].items()}, "wall_s": wall,
             "resumed_from_step": resumed_from, "population": str(folder)} for m in range(len(specs))]


def run_teachers(cfg: FoundationRunConfig, run_dir: Path,
                 train_fn: Callable[[dict], dict] = train_teacher, executor: Executor | None = None) -> Manifest:
    """Train every teacher not yet ``done`` in ``run_dir/manifest.json`` as Ray tasks (``robo.ray_tasks``;
    ``executor``: another ``Executor``, e.g. a serial one in tests).

    A task that raises is resubmitted (it resumes from its checkpoint) until it has had
    ``1 + ray.max_retries`` attempts, then marked ``failed`` with the error; raises
    ``RuntimeError`` at the end if any teacher failed (rerun on the same folder to retry them).
    """
    specs = teacher_specs(cfg, Path(run_dir))
    manifest = Manifest.open(Path(run_dir) / MANIFEST, specs)
    todo = [s for s in specs if manifest.teachers[s["index"]]["status"] != "done"]
    if not todo:
        return manifest
    if cfg.teacher.population > 0:
        return _run_populations(cfg, Path(run_dir), specs, manifest)
    if executor is None:
        executor = RayExecutor(cfg.ray.address, cfg.ray.num_cpus, cpus=cfg.ray.cpus_per_teacher,
                               max_retries=cfg.ray.max_retries)

    def submitted(spec: dict) -> None:
        manifest.update(spec["index"], status="running", attempts=manifest.teachers[spec["index"]]["attempts"] + 1)

    def failed(spec: dict, error: str) -> bool:
        i = spec["index"]
        if manifest.teachers[i]["attempts"] <= cfg.ray.max_retries:
            log.warning("teacher %d failed (%s); retrying from its checkpoint", i, error.splitlines()[0])
            manifest.update(i, error=error[-2000:])
            return True
        manifest.update(i, status="failed", error=error[-2000:])
        return False

    def done(spec: dict, result: dict) -> None:
        manifest.update(spec["index"], status="done", **result)
        log.info("teacher %d (%.3f kg) done in %.0f s: median error %.3f m, crashes %d", spec["index"],
                 spec["config"]["robot"]["mass"], result["wall_s"], result["score"]["final_median_position_error"],
                 result["score"]["crashes"])

    fan_out(train_fn, todo, executor, on_submit=submitted, on_done=done, on_error=failed)
    failed_ids = [t["index"] for t in manifest.teachers if t["status"] == "failed"]
    if failed_ids:
        raise RuntimeError(f"teachers {failed_ids} failed after {1 + cfg.ray.max_retries} attempts (see "
                           f"{manifest.path}); rerun with resume={run_dir} to retry them")
    return manifest


def _run_populations(cfg: FoundationRunConfig, run_dir: Path, specs: list[dict], manifest: Manifest) -> Manifest:
    """``teacher.population`` > 0: the teachers in groups of that many (by index, so by mass), each group one
    population in ``populations/<first index>``; a group whose teachers are all done is skipped, a group cut off
    resumes from its checkpoint."""
    if cfg.teacher.init_from:
        raise ValueError("teacher.init_from starts each teacher from another run's; teacher.population trains them "
                         "from scratch: set one of them")
    size = int(cfg.teacher.population)
    for lo in range(0, len(specs), size):
        group = specs[lo:lo + size]
        if all(manifest.teachers[s["index"]]["status"] == "done" for s in group):
            continue
        for s in group:
            manifest.update(s["index"], status="running", attempts=manifest.teachers[s["index"]]["attempts"] + 1)
        results = train_population(group, run_dir / "populations" / f"{group[0]['index']:04d}")
        for s, result in zip(group, results):
            manifest.update(s["index"], status="done", **result)
        log.info("teachers %d-%d (%.3f-%.3f kg) done as one population: %.0f s each", group[0]["index"],
                 group[-1]["index"], group[0]["config"]["robot"]["mass"], group[-1]["config"]["robot"]["mass"],
                 results[0]["wall_s"])
    return manifest


def teacher_summary(manifest: Manifest) -> dict[str, float]:
    """Mean/median of the teachers' own scores and wall times."""
    done = manifest.done()
    err = [t["score"]["final_median_position_error"] for t in done]
    return {"teachers_done": len(done), "teacher_wall_s_mean": float(np.mean([t["wall_s"] for t in done])),
            "teacher_median_error_median": float(np.median(err)),
            "teacher_success_rate_mean": float(np.mean([t["score"]["success_rate"] for t in done]))}
