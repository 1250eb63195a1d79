"""Population training's cost (``robo train population=N``, ``robo.rl.population_trainer``): for each population
size, one run of N independent SAC hover policies from scratch, then each member's deployed actor flown on the main
job's 256 seeded starts. Prints one table: env steps/s and gradient steps/s (all members together, training only),
the members under 5 cm with 0 crashes, each member's first evaluation under 5 cm with 0 crashes (env steps, and the
training seconds to reach it, amortized over the population), the training seconds per policy, and the FLOP rate
of the updates (an analytic count per gradient step: the members' forward and backward passes) against a matmul
of the same shapes and a large matmul timed in the same run.

    python benchmarks/population.py --sizes 1 8 64
    python benchmarks/population.py --sizes 64 sim.step_backend=torch
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_config, parser, parse  # noqa: E402
from table import print_table  # noqa: E402

from omegaconf import OmegaConf  # noqa: E402

from robo.rl.population_trainer import PopulationTrainer  # noqa: E402
from robo.run_dir import seed_run, write_json  # noqa: E402

DEFAULTS = ["+experiment=hover_quick", "video.enabled=false"]


def update_flop(cfg) -> float:
    """FLOP of one member's gradient step: 2 per multiply-add, forward passes (actor at obs and next obs, the
    twin critics at the batch, the targets at next obs, the frozen critics at the actor's actions) and backward
    (about twice the forward of the actor, the critics and the frozen critics)."""
    def macs(sizes):
        return sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    actor = macs([cfg.actor_obs_dim, *cfg.pi]) + cfg.pi[-1] * 2 * cfg.action_dim
    twin = 2 * macs([cfg.obs_dim + cfg.action_dim, *cfg.qf, 1])
    forward = 2 * actor + 3 * twin
    backward = 2 * (actor + 2 * twin)
    return 2.0 * cfg.batch_size * (forward + backward)


def matmul_gflops(shape: tuple[int, int, int, int], seconds: float = 1.0) -> float:
    """GFLOP/s of ``torch.bmm`` (n, b, i) @ (n, i, o) on this process's threads."""
    n, b, i, o = shape
    x, w = torch.randn(n, b, i), torch.randn(n, i, o)
    torch.bmm(x, w)
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        torch.bmm(x, w)
        reps += 1
    return 2.0 * n * b * i * o * reps / (time.perf_counter() - t0) / 1e9


def first_under(history: list[dict], radius: float = 0.05) -> int | None:
    return next((h["step"] for h in history if h["crashes"] == 0 and h["final_median_position_error"] < radius), None)


def main(argv=None) -> None:
    ap = parser(__doc__, "train", "total_steps=300000 sim.step_backend=c")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64], help="population sizes (default 1 8 64)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parse(ap, argv)
    rows = []
    for n in args.sizes:
        cfg = command_config(ap, "train", args.overrides, DEFAULTS, [f"population={n}"])
        c = OmegaConf.to_container(cfg, resolve=True)
        seed_run(int(c["seed"]), int(c["threads"]))
        with tempfile.TemporaryDirectory() as tmp:
            trainer = PopulationTrainer(c, Path(tmp))
            s = trainer.train()
            histories = trainer.history
        train_s = s["seconds"]["rollout"] + s["seconds"]["update"]
        firsts = [first_under(h) for h in histories]
        reached = [f for f in firsts if f is not None]
        steps = s["env_steps_per_member"]
        errors = np.array([m["deployed"]["final_median_position_error"] for m in s["members"]])
        crashes = np.array([m["deployed"]["crashes"] for m in s["members"]])
        flop = update_flop(trainer.config) * trainer.sac.updates * n
        rows.append({
            "population": n, "backend": (c.get("sim") or {}).get("step_backend", "torch"), "env steps/s": s["env_steps_per_second"],
            "grad steps/s": s["gradient_steps_per_second"],
            "< 5 cm, 0 crashes": f"{s['members_under_5cm_without_crash']} of {n}",
            "median error (cm)": float(100 * np.median(errors)), "members crashing": int((crashes > 0).sum()),
            "first < 5 cm (k steps)": f"{np.median(reached) / 1e3:.0f}" if reached else "-",
            "s to it per policy": float(np.median(reached) / steps * train_s / n) if reached else "-",
            "train s per policy": train_s / n,
            "update GFLOP/s": flop / max(s["seconds"]["update"], 1e-9) / 1e9,
            "bmm GFLOP/s": matmul_gflops((2 * n, trainer.config.batch_size, 64, 64)),
        })
        print_table(rows[-1:], list(rows[-1]))
        sys.stdout.flush()
    print(f"\nlarge matmul (2048 x 2048, {torch.get_num_threads()} threads): {matmul_gflops((1, 2048, 2048, 2048)):.1f} "
          "GFLOP/s")
    print_table(rows, list(rows[0]))
    if args.json:
        write_json(args.json, rows)


if __name__ == "__main__":
    main()
