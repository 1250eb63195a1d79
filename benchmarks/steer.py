"""Steering benchmark: DSRL vs residual SAC vs SAC from scratch on one env-step budget.

    python benchmarks/steer.py base=<chunked policy checkpoint> task=obstacle_reach \
        total_env_steps=20000 eval.episodes=100 [--methods dsrl,residual_sac,sac_actions] [--n-action-steps 4]

Every setting is a Hydra override of ``configs/steer.yaml`` (as for ``robo steer``), applied after this
benchmark's defaults (``BENCH_DEFAULTS``); ``algo.*`` overrides apply to every method of ``--methods``
(each is ``algo=<method>``). The base policy (``base=``, a deliberately weak diffusion policy, e.g. ``robo train
policy=diffusion task=pusht +task.demo_kwargs.noise_std=0.006 policy.train.steps=20000``) is evaluated first with
N(0, I) noise through the chunked evaluation path, with zero noise, and with N(0, I) clipped to
DSRL's noise box (the warm-up's noise). Each method then trains with SAC (configs/algo/<method>.yaml) for
``total_env_steps`` env steps, evaluating every ``eval_every`` env steps on ``eval.episodes_during_training``
episodes; the final evaluation uses ``eval.episodes`` episodes with the same env seeds as the base
(for DSRL through the exported steered policy, i.e. the ordinary evaluation path, and the deployed one:
``checkpoints/best``, the deploy gate's pick, steered or the base). Prints one
table: final success, and the env steps of the first training evaluation at or above
``--target`` success. ``--n-action-steps`` sets the base's execution horizon (actions per chunk,
so per steering decision) for everything, the base's own evaluation included. ``--resume``
continues each method's run in ``--out`` (its ``checkpoints/latest``, replay buffer included) up to a
larger ``total_env_steps``; the other settings must match the first run's. The base's evaluation is kept in
``--out/base_eval.json`` and reused by a ``--resume`` with the same base and evaluation settings.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from policies.chunked import with_execution_horizon
from policies.registry import load_policy
from robo.imitation.evaluate import evaluate_chunked_policy
from robo.commands.steer import task_env_factory
from robo.run_dir import write_json
from robo.steer.trainer import SteerTrainer
from common import command_config, fail, parse, parser  # benchmarks/ is on sys.path when run as a script
from table import print_table

# Overrides of configs/steer.yaml applied before the command line's.
BENCH_DEFAULTS = ["eval_every=2000", "checkpoint_every=${total_env_steps}"]


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


def run_method(name: str, base, cfg, args, out: Path) -> list[dict]:
    c = OmegaConf.to_container(cfg, resolve=True)
    task = c["task"]
    latent = c["algo"]["mode"] == "latent"
    t0 = time.time()
    (out / name).mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / name / "config.yaml")  # the run's own settings (benchmarks/steer_diagnose.py reads them)
    trainer = SteerTrainer(c, out / name, base if c["algo"]["mode"] != "action" else None, task_env_factory(task),
                           progress=False)
    final = trainer.train(resume=args.resume)
    row = {"method": name, "env_steps": trainer.env_steps, "success": final["success_rate"],
           "episodes": final["episodes"], "wall_min": (time.time() - t0) / 60}
    hit = [h["env_steps"] for h in trainer.history if h["success_rate"] >= args.target]
    row["steps_to_target"] = hit[0] if hit else "-"
    if latent:  # the trainer scored the final steered policy through the chunked evaluation path
        row["method"] = f"{name} (steered policy)"
        if "deploy" in final:  # checkpoints/best: the deploy gate's pick, the steered policy or the base
            return [row, {**row, "method": f"{name} (deployed: {final['deploy']['deployed']})",
                          "success": trainer.deployed_metrics(final)["success_rate"]}]
    return [row]


def main() -> None:
    ap = parser(__doc__, "steer", "base=<checkpoint> task=obstacle_reach total_env_steps=6000 algo.noise_bound=1.5")
    ap.add_argument("--methods", default="dsrl,dsrl_na,residual_sac,sac_actions",
                    help="comma-separated configs/algo names, one run each")
    ap.add_argument("--target", type=float, default=0.85, help="success rate whose first evaluation is reported")
    ap.add_argument("--n-action-steps", type=int, default=None,
                    help="the base's execution horizon (default: its checkpoint's)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_steer"))
    ap.add_argument("--resume", action="store_true", help="continue the runs in --out up to total_env_steps")
    args = parse(ap)
    if any(o.lstrip("+~").startswith("algo=") for o in args.overrides):
        fail(ap, "the methods are --methods (each is algo=<method>); give algo.<key>=<value> to change them all")
    configs = {name: command_config(ap, "steer", args.overrides, defaults=BENCH_DEFAULTS, forced=[f"algo={name}"])
               for name in args.methods.split(",")}
    cfg = command_config(ap, "steer", args.overrides, defaults=BENCH_DEFAULTS)  # the base's evaluation: algo=dsrl's box
    if not cfg.base:
        fail(ap, "base is required: add base=<chunked policy checkpoint folder> (e.g. <run>/checkpoints/latest/policy)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(int(cfg.threads))
    task = OmegaConf.to_container(cfg.task, resolve=True)
    base = load_policy(cfg.base)
    if args.n_action_steps is not None:
        base = with_execution_horizon(base, args.n_action_steps)
    bound = float(cfg.algo.noise_bound)
    episodes, seed = int(cfg.eval.episodes), int(cfg.eval.seed)
    draws = torch.Generator().manual_seed(int(cfg.seed))  # the clipped noise is the same on every run
    variants = {"N(0, I) noise": base, "zero noise": DrawnNoise(base, torch.zeros),
                f"N(0, I) clipped to +-{bound:g}":
                    DrawnNoise(base, lambda s: torch.randn(s, generator=draws).clamp(-bound, bound))}
    # the base's rows are kept in --out: a --resume with the same base and evaluation reuses them
    key = {"base": str(cfg.base), "n_action_steps": args.n_action_steps, "task": task, "episodes": episodes,
           "seed": seed, "noise_bound": bound, "noise_seed": int(cfg.seed)}
    cached = json.loads((args.out / "base_eval.json").read_text()) if (args.out / "base_eval.json").is_file() else {}
    if args.resume and cached.get("key") == json.loads(json.dumps(key)):
        rows = cached["rows"]
        logging.info("the base's evaluation of %s reused (--resume, same settings)", args.out / "base_eval.json")
    else:
        rows = []
        for label, policy in variants.items():
            m = evaluate_chunked_policy(policy, task["env_id"], episodes, seed=seed, env_kwargs=task.get("env_kwargs")
                                        or {}, max_steps=task["eval"].get("max_steps"))
            rows.append({"method": f"base {base.kind} ({label})", "env_steps": 0, "success": m["success_rate"],
                         "episodes": episodes, "steps_to_target": "-", "wall_min": 0.0})
        write_json(args.out / "base_eval.json", {"key": key, "rows": rows})
    for name, c in configs.items():
        rows.extend(run_method(name, base, c, args, args.out))
    print_table(rows, ["method", "env_steps", "success", "episodes", "steps_to_target", "wall_min"])


if __name__ == "__main__":
    main()
