"""Steering robustness: K base policies (training seeds) x S SAC seeds, final and deployed success.

    python benchmarks/steer_robustness.py task=obstacle_reach total_env_steps=6000 --bases 5 --seeds 1 \
        [--methods dsrl,dsrl_na,residual_sac] [--base-steps 1000] [--target 0.95] [--out runs/bench_steer_robustness]

Base k is ``robo train policy=<--base-policy> task=<task> policy.train.steps=<--base-steps> seed=k threads=1``
in ``<out>/base<k>`` (``<out>/<policy>_base<k>`` for a ``--base-policy`` other than diffusion_mlp; trained once,
an existing folder is reused). Each (base, SAC seed, method) run trains
as ``benchmarks/steer.py`` does (``key=value`` words: Hydra overrides of configs/steer.yaml, after
``BENCH_DEFAULTS``) in ``<base's folder>/<method>_seed<s>``. Scores, each on ``eval.episodes`` episodes from
``eval.seed`` through the batched chunked evaluation (the seeds the base is reported on; the deploy gate
uses its own): the base with N(0, I) noise, the final steered policy, and the deployed one
(``checkpoints/best``: the gate's pick, steered or the base; a method without a steered policy deploys its
final agent, scored by the trainer). Prints one row per run and a summary per method (deployed >= base,
runs at >= ``--target``, median env steps to the first training evaluation at ``--target``); writes
``<out>/results.json`` (``--results``).
"""

from __future__ import annotations

import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from policies.registry import load_policy
from robo.commands.steer import task_env_factory
from robo.imitation.evaluate import evaluate_chunked_policy
from robo.steer.trainer import SteerTrainer
from robo.run_dir import write_json
from common import command_config, fail, parse, parser  # benchmarks/ is on sys.path when run as a script
from steer import BENCH_DEFAULTS
from table import print_table


def base_folder(k: int, kind: str, out: Path) -> Path:
    return out / (f"base{k}" if kind == "diffusion_mlp" else f"{kind}_base{k}")


def train_base(k: int, kind: str, task: str, steps: int, folder: Path) -> Path:
    """The policy of base k, trained in ``folder`` unless it already holds one."""
    policy = folder / "checkpoints" / "latest" / "policy"
    if not policy.is_dir():
        cmd = [sys.executable, "-m", "robo", "train", f"policy={kind}", f"task={task}",
               f"policy.train.steps={steps}", f"seed={k}", "threads=1", f"hydra.run.dir={folder}"]
        logging.info("training base %d: %s", k, " ".join(cmd[2:]))
        subprocess.run(cmd, check=True, capture_output=True)
    return policy.resolve()


def success(policy, c: dict) -> float:
    task, e = c["task"], c["eval"]
    m = evaluate_chunked_policy(policy, task["env_id"], int(e["episodes"]), seed=int(e["seed"]),
                                env_kwargs=task.get("env_kwargs") or {}, max_steps=task["eval"].get("max_steps"))
    return float(m["success_rate"])


def run_one(c: dict, base, folder: Path, target: float) -> dict:
    """Train one method on one base with one SAC seed; final, deployed and steps to target."""
    latent = c["algo"]["mode"] == "latent"
    t0 = time.time()
    folder.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(c), folder / "config.yaml")
    trainer = SteerTrainer(c, folder, base if c["algo"]["mode"] != "action" else None, task_env_factory(c["task"]),
                           progress=False)
    final = trainer.train()  # the final steered policy scored as success() scores (the chunked path, eval.*)
    hit = [h["env_steps"] for h in trainer.history if not h.get("final") and h["success_rate"] >= target]
    row = {"env_steps": trainer.env_steps, "steps_to_target": hit[0] if hit else None,
           "wall_min": (time.time() - t0) / 60}
    if latent:
        row["final"] = final["success_rate"]
        row["deployed"] = (trainer.deployed_metrics(final)["success_rate"] if "deploy" in final  # the gate's pick
                           else success(load_policy(folder / "checkpoints" / "best" / "policy"), c))  # no gate
        row["deployed_kind"] = final.get("deploy", {}).get("deployed", "best during training")
        row["gate_lower_bound"] = final.get("deploy", {}).get("lower_bound")
    else:
        row["final"] = row["deployed"] = final["success_rate"]
        row["deployed_kind"] = "final"
    return row


def summary(rows: list[dict], target: float) -> list[dict]:
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        rs = [r for r in rows if r["method"] == method]
        steps = [r["steps_to_target"] for r in rs if r["steps_to_target"] is not None]
        out.append({"method": method, "runs": len(rs),
                    "final_min_median": f"{min(r['final'] for r in rs):.2f} / "
                                        f"{statistics.median(r['final'] for r in rs):.2f}",
                    "deployed_min_median": f"{min(r['deployed'] for r in rs):.2f} / "
                                           f"{statistics.median(r['deployed'] for r in rs):.2f}",
                    "deployed_ge_base": sum(r["deployed"] >= r["base_success"] for r in rs),
                    f"deployed_ge_{target:g}": sum(r["deployed"] >= target for r in rs),
                    "median_steps_to_target": statistics.median(steps) if steps else "-"})
    return out


def main() -> None:
    ap = parser(__doc__, "steer", "task=obstacle_reach total_env_steps=6000")
    ap.add_argument("--bases", type=int, default=5, help="base policies (training seeds 0..K-1)")
    ap.add_argument("--seeds", type=int, default=1, help="SAC seeds (0..S-1) per base and method")
    ap.add_argument("--methods", default="dsrl", help="comma-separated configs/algo names")
    ap.add_argument("--base-steps", type=int, default=1000, help="policy.train.steps of each base")
    ap.add_argument("--base-policy", default="diffusion_mlp", help="the bases' policy config (diffusion_mlp, energy)")
    ap.add_argument("--target", type=float, default=0.95, help="success rate counted as reached")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_steer_robustness"))
    ap.add_argument("--results", type=Path, default=None,
                    help="where the rows go (default <out>/results.json; one per process sharing --out)")
    args = parse(ap)
    if any(o.lstrip("+~").startswith(("algo=", "base=", "seed=")) for o in args.overrides):
        fail(ap, "the bases, SAC seeds and methods are --bases, --seeds and --methods")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    cfg = command_config(ap, "steer", args.overrides, defaults=BENCH_DEFAULTS)
    rows = []
    for k in range(args.bases):
        folder = base_folder(k, args.base_policy, args.out)
        policy_dir = train_base(k, args.base_policy, cfg.task.name, args.base_steps, folder)
        base = load_policy(policy_dir)
        base_success = success(base, OmegaConf.to_container(cfg, resolve=True))
        for s in range(args.seeds):
            for method in args.methods.split(","):
                c = OmegaConf.to_container(command_config(
                    ap, "steer", args.overrides, defaults=BENCH_DEFAULTS,
                    forced=[f"base={policy_dir}", f"seed={s}", f"algo={method}"]), resolve=True)
                row = {"base": k, "seed": s, "method": method, "base_success": base_success,
                       **run_one(c, base, folder / f"{method}_seed{s}", args.target)}
                logging.info("run: %s", row)
                rows.append(row)
                write_json(args.results or args.out / "results.json", rows)
    print_table(rows, ["base", "seed", "method", "base_success", "final", "deployed", "deployed_kind",
                       "gate_lower_bound", "steps_to_target", "wall_min"])
    print()
    sm = summary(rows, args.target)
    print_table(sm, list(sm[0]))


if __name__ == "__main__":
    main()
