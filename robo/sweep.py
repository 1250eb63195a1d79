"""Hydra multirun sweeps as Ray tasks: ``robo train -m seed=0,1,2 ray.address=local``.

Without ``ray.address`` a multirun is Hydra's own (its jobs one after another in this process). With it, the
sweep is expanded as Hydra's basic sweeper expands it (the cartesian product of the comma lists and ranges),
and each job runs as one Ray task (``robo.ray_tasks``): ``python -m robo <command> <job overrides>`` in a
subprocess, with its run folder ``<hydra.sweep.dir>/<job number>`` (default
``multirun/<command>/<time>/<n>``), as Hydra would have named it. ``ray.address``: ``local`` starts Ray on
this machine (``ray.num_cpus`` CPUs, default all), ``auto`` or ``host:port`` joins a cluster; each job asks
for ``ray.cpus_per_run`` CPUs and ``ray.gpus_per_run`` GPUs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from robo.ray_tasks import Executor, RayExecutor, fan_out

MULTIRUN = ("-m", "--multirun")
RAY_KEYS = ("ray.address", "ray.num_cpus", "ray.cpus_per_run", "ray.gpus_per_run")


@dataclass
class SweepRay:
    address: str | None = None
    num_cpus: int | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0


def sweep_ray(args: list[str]) -> SweepRay | None:
    """The ``ray.*`` settings typed on a multirun command line, or None when it has no ``ray.address``
    (then Hydra runs the sweep itself)."""
    if not any(a in MULTIRUN for a in args):
        return None
    typed = dict(a.lstrip("+").split("=", 1) for a in args if a.lstrip("+").startswith(RAY_KEYS) and "=" in a)
    address = typed.get("ray.address")
    if address in (None, "", "null", "None"):
        return None
    def number(key: str, kind, default):
        try:
            return kind(typed[key]) if key in typed and typed[key] not in ("null", "") else default
        except ValueError:
            raise ValueError(f"{key}={typed[key]!r}: must be a number") from None

    return SweepRay(address, number("ray.num_cpus", int, None), number("ray.cpus_per_run", float, 1.0),
                    number("ray.gpus_per_run", float, 0.0))


def expand(args: list[str]) -> list[list[str]]:
    """The jobs of a multirun command line (Hydra's basic sweeper's expansion), each as its overrides, without
    the ``-m`` flag, the ``ray.*`` settings and ``hydra.sweep.*``."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    kept = [a for a in args if a not in MULTIRUN and not a.lstrip("+").startswith((*RAY_KEYS, "hydra.sweep."))]
    if any(a.startswith("-") for a in kept):
        raise ValueError(f"a Ray sweep takes overrides only, not {[a for a in kept if a.startswith('-')]}")
    parsed = OverridesParser.create().parse_overrides(kept)
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [list(job) for batch in batches for job in batch]


def sweep_dir(args: list[str], command: str) -> Path:
    """``hydra.sweep.dir`` where typed, else ``multirun/<command>/<now>`` (the configs' default)."""
    typed = [a.split("=", 1)[1] for a in args if a.startswith("hydra.sweep.dir=")]
    return Path(typed[-1]) if typed else Path("multirun") / command / time.strftime("%Y-%m-%d_%H-%M-%S")


def run_job(spec: dict) -> dict:
    """One job of a sweep: ``python -m robo <command> <overrides> hydra.run.dir=<run_dir>`` -> its exit code,
    run folder and last lines of output."""
    cmd = [sys.executable, "-m", "robo", spec["command"], *spec["overrides"], f"hydra.run.dir={spec['run_dir']}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    tail = (done.stdout + done.stderr).strip().splitlines()[-12:]
    return {"job": spec["job"], "returncode": done.returncode, "run_dir": spec["run_dir"], "output": tail}


def run_sweep(command: str, args: list[str], ray: SweepRay, executor: Executor | None = None,
              job_fn=run_job) -> list[dict]:
    """Every job of the multirun ``args`` as one task (Ray's, unless ``executor`` is given) -> their results in
    job order (``run_job``'s dicts, or ``{"job", "returncode": None, "error"}`` for a task whose worker died)."""
    root = sweep_dir(args, command)
    specs = [{"job": n, "command": command, "overrides": job, "run_dir": str(root / str(n))}
             for n, job in enumerate(expand(args))]
    if executor is None:
        executor = RayExecutor(ray.address, ray.num_cpus, cpus=ray.cpus_per_run, gpus=ray.gpus_per_run)
    results: dict[int, dict] = {}
    fan_out(job_fn, specs, executor, on_done=lambda spec, r: results.__setitem__(spec["job"], r),
            on_error=lambda spec, e: results.__setitem__(spec["job"], {"job": spec["job"], "returncode": None,
                                                                       "run_dir": spec["run_dir"], "error": e}))
    return [results[n] for n in sorted(results)]


def report(results: list[dict]) -> tuple[str, int]:
    """(the table of a sweep's jobs, exit code: 0 when every job succeeded, else 1)."""
    lines = ["job  exit  run folder / last line"]
    for r in results:
        last = (r.get("output") or [r.get("error", "")])[-1] if (r.get("output") or r.get("error")) else ""
        lines.append(f"{r['job']:>3}  {str(r['returncode']):>4}  {r['run_dir']}" + ("" if r["returncode"] == 0
                                                                                  else f"  ({last})"))
    return "\n".join(lines), int(any(r["returncode"] != 0 for r in results))
