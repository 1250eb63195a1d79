"""DSRL under domain shift on the quadrotor: steer a diffusion hover policy, trained on demos from a
nominal Crazyflie, so it flies a heavier one. Prints one table of tracking error before and after.

    python benchmarks/steer_quadrotor.py --teacher <hover policy checkpoint> [--mass-scale 1.15]
    python benchmarks/steer_quadrotor.py --base <chunked policy checkpoint>     # skip the imitation part

1. Demos: ``--teacher`` (e.g. the ``make run`` SAC hover policy, ``runs/main/<time>/train/checkpoints/
   best/policy``) flies ``--demos`` nominal Crazyflies with DART action noise ``--dart``
   (``robo.imitation.demos.quadrotor_demos``). RAPTOR also makes a usable teacher with DART noise (the
   README's quadrotor_tracking rows); this benchmark keeps the SAC policy, the ``make run`` product.
2. Imitation: a diffusion policy with the residual-MLP denoiser (``ImitationTrainer``), ``--bc-steps``.
3. Evaluation: hover from the task's random starts (0.5 m, 30 deg), ``--episodes`` quadrotors in the
   batched sim, nominal and ``--mass-scale`` times heavier: final median error, RMSE over the second
   half, crashes (``robo.imitation.evaluate.evaluate_flights``: starts and diffusion noise seeded).
4. DSRL (configs/algo/dsrl.yaml with ``reward=env``) on one heavy quadrotor env for ``--budget`` env
   steps; the steering reward is the hover reward with a stronger position term (``--w-position``,
   ``--w-position-abs``). The steered policy is evaluated like the base.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.registry import load_policy
from robo.imitation.data import ChunkWindows, compute_stats
from robo.imitation.demos import quadrotor_demos
from robo.imitation.evaluate import evaluate_flights
from robo.imitation.trainer import ImitationTrainer, TrainConfig
from robo.steer import SteerTrainer
from robo.commands.steer import algo_config
from sims.envs.quadrotor_env import QuadrotorEnv
from sims.quadrotor.params import preset
from table import print_table  # benchmarks/table.py (this folder is on sys.path when run as a script)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
NOMINAL = {"preset": "crazyflie"}
EVAL_SEED = 12345  # the starts and the diffusion noise of every evaluation


def imitate(args, task: dict) -> tuple[DiffusionPolicy, dict]:
    t0 = time.time()
    demos = quadrotor_demos(load_policy(args.teacher), args.demos, task, NOMINAL, action_noise=args.dart, seed=1)
    policy = DiffusionPolicy(DiffusionConfig(obs_dim=22, action_dim=4, n_obs_steps=2, horizon=16,
                                             n_action_steps=args.n_action_steps, denoiser="mlp", mlp_hidden=512,
                                             mlp_blocks=3))
    policy.set_normalization(compute_stats(demos))
    windows = ChunkWindows(demos, policy.n_obs_steps, policy.horizon, policy.n_action_steps)
    cfg = TrainConfig(steps=args.bc_steps, batch_size=256, lr=1e-3, warmup_steps=200, eval_every=args.bc_steps,
                      checkpoint_every=args.bc_steps, log_every=500)
    ImitationTrainer(policy, windows, cfg, args.out / "imitation").train(progress=False)
    return policy, {"demos": len(demos), "imitation_min": (time.time() - t0) / 60}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--teacher", help="checkpoint folder of a feed-forward hover policy to imitate")
    src.add_argument("--base", help="checkpoint folder of an already trained chunked hover policy")
    ap.add_argument("--demos", type=int, default=256)
    ap.add_argument("--dart", type=float, default=0.1, help="action noise std while recording demos")
    ap.add_argument("--bc-steps", type=int, default=8000)
    ap.add_argument("--n-action-steps", type=int, default=4)
    ap.add_argument("--mass-scale", type=float, default=1.15)
    ap.add_argument("--budget", type=int, default=40000, help="DSRL env steps on the heavy quadrotor")
    ap.add_argument("--w-position", type=float, default=100.0)
    ap.add_argument("--w-position-abs", type=float, default=10.0)
    ap.add_argument("--set", action="append", default=[], help="DSRL algo override, e.g. noise_bound=1.5")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("runs/bench_steer_quadrotor"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    task = OmegaConf.to_container(OmegaConf.load(CONFIGS / "task" / "hover.yaml"), resolve=True)
    heavy = {"preset": "crazyflie", "mass": preset("crazyflie").mass * args.mass_scale}
    base, info = imitate(args, task) if args.teacher else (load_policy(args.base), {})
    rows = [{"policy": "diffusion base", "robot": robot,
             **evaluate_flights(base, task, r, args.episodes, seed=EVAL_SEED)}
            for robot, r in (("nominal", NOMINAL), (f"{args.mass_scale:g}x mass", heavy))]
    steer_task = {**task, "reward": {**task["reward"], "position": args.w_position,
                                     "position_abs": args.w_position_abs}}
    c = {"algo": algo_config("dsrl", ["reward=env", "reward_offset=0.0", "failure_reward=-100.0", *args.set]),
         "total_env_steps": args.budget, "num_envs": 1, "seed": 0, "eval_every": args.budget // 4,
         "checkpoint_every": args.budget, "eval": {"episodes": 5, "episodes_during_training": 5, "seed": 777}}
    t0 = time.time()
    trainer = SteerTrainer(c, args.out / "dsrl", base, lambda: QuadrotorEnv(task=steer_task, robot=heavy),
                           progress=False)
    trainer.train()
    steered = trainer.steered_policy()
    rows += [{"policy": f"DSRL, {trainer.env_steps} env steps ({(time.time() - t0) / 60:.1f} min)", "robot": robot,
              **evaluate_flights(steered, task, r, args.episodes, seed=EVAL_SEED)}
             for robot, r in (("nominal", NOMINAL), (f"{args.mass_scale:g}x mass", heavy))]
    if info:
        print(f"imitation: {info['demos']} demos, {info['imitation_min']:.1f} min")
    print_table(rows, ["policy", "robot", "final_median_position_error", "rmse", "crashes", "num_envs"])


if __name__ == "__main__":
    main()
