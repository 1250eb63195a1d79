"""Do curricula help where the fixed recipe fails? Train quadrotor policies with and without one and print one table.

Settings (``--settings``, comma-separated):
- ``randomized``: hover on Crazyflie-class quadrotors randomized as ``configs/curriculum/level_replay.yaml`` draws them
  (25-40 g, thrust-to-weight 1.4-2.5, rising motor time constants 30-80 ms and falling 2-5x slower). The fixed
  recipe is domain randomization over the same 1,000 levels drawn uniformly (``curriculum.replay.replay_prob=0``);
  the curriculum is prioritized level replay (PLR, ``curriculum=level_replay``). Scored on 256 held-out quadrotors
  of the same ranges (randomization seeds from 1,000,000 on, never a level), one random start each (0.5 m, 30 deg),
  5 s; and on the quarter of them with the lowest thrust-to-weight (the heavy ones).
- ``figure_eight``: random figure-eights (amplitude 0.5-1.5 m, period 4-10 s, random phase) on the nominal Crazyflie,
  curriculum none against Learning to Fly's penalty ramp (``curriculum=l2f``). Scored by the tracking RMSE over the
  last 6 s of 12-s flights on 256 random figure-eights (seed 0).

Each run is ``robo train`` (``configs/train.yaml`` with this benchmark's defaults, then the command line's
overrides) and keeps its best-evaluated actor (nominal hover evaluations), which is what is scored.

    python benchmarks/curriculum.py                                   # both settings, seed 0 (about 25 min here)
    python benchmarks/curriculum.py --settings randomized --seeds 2 total_steps=200000
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import command_config, parse, parser  # benchmarks/common.py (this folder is on sys.path)
from omegaconf import OmegaConf
from table import print_table

from policies.registry import load_policy
from robo.evaluate import flight_metrics, make_fleet_task, rollout
from robo.rl.trainer import BEST, Trainer
from sims.envs import make_batched_task
from sims.quadrotor.randomization import RandomizationConfig, sample_param_list

BENCH_DEFAULTS = ["algo=sac_fast", "total_steps=300000", "eval_every=25000", "checkpoint_every=${total_steps}",
                  "video.enabled=false"]
FIGURE_EIGHT = ["task=figure_eight", "task.figure_eight_randomization.amplitude=[0.5,1.5]",
                "task.figure_eight_randomization.period=[4.0,10.0]", "task.figure_eight_randomization.random_phase=true",
                "eval.seconds=12"]
RUNS = {  # setting -> {row name: overrides}
    "randomized": {"uniform levels (domain randomization)": ["curriculum=level_replay", "curriculum.replay.replay_prob=0"],
                   "prioritized level replay": ["curriculum=level_replay"]},
    "figure_eight": {"none": [*FIGURE_EIGHT, "curriculum=none"], "l2f": [*FIGURE_EIGHT, "curriculum=l2f"]},
}
HELD_OUT_SEED = 1_000_000
COLUMNS = ["setting", "curriculum", "seed", "best_step", "median_error_m", "crashes", "success", "heavy_median_m",
           "heavy_crashes", "rmse_m", "train_s"]


def held_out(cfg, policy, n: int = 256) -> dict:
    """Hover ``policy`` on ``n`` held-out quadrotors of the run's randomization, one random start each (the test
    task: 0.5 m, 30 deg, at rest); the median final error and crashes over all and over the heavy quarter."""
    randomization = RandomizationConfig.from_dict(OmegaConf.to_container(cfg.curriculum.randomization, resolve=True))
    quads = sample_param_list(randomization, n, HELD_OUT_SEED)
    r = rollout(policy, make_fleet_task("hover", quads, 1, 0), 5.0)
    m = flight_metrics(r, success_radius=0.05)
    heavy = np.argsort([q.thrust_to_weight for q in quads])[: n // 4]
    final = np.where(r.crashed_at < 0, r.position_error[-1], np.inf)[heavy]
    return {"median_error_m": m["final_median_position_error"], "crashes": m["crashes"], "success": m["success_rate"],
            "heavy_median_m": float(np.median(final)), "heavy_crashes": int((r.crashed_at[heavy] >= 0).sum())}


def figure_eight_rmse(cfg, policy, n: int = 256) -> dict:
    """Fly ``policy`` on ``n`` of the run's random figure-eights (the test task: starts and termination are not the
    train-time shaping's) for 12 s; the RMSE over the last 6 s."""
    shape = OmegaConf.to_container(cfg.task.figure_eight_randomization, resolve=True)
    task = make_batched_task({"name": "figure_eight", "figure_eight_randomization": shape}, "crazyflie", n)
    task.seed(0)
    m = flight_metrics(rollout(policy, task, 12.0))
    return {"rmse_m": m["rmse"], "crashes": m["crashes"]}


def main() -> None:
    ap = parser(__doc__, "train", "total_steps=200000 seed=1")
    ap.add_argument("--settings", default="randomized,figure_eight", help="comma-separated: randomized, figure_eight")
    ap.add_argument("--seeds", type=int, default=1, help="runs with seeds 0..N-1 per row")
    args = parse(ap)
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="robo-curriculum-") as tmp:
        for setting in args.settings.split(","):
            for name, words in RUNS[setting].items():
                for seed in range(args.seeds):
                    cfg = command_config(ap, "train", args.overrides, defaults=[*BENCH_DEFAULTS, *words],
                                         forced=[f"seed={seed}"])
                    t0 = time.time()
                    trainer = Trainer(OmegaConf.to_container(cfg, resolve=True), Path(tmp) / f"{setting}_{name}_{seed}")
                    trainer.train(progress=False)
                    wall = time.time() - t0
                    policy = load_policy(trainer.ckpt_dir / BEST / "policy")
                    score = held_out(cfg, policy) if setting == "randomized" else figure_eight_rmse(cfg, policy)
                    rows.append({"setting": setting, "curriculum": name, "seed": seed,
                                 "best_step": trainer.best["step"], "train_s": wall, **score})
                    print(rows[-1], flush=True)
    print_table(rows, COLUMNS)


if __name__ == "__main__":
    main()
