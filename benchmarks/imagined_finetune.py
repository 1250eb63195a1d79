"""Fine-tuning a chunked policy on its own successful imagined rollouts (Ctrl-World's loop), as one table.

For the base, the same base fine-tuned on its demos only (the control: as many steps), on demos +
imagined successes, and on imagined successes only: success in the simulator on the same seeds.
It also reports the imagined success rate and how many imagined successes reproduce when their
actions are replayed open loop in the simulator from the same start (the data's fidelity).

    python benchmarks/imagined_finetune.py                     # toy obstacle_reach: base trained here, 3 seeds
    python benchmarks/imagined_finetune.py --start-spread 0.9 0.3 --sim-reference   # starts the demos never covered
    python benchmarks/imagined_finetune.py --obstacle 0.3 0 --sim-reference         # a scene the demos never showed
    python benchmarks/imagined_finetune.py --task pusht --base <chunked checkpoint> --model <ensemble folder> \\
        --attempts 8 --select shortest

Toy: the base is a diffusion policy (MLP denoiser) trained 5,000 steps on ``--demos`` (100) scripted demos; the
ensemble is fitted on 200 behaviour episodes (noisy expert). ``--start-spread X Y`` draws the
behaviour data, the imagined starts and the evaluation from a start box of half-widths X, Y m while
the demos keep theirs (±5 cm): the imagined successes then cover starts the demos never did.
``--obstacle X Y`` moves the obstacle there for the same three (the demos were recorded with it at the
origin): at ``0.3 0`` the demos' right-hand path collides, so continued training on the demos cannot
help and the imagined successes (from a model of the changed scene) are the only news.
``--sim-reference`` adds a fine-tune on the base's own successes in the simulator from the same
starts (what the world model stands in for; those cost real env steps). push-T: ``--base`` was imitated from
``--demos`` demos generated with ``--demo-seed``; ``--model`` is a fitted ensemble (else one is fitted
on ``--data`` behaviour episodes). One thread.
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import numpy as np
import torch
from table import print_table
from world_model import fit_model

from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.registry import load_policy
from policies.world_model import EnsembleDynamics, TrajectoryDiffusion, TrajectoryDiffusionConfig
from robo.imitation.data import ChunkWindows, compute_stats
from robo.imitation.evaluate import evaluate_chunked_policy
from robo.world_model.self_improve import finetune, imagined_successes, plan_steps, replay_in_sim
from robo.world_model.synthesize import chunked_policy_target, segment_episodes, segments_from_episodes, synthesize
from robo.world_model.tasks import make_task

START_SEED, EVAL_SEED = 70_000, 100_000
SIZES = {"obstacle_reach": {"eval": 200, "starts": 256, "steps": 2000, "batch": 256},
         "pusht": {"eval": 100, "starts": 512, "steps": 3000, "batch": 64}}


def toy_base(seed: int, demos: int = 100, steps: int = 5000):
    from sims.toy import generate_demos

    torch.manual_seed(seed)
    demos = generate_demos(demos, seed=0)
    policy = DiffusionPolicy(DiffusionConfig(obs_dim=2, action_dim=2, denoiser="mlp", mlp_hidden=128, mlp_blocks=2))
    policy.set_normalization(compute_stats(demos))
    windows = ChunkWindows(demos, policy.n_obs_steps, policy.horizon, policy.n_action_steps)
    opt = torch.optim.AdamW(policy.model.parameters(), 1e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        loss = policy.compute_loss(windows.batch(torch.randint(len(windows), (256,), generator=gen)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        policy.update_ema()
    return policy, demos


def experiment(task, base, demos, model, args, seed: int, generator=None) -> list[dict]:
    size = SIZES[task.name]

    def success(policy) -> float:
        return evaluate_chunked_policy(policy, lambda render_mode=None: task.make_env(), size["eval"],
                                       seed=EVAL_SEED)["success_rate"]

    starts, _ = task.collect(task.behaviour(seed + 7), size["starts"], seed=START_SEED, max_steps=1)
    start = np.stack([e["obs"][0] for e in starts])
    t = time.perf_counter()
    imagined, st = imagined_successes(model, base, start, task, args.attempts, args.select, seed=seed)
    imagine_s = time.perf_counter() - t
    common = {"seed": seed, "imagined success": st["imagined_success"], "kept": st["kept"],
              "replay ok": replay_rate(task, imagined, len(start)), "imagine s": imagine_s}
    rows = [{**common, "data": "base", "sim success": success(base)}]
    runs = [("demos", demos, common), ("demos + imagined", demos + imagined, common), ("imagined", imagined, common)]
    if args.sim_reference:
        runs.append(("demos + sim successes", demos + sim_successes(task, base, len(start)), {"seed": seed}))
    for label, scale in ((("unguided", 0.0), ("guided", args.guidance)) if generator else ()):
        segments, stats = generated_episodes(task, generator, base, model, start, scale, args.max_residual, seed)
        runs += [(f"demos + {label} trajectory diffusion", demos + segments, {"seed": seed, **stats}),
                 (f"{label} trajectory diffusion", segments, {"seed": seed, **stats})]
    for label, data, info in runs:
        if not data:
            rows.append({**info, "data": label, "sim success": float("nan")})  # nothing kept to fine-tune on
            continue
        policy = finetune(copy.deepcopy(base), data, size["steps"], lr=args.lr, batch_size=size["batch"], seed=seed)
        rows.append({**info, "data": label, "sim success": success(policy)})
        print(rows[-1], flush=True)
    return rows


def generated_episodes(task, generator, base, model, start, scale: float, max_residual: float, seed: int):
    """Segments from the trajectory diffusion ``generator`` (one per start, guided toward ``base`` at
    ``scale``), the successful and dynamically consistent ones as episodes; their replay in the sim."""
    t = time.perf_counter()
    segments, st = synthesize(generator, start, task, chunked_policy_target(base, seed), scale, model=model,
                              max_residual=max_residual, seed=seed)
    episodes = segment_episodes(segments, task)
    for e, i in zip(episodes, st["kept_starts"]):
        e["start"] = np.asarray(i)
    return episodes, {"imagined success": st["successful"] / st["generated"], "kept": st["kept"],
                      "replay ok": replay_rate(task, episodes, len(start)), "imagine s": time.perf_counter() - t}


def replay_rate(task, episodes, starts: int) -> float:
    """The fraction of ``episodes`` (from the first ``starts`` start seeds) that succeed again when
    their actions are replayed open loop in the simulator; NaN for none."""
    replayed = replay_in_sim(task.make_env, episodes, START_SEED + np.arange(starts))
    return float(replayed.mean()) if len(replayed) else float("nan")


def fit_generator(task, data, args) -> TrajectoryDiffusion:
    """Trajectory diffusion over (state, action, reward) segments of the behaviour ``data``, ended
    episodes held in their final state (so segments from a start reach where the episodes ended)."""
    generator = TrajectoryDiffusion(TrajectoryDiffusionConfig(obs_dim=task.obs_dim, action_dim=task.action_dim,
                                                              horizon=args.generator_horizon))
    t = time.perf_counter()
    stats = generator.fit(segments_from_episodes(data, args.generator_horizon, pad_terminal=True),
                          steps=args.generator_steps, seed=0)
    print("generator", {**stats, "fit_seconds": time.perf_counter() - t}, flush=True)
    return generator


def sim_successes(task, policy, starts: int) -> list[dict]:
    """The chunked ``policy``'s successful episodes in the simulator from the imagined starts' seeds,
    with its planning steps marked (every ``n_action_steps`` from the start), as imagined ones are."""
    episodes, ok = task.collect(policy, starts, seed=START_SEED)
    return [{"obs": e["obs"], "action": e["action"], "plan": plan_steps(len(e["obs"]), policy.n_action_steps)}
            for e, won in zip(episodes, ok) if won]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="obstacle_reach", choices=sorted(SIZES))
    ap.add_argument("--seeds", type=int, default=3, help="toy: bases trained with N seeds from --first-seed")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--base", default=None, help="push-T: the chunked policy checkpoint to improve")
    ap.add_argument("--demos", type=int, default=None,
                    help="demos the base is (toy, default 100) or was (push-T, default 200) imitated from")
    ap.add_argument("--demo-seed", type=int, default=0)
    ap.add_argument("--model", default=None, help="a fitted EnsembleDynamics folder")
    ap.add_argument("--data", type=int, default=200, help="behaviour episodes to fit a model on (no --model)")
    ap.add_argument("--fit-steps", type=int, default=5000)
    ap.add_argument("--attempts", type=int, default=1, help="imagined rollouts per start")
    ap.add_argument("--select", default="all", choices=["all", "shortest"])
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--start-spread", type=float, nargs=2, default=None, metavar=("X", "Y"),
                    help="toy: half-widths (m) of the start box for behaviour data, imagined starts and evaluation")
    ap.add_argument("--obstacle", type=float, nargs=2, default=None, metavar=("X", "Y"),
                    help="toy: the obstacle's centre (m) for behaviour data, imagined starts and evaluation "
                         "(the demos keep it at the origin)")
    ap.add_argument("--base-steps", type=int, default=5000, help="toy: the base's training steps")
    ap.add_argument("--sim-reference", action="store_true",
                    help="also fine-tune on the base's successes in the simulator from the same starts")
    ap.add_argument("--generator-steps", type=int, default=0,
                    help="also fine-tune on trajectory-diffusion segments (unguided and guided toward the base), "
                         "the generator fitted this many steps on the behaviour data (0: off)")
    ap.add_argument("--generator-horizon", type=int, default=32, help="generated segment length (steps)")
    ap.add_argument("--guidance", type=float, default=0.5, help="guided generator's guidance scale in (0, 1]")
    ap.add_argument("--max-residual", type=float, default=float("inf"),
                    help="keep generated segments whose mean one-step residual under the ensemble is at most this")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    scene = {k: tuple(v) for k, v in (("start_spread", args.start_spread), ("obstacle_center", args.obstacle))
             if v is not None}
    if scene and args.task != "obstacle_reach":
        ap.error("--start-spread and --obstacle are obstacle_reach options")
    task = make_task(args.task, scene or None)
    data = task.collect(task.behaviour(0), args.data, seed=0)[0] if not args.model or args.generator_steps else None
    if args.model:
        model = EnsembleDynamics.load(args.model)
    else:
        model, stats = fit_model(task, data, args.fit_steps, seed=0, hidden=[200, 200, 200])
        print("model", stats, flush=True)
    generator = fit_generator(task, data, args) if args.generator_steps else None
    rows = []
    if args.task == "pusht":
        if not args.base:
            ap.error("--task pusht needs --base <chunked policy checkpoint>")
        from robo.imitation.demos import pusht_demos

        demos = pusht_demos(args.demos or 200, seed=args.demo_seed)
        rows += experiment(task, load_policy(args.base), demos, model, args, 0, generator)
    else:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            base, demos = toy_base(seed, args.demos or 100, args.base_steps)
            rows += experiment(task, base, demos, model, args, seed, generator)
    print(f"\n{args.task}: fine-tuned on demos / imagined successes ({args.attempts} attempts per start, "
          f"select {args.select}); sim success on {SIZES[args.task]['eval']} episodes")
    print_table(rows, ["seed", "data", "sim success", "imagined success", "kept", "replay ok", "imagine s"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
