"""Meta-World benchmark: per task, record the scripted expert's demos, train each policy on them, evaluate it.

    python benchmarks/meta_world.py --tasks easy --demos 10 --policies diffusion,energy --budget 20000 \
        --episodes 50 [--obs state|image] [--multitask [--mt-budget N] [--no-per-task]] \
        [--out runs/bench/metaworld/<name>] [KEY=VALUE ...]

``--tasks``: ``easy`` | ``medium`` | ``hard`` | ``all`` (the eight tasks of ``sims.metaworld.tasks``) or
comma-separated Meta-World env names (any of the 50). For each task, ``robo record task=metaworld`` writes
``--demos`` successful expert episodes (attempt i reset with seed ``--seed`` + i; the attempts give the
expert's success rate), then for each of ``--policies`` ``robo train task=metaworld policy=<kind>
dataset=<those demos>`` trains ``--budget`` steps (its task_policy preset, configs/task_policy/metaworld_*.yaml)
and evaluates the policy on ``--episodes`` fresh seeds (100000.., never a demo's) with Meta-World's success
signal; ``--obs image`` uses task=metaworld_image. KEY=VALUE words are Hydra overrides of configs/train.yaml for
every training run (``threads=2``, ``policy.train.batch_size=128``). Each step is robo's own command, run in
this process; the run folders are kept under ``--out``. Prints one table: task, difficulty, expert success,
demos kept, policy, success over the episodes, latency per chunk (median ms of one ``predict_chunk`` at
batch 1, 1 thread), and wall time (record + train + evaluate, s). (Named meta_world.py: a benchmarks/metaworld.py
would shadow the metaworld package, this folder being first on sys.path.)

``--multitask`` adds, beside those per-task rows, one multi-task policy per kind over all the tasks
(``task=metaworld_multitask``, Meta-World's MT10 / MT50 form: the one-hot task id appended to the state): ``robo
record`` writes ``--demos`` demos of each task (the same seeds as the per-task demos) into one dataset, ``robo
train`` trains one policy ``--mt-budget`` steps (default ``--budget`` x the number of tasks: the per-task
policies' steps together) and evaluates it on ``--episodes`` fresh seeds per task. Its rows (policy
``<kind>-mt``) give each task's success; its wall time, on its ``mean`` row, covers all tasks. With more than one
task each policy also gets a ``mean`` row (success averaged over the tasks). ``--no-per-task`` skips the per-task
policies. State observations only.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import torch

from policies.registry import load_policy
from robo.commands import record, train
from robo.run_dir import write_json
from sims.metaworld.env import env_names
from sims.metaworld.tasks import DIFFICULTY, select_tasks
from common import command_config, fail, parse, parser  # benchmarks/ is on sys.path when run as a script
from imitation import chunk_latency_ms  # benchmarks/imitation.py, beside this script
from table import print_table

COLUMNS = ["task", "difficulty", "expert_success", "demos", "policy", "success", "episodes", "latency_ms",
           "train_steps", "wall_s"]


MULTITASK = "multitask"   # the multi-task runs' folder under --out


def task_overrides(group: str, name: str) -> list[str]:
    """The task words of one task's runs (``task=metaworld task.name=<name>``), or with ``name`` =
    ``"multitask"`` the multi-task ones (``group`` = ``task=metaworld_multitask task.names=[...]``)."""
    return group.split() if name == MULTITASK else [f"task={group}", f"task.name={name}"]


def record_demos(ap, group: str, name: str, args, out: Path) -> dict:
    """``robo record <task_overrides>``: the expert's demos at ``out / name / demos``."""
    cfg = command_config(ap, "record", [*task_overrides(group, name), f"episodes={args.demos}",
                                        f"out={out / name / 'demos'}", f"obs={args.obs}", f"seed={args.seed}",
                                        "overwrite=true"])
    run_dir = out / name / "record"
    run_dir.mkdir(parents=True, exist_ok=True)
    return record.run(cfg, run_dir)


def train_config(ap, group: str, name: str, kind: str, args, out: Path, recorded: bool = True,
                 budget: int | None = None):
    """The config of ``robo train <task_overrides> policy=<kind> dataset=<demos>`` (a bad override or policy
    ends the benchmark with one line); before the demos are ``recorded``, with ``demos=<n>`` instead.
    ``budget``: training steps (default ``--budget``)."""
    data = f"dataset={out / name / 'demos'}" if recorded else f"demos={args.demos}"
    return command_config(ap, "train", [*task_overrides(group, name), f"policy={kind}",
                                        data, f"policy.train.steps={budget or args.budget}",
                                        "policy.train.eval_every=0", f"task.eval.episodes={args.episodes}",
                                        f"seed={args.seed}", *args.overrides])


def train_policy(ap, group: str, name: str, kind: str, args, out: Path,
                 budget: int | None = None) -> tuple[dict, Path]:
    """``robo train`` of ``train_config``: (its results, run folder)."""
    cfg = train_config(ap, group, name, kind, args, out, budget=budget)
    run_dir = out / name / kind
    run_dir.mkdir(parents=True, exist_ok=True)
    return train.run(cfg, run_dir), run_dir


def latency_ms(run_dir: Path) -> float:
    """Median ms of one ``predict_chunk`` of the run's policy at batch 1 on one thread."""
    torch.set_num_threads(1)   # the latency is measured on one thread, whatever the run used
    return chunk_latency_ms(load_policy(run_dir / "checkpoints" / "latest" / "policy"))[0]


def multitask_group(tasks: list[str]) -> str:
    """The task words of the multi-task runs over ``tasks``."""
    return f"task=metaworld_multitask task.names=[{','.join(tasks)}]"


