"""Scripted push-T experts in gym-pusht and in robo's MuJoCo push-T, each zero-shot in the other's sim: one table.

robo's expert (``sims.pusht.expert``) and its gym-pusht adaptation (``sims.pusht.gym_pusht_expert``) each play
``--episodes`` episodes in the three envs (robo's push-T, robo's push-T matched to gym-pusht, ``task=pusht_matched``
with ``sims.pusht.matched.GYM_PUSHT_MATCHED``, and gym-pusht); episode i is reset with seed ``--seed + i`` (in
the matched variant and gym-pusht: gym-pusht's start i) and the expert's strategy is drawn from ``(--seed, i)``
(``iter_demos``' convention). Success is each env's own test (gym-pusht: coverage > 95 %, robo: >= 95 %),
within 300 steps. Needs gym-pusht (pip install 'robo[bench]'). (Not named gym_pusht.py:
this folder is on sys.path when the script runs, and that name would hide the gym_pusht package.)

    python benchmarks/gym_pusht_expert.py                    # 200 episodes per row, ~5 min on one core
    python benchmarks/gym_pusht_expert.py --episodes 50 --json gym_pusht_expert.json
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import sims  # noqa: F401  (registers robo/PushT-v0)
from sims.pusht import ENV_ID, PushTExpert
from sims.pusht.demos import rollout_expert
from sims.pusht.gym_pusht import MAKE_ID
from sims.pusht.gym_pusht_expert import GymPushTExpert
from sims.pusht.matched import GYM_PUSHT_MATCHED
from table import print_table
from robo.run_dir import write_json

ENVS = {"robo push-T (MuJoCo)": (ENV_ID, {}), "robo push-T matched (MuJoCo)": (ENV_ID, {"config": GYM_PUSHT_MATCHED}),
        "gym-pusht": (MAKE_ID, {})}  # name -> (gym id, make kwargs)
EXPERTS = {"robo": PushTExpert, "gym-pusht adapted": GymPushTExpert}


def play(expert_name: str, env_name: str, episodes: int, seed: int) -> dict:
    """One row: ``EXPERTS[expert_name]`` for ``episodes`` episodes in ``ENVS[env_name]`` (state observations)."""
    env_id, kwargs = ENVS[env_name]
    env = gym.make(env_id, obs_type="state", render_mode=None, **kwargs)
    expert = EXPERTS[expert_name]()
    t0 = time.perf_counter()
    success, steps = [], []
    for i in range(episodes):
        expert.rng = np.random.default_rng([seed, i])
        ep, ok = rollout_expert(env, expert, seed + i)
        success.append(ok)
        steps.append(len(ep["action"]))
    env.close()
    success, steps = np.array(success), np.array(steps)
    return {"expert": expert_name, "env": env_name, "episodes": episodes, "success": float(success.mean()),
            "mean_steps": float(steps.mean()),
            "mean_steps_success": float(steps[success].mean()) if success.any() else float("nan"),
            "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=200, help="episodes per row (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="first reset seed (default 0)")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    if args.episodes < 1:
        ap.exit(2, f"{ap.prog}: error: --episodes must be >= 1, got {args.episodes}\n")
    rows = [play(e, s, args.episodes, args.seed) for e in EXPERTS for s in ENVS]
    print_table(rows, ["expert", "env", "episodes", "success", "mean_steps", "mean_steps_success", "seconds"])
    if args.json:
        write_json(args.json, rows)
    return rows


if __name__ == "__main__":
    main()
