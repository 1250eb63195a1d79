"""Imitation benchmark: success, training time and inference latency of chunked policies.

    python benchmarks/imitation.py --run runs/train/<time> [--run ...] [--episodes 100] [--n-action-steps 8,2]

Each ``--run`` is a ``robo train policy=... task=...`` run folder (its checkpoints/latest is
read, whatever step it reached). Diffusion policies get a row per inference setting
(DDIM 10 and 100 steps, DPM-Solver++ 10 steps by default); other kinds (energy) one row with
their own settings. Success is evaluated over ``--episodes`` episodes of the run's task env
(the run's own final evaluation in metrics.json is reused when it matches the checkpoint);
latency is the median wall time of one ``predict_chunk`` at batch 1 on this CPU (1 thread).
``--n-action-steps`` evaluates each setting with these execution horizons (actions executed per
chunk before replanning, an inference setting; default: the checkpoint's own).
Runs of ``task=quadrotor_tracking`` are scored by flying the task's held-out quadrotors (success: no crash
and RMSE < ``task.eval.success_rmse``; ``rmse`` in m), and their demos' teacher gets a row on the same seeds.
Prints one table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from policies.chunked import draw_noise, with_config, with_execution_horizon
from policies.registry import load_policy
from robo.factory import policy_by_name
from robo.commands.imitation import evaluator
from table import print_table  # benchmarks/table.py (this folder is on sys.path when run as a script)

DIFFUSION_SETTINGS = [("ddim", 10), ("ddim", 100), ("dpmsolver", 10)]
ENERGY_STEPS = (1, 2, 4)  # gradient-descent steps of the energy policy, a row each (+ its own)


def chunk_latency_ms(policy, repeats: int = 20) -> tuple[float, float]:
    """(median, min) ms of predict_chunk at batch 1 after 2 warm-up calls; on a shared CPU the
    minimum is the better estimate of the code's own cost."""
    c = policy.config
    obs = torch.zeros(1, policy.n_obs_steps, policy.obs_dim)
    if getattr(c, "image_shape", None):
        obs = {"state": obs, "image": torch.rand(1, policy.n_obs_steps, *c.image_shape)}
    times = []
    for k in range(repeats + 2):
        noise = draw_noise(policy, 1)
        t0 = time.perf_counter()
        policy.predict_chunk(obs, noise)
        if k >= 2:
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times), min(times)


def variants(policy, settings):
    """(label, steps, policy) for each inference setting to measure."""
    if policy.kind == "energy":
        steps = sorted({*ENERGY_STEPS, policy.config.n_steps})  # its own steps too
        return [("descent", k, with_config(policy, n_steps=k)) for k in steps]
    if policy.kind == "implicit_bc":
        return [("dfo", policy.config.dfo_iters, policy)]
    if policy.kind != "diffusion":
        steps = getattr(policy.config, "num_inference_steps", getattr(policy.config, "inference_steps", "-"))
        return [(policy.kind, steps, policy)]
    out = []
    for scheduler, steps in settings:
        out.append((scheduler, steps, with_config(policy, inference_scheduler=scheduler, num_inference_steps=steps)))
    return out


def rows_for_run(run: Path, episodes: int, settings, eval_settings: set[str],
                 horizons: list[int] | None = None) -> list[dict]:
    cfg = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"), resolve=True)
    task = cfg["task"]
    latest = run / "checkpoints" / "latest"
    state = torch.load(latest / "training_state.pt", weights_only=False)
    policy = load_policy(latest / "policy")
    metrics_file = run / "metrics.json"
    final = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
    c = policy.config
    own = (getattr(c, "inference_scheduler", policy.kind), getattr(c, "num_inference_steps", "-"))
    own = {"energy": ("descent", getattr(c, "n_steps", None)),
           "implicit_bc": ("dfo", getattr(c, "dfo_iters", None))}.get(policy.kind, own)
    rows = []
    for label, steps, p in variants(policy, settings):
        median_ms, min_ms = chunk_latency_ms(p)
        evaluated = f"{label}{steps}" in eval_settings or policy.kind != "diffusion"
        for n_act in (horizons or [policy.n_action_steps]) if evaluated else [policy.n_action_steps]:
            row = {"policy": policy.kind, "task": task["name"], "demos": cfg.get("demos") or task.get("demos"),
                   "train_steps": state["step"], "train_min": state["wall_time"] / 60, "sampler": label,
                   "inf_steps": steps, "exec": n_act, "chunk_ms": median_ms, "chunk_ms_min": min_ms,
                   "success": float("nan"), "max_cover": float("nan"), "rmse": float("nan"), "episodes": 0}
            if ((label, steps) == own and n_act == policy.n_action_steps and final.get("step") == state["step"]
                    and final.get("episodes", 0) >= episodes):
                # the run's own final evaluation (same policy, sampler, execution horizon, env seeds)
                row.update(_scores(final))
            elif evaluated:
                row.update(_scores({**evaluator(task, episodes)(with_execution_horizon(p, n_act), state["step"]),
                                    "episodes": episodes}))
            rows.append(row)
    return rows


def _scores(metrics: dict) -> dict:
    """success, max_cover (push-T, toy) or rmse (m; quadrotor_tracking), episodes from evaluation metrics."""
    return {"success": metrics["success_rate"], "max_cover": metrics.get("mean_max_reward", float("nan")),
            "rmse": metrics.get("rmse", float("nan")), "episodes": metrics["episodes"]}


def teacher_row(task: dict) -> dict:
    """The demos' teacher (quadrotor_tracking) flown on the same seeds as the policies."""
    teacher = task["demo_kwargs"]["teacher"]
    m = evaluator(task, int(task["eval"]["episodes"]))(policy_by_name(teacher), 0)
    return {"policy": f"teacher: {teacher}", "task": task["name"], **_scores(m)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, action="append", required=True, help="a robo train run folder")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--eval", default="ddim10", help="comma list of diffusion settings to evaluate (ddim10,...)")
    ap.add_argument("--n-action-steps", default=None,
                    help="comma list of execution horizons to evaluate (default: the checkpoint's own)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    horizons = [int(n) for n in args.n_action_steps.split(",")] if args.n_action_steps else None
    rows = []
    teachers = {}
    for run in args.run:
        rows += rows_for_run(run, args.episodes, DIFFUSION_SETTINGS, set(args.eval.split(",")), horizons)
        task = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"), resolve=True)["task"]
        if "flight" in task:
            teachers.setdefault(json.dumps(task, sort_keys=True), task)
    rows += [teacher_row(task) for task in teachers.values()]
    print_table(rows, ["policy", "task", "demos", "train_steps", "train_min", "sampler", "inf_steps", "exec",
                       "chunk_ms", "chunk_ms_min", "success", "max_cover", "rmse", "episodes"])


if __name__ == "__main__":
    main()