def multitask_rows(ap, tasks: list[str], kinds: list[str], args, out: Path, budget: int) -> list[dict]:
    """One multi-task policy per kind over ``tasks``: per task its success (policy ``<kind>-mt``), then a
    ``mean`` row with the success over all tasks and the wall time of record + train + evaluate."""
    group = multitask_group(tasks)
    t0 = time.time()
    rec = record_demos(ap, group, MULTITASK, args, out)
    record_s, rows = time.time() - t0, []
    for kind in kinds:
        t1 = time.time()
        result, run_dir = train_policy(ap, group, MULTITASK, kind, args, out, budget)
        wall, latency = record_s + time.time() - t1, latency_ms(run_dir)
        for name in tasks:
            per = rec["per_task"][name]
            rows.append({"task": name, "difficulty": DIFFICULTY.get(name, "-"),
                         "expert_success": per["expert_success_rate"], "demos": per["episodes"],
                         "policy": f"{kind}-mt", "success": result[f"success_rate/{name}"],
                         "episodes": args.episodes, "latency_ms": latency, "train_steps": result["step"],
                         "run": str(run_dir)})
        rows.append({"task": "mean", "expert_success": rec["expert_success_rate"], "demos": rec["episodes"],
                     "policy": f"{kind}-mt", "success": result["success_rate"], "episodes": result["episodes"],
                     "latency_ms": latency, "train_steps": result["step"], "wall_s": wall, "run": str(run_dir)})
    return rows


def mean_rows(rows: list[dict], kinds: list[str]) -> list[dict]:
    """Per kind, the per-task policies' ``mean`` row: success averaged over the tasks, wall time summed."""
    out = []
    for kind in kinds:
        mine = [r for r in rows if r["policy"] == kind]
        out.append({"task": "mean", "policy": kind, "demos": sum(r["demos"] for r in mine),
                    "expert_success": sum(r["expert_success"] for r in mine) / len(mine),
                    "success": sum(r["success"] for r in mine) / len(mine),
                    "episodes": sum(r["episodes"] for r in mine), "train_steps": sum(r["train_steps"] for r in mine),
                    "wall_s": sum(r["wall_s"] for r in mine)})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = parser(__doc__, "train", "threads=2 policy.train.batch_size=128")
    ap.add_argument("--tasks", default="easy", help="easy | medium | hard | all | comma-separated env names")
    ap.add_argument("--demos", type=int, default=10, help="successful expert demos per task")
    ap.add_argument("--policies", default="diffusion,energy", help="comma-separated imitation policy kinds")
    ap.add_argument("--budget", type=int, default=20000, help="training steps per policy")
    ap.add_argument("--episodes", type=int, default=50, help="evaluation episodes per policy (fresh seeds)")
    ap.add_argument("--obs", choices=("state", "image"), default="state")
    ap.add_argument("--seed", type=int, default=0, help="demo reset seeds start here; the training seed")
    ap.add_argument("--out", default=None, help="folder of the runs (default runs/bench/metaworld/<time>)")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--multitask", action="store_true",
                    help="also train one policy per kind over all the tasks, conditioned on a one-hot task id")
    ap.add_argument("--mt-budget", type=int, default=None,
                    help="training steps of the multi-task policy (default: --budget x the number of tasks)")
    ap.add_argument("--no-per-task", action="store_true", help="skip the per-task policies (with --multitask)")
    args = parse(ap, argv)
    try:
        tasks = select_tasks(args.tasks, env_names())
    except (ValueError, ImportError) as e:
        fail(ap, str(e))
    if args.demos < 1 or args.budget < 1 or args.episodes < 1:
        fail(ap, f"--demos, --budget and --episodes must be >= 1, got {args.demos}, {args.budget}, {args.episodes}")
    if args.multitask and args.obs != "state":
        fail(ap, "--multitask trains on state observations only; drop --obs image")
    if args.no_per_task and not args.multitask:
        fail(ap, "--no-per-task leaves nothing to run without --multitask")
    mt_budget = args.mt_budget or args.budget * len(tasks)
    if mt_budget < 1:
        fail(ap, f"--mt-budget must be >= 1, got {mt_budget}")
    kinds = [k.strip() for k in args.policies.split(",") if k.strip()]
    group = "metaworld" if args.obs == "state" else "metaworld_image"
    out = Path(args.out or f"runs/bench/metaworld/{datetime.now():%Y-%m-%d_%H-%M-%S}")
    for kind in kinds:   # check every training config before anything is recorded
        if not args.no_per_task:
            train_config(ap, group, tasks[0], kind, args, out, recorded=False)
        if args.multitask:
            train_config(ap, multitask_group(tasks), MULTITASK, kind, args, out, recorded=False, budget=mt_budget)
    torch.set_num_threads(1)
    rows = []
    for name in [] if args.no_per_task else tasks:
        t0 = time.time()
        rec = record_demos(ap, group, name, args, out)
        record_s = time.time() - t0
        for kind in kinds:
            t1 = time.time()
            result, run_dir = train_policy(ap, group, name, kind, args, out)
            wall = record_s + time.time() - t1
            rows.append({"task": name, "difficulty": DIFFICULTY.get(name, "-"),
                         "expert_success": rec["expert_success_rate"], "demos": rec["episodes"], "policy": kind,
                         "success": result["success_rate"], "episodes": result["episodes"],
                         "latency_ms": latency_ms(run_dir), "train_steps": result["step"], "wall_s": wall,
                         "run": str(run_dir)})
    if rows and len(tasks) > 1:
        rows += mean_rows(rows, kinds)
    if args.multitask:
        rows += multitask_rows(ap, tasks, kinds, args, out, mt_budget)
    print_table(rows, COLUMNS)
    if args.json:
        write_json(args.json, rows)


if __name__ == "__main__":
    main()
