"""DSRL with and without imagination: real env steps to a target success (toy task).

    python benchmarks/steer_imagination.py base=<chunked policy checkpoint> [total_env_steps=3000]
    python benchmarks/steer_imagination.py base=<...> seed=S --model-demos 100 --model-steps 10000 --imagined 7

The DSRL runs are ``robo steer`` runs on the toy task: every setting is a Hydra override of ``configs/steer.yaml``,
applied after this benchmark's defaults (``BENCH_DEFAULTS``); the flags set up the world model.

1. Roll out the frozen base policy (N(0, I) noise) for ``--model-data`` real env steps and fit an
   MBPO ensemble (``EnsembleDynamics``) on them; or, with ``--model-demos N``, fit it on the N
   scripted-expert demos the base was imitated from (``--demo-seed``: its training seed), which
   costs no env steps beyond those both runs share.
2. DSRL (configs/algo/dsrl.yaml) on the real env alone, and DSRL with 1 real env plus
   ``--imagined`` imagined envs: the ensemble behind the same ``LatentNoiseEnv`` (success from the
   predicted position, collisions from the predicted termination, episodes cut where the members
   disagree by more than ``--disagreement``). Only real env steps count against ``total_env_steps``.
Both are evaluated every ``eval_every`` real env steps on ``eval.episodes_during_training`` real episodes.
Prints one table: real env steps to the first evaluation >= ``--target`` (the imagination row's
count includes the model data), final success on ``eval.episodes`` episodes, imagined env steps.
"""

from __future__ import annotations

import tempfile
import time

import gymnasium as gym
import numpy as np
import torch
from omegaconf import OmegaConf

import sims  # noqa: F401  (registers the envs)
from policies.chunked import draw_noise
from policies.registry import load_policy
from policies.world_model import EnsembleConfig, EnsembleDynamics
from robo.imitation.evaluate import evaluate_chunked_policy
from robo.steer import SteerTrainer
from robo.world_model import ImaginedEnv, SingleImaginedEnv
from robo.world_model.tasks import from_demos, toy_success, transitions
from sims.toy import generate_demos
from common import command_config, fail, parse, parser  # benchmarks/ is on sys.path when run as a script
from table import print_table

TOY = "robo/ObstacleReach-v0"
# Overrides of configs/steer.yaml applied before the command line's.
BENCH_DEFAULTS = ["task=obstacle_reach", "total_env_steps=3000", "eval_every=250", "eval.episodes_during_training=50",
                  "checkpoint_every=${total_env_steps}"]


def collect(base, steps: int, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Transitions (obs, action, next_obs, reward, terminated) of the base policy in the real env,
    and the episodes' first observations (imagined episodes start from them)."""
    env = gym.make(TOY)
    rows = {k: [] for k in ("obs", "action", "next_obs", "reward", "terminated")}
    starts = []
    gen = torch.Generator().manual_seed(seed)
    episode = 0
    while len(rows["obs"]) < steps:
        obs, _ = env.reset(seed=seed + episode)
        starts.append(obs)
        base.reset()
        done = False
        while not done and len(rows["obs"]) < steps:
            a = base.act(obs[None].astype(np.float32), noise=draw_noise(base, 1, gen))[0]
            nxt, r, term, trunc, _ = env.step(a)
            for k, v in zip(rows, (obs, a, nxt, r, float(term))):
                rows[k].append(v)
            obs, done = nxt, term or trunc
        episode += 1
    return {k: np.asarray(v, np.float32) for k, v in rows.items()}, np.asarray(starts, np.float32)


def run(name: str, base, cfg, imagined: int = 0, imagined_factory=None) -> tuple[dict, SteerTrainer]:
    c = {**OmegaConf.to_container(cfg, resolve=True), "imagined_envs": imagined if imagined_factory else 0}
    t0 = time.time()
    trainer = SteerTrainer(c, tempfile.mkdtemp(prefix=f"steer_{name}_"), base, lambda: gym.make(TOY),
                           progress=False, make_imagined_env=imagined_factory)
    trainer.train()
    final = evaluate_chunked_policy(trainer.steered_policy(), TOY, int(cfg.eval.episodes), seed=int(cfg.eval.seed))
    return {"final_success": final["success_rate"], "imagined_env_steps": trainer.imagined_env_steps,
            "wall_min": (time.time() - t0) / 60}, trainer


def main() -> None:
    ap = parser(__doc__, "steer", "base=<checkpoint> total_env_steps=3000 seed=1 algo.noise_bound=1.5")
    ap.add_argument("--model-data", type=int, default=600, help="real env steps to fit the world model on")
    ap.add_argument("--model-demos", type=int, default=0,
                    help="fit the world model on this many of the base's training demos instead (no new env "
                         "steps; the base's imitation seed is --demo-seed)")
    ap.add_argument("--demo-seed", type=int, default=0)
    ap.add_argument("--model-steps", type=int, default=3000, help="ensemble training steps")
    ap.add_argument("--imagined", type=int, default=3, help="imagined envs beside the one real env")
    ap.add_argument("--disagreement", type=float, default=1.0,
                    help="cut imagined episodes where the members disagree by more than this (normalized units)")
    ap.add_argument("--target", type=float, default=0.85, help="success rate whose first evaluation is reported")
    args = parse(ap)
    cfg = command_config(ap, "steer", args.overrides, defaults=BENCH_DEFAULTS)
    if cfg.task.name != "obstacle_reach" or cfg.algo.mode != "latent":
        fail(ap, "this benchmark steers on the toy task with DSRL: task=obstacle_reach, a latent algo (algo=dsrl)")
    if not cfg.base:
        fail(ap, "base is required: add base=<chunked policy checkpoint folder> (a policy for task=obstacle_reach)")
    torch.set_num_threads(int(cfg.threads))
    base = load_policy(cfg.base)
    env = gym.make(TOY)
    if args.model_demos:
        demos = generate_demos(args.model_demos, seed=args.demo_seed)
        data, starts = transitions(from_demos(demos)), np.stack([d["obs"][0] for d in demos])
        args.model_data = 0  # the base's own training data: no env steps beyond what both arms share
    else:
        data, starts = collect(base, args.model_data, seed=1000)
    model = EnsembleDynamics(EnsembleConfig(obs_dim=2, action_dim=2, hidden_dims=[128, 128]))
    fit = model.fit(data, steps=args.model_steps)
    print("world model fit:", fit)

    def imagined():
        return SingleImaginedEnv(ImaginedEnv(model, starts, 1, env.action_space, 60, args.disagreement,
                                             success_fn=toy_success, observation_space=env.observation_space,
                                             seed=int(cfg.seed)))

    rows = []
    runs = [("DSRL, real env only", None, 0), (f"DSRL, 1 real + {args.imagined} imagined", imagined, args.model_data)]
    for name, factory, extra in runs:
        m, trainer = run(name, base, cfg, args.imagined, factory)
        hit = [h["env_steps"] for h in trainer.history if h["success_rate"] >= args.target]
        rows.append({"method": name, "real_steps_to_target": hit[0] + extra if hit else "-",
                     "model_data": extra, **m, "episodes": int(cfg.eval.episodes)})
    print_table(rows, ["method", "real_steps_to_target", "model_data", "final_success", "imagined_env_steps",
                       "wall_min", "episodes"])


if __name__ == "__main__":
    main()
