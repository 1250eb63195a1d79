"""Fine-tuning a chunked policy on its own successful imagined rollouts (Ctrl-World's loop), as one table.

For the base, the same base fine-tuned on its demos only (the control: as many steps), on demos +
imagined successes, and on imagined successes only: success in the simulator on the same seeds.
It also reports the imagined success rate and how many imagined successes reproduce when their
actions are replayed open loop in the simulator from the same start (the data's fidelity).

    python benchmarks/imagined_finetune.py                     # toy obstacle_reach: base trained here, 3 seeds
    python benchmarks/imagined_finetune.py --sim-reference "+task.env_kwargs.start_spread=[0.9,0.3]"  # new starts
    python benchmarks/imagined_finetune.py --sim-reference "+task.env_kwargs.obstacle_center=[0.3,0]" # a new scene
    python benchmarks/imagined_finetune.py task=pusht synthesize.base=<chunked checkpoint> model.path=<ensemble> \
        synthesize.attempts=8 synthesize.select=shortest

Every setting is a Hydra override of ``configs/imagine.yaml`` (as for ``robo imagine synthesize``), applied after
this benchmark's defaults (``BENCH_DEFAULTS``, then ``TASK_DEFAULTS``: every fine-tune runs
``synthesize.finetune_steps`` steps, success is measured on ``synthesize.eval_episodes`` episodes); ``seed`` is
the first of ``--seeds`` toy bases.
Toy: the base is a diffusion policy (MLP denoiser) trained ``--base-steps`` (5,000) steps on ``model.demos``
(the task's 100) scripted demos; the ensemble is fitted on ``model.data_episodes`` (200) behaviour episodes (noisy
expert) for ``model.fit_steps``. ``task.env_kwargs.start_spread=[X,Y]`` draws the behaviour data, the imagined
starts and the evaluation from a start box of half-widths X, Y m while the demos keep theirs (±5 cm): the imagined
successes then cover starts the demos never did. ``task.env_kwargs.obstacle_center=[X,Y]`` moves the obstacle
there for the same three (the demos were recorded with it at the origin): at ``[0.3,0]`` the demos' right-hand
path collides, so continued training on the demos cannot help and the imagined successes (from a model of the
changed scene) are the only news. ``--sim-reference`` adds a fine-tune on the base's own successes in the
simulator from the same starts (what the world model stands in for; those cost real env steps). ``--generator``
adds fine-tunes on trajectory-diffusion segments (``synthesize.diffusion_steps``, ``synthesize.horizon``,
``synthesize.guidance_scale``). push-T: ``synthesize.base`` was imitated from ``model.demos`` demos generated with
``model.demo_seed``; ``model.path`` is a fitted ensemble (else one is fitted). One thread.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch
from omegaconf import OmegaConf

from common import command_config, fail, parse, parser  # benchmarks/ is on sys.path when run as a script
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
from robo.run_dir import write_json

START_SEED, EVAL_SEED = 70_000, 100_000
# Overrides of configs/imagine.yaml applied before the command line's.
BENCH_DEFAULTS = ["mode=synthesize", "task=obstacle_reach", "model.data_episodes=200", "model.fit_steps=5000"]
STARTS = {"obstacle_reach": 256, "pusht": 512}  # imagined rollouts start from this many behaviour starts
# Overrides of configs/imagine.yaml per task, after BENCH_DEFAULTS: fine-tuning and evaluation sizes.
TASK_DEFAULTS = {"obstacle_reach": ["synthesize.finetune_batch=256", "synthesize.eval_episodes=200"],
                 "pusht": ["synthesize.finetune_steps=3000", "synthesize.eval_episodes=100"]}


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


def experiment(task, base, demos, model, r, args, seed: int, generator=None) -> list[dict]:
    """The table's rows for one ``base``; ``r`` is the config's ``synthesize`` node."""

    def success(policy) -> float:
        return evaluate_chunked_policy(policy, lambda render_mode=None: task.make_env(), int(r.eval_episodes),
                                       seed=EVAL_SEED)["success_rate"]

    starts, _ = task.collect(task.behaviour(seed + 7), STARTS[task.name], seed=START_SEED, max_steps=1)
    start = np.stack([e["obs"][0] for e in starts])
    t = time.perf_counter()
    imagined, st = imagined_successes(model, base, start, task, int(r.attempts), r.select, seed=seed)
    imagine_s = time.perf_counter() - t
    common = {"seed": seed, "imagined success": st["imagined_success"], "kept": st["kept"],
              "replay ok": replay_rate(task, imagined, len(start)), "imagine s": imagine_s}
    rows = [{**common, "data": "base", "sim success": success(base)}]
    runs = [("demos", demos, common), ("demos + imagined", demos + imagined, common), ("imagined", imagined, common)]
    if args.sim_reference:
        runs.append(("demos + sim successes", demos + sim_successes(task, base, len(start)), {"seed": seed}))
    for label, scale in ((("unguided", 0.0), ("guided", float(r.guidance_scale))) if generator else ()):
        segments, stats = generated_episodes(task, generator, base, model, start, scale, args.max_residual, seed)
        runs += [(f"demos + {label} trajectory diffusion", demos + segments, {"seed": seed, **stats}),
                 (f"{label} trajectory diffusion", segments, {"seed": seed, **stats})]
    for label, data, info in runs:
        if not data:
            rows.append({**info, "data": label, "sim success": float("nan")})  # nothing kept to fine-tune on
            continue
        policy = finetune(copy.deepcopy(base), data, int(r.finetune_steps), lr=float(r.finetune_lr),
                          batch_size=int(r.finetune_batch), seed=seed)
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


def fit_generator(task, data, horizon: int, steps: int) -> TrajectoryDiffusion:
    """Trajectory diffusion over (state, action, reward) segments (``horizon`` steps) of the behaviour ``data``,
    fitted ``steps`` steps, ended episodes held in their final state (so segments from a start reach where the
    episodes ended)."""
    generator = TrajectoryDiffusion(TrajectoryDiffusionConfig(obs_dim=task.obs_dim, action_dim=task.action_dim,
                                                              horizon=horizon))
    t = time.perf_counter()
    stats = generator.fit(segments_from_episodes(data, horizon, pad_terminal=True), steps=steps, seed=0)
    print("generator", {**stats, "fit_seconds": time.perf_counter() - t}, flush=True)
    return generator


def sim_successes(task, policy, starts: int) -> list[dict]:
    """The chunked ``policy``'s successful episodes in the simulator from the imagined starts' seeds,
    with its planning steps marked (every ``n_action_steps`` from the start), as imagined ones are."""
    episodes, ok = task.collect(policy, starts, seed=START_SEED)
    return [{"obs": e["obs"], "action": e["action"], "plan": plan_steps(len(e["obs"]), policy.n_action_steps)}
            for e, won in zip(episodes, ok) if won]


def main() -> None:
    ap = parser(__doc__, "imagine", "task=pusht synthesize.base=<checkpoint> synthesize.attempts=8 model.fit_steps=500")
    ap.add_argument("--seeds", type=int, default=3, help="toy: bases trained with seeds seed..seed+N-1")
    ap.add_argument("--base-steps", type=int, default=5000, help="toy: the base's training steps")
    ap.add_argument("--sim-reference", action="store_true",
                    help="also fine-tune on the base's successes in the simulator from the same starts")
    ap.add_argument("--generator", action="store_true",
                    help="also fine-tune on trajectory-diffusion segments (unguided and guided toward the base), "
                         "the generator fitted synthesize.diffusion_steps on the behaviour data")
    ap.add_argument("--max-residual", type=float, default=float("inf"),
                    help="keep generated segments whose mean one-step residual under the ensemble is at most this")
    ap.add_argument("--json", default=None)
    args = parse(ap)
    name = command_config(ap, "imagine", args.overrides, defaults=BENCH_DEFAULTS).task.name
    if name not in TASK_DEFAULTS:
        fail(ap, f"task={name}: choose task=obstacle_reach or task=pusht")
    cfg = command_config(ap, "imagine", args.overrides, defaults=[*BENCH_DEFAULTS, *TASK_DEFAULTS[name]])
    m, r = cfg.model, cfg.synthesize
    if name == "pusht" and not r.base:
        fail(ap, "task=pusht needs synthesize.base=<chunked policy checkpoint>")
    torch.set_num_threads(1)
    env_kwargs = cfg.task.get("env_kwargs")
    task = make_task(name, OmegaConf.to_container(env_kwargs, resolve=True) if env_kwargs else None)
    demo_count, steps = int(m.demos or cfg.task.demos), int(m.fit_steps)
    data = (task.collect(task.behaviour(0), int(m.data_episodes), seed=0)[0] if not m.path or args.generator
            else None)
    if m.path:
        model = EnsembleDynamics.load(m.path)
    else:
        model, stats = fit_model(task, data, steps, 0, m.hidden_dims, m.object_frame, int(m.members))
        print("model", stats, flush=True)
    generator = fit_generator(task, data, int(r.horizon), int(r.diffusion_steps)) if args.generator else None
    rows = []
    if name == "pusht":
        from robo.imitation.demos import pusht_demos

        demos = pusht_demos(demo_count, seed=int(m.demo_seed))
        rows += experiment(task, load_policy(r.base), demos, model, r, args, 0, generator)
    else:
        for seed in range(int(cfg.seed), int(cfg.seed) + args.seeds):
            base, demos = toy_base(seed, demo_count, args.base_steps)
            rows += experiment(task, base, demos, model, r, args, seed, generator)
    print(f"\n{name}: fine-tuned on demos / imagined successes ({r.attempts} attempts per start, "
          f"select {r.select}); sim success on {r.eval_episodes} episodes")
    print_table(rows, ["seed", "data", "sim success", "imagined success", "kept", "replay ok", "imagine s"])
    if args.json:
        write_json(args.json, rows)


if __name__ == "__main__":
    main()
