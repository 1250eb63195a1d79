"""Quadrotor hover policies scored on Learning to Fly's own validation, as robo can fly it: one table.

L2F's validation (``src/config/validation.h`` of rl-tools/learning-to-fly at d401e35, its parameters in
``src/config/parameters.h``) flies episodes of 500 steps (5 s at 100 Hz) on the Crazyflie from its training
distribution, with disturbances:
- starts: 10 % at the reference at rest ("guidance"); the others within 0.2 m, tilted up to 90 deg, moving at up to
  1 m/s and 1 rad/s, motors at hover;
- a constant random world-frame force per episode, N(0, (0.027 * 9.81 / 20) N) per axis;
- an episode terminates when the position leaves the 0.6 m box around the reference on any axis.

Reported, as L2F's validation reports them: the fraction terminated; the fraction settled (position error below
``--settle`` m from step 200 to the end; L2F's ``SettlingFractionPosition<200>``); and the mean over the episodes
that did not terminate of the largest position error after step 200 (``MaxErrorMean<POSITION, 200>``).

Differences from L2F's own run:
- The episodes are robo's seeded draws, ``--episodes`` of them (L2F flies 10).
- robo's starts lie in a 0.2 m ball (L2F: a box) and its vehicle is robo's Crazyflie (30.6 g; L2F: 27 g, with
  the same force).
- L2F's random torque (std 2.6e-5 N m) and observation noise (1-2 mm, mrad) are not applied.

    python benchmarks/l2f_validation.py --policy main=<run>/checkpoints/best/policy --policy raptor=raptor
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import print_table  # noqa: E402

from robo.evaluate import rollout  # noqa: E402
from robo.factory import make_policy  # noqa: E402
from robo.foundation.evaluate import pushed  # noqa: E402
from sims.envs import make_batched_task  # noqa: E402

STEPS, SETTLE_FROM, BOX = 500, 200, 0.6
FORCE_STD = 0.027 * 9.81 / 20  # N per axis (L2F's parameters.h)


def validation_task(n: int, seed: int, action_history: int = 0):
    """robo's hover task on the Crazyflie with L2F's validation starts, no termination of its own (the box is
    applied to the recorded flight) and no floor (L2F's simulator has none); ``action_history``: the older actions
    a policy reads after robo's 22 floats (L2F's recipe: 32)."""
    task = make_batched_task({
        "name": "hover", "episode_seconds": STEPS / 100, "action_history": action_history,
        "init": {"position_radius": 0.2, "angle_deg": 90.0, "velocity": 1.0, "angular_velocity": 1.0,
                 "guidance": 0.1, "motors_at_hover": True},
        "termination": {"floor": False, "position_error": 1e3, "velocity": 1e3, "angular_velocity": 1e3},
    }, "crazyflie", n)
    task.seed(seed)
    return task


def action_history(policy) -> int:
    """The older actions a robo MLP policy reads (its ``obs_dim`` beyond robo's 22 floats, 4 each); 0 otherwise."""
    obs_dim = getattr(getattr(policy, "config", None), "obs_dim", 22)
    return max(0, (int(obs_dim) - 22) // 4)


def score(policy, n: int, seed: int, settle: float) -> dict:
    task = validation_task(n, seed, action_history(policy))
    force = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed), dtype=task.state.dtype) * FORCE_STD
    with pushed(task, force, 0, STEPS):
        r = rollout(policy, task, STEPS / 100)
    offset = r.states[:, :, :3] - r.reference                     # (T, B, 3) m
    terminated = (np.abs(offset) > BOX).any(-1).any(0)              # (B,)
    err = np.linalg.norm(offset, axis=-1)[SETTLE_FROM:]             # (T - 200, B)
    ok = ~terminated & np.isfinite(err).all(0)
    late_max = err.max(0)
    return {"episodes": n, "terminated": f"{terminated.mean():.1%}",
            "settled": f"{(ok & (late_max < settle)).mean():.1%}",
            "mean max error after 200 steps (m)": float(late_max[ok].mean()) if ok.any() else float("nan"),
            "median final error (m)": float(np.median(err[-1][ok])) if ok.any() else float("nan")}


def policy_spec(word: str) -> tuple[str, dict]:
    name, _, spec = word.partition("=")
    if not spec:
        raise argparse.ArgumentTypeError(f"--policy {word!r}: give NAME=raptor, NAME=robo_foundation or NAME=<folder>")
    kind = spec if spec in ("raptor", "robo_foundation") else "checkpoint"
    return name, {"kind": kind, "path": None if kind != "checkpoint" else spec}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", type=policy_spec, action="append", required=True, help="NAME=raptor|<folder>")
    ap.add_argument("--episodes", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settle", type=float, default=0.2, help="m: settled below this from step 200 on")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for name, spec in args.policy:
        try:
            policy = make_policy(spec)
        except (FileNotFoundError, ValueError) as e:
            ap.exit(2, f"{ap.prog}: error: --policy {name}: {e}\n")
        rows.append({"policy": name, **score(policy, args.episodes, args.seed, args.settle)})
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
