"""World-model numbers, as one markdown table: policy ranking in imagination vs the simulator
(Spearman), one-step and 50-step prediction error, and the synthesis gain of BC fine-tuned on
imagined successful trajectories (guided vs unguided generator).

    nice -n 10 python benchmarks/world_model.py                       # both tasks, all parts
    python benchmarks/world_model.py --tasks hover --parts ranking,error
    python benchmarks/world_model.py --tasks hover model.data_episodes=32 model.fit_steps=500 seed=1
    python benchmarks/world_model.py --json results.json

The model settings are Hydra overrides of ``configs/imagine.yaml`` (as for ``robo imagine``), applied to every
task of ``--tasks`` after this benchmark's sizes for it (``TASK_DEFAULTS``: ``model.data_episodes``,
``model.fit_steps``, ``model.hidden_dims``, ``evaluate.episodes``). Everything runs on CPU with one thread;
models are small and runs short.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from policies.world_model import EnsembleDynamics
from robo.world_model.rollout import imagine_rollout, open_loop_error, spearman
from robo.world_model.tasks import ensemble_config, make_task, transitions
from robo.run_dir import write_json
from common import command_config, fail, parse, parser  # benchmarks/ is on sys.path when run as a script

# Overrides of configs/imagine.yaml per task, applied before the command line's.
TASK_DEFAULTS = {"hover": ["model.data_episodes=64", "model.fit_steps=1000", "model.hidden_dims=[128,128]",
                           "evaluate.episodes=64"],
                 "pusht": ["model.data_episodes=600", "model.fit_steps=8000", "evaluate.episodes=50"]}
PUSHT_LEVELS = [0.0, 0.03, 0.05, 0.07, 0.09, 0.11, 0.14, 0.2]  # the expert's random-action probability


def fit_model(task, episodes, steps: int, seed: int, hidden: list[int], object_frame: bool = True,
              members: int = 5) -> tuple[EnsembleDynamics, dict]:
    model = EnsembleDynamics(ensemble_config(task, members, list(hidden), object_frame))
    t = time.perf_counter()
    stats = model.fit(transitions(episodes), steps=steps, seed=seed)
    stats["fit_seconds"] = time.perf_counter() - t
    return model, stats


def ranking(task, model, episodes: int, levels, seed: int, sample: str = "mean") -> dict:
    real, imagined, score, names = [], [], [], []
    start_eps, _ = task.collect(task.behaviour(seed + 7), episodes, seed=seed + 30_000)
    start = np.stack([e["obs"][0] for e in start_eps])
    for name, pol in task.ladder(levels, seed):
        _, ok = task.collect(pol, episodes, seed=seed + 20_000)
        r = imagine_rollout(model, pol, start, task.episode_steps, task, sample=sample)
        real.append(float(ok.mean()))
        imagined.append(float(r["success"].mean()))
        score.append(float(r["max_reward"].mean()))
        names.append(name)
        print(f"  {task.name} {name}: sim {real[-1]:.3f} imagined {imagined[-1]:.3f} max reward {score[-1]:.3f} "
              f"cut {r['cut'].mean():.2f}", flush=True)
    return {"names": names, "sim_success": real, "imagined_success": imagined, "imagined_max_reward": score,
            "spearman": spearman(real, imagined), "spearman_max_reward": spearman(real, score)}


def prediction_error(task, model, episodes) -> dict:
    err = open_loop_error(model, episodes, 50, task.angle_dims)
    copy = np.mean([np.abs(e["next_obs"][:50] - e["obs"][0]).mean() for e in episodes if len(e["obs"]) >= 50])
    return {"one_step_mae": float(err[0]), "fifty_step_mae": float(err[49]), "copy_start_50_mae": float(copy)}


def latent_benchmark(seed: int, episodes: int = 8, steps: int = 300) -> dict:
    """Push-T images (64 px): next-frame MSE of the latent model on a held-out episode vs copying the frame."""
    from policies.world_model import LatentConfig, LatentWorldModel
    from sims.pusht.demos import generate_demos

    eps = generate_demos(episodes + 1, seed=seed, obs_type="image")
    def triples(es):
        return (np.concatenate([e["image"][:-1] for e in es]), np.concatenate([e["action"][:-1] for e in es]),
                np.concatenate([e["image"][1:] for e in es]))
    wm = LatentWorldModel(LatentConfig(image_size=64, action_dim=2))
    t = time.perf_counter()
    fit = wm.fit(*triples(eps[:-1]), steps=steps, seed=seed)
    x, a, y = triples(eps[-1:])
    from policies.world_model.latent import as_images

    y = as_images(y, 64)
    pred = float(((wm.predict(x, a) - y) ** 2).mean())
    copy = float(((as_images(x, 64) - y) ** 2).mean())
    return {"next_frame_mse": pred, "copy_frame_mse": copy, "recon_mse": fit["recon"],
            "fit_seconds": time.perf_counter() - t}


def main() -> None:
    ap = parser(__doc__, "imagine", "model.fit_steps=500 model.object_frame=false seed=1")
    ap.add_argument("--tasks", default="hover,pusht", help="comma-separated: hover, pusht")
    ap.add_argument("--parts", default="ranking,error,synthesis,latent")
    ap.add_argument("--sample", default="mean", help="imagined rollouts: mean (of members) or member (MBPO draws)")
    ap.add_argument("--json", default=None)
    args = parse(ap)
    if any(o.lstrip("+~").startswith("task=") for o in args.overrides):
        fail(ap, "the tasks are --tasks (each is task=<name>)")
    names = args.tasks.split(",")
    unknown = sorted(set(names) - TASK_DEFAULTS.keys())
    if unknown:
        fail(ap, f"--tasks {','.join(unknown)}: choose among {', '.join(TASK_DEFAULTS)}")
    configs = {name: command_config(ap, "imagine", args.overrides, defaults=[f"task={name}", *TASK_DEFAULTS[name]])
               for name in names}
    torch.set_num_threads(1)
    torch.manual_seed(int(configs[names[0]].seed))  # once: the tasks share the seed and the generator
    parts = args.parts.split(",")
    rows: list[tuple[str, str, str]] = []
    results: dict = {}
    for name, cfg in configs.items():
        seed, m = int(cfg.seed), cfg.model
        task = make_task(name)
        t0 = time.perf_counter()
        data, _ = task.collect(task.behaviour(seed), int(m.data_episodes), seed=seed)
        n = sum(len(e["obs"]) for e in data)
        model, stats = fit_model(task, data, int(m.fit_steps), seed, m.hidden_dims, m.object_frame, int(m.members))
        print(f"{name}: {n} transitions, fit {stats}", flush=True)
        res = results[name] = {"transitions": n, **stats}
        rows.append((name, "model: transitions / holdout MSE (normalized)", f"{n} / {stats['holdout_mse']:.4f}"))
        if "error" in parts:
            held, _ = task.collect(task.behaviour(seed + 1), 16, seed=seed + 40_000)
            e = res["error"] = prediction_error(task, model, held)
            rows.append((name, "1-step MAE vs sim (obs units)", f"{e['one_step_mae']:.5f}"))
            rows.append((name, "50-step open-loop MAE vs sim (copy-start baseline)",
                         f"{e['fifty_step_mae']:.4f} ({e['copy_start_50_mae']:.4f})"))
        if "ranking" in parts:
            levels = PUSHT_LEVELS if name == "pusht" else task.default_levels
            r = res["ranking"] = ranking(task, model, int(cfg.evaluate.episodes), levels, seed, args.sample)
            rows.append((name, f"ranking: Spearman imagined vs sim success ({len(levels)} policies)",
                         f"{r['spearman']:.3f}"))
            rows.append((name, "ranking: Spearman imagined mean max reward vs sim success",
                         f"{r['spearman_max_reward']:.3f}"))
            rows.append((name, "sim success per policy", " ".join(f"{v:.2f}" for v in r["sim_success"])))
            rows.append((name, "imagined success per policy", " ".join(f"{v:.2f}" for v in r["imagined_success"])))
        if "synthesis" in parts and name == "pusht":
            from robo.world_model.synthesize import synthesis_experiment

            s = res["synthesis"] = synthesis_experiment(task, data, seed=seed)
            for k, v in s.items():
                rows.append((name, f"synthesis: {k}", f"{v:.3f}" if isinstance(v, float) else str(v)))
        if "latent" in parts and name == "pusht":
            lat = res["latent"] = latent_benchmark(seed)
            rows.append((name, "latent image model: next-frame MSE (copy-frame baseline)",
                         f"{lat['next_frame_mse']:.4f} ({lat['copy_frame_mse']:.4f})"))
        res["seconds"] = time.perf_counter() - t0
        rows.append((name, "benchmark wall time, s", f"{res['seconds']:.0f}"))
    print("\n| task | quantity | value |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
