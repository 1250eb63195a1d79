"""Energy-based policies on state-based push-T: success, training time, latency, energy as uncertainty.

Train the policies first with the imitation CLI (same 200 expert demos, seed 0), e.g.

    robo train policy=energy task=pusht task.demo_generator=sims.pusht.demos:generate_demos demos=200
    robo train policy=implicit_bc task=pusht task.demo_generator=sims.pusht.demos:generate_demos demos=200

then point this script at the run folders (a diffusion run is optional; without it the diffusion
policy's latency is timed on an untrained model of the default config, which costs the same):

    python benchmarks/energy.py --energy runs/train/<time> --ibc runs/train/<time> [--diffusion <run>]

Prints one table: success rate over ``--episodes`` episodes for each number of descent steps K and of
candidates N (``--candidates``: N guesses descended together, the chunk of lowest final energy kept),
training wall time, latency per action chunk (batch 1, median), and the AUROC of the episode's
mean / max energy at predicting failure on ``--perturbed`` perturbed starts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import sims  # noqa: F401  (registers robo/PushT-v0)
from imitation import chunk_latency_ms  # benchmarks/imitation.py, beside this script
from policies.chunked import draw_noise
from policies.registry import load_policy
from robo.imitation.evaluate import evaluate_chunked_policy

ENV_ID = "robo/PushT-v0"
EVAL_SEED, PERTURBED_SEED = 100000, 200000
PERTURBATION = np.array([0.03, 0.03, 0.03, 0.03, 0.5])  # std of the start perturbation: m, m, m, m, rad


def auroc(scores: np.ndarray, positives: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for the binary labels ``positives`` (Mann-Whitney U, ties
    count half); NaN when only one class is present."""
    scores, positives = np.asarray(scores, float), np.asarray(positives, bool)
    n_pos, n_neg = positives.sum(), (~positives).sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):  # average ranks over ties
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def perturbed_starts(n: int, seed: int) -> np.ndarray:
    """(n, 5) push-T start states: the env's start distribution plus Gaussian ``PERTURBATION``."""
    env = gym.make(ENV_ID, obs_type="state", render_mode=None).unwrapped
    rng = np.random.default_rng(seed)
    h = env.cfg.half_size - 0.03
    starts = []
    for _ in range(n):
        s = env.sample_initial_state(rng) + PERTURBATION * rng.standard_normal(5)
        s[:4] = np.clip(s[:4], -h, h)
        starts.append(s)
    env.close()
    return np.stack(starts)


def rollout_with_energy(policy, starts: np.ndarray, seed: int, max_steps: int = 300):
    """Roll ``policy`` out from ``starts`` (n, 5), all envs batched -> (success (n,), max coverage reward (n,),
    mean energy (n,), max energy (n,)); the energy of the chunk being executed is logged at every step."""
    n = len(starts)
    envs = [gym.make(ENV_ID, obs_type="state", render_mode=None) for _ in range(n)]
    obs = np.stack([e.reset(seed=seed + i, options={"state": s})[0] for i, (e, s) in enumerate(zip(envs, starts))])
    gen = torch.Generator().manual_seed(seed)
    done, success, best = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n)
    energies: list[list[float]] = [[] for _ in range(n)]
    policy.reset()
    for _ in range(max_steps):
        actions = policy.act(obs.astype(np.float32), noise=draw_noise(policy, n, gen))
        energy = policy.last_energy.numpy()
        for i in np.nonzero(~done)[0]:
            energies[i].append(float(energy[i]))
            obs[i], reward, term, trunc, info = envs[i].step(actions[i])
            best[i] = max(best[i], reward)
            if term or trunc:
                done[i], success[i] = True, bool(info["is_success"])
        if done.all():
            break
    for e in envs:
        e.close()
    return success, best, np.array([np.mean(e) for e in energies]), np.array([np.max(e) for e in energies])


def run_metrics(run: Path) -> dict:
    """The run's final metrics (``robo train`` evaluates on the same seeds as ``success_rate``)."""
    path = run / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else {}


def train_time(run: Path) -> float:
    return float(run_metrics(run).get("train_wall_time", float("nan")))


def policy_of(run: Path):
    return load_policy(run / "checkpoints" / "latest" / "policy")


