r"""RAPTOR-style foundation policy from N RL teachers, against RAPTOR's released policy; prints one table.

Trains (or resumes, from ``--run-dir``'s manifest) the teachers of ``configs/foundation.yaml`` on Ray,
distils GRU students from evenly mass-spread subsets of ``--counts`` teachers (and an MLP student from
all), and evaluates them, RAPTOR's released policy and an untrained GRU on the fixed held-out set.
Every other setting is a Hydra override of ``configs/foundation.yaml`` (as for ``robo foundation``),
applied after this benchmark's smaller defaults (``BENCH_DEFAULTS``).

    # measured on 2 shared cores: teachers 346 s (4 x 150k steps, 2 at a time), DAgger + eval ~1 min
    python benchmarks/foundation.py --counts 2 4 teacher.total_steps=150000 teacher.checkpoint_every=75000 \
        dagger.iterations=5 dagger.steps_per_iteration=300 dagger.epochs=2 eval.quadrotors=16
    python benchmarks/foundation.py --counts 4 16 64 teachers=64 teacher.total_steps=300000 ray.address=auto
    python benchmarks/foundation.py --run-dir runs/f16 --counts 16 --no-mlp teachers=16 teacher.total_steps=300000 \
        +experiment=foundation_tracking   # the tracking preset's students
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from omegaconf import OmegaConf

from robo.foundation import FoundationRunConfig, Manifest, evaluate_all, load_teachers, run_teachers, teacher_specs
from robo.foundation.pipeline import distil
from robo.foundation.teachers import teacher_summary
from robo.foundation.trim import trim_record
from robo.run_dir import write_json
from common import command_config, fail, parse, parser  # benchmarks/ is on sys.path when run as a script

COLUMNS = ("hover_success_rate", "hover_median_error_m", "hover_mean_error_m", "hover_crash_rate",
           "figure_eight_rmse_m", "figure_eight_crash_rate", "push_recovery_rate")
# Overrides applied before the command line's: a run of a few minutes on two cores.
BENCH_DEFAULTS = ["teachers=4", "teacher.total_steps=60000", "teacher.eval_envs=32"]


def main() -> None:
    ap = parser(__doc__, "foundation", "seed=1 dagger.seed=3 teacher.trim=false "
                "\"teacher.overrides=['task.init.velocity=1.5']\" dagger.validation_quadrotors=16")
    ap.add_argument("--run-dir", type=Path, default=Path("runs/foundation_bench"))
    ap.add_argument("--counts", type=int, nargs="+", default=[2, 4], help="teachers per GRU student")
    ap.add_argument("--gru-hidden", type=int, nargs="+", default=None,
                    help="GRU student widths, one row each (default: dagger.gru_hidden)")
    ap.add_argument("--mlp", action=argparse.BooleanOptionalAction, default=True,
                    help="also distil the non-adaptive MLP student from all teachers")
    ap.add_argument("--pool", type=Path, nargs="*", default=[], metavar="RUN_DIR",
                    help="also distil from these runs' done teachers (e.g. a run with another seed)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parse(ap)
    node = command_config(ap, "foundation", args.overrides, defaults=BENCH_DEFAULTS)
    try:
        cfg = FoundationRunConfig.from_dict(OmegaConf.to_container(node, resolve=True))
    except ValueError as e:  # a value the pipeline's config refuses
        fail(ap, " ".join(str(e).split()))
    logging.basicConfig(level=logging.INFO)
    torch.set_num_threads(1)
    trim, steps, quadrotors = cfg.teacher.trim, cfg.teacher.total_steps, cfg.eval.quadrotors
    t0 = time.time()
    manifest = run_teachers(cfg, args.run_dir)
    rows = [(f"teachers: {cfg.teachers} x {steps} env steps, Ray num_cpus={cfg.ray.num_cpus}",
             f"{time.time() - t0:.0f} s this call (0 if all were in the manifest)")]
    if args.pool:
        manifest = Manifest.pooled([manifest, *(Manifest.load(d / "manifest.json") for d in args.pool)])
    all_teachers, all_quads = load_teachers(manifest, trim=trim)  # trims each teacher once (trim.json)
    for t in manifest.done():
        s, record = t["score"], trim_record(t) if trim else None
        rows.append((f"  teacher {t['index']} ({t['mass']:.3f} kg) on its own quad",
                     f"{t['wall_s']:.0f} s wall, median error {s['final_median_position_error']:.3f} m, "
                     f"crashes {int(s['crashes'])}/{int(s['num_envs'])}"
                     + (f"; trimmed {record['median_error_m']:.3f} -> {record['trimmed_median_error_m']:.3f} m"
                        if record else "")))
    if args.pool:
        rows.append((f"  pooled with {', '.join(map(str, args.pool))}", f"{len(manifest.done())} teachers"))
    summary = teacher_summary(manifest)
    rows.append(("  wall time per teacher (mean)", f"{summary['teacher_wall_s_mean']:.0f} s"))
    task = teacher_specs(cfg, args.run_dir)[0]["config"]["task"]
    policies = {}
    for count in sorted(set(args.counts)):
        teachers, quads = load_teachers(manifest, count, trim=trim)
        for hidden in args.gru_hidden or [cfg.dagger.gru_hidden]:
            t = time.time()
            name = f"student GRU-{hidden}, {count} teachers"
            policies[name], _ = distil("gru", teachers, quads, task,
                                       replace(cfg, dagger=replace(cfg.dagger, gru_hidden=hidden)))
            rows.append((f"  DAgger wall time, {name}", f"{time.time() - t:.0f} s"))
    if args.mlp:
        policies[f"student MLP, {len(all_teachers)} teachers"], _ = distil("mlp", all_teachers, all_quads, task, cfg)
    logging.info("rows so far: %s", rows)
    results = evaluate_all(cfg, policies)
    for name, m in results.items():
        rows.append((f"held-out ({quadrotors} quads): {name}",
                     ", ".join(f"{k.replace('_rate', '').replace('_m', ' m')} {m[k]:.3f}" for k in COLUMNS)))
        bands = {k.split(" ", 1)[1]: v for k, v in m.items() if k.startswith("hover_success ")}
        rows.append(("    hover success by mass", ", ".join(f"{b} {v:.2f}" for b, v in bands.items())))
    width = max(len(r[0]) for r in rows)
    print(f"\n| {'measurement':<{width}} | result |\n|{'-' * (width + 2)}|--------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    if args.json:
        write_json(args.json, {"rows": rows, "results": results})
    sys.stdout.flush()


if __name__ == "__main__":
    main()
