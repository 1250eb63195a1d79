"""Steering benchmark: DSRL vs residual SAC vs SAC from scratch on one env-step budget.

    python benchmarks/steer.py --base <chunked policy checkpoint> --task obstacle_reach \
        --budget 20000 --episodes 100 [--methods dsrl,residual_sac,sac_actions] [--n-action-steps 4]

The base policy (a deliberately weak diffusion policy, e.g. ``robo train policy=diffusion
task=pusht +task.demo_kwargs.noise_std=0.006 policy.train.steps=20000``) is evaluated first with
N(0, I) noise through the chunked evaluation path, with zero noise, and with N(0, I) clipped to
DSRL's noise box (the warm-up's noise). Each method then trains with SAC (configs/algo/<method>.yaml) for
``--budget`` env steps, evaluating every ``--eval-every`` env steps on ``--eval-episodes``
episodes; the final evaluation uses ``--episodes`` episodes with the same env seeds as the base
(for DSRL through the exported steered policy, i.e. the ordinary evaluation path). Prints one
table: final success, and the env steps of the first training evaluation at or above
``--target`` success. ``--n-action-steps`` sets the base's execution horizon (actions per chunk,
so per steering decision) for everything, the base's own evaluation included. ``--resume``
continues each method's run in ``--out`` (its ``checkpoints/latest``, replay buffer included) up to a
larger ``--budget``; the other arguments must match the first run's.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from policies.chunked import with_execution_horizon
from policies.registry import load_policy
from robo.imitation.evaluate import evaluate_chunked_policy
from robo.commands.steer import algo_config, task_env_factory
from robo.steer.trainer import SteerTrainer
from table import print_table  # benchmarks/table.py (this folder is on sys.path when run as a script)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


class DrawnNoise:
    """The base policy with its noise drawn by ``draw(shape) -> tensor`` instead of N(0, I):
    zero noise (the mode its denoiser maps the mean noise to: the constant-noise reference a
    learned steering actor should beat) or N(0, I) clipped to the steering box (the warm-up's)."""

    def __init__(self, base, draw):
        self.base, self.draw = base, draw

    def __getattr__(self, name):
        return getattr(self.base, name)

    def act(self, obs, noise=None):
        return self.base.act(obs, noise=self.draw((len(obs), *self.base.noise_shape)))


def run_method(name: str, base, task: dict, args, out: Path) -> dict:
    algo = algo_config(name, args.set)
    latent = algo["mode"] == "latent"
    # a steered policy's final score comes from the batched evaluation below: the trainer's own
    # (one wrapper env, a chunk decoded per decision) then needs only the training-evaluation size
    c = {"algo": algo, "task": task, "total_env_steps": args.budget, "num_envs": 1, "seed": args.seed,
         "eval_every": args.eval_every, "checkpoint_every": args.budget,
         "eval": {"episodes": args.eval_episodes if latent else args.episodes,
                  "episodes_during_training": args.eval_episodes, "seed": int(task["eval"]["seed"])}}
    t0 = time.time()
    trainer = SteerTrainer(c, out / name, base if algo["mode"] != "action" else None, task_env_factory(task),
                           progress=False)
    final = trainer.train(resume=args.resume)
    row = {"method": name, "env_steps": trainer.env_steps, "success": final["success_rate"],
           "episodes": final["episodes"], "wall_min": (time.time() - t0) / 60}
    hit = [h["env_steps"] for h in trainer.history if h["success_rate"] >= args.target]
    row["steps_to_target"] = hit[0] if hit else "-"
    if latent:  # the exported steered policy, through the chunked evaluation path
        m = evaluate_chunked_policy(trainer.steered_policy(), task["env_id"], args.episodes,
                                    seed=int(task["eval"]["seed"]), env_kwargs=task.get("env_kwargs") or {},
                                    max_steps=task["eval"].get("max_steps"))
        row.update(success=m["success_rate"], episodes=args.episodes, method=f"{name} (steered policy)")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="checkpoint folder of the frozen chunked policy")
    ap.add_argument("--task", default="pusht", help="a configs/task/<name>.yaml imitation task")
    ap.add_argument("--budget", type=int, default=20000, help="env steps per method")
    ap.add_argument("--episodes", type=int, default=100, help="final evaluation episodes")
    ap.add_argument("--eval-every", type=int, default=2000)
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--methods", default="dsrl,dsrl_na,residual_sac,sac_actions")
    ap.add_argument("--set", action="append", help="algo override for every method, e.g. kwargs.gradient_steps=2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-action-steps", type=int, default=None,
                    help="the base's execution horizon (default: its checkpoint's)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_steer"))
    ap.add_argument("--resume", action="store_true", help="continue the runs in --out up to --budget")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    task = OmegaConf.to_container(OmegaConf.load(CONFIGS / "task" / f"{args.task}.yaml"), resolve=True)
    base = load_policy(args.base)
    if args.n_action_steps is not None:
        base = with_execution_horizon(base, args.n_action_steps)
    bound = float(algo_config("dsrl", args.set)["noise_bound"])
    draws = torch.Generator().manual_seed(args.seed)  # the clipped noise is the same on every run
    variants = {"N(0, I) noise": base, "zero noise": DrawnNoise(base, torch.zeros),
                f"N(0, I) clipped to +-{bound:g}":
                    DrawnNoise(base, lambda s: torch.randn(s, generator=draws).clamp(-bound, bound))}
    rows = []
    for label, policy in variants.items():
        m = evaluate_chunked_policy(policy, task["env_id"], args.episodes, seed=int(task["eval"]["seed"]),
                                    env_kwargs=task.get("env_kwargs") or {}, max_steps=task["eval"].get("max_steps"))
        rows.append({"method": f"base {base.kind} ({label})", "env_steps": 0, "success": m["success_rate"],
                     "episodes": args.episodes, "steps_to_target": "-", "wall_min": 0.0})
    for name in args.methods.split(","):
        rows.append(run_method(name, base, task, args, args.out))
    print_table(rows, ["method", "env_steps", "success", "episodes", "steps_to_target", "wall_min"])


if __name__ == "__main__":
    main()