def success_rate(policy, episodes: int, run: Path | None = None) -> float:
    """Success over ``episodes`` push-T episodes; taken from ``run``'s final evaluation when that
    evaluated the same number of episodes with the policy's trained settings (pass ``run`` only then)."""
    m = run_metrics(run) if run is not None else {}
    if m.get("episodes") == episodes and "success_rate" in m:
        return float(m["success_rate"])
    return evaluate_chunked_policy(policy, ENV_ID, episodes, seed=EVAL_SEED, num_envs=50, max_steps=300,
                                   env_kwargs={"obs_type": "state", "render_mode": None})["success_rate"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--energy", type=Path, required=True, help="run folder of `robo train policy=energy`")
    ap.add_argument("--ibc", type=Path, help="run folder of `robo train policy=implicit_bc`")
    ap.add_argument("--diffusion", type=Path, help="run folder of `robo train policy=diffusion`")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--perturbed", type=int, default=100)
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 2, 4], help="energy descent steps K to test")
    ap.add_argument("--candidates", type=int, nargs="+", default=[1, 8],
                    help="guesses descended per chunk, the lowest final energy kept (EBT's self-verification)")
    ap.add_argument("--auroc-steps", type=int, nargs="*", default=[2], help="K for which to measure the AUROC")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []  # (policy, steps, success, train s, latency ms (median, min), auroc mean, auroc max)
    energy = policy_of(args.energy)
    trained = (energy.config.n_steps, energy.config.n_candidates)
    low_cover = (float("nan"), float("nan"))
    for k in args.steps:
        for n in args.candidates:
            energy.config.n_steps, energy.config.n_candidates = k, n
            name, a_mean, a_max = f"energy (EBT-style), {n} candidate(s)", float("nan"), float("nan")
            if k in args.auroc_steps:
                ok, cover, mean_e, max_e = rollout_with_energy(energy, perturbed_starts(args.perturbed, PERTURBED_SEED),
                                                               PERTURBED_SEED)
                bad = cover < np.median(cover)  # the worse half by max coverage: a label even when nothing succeeds
                name += f" ({ok.mean():.2f} success perturbed)"
                a_mean, a_max = auroc(mean_e, ~ok), auroc(max_e, ~ok)
                low_cover = (auroc(mean_e, bad), auroc(max_e, bad))
            rows.append((name, k, success_rate(energy, args.episodes, args.energy if (k, n) == trained else None),
                         train_time(args.energy), chunk_latency_ms(energy), a_mean, a_max))
    if args.ibc:
        ibc = policy_of(args.ibc)
        rows.append(("implicit_bc (DFO)", ibc.config.dfo_iters, success_rate(ibc, args.episodes, args.ibc),
                     train_time(args.ibc), chunk_latency_ms(ibc, 10), float("nan"), float("nan")))
    if args.diffusion:
        diffusion = policy_of(args.diffusion)
        success, trained = success_rate(diffusion, args.episodes, args.diffusion), train_time(args.diffusion)
    else:
        from policies.diffusion import DiffusionConfig, DiffusionPolicy
        diffusion = DiffusionPolicy(DiffusionConfig(obs_dim=5, action_dim=2))  # untrained: same latency
        success = trained = float("nan")
    rows.append(("diffusion (" + diffusion.config.inference_scheduler + ")", diffusion.config.num_inference_steps,
                 success, trained, chunk_latency_ms(diffusion), float("nan"), float("nan")))

    print(f"push-T (state), {args.episodes} eval episodes, AUROC of energy vs failure on {args.perturbed} "
          f"perturbed starts, latency per chunk (median and min wall time) at batch 1 with "
          f"{torch.get_num_threads()} thread")
    head = (f"{'policy':<66} {'steps':>5} {'success':>8} {'train s':>8} {'ms/chunk':>9} {'min ms':>8} "
            f"{'AUROC mean E':>13} {'AUROC max E':>12}")
    print(head)
    print("-" * len(head))
    for name, k, s, t, (wall, cpu), a_mean, a_max in rows:
        print(f"{name:<66} {k:>5} {s:>8.2f} {t:>8.0f} {wall:>9.2f} {cpu:>8.2f} {a_mean:>13.2f} {a_max:>12.2f}")
    print(f"AUROC of the energy (mean, max over the episode) at flagging the worse half of perturbed episodes by "
          f"max coverage: {low_cover[0]:.2f}, {low_cover[1]:.2f}")


if __name__ == "__main__":
    main()
