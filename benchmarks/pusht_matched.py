"""robo's MuJoCo push-T against gym-pusht, default and matched (``configs/task/pusht_matched.yaml``): one table.

Per variant of robo's push-T (robo's default ``PushTConfig()``, and ``sims.pusht.matched.GYM_PUSHT_MATCHED``):

- ``starts_equal``: the fraction of reset seeds 0..--episodes-1 whose start equals gym-pusht's (to 1 um, 1 urad);
- ``image_mad``: mean absolute difference (0-255 per channel) between robo's 96 x 96 image and gym-pusht's of the
  same state, over --states states drawn from gym-pusht's starts (seed --seed);
- ``block_mm@N`` / ``yaw_deg@N``: the block pose difference (position mm, yaw deg) after N control steps of the
  same pusher path open loop: the adapted expert's actions (``sims.pusht.gym_pusht_expert``) in gym-pusht
  episode i (seed i, i < --episodes), replayed from the same start; means over the episodes still running at N;
- ``agent_mm@10``: the pusher's position difference after 10 steps (the servo);
- ``pen_mm_p50`` / ``pen_mm_p95``: the median and 95th percentile of MuJoCo's deepest contact penetration at the
  end of the control steps of these paths that end in contact (gym-pusht's hard contacts keep it near 0).

Needs gym-pusht (pip install 'robo[bench]'). Not named gym_pusht*.py: this folder is on sys.path when the script
runs, and that name would hide the gym_pusht package.

    python benchmarks/pusht_matched.py                      # 100 paths, 300 images, ~1 min on one core
    python benchmarks/pusht_matched.py --episodes 20 --states 50 --json pusht_matched.json
    python benchmarks/pusht_matched.py --set timestep=0.005 --set agent_kp=12241.6 --set agent_kv=2425.3  # a choice
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import yaml

import sims  # noqa: F401  (registers robo/PushT-v0)
from sims.pusht import ENV_ID, PushTConfig
from sims.pusht.geometry import wrap_angle
from sims.pusht.gym_pusht import MAKE_ID
from sims.pusht.gym_pusht_expert import GymPushTExpert
from sims.pusht.matched import GYM_PUSHT_MATCHED, gym_pusht_start
from table import print_table
from robo.run_dir import write_json

VARIANTS = {"robo push-T": None, "robo push-T matched": GYM_PUSHT_MATCHED}
STEPS = (10, 30, 60)


def gym_paths(episodes: int, steps: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(start (5,), actions (T, 2), states (T, 5) after each action) of the adapted expert in gym-pusht
    episodes 0..episodes-1, T <= steps (robo's frame, m, rad)."""
    env = gym.make(MAKE_ID, obs_type="state", render_mode=None).unwrapped
    paths = []
    for i in range(episodes):
        _, info = env.reset(seed=i)
        expert = GymPushTExpert(seed=i)
        start, actions, states = info["state"].astype(float), [], []
        for _ in range(steps):
            actions.append(expert.act(info["state"]))
            _, _, terminated, _, info = env.step(actions[-1])
            states.append(env.state)
            if terminated:
                break
        paths.append((start, np.array(actions), np.array(states)))
    env.close()
    return paths


def image_mad(config: dict | None, states: int, seed: int) -> float:
    """Mean |robo image - gym-pusht image| (0-255) over ``states`` states from gym-pusht's start draw."""
    robo = gym.make(ENV_ID, obs_type="pixels", render_mode=None, config=config).unwrapped
    ref = gym.make(MAKE_ID, obs_type="pixels", render_mode=None).unwrapped
    rng, diffs = np.random.default_rng(seed), []
    for _ in range(states):
        pixels, _ = ref.reset(options={"state": gym_pusht_start(rng)})
        robo.set_state(ref.state)  # gym-pusht's state after its reset step
        diffs.append(np.abs(robo.render_image().astype(int) - pixels.astype(int)).mean())
    ref.close()
    return float(np.mean(diffs))


def row(name: str, config: dict | None, paths: list, episodes: int, images: int, seed: int) -> dict:
    t0 = time.perf_counter()
    env = gym.make(ENV_ID, obs_type="state", render_mode=None, config=config).unwrapped
    ref = gym.make(MAKE_ID, obs_type="state", render_mode=None).unwrapped
    equal = [np.allclose(env.reset(seed=i)[1]["state"], ref.reset(seed=i)[1]["state"], atol=1e-6, rtol=0)
             for i in range(episodes)]
    ref.close()
    err: dict[int, list] = {n: [] for n in STEPS}
    agent, pen = [], []
    for start, actions, after in paths:
        env.reset(options={"state": start})
        for t, a in enumerate(actions):
            env.step(a)
            if env.data.ncon:
                pen.append(-min(c.dist for c in env.data.contact[:env.data.ncon]) * 1e3)
            d = env.state - after[t]
            if t + 1 in err:
                err[t + 1].append((np.hypot(*d[2:4]) * 1e3, abs(float(wrap_angle(d[4]))) * 180 / np.pi))
            if t + 1 == 10:
                agent.append(np.hypot(*d[:2]) * 1e3)
    out = {"variant": name, "starts_equal": float(np.mean(equal)), "image_mad": image_mad(config, images, seed)}
    for n in STEPS:
        mm, deg = np.mean(err[n], axis=0) if err[n] else (float("nan"), float("nan"))
        out |= {f"block_mm@{n}": float(mm), f"yaw_deg@{n}": float(deg)}
    out |= {"agent_mm@10": float(np.mean(agent)), "pen_mm_p50": float(np.percentile(pen, 50)),
            "pen_mm_p95": float(np.percentile(pen, 95)), "paths@60": len(err[STEPS[-1]]),
            "seconds": time.perf_counter() - t0}
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=100, help="pusher paths and start seeds (default 100)")
    ap.add_argument("--states", type=int, default=300, help="states whose images are compared (default 300)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the image states (default 0)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a PushTConfig field of the matched variant, e.g. timestep=0.005 (repeatable)")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    if args.episodes < 1 or args.states < 1:
        ap.exit(2, f"{ap.prog}: error: --episodes and --states must be >= 1, got {args.episodes}, {args.states}\n")
    if any("=" not in kv for kv in args.set):
        ap.exit(2, f"{ap.prog}: error: --set takes KEY=VALUE, got {args.set}\n")
    changes = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    variants = dict(VARIANTS)
    if changes:
        try:
            PushTConfig.from_dict({**GYM_PUSHT_MATCHED, **changes})
        except (TypeError, ValueError) as e:
            ap.exit(2, f"{ap.prog}: error: --set: {e}\n")
        name = "robo push-T matched, " + ", ".join(f"{k}={v}" for k, v in changes.items())
        variants[name] = {**GYM_PUSHT_MATCHED, **changes}
    paths = gym_paths(args.episodes, max(STEPS))
    rows = [row(name, config, paths, args.episodes, args.states, args.seed) for name, config in variants.items()]
    cols = ["variant", "starts_equal", "image_mad"] + [f"{k}@{n}" for n in STEPS for k in ("block_mm", "yaw_deg")]
    print_table(rows, cols + ["agent_mm@10", "pen_mm_p50", "pen_mm_p95", "paths@60", "seconds"])
    if args.json:
        write_json(args.json, rows)
    return rows


if __name__ == "__main__":
    main()
