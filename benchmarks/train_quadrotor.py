"""Issue 3's measurements: train quadrotor policies from scratch and print one table.

Rows:
- hover, curriculum none / l2f (configs/curriculum/l2f.yaml), seeds 0..S-1: wall-clock time and env steps until
  the Crazyflie hover policy reaches median final error < 5 cm and 0 crashes on 256 evaluation envs from random
  starts (0.5 m, 30 deg) at rest; measured at evaluations every ``eval_every`` steps (wall time includes the
  evaluations; the run stops at the first one that reaches it). ``trim.starts=N``: actors evaluated and kept
  trimmed over N starts, as the main job deploys them.
- robustness of the best run's hover policy (its ``checkpoints/best``): nominal, +-20 % mass and
  thrust, and a push of 1 m/s (the issue's 10 N s would be 330 m/s on a 30 g Crazyflie).
- figure-eight tracking RMSE of a policy trained on ``task=figure_eight``.

The hover runs are ``robo train`` runs: every setting is a Hydra override of ``configs/train.yaml``, applied
after this benchmark's defaults (``BENCH_DEFAULTS``); ``--curricula`` and ``--seeds`` pick the runs.

    python benchmarks/train_quadrotor.py                 # full (about 25 min on one core)
    python benchmarks/train_quadrotor.py --seeds 1 --skip-figure-eight total_steps=200000
    python benchmarks/train_quadrotor.py --curricula none --skip-figure-eight trim.starts=16   # trimmed, as deployed
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import command_config, parse, parser  # benchmarks/common.py (this folder is on sys.path)
from omegaconf import OmegaConf

from robo.evaluate import flight_metrics, rollout
from robo.foundation.evaluate import pushed
from policies.registry import load_policy
from robo.rl.trainer import BEST, Trainer, evaluation_key
from robo.run_dir import write_json
from sims.envs import make_batched_task
from sims.quadrotor import ParamsBatch, preset

LEARNING_TO_FLY_SECONDS = 18.0
# Overrides of configs/train.yaml applied before the command line's: stop at the first evaluation < 5 cm, 0 crashes.
BENCH_DEFAULTS = ["total_steps=400000", "eval_every=25000", "checkpoint_every=${total_steps}",
                  "stop.median_position_error=0.05", "stop.crashes=0"]


def train(cfg, out: Path) -> tuple[Trainer, dict, float]:
    t0 = time.time()
    trainer = Trainer(OmegaConf.to_container(cfg, resolve=True), out)
    final = trainer.train(progress=False)
    return trainer, final, time.time() - t0


def time_to_hover(curriculum: str, cfg, out: Path) -> dict:
    seed = int(cfg.seed)
    trainer, _, wall = train(cfg, out / f"hover_{curriculum}_{seed}")
    hit = next((h for h in trainer.history if h["final_median_position_error"] < 0.05 and h["crashes"] == 0), None)
    return {"curriculum": curriculum, "seed": seed, "reached": hit is not None,
            "steps": hit["step"] if hit else None, "wall_s": hit["wall_time"] if hit else None,
            "trainer": trainer, "total_wall": wall}


def test_task(cfg) -> dict:
    """The hover test task (starts at rest within 0.5 m and 30 deg) with the run's action history, not its
    train-time starts and terminations (a position-integral actor integrates its error itself)."""
    return {"name": "hover", "action_history": int(cfg.task.action_history)}


def robustness(policy, task_cfg: dict, seed: int = 0, n: int = 256) -> dict[str, dict]:
    """Hover the ``task_cfg`` (``test_task``) from random starts on: nominal Crazyflie; mass and thrust each scaled
    by U(0.8, 1.2) per env; and a push: a 0.1 s force at t = 1 s giving a velocity change of 1 m/s
    (an impulse of 0.0306 N s on the 30.6 g Crazyflie)."""
    cf = preset("crazyflie")
    rng = np.random.default_rng(seed)
    out = {}
    task = make_batched_task(task_cfg, "crazyflie", n)
    task.seed(seed)
    out["nominal"] = flight_metrics(rollout(policy, task, 5.0))
    ms, ts = rng.uniform(0.8, 1.2, n), rng.uniform(0.8, 1.2, n)
    params = [cf.replace(mass=cf.mass * m, thrust_curve=np.asarray(cf.thrust_curve) * t) for m, t in zip(ms, ts)]
    task = make_batched_task(task_cfg, "crazyflie", n)
    task.sim.set_params(ParamsBatch.from_params(params))
    task.seed(seed)
    out["mass+thrust +-20%"] = flight_metrics(rollout(policy, task, 5.0))
    task = make_batched_task(task_cfg, "crazyflie", n)
    task.seed(seed)
    out["push 1 m/s at 1 s"] = flight_metrics(_pushed_rollout(policy, task, impulse=cf.mass * 1.0))
    return out


def _pushed_rollout(policy, task, impulse: float, at: float = 1.0, duration: float = 0.1, seconds: float = 5.0):
    """Rollout with a horizontal world-frame push of ``impulse`` N s spread over ``duration`` s."""
    force = torch.zeros(task.num_envs, 3, dtype=task.state.dtype)
    force[:, 0] = impulse / duration
    with pushed(task, force, int(round(at / task.dt)), int(round(duration / task.dt))):
        return rollout(policy, task, seconds)


def main() -> None:
    ap = parser(__doc__, "train", "trim.starts=16 total_steps=200000 algo.kwargs.learning_rate=0.0005")
    ap.add_argument("--seeds", type=int, default=3, help="hover runs with seeds 0..N-1 per curriculum")
    ap.add_argument("--curricula", default="none,l2f", help="comma-separated configs/curriculum names")
    ap.add_argument("--figure-eight-steps", type=int, default=400_000,
                    help="total_steps of the task=figure_eight run (the overrides configure the hover runs)")
    ap.add_argument("--skip-figure-eight", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parse(ap)
    configs = {c: [command_config(ap, "train", args.overrides, defaults=BENCH_DEFAULTS,
                                      forced=[f"curriculum={c}", f"seed={s}"])
                   for s in range(args.seeds)] for c in args.curricula.split(",")}
    n = args.figure_eight_steps
    figure_eight = None if args.skip_figure_eight else command_config(ap, "train", [
        "task=figure_eight", f"total_steps={n}", f"eval_every={n}", "eval.seconds=12", f"checkpoint_every={n}"])
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="robo-bench-") as tmp:
        out = Path(tmp)
        results = {c: [time_to_hover(c, cfg, out) for cfg in cs] for c, cs in configs.items()}
        for c, rs in results.items():
            cfg = configs[c][0]
            for r in rs:
                trim = f", trimmed over {cfg.trim.starts} starts" if cfg.trim.starts else ""
                rows.append((f"hover to <5 cm, 0 crashes (curriculum={c}{trim}, seed {r['seed']})",
                             f"{r['steps']} steps, {r['wall_s']:.0f} s" if r["reached"]
                             else f"not reached in {cfg.total_steps} steps, {r['total_wall']:.0f} s (medians "
                             + ", ".join(f"{h['final_median_position_error']:.3f}" for h in r["trainer"].history)
                             + f" m at the evaluations; crashes {r['trainer'].history[-1]['crashes']} at the last)"))
            hit = [r for r in rs if r["reached"]]
            if hit:
                steps, wall = np.mean([r["steps"] for r in hit]), np.mean([r["wall_s"] for r in hit])
                rows.append((f"  mean over reached seeds (curriculum={c}, {len(hit)}/{len(rs)})",
                             f"{steps:.0f} steps, {wall:.0f} s = "
                             f"{wall / LEARNING_TO_FLY_SECONDS:.1f}x Learning to Fly's 18 s"))
        best = min((r for rs in results.values() for r in rs), key=lambda r: evaluation_key(r["trainer"].best))
        policy = load_policy(best["trainer"].ckpt_dir / BEST / "policy")
        for name, m in robustness(policy, test_task(configs[best["curriculum"]][0])).items():
            rows.append((f"robustness ({name}), curriculum={best['curriculum']} seed {best['seed']}",
                         f"median {m['final_median_position_error']:.3f} m, crashes {m['crashes']}/256, "
                         f"success(<10 cm) {m['success_rate']:.2f}"))
        if figure_eight is not None:
            trainer, final, wall = train(figure_eight, out / "figure_eight")
            task = make_batched_task("figure_eight", "crazyflie", 256)
            task.seed(0)
            m = flight_metrics(rollout(trainer.policy(), task, 12.0))
            rows.append((f"figure-eight tracking ({args.figure_eight_steps} steps, {wall:.0f} s training)",
                         f"RMSE {m['rmse']:.3f} m over the last 6 s, crashes {m['crashes']}/256"))
    width = max(len(r[0]) for r in rows)
    print(f"\n| {'measurement':<{width}} | result |\n|{'-' * (width + 2)}|--------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    if args.json:
        write_json(args.json, rows)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
