"""DSRL under domain shift on the quadrotor: steer a diffusion hover policy, trained on demos from a
nominal Crazyflie, so it flies a heavier one. Prints one table of tracking error before and after.

    python benchmarks/steer_quadrotor.py --teacher <hover policy checkpoint> [--mass-scale 1.15]
    python benchmarks/steer_quadrotor.py base=<chunked policy checkpoint>     # skip the imitation part

The DSRL run is a ``robo steer`` run on ``task=hover``: every setting is a Hydra override of
``configs/steer.yaml``, applied after this benchmark's defaults (``BENCH_DEFAULTS``); the flags set up the base.

1. Demos: ``--teacher`` (e.g. the ``make run`` SAC hover policy, ``runs/main/<time>/train/checkpoints/
   best/policy``) flies ``--demos`` nominal Crazyflies with DART action noise ``--dart``
   (``robo.imitation.demos.quadrotor_demos``). RAPTOR also makes a usable teacher with DART noise (the
   README's quadrotor_tracking rows); this benchmark keeps the SAC policy, the ``make run`` product.
2. Imitation: a diffusion policy with the residual-MLP denoiser (``ImitationTrainer``), ``--bc-steps``.
3. Evaluation: hover from the task's random starts (0.5 m, 30 deg), ``eval.episodes`` quadrotors in the
   batched sim, nominal and ``--mass-scale`` times heavier: final median error, RMSE over the second
   half, crashes (``robo.imitation.evaluate.evaluate_flights``: starts and diffusion noise seeded).
4. DSRL (configs/algo/dsrl.yaml with ``algo.reward=env``) on one heavy quadrotor env for ``total_env_steps``
   env steps; the steering reward is the hover reward with a stronger position term (``task.reward.position``,
   ``task.reward.position_abs``). The steered policy is evaluated like the base.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.registry import load_policy
from robo.factory import policy_by_name
from robo.imitation.data import ChunkWindows, compute_stats
from robo.imitation.demos import quadrotor_demos
from robo.imitation.evaluate import evaluate_flights
from robo.imitation.trainer import ImitationTrainer, TrainConfig
from robo.steer import SteerTrainer
from sims.envs.quadrotor_env import QuadrotorEnv
from sims.quadrotor.params import preset
from common import command_config, fail, parse, parser  # benchmarks/ is on sys.path when run as a script
from table import print_table

# Overrides of configs/steer.yaml applied before the command line's: the steering reward is the env's (a stronger
# position term), a crash costs 100; the trainer's evaluations are 5 episodes, the table's eval.episodes quadrotors.
BENCH_DEFAULTS = ["task=hover", "total_env_steps=40000", "eval_every=10000", "checkpoint_every=${total_env_steps}",
                  "algo.reward=env", "algo.reward_offset=0.0", "algo.failure_reward=-100.0",
                  "task.reward.position=100.0", "task.reward.position_abs=10.0",
                  "eval.episodes=64", "eval.episodes_during_training=5", "eval.seed=777"]
NOMINAL = {"preset": "crazyflie"}
EVAL_SEED = 12345  # the starts and the diffusion noise of every evaluation


def imitate(args, task: dict) -> tuple[DiffusionPolicy, dict]:
    t0 = time.time()
    demos = quadrotor_demos(policy_by_name(args.teacher), args.demos, task, NOMINAL, action_noise=args.dart, seed=1)
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
    ap = parser(__doc__, "steer", "base=<checkpoint> total_env_steps=40000 algo.noise_bound=1.5")
    ap.add_argument("--teacher", help="a feed-forward hover policy to imitate (instead of base=): a checkpoint "
                                        "folder, or raptor")
    ap.add_argument("--demos", type=int, default=256, help="with --teacher: demos to imitate")
    ap.add_argument("--dart", type=float, default=0.1, help="action noise std while recording demos")
    ap.add_argument("--bc-steps", type=int, default=8000, help="imitation steps")
    ap.add_argument("--n-action-steps", type=int, default=4, help="the imitated policy's execution horizon")
    ap.add_argument("--mass-scale", type=float, default=1.15, help="the heavier Crazyflie's mass / the nominal one's")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_steer_quadrotor"))
    args = parse(ap)
    cfg = command_config(ap, "steer", args.overrides, defaults=BENCH_DEFAULTS)
    if bool(args.teacher) == bool(cfg.base):
        fail(ap, "give one base policy: --teacher <hover policy> (imitated here) or base=<chunked policy checkpoint>")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(int(cfg.threads))
    c = OmegaConf.to_container(cfg, resolve=True)
    task, episodes = c["task"], int(cfg.eval.episodes)
    heavy = {"preset": "crazyflie", "mass": preset("crazyflie").mass * args.mass_scale}
    base, info = imitate(args, task) if args.teacher else (load_policy(cfg.base), {})
    rows = [{"policy": "diffusion base", "robot": robot, **evaluate_flights(base, task, r, episodes, seed=EVAL_SEED)}
            for robot, r in (("nominal", NOMINAL), (f"{args.mass_scale:g}x mass", heavy))]
    c["eval"]["episodes"] = c["eval"]["episodes_during_training"]  # the trainer's final check; the table's is below
    t0 = time.time()
    trainer = SteerTrainer(c, args.out / "dsrl", base, lambda: QuadrotorEnv(task=task, robot=heavy), progress=False)
    trainer.train()
    steered = trainer.steered_policy()
    rows += [{"policy": f"DSRL, {trainer.env_steps} env steps ({(time.time() - t0) / 60:.1f} min)", "robot": robot,
              **evaluate_flights(steered, task, r, episodes, seed=EVAL_SEED)}
             for robot, r in (("nominal", NOMINAL), (f"{args.mass_scale:g}x mass", heavy))]
    if info:
        print(f"imitation: {info['demos']} demos, {info['imitation_min']:.1f} min")
    print_table(rows, ["policy", "robot", "final_median_position_error", "rmse", "crashes", "num_envs"])


if __name__ == "__main__":
    main()
