"""Issue 7's measurements: RAPTOR-style foundation policy from N RL teachers; prints one table.

Trains (or resumes, from ``--run-dir``'s manifest) ``--teachers`` teachers on Ray, distils GRU
students from evenly mass-spread subsets of ``--counts`` teachers (and an MLP student from all),
and evaluates them, RAPTOR's released policy and an untrained GRU on the fixed held-out set
(``--quadrotors`` quadrotors across 0.02-3 kg, 4 starts each).

    # measured on 2 shared cores: teachers 346 s (4 x 150k steps, 2 at a time), DAgger + eval ~1 min
    python benchmarks/foundation.py --teachers 4 --steps 150000 --counts 2 4 --iterations 5 \
        --dagger-steps 300 --epochs 2 --quadrotors 16
    python benchmarks/foundation.py --teachers 64 --steps 300000 --counts 4 16 64 --address auto  # cluster
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from robo.foundation import (DaggerConfig, FoundationRunConfig, Manifest, evaluate_all, load_teachers, run_teachers,
                             teacher_specs)
from robo.foundation.pipeline import distil
from robo.foundation.teachers import teacher_summary
from robo.foundation.trim import trim_record

COLUMNS = ("hover_success_rate", "hover_median_error_m", "hover_mean_error_m", "hover_crash_rate",
           "figure_eight_rmse_m", "figure_eight_crash_rate", "push_recovery_rate")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", type=Path, default=Path("runs/foundation_bench"))
    ap.add_argument("--teachers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60_000, help="env steps per teacher")
    ap.add_argument("--eval-every", type=int, default=50_000, help="teacher evaluations (the best one is kept)")
    ap.add_argument("--teacher-overrides", nargs="*", default=[], metavar="KEY=VALUE",
                    help="Hydra overrides of configs/train.yaml for the teachers, e.g. task.init.velocity=1.5")
    ap.add_argument("--finetune-steps", type=int, default=0,
                    help="a second RL stage per teacher from its first stage's networks (0: none)")
    ap.add_argument("--finetune-overrides", nargs="*", default=[], metavar="KEY=VALUE",
                    help="Hydra overrides of configs/train.yaml for the second stage, e.g. task=figure_eight")
    ap.add_argument("--teacher-init-from", metavar="RUN_DIR",
                    help="start each teacher from this run's teacher for the same quadrotor (same --teachers, --seed)")
    ap.add_argument("--counts", type=int, nargs="+", default=[2, 4], help="teachers per GRU student")
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--address", default=None, help="'auto' to join a running Ray cluster")
    ap.add_argument("--quadrotors", type=int, default=32, help="held-out quadrotors")
    ap.add_argument("--iterations", type=int, default=DaggerConfig.iterations, help="DAgger iterations")
    ap.add_argument("--dagger-steps", type=int, default=500, help="steps per DAgger iteration")
    ap.add_argument("--epochs", type=int, default=4, help="BPTT epochs per DAgger iteration")
    ap.add_argument("--starts", type=int, default=4, help="random starts per held-out quadrotor")
    ap.add_argument("--gru-hidden", type=int, nargs="+", default=[16], help="GRU student widths (RAPTOR: 16)")
    ap.add_argument("--validation", type=int, default=0, metavar="N",
                    help="keep each student's best DAgger iteration on N validation quadrotors (0: the last)")
    ap.add_argument("--validation-figure-eight", action="store_true",
                    help="validation flies the figure-eight too and ranks equal hover success by it")
    ap.add_argument("--restarts", type=int, default=1,
                    help="students per row, the best validated kept (with --ensemble > 1: refinements)")
    ap.add_argument("--ensemble", type=int, default=1,
                    help="students per row (DAgger seeds from --dagger-seed) refined into one from their mean")
    ap.add_argument("--refine-quadrotors", type=int, default=DaggerConfig.refine_quadrotors,
                    help="new quadrotors the refined student flies (with --ensemble > 1)")
    ap.add_argument("--refine-feedforward", type=float, default=DaggerConfig.refine_feedforward, metavar="S2",
                    help="the students label the refined student's moving references this x a_ref ahead")
    ap.add_argument("--refine-trim", action="store_true",
                    help="trim the students' mean on each refine quadrotor before it labels (dagger.refine_trim)")
    ap.add_argument("--dagger-seed", type=int, default=DaggerConfig.seed, help="DAgger's seed (restarts count from it)")
    ap.add_argument("--mlp", action=argparse.BooleanOptionalAction, default=True,
                    help="also distil the non-adaptive MLP student from all teachers")
    ap.add_argument("--variants", type=int, default=1, help="quadrotors per teacher in DAgger (its own + variants)")
    ap.add_argument("--variant-scale", type=float, default=0.1, help="variants' parameters within +- this fraction")
    ap.add_argument("--dagger-tasks", type=json.loads, nargs="+", default=DaggerConfig().tasks, metavar="JSON",
                    help="what the students fly in DAgger: overrides of the teachers' task (envs split evenly), "
                         "e.g. '{}' '{\"name\": \"figure_eight\"}' for hover and a figure-eight; default: hover only")
    ap.add_argument("--ema-decay", type=float, default=DaggerConfig.ema_decay,
                    help="validate and keep a moving average of the students' weights (0: the raw weights)")
    ap.add_argument("--label-feedforward", type=float, default=DaggerConfig.label_feedforward, metavar="S2",
                    help="teachers label moving references as if aiming this x the reference acceleration ahead")
    ap.add_argument("--seed", type=int, default=0, help="samples the teachers' quadrotors (not the held-out set)")
    ap.add_argument("--pool", type=Path, nargs="*", default=[], metavar="RUN_DIR",
                    help="also distil from these runs' done teachers (e.g. a run with another --seed)")
    ap.add_argument("--trim", action=argparse.BooleanOptionalAction, default=True,
                    help="remove each teacher's steady hover offset on its own quadrotor before DAgger")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    torch.set_num_threads(1)
    cfg = FoundationRunConfig.from_dict({
        "teachers": args.teachers, "seed": args.seed,
        "teacher": {"overrides": args.teacher_overrides, "init_from": args.teacher_init_from, "total_steps": args.steps,
                    "finetune_steps": args.finetune_steps, "finetune_overrides": args.finetune_overrides,
                    "eval_every": min(args.eval_every, args.steps),
                    "checkpoint_every": max(args.steps // 2, 1),
                    "eval_envs": 32, "trim": args.trim},
        "ray": {"num_cpus": args.num_cpus, "address": args.address},
        "dagger": {"iterations": args.iterations, "steps_per_iteration": args.dagger_steps, "epochs": args.epochs,
                   "validation_quadrotors": args.validation, "restarts": args.restarts, "seed": args.dagger_seed,
                   "ensemble": args.ensemble, "refine_quadrotors": args.refine_quadrotors,
                   "refine_feedforward": args.refine_feedforward, "refine_trim": args.refine_trim,
                   "validation_figure_eight": args.validation_figure_eight,
                   "variants_per_teacher": args.variants, "variant_scale": args.variant_scale,
                   "tasks": args.dagger_tasks,
                   "ema_decay": args.ema_decay, "label_feedforward": args.label_feedforward},
        "eval": {"quadrotors": args.quadrotors, "starts": args.starts}})
    t0 = time.time()
    manifest = run_teachers(cfg, args.run_dir)
    rows = [(f"teachers: {args.teachers} x {args.steps} env steps, Ray num_cpus={args.num_cpus}",
             f"{time.time() - t0:.0f} s this call (0 if all were in the manifest)")]
    if args.pool:
        manifest = Manifest.pooled([manifest, *(Manifest.load(d / "manifest.json") for d in args.pool)])
    all_teachers, all_quads = load_teachers(manifest, trim=args.trim)  # trims each teacher once (trim.json)
    for t in manifest.done():
        s, trim = t["score"], trim_record(t) if args.trim else None
        rows.append((f"  teacher {t['index']} ({t['mass']:.3f} kg) on its own quad",
                     f"{t['wall_s']:.0f} s wall, median error {s['final_median_position_error']:.3f} m, "
                     f"crashes {int(s['crashes'])}/{int(s['num_envs'])}"
                     + (f"; trimmed {trim['median_error_m']:.3f} -> {trim['trimmed_median_error_m']:.3f} m"
                        if trim else "")))
    if args.pool:
        rows.append((f"  pooled with {', '.join(map(str, args.pool))}", f"{len(manifest.done())} teachers"))
    summary = teacher_summary(manifest)
    rows.append(("  wall time per teacher (mean)", f"{summary['teacher_wall_s_mean']:.0f} s"))
    task = teacher_specs(cfg, args.run_dir)[0]["config"]["task"]
    policies = {}
    for count in sorted(set(args.counts)):
        teachers, quads = load_teachers(manifest, count, trim=args.trim)
        for hidden in args.gru_hidden:
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
        rows.append((f"held-out ({args.quadrotors} quads): {name}",
                     ", ".join(f"{k.replace('_rate', '').replace('_m', ' m')} {m[k]:.3f}" for k in COLUMNS)))
        bands = {k.split(" ", 1)[1]: v for k, v in m.items() if k.startswith("hover_success ")}
        rows.append(("    hover success by mass", ", ".join(f"{b} {v:.2f}" for b, v in bands.items())))
    width = max(len(r[0]) for r in rows)
    print(f"\n| {'measurement':<{width}} | result |\n|{'-' * (width + 2)}|--------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "results": results}, indent=1, default=float))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
