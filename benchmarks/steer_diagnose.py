"""Why a DSRL run did not lift its base: one number per hypothesis, from a finished run folder.

    python benchmarks/steer_diagnose.py <steer run folder> [--episodes 100]

The run folder is one ``robo steer`` or ``benchmarks/steer.py`` run (its ``config.yaml`` or the
benchmark's resolved config, and ``checkpoints/latest``: ``sb3.zip`` + ``replay_buffer.pkl``). Prints:

- noise box: the base's success with N(0, I) noise, clipped to the run's box, and zero noise (the
  mean a deterministic actor starts from);
- the deployed decode: the trained actor's success with its mean (deterministic) and its sampled noise,
  and how far the mean sits from the base's noise (RMS of the mean noise; the share of components at the
  box edge, |a| > 0.95);
- critic over-estimation: min-over-critics Q(s0, mu(s0)) at the first decision against the discounted
  return that episode earned (gamma per decision, as SAC's target), and Q(s0, .) at the base's own noise;
- sparse signal: the buffer's episodes, the share that succeeded, and the return gap between
  successful and failed ones.
All episodes use the run's evaluation seeds (``eval.seed`` ..).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from policies.registry import load_policy
from robo.commands.steer import task_env_factory
from robo.imitation.evaluate import evaluate_chunked_policy
from robo.steer.trainer import SteerSAC, make_chunk_env
from steer import DrawnNoise  # benchmarks/ is on sys.path when run as a script
from table import print_table


def actor_episodes(model, make_env, episodes: int, seed: int, deterministic: bool, gamma: float,
                   bound: float) -> dict:
    """Success, Q(s0, mu(s0)) vs the discounted return earned, and the actor's noise statistics."""
    env = make_env()
    succ, q0, qb, disc, acts = [], [], [], [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, ret, k, info = False, 0.0, 0, {}
        with torch.no_grad():
            o = torch.as_tensor(obs)[None]
            a0 = model.actor(o, deterministic=True)
            q0.append(float(torch.min(*model.critic(o, a0))))
            ab = torch.clamp(torch.randn(16, a0.shape[1]) / bound, -1, 1)  # the base's own noise, 16 draws
            qb.append(float(torch.min(*model.critic(o.expand(16, -1), ab)).mean()))
        while not done:
            a = model.predict(obs, deterministic=deterministic)[0]
            acts.append(a)
            obs, r, term, trunc, info = env.step(a)
            ret, k, done = ret + gamma ** k * r, k + 1, term or trunc
        succ.append(bool(info.get("is_success", False)))
        disc.append(ret)
    acts = np.asarray(acts)
    return {"success": float(np.mean(succ)), "q0": float(np.mean(q0)), "q0_base_noise": float(np.mean(qb)),
            "return": float(np.mean(disc)),
            "rms": float(np.sqrt(np.mean(acts ** 2))), "edge": float(np.mean(np.abs(acts) > 0.95))}


def buffer_episodes(buffer) -> dict:
    """Episodes in the replay buffer: count, success share, mean return of successes and failures."""
    n = buffer.buffer_size if buffer.full else buffer.pos
    r, d = buffer.rewards[:n, 0], buffer.dones[:n, 0]
    ends = np.flatnonzero(d)
    returns = [r[s:e + 1].sum() for s, e in zip(np.r_[0, ends[:-1] + 1], ends)]
    ok = [x > -59 for x in returns]  # a failure pays failure_reward (-60) or times out (60 steps)
    rs, rf = [x for x, o in zip(returns, ok) if o], [x for x, o in zip(returns, ok) if not o]
    return {"episodes": len(returns), "success": float(np.mean(ok)) if ok else 0.0,
            "return_success": float(np.mean(rs)) if rs else float("nan"),
            "return_failure": float(np.mean(rf)) if rf else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--episodes", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    c = OmegaConf.to_container(OmegaConf.load(args.run / "config.yaml"), resolve=True)
    task, algo = c["task"], c["algo"]
    base = load_policy(c["base"])
    seed, n, bound = int(c["eval"]["seed"]), args.episodes, float(algo["noise_bound"])
    draws = torch.Generator().manual_seed(0)
    rows = []
    for label, p in {"N(0, I)": base, f"N(0, I) clipped to +-{bound:g}":
                     DrawnNoise(base, lambda s: torch.randn(s, generator=draws).clamp(-bound, bound)),
                     "zero noise": DrawnNoise(base, torch.zeros)}.items():
        m = evaluate_chunked_policy(p, task["env_id"], n, seed=seed, env_kwargs=task.get("env_kwargs") or {})
        rows.append({"what": f"base, {label}", "success": m["success_rate"]})
    ckpt = args.run / "checkpoints" / "latest"
    model = SteerSAC.load(ckpt / "sb3.zip", device="cpu")
    model.load_replay_buffer(ckpt / "replay_buffer.pkl")
    make_env = lambda: make_chunk_env("latent", task_env_factory(task)(), base, algo)  # noqa: E731
    gamma = float(algo["kwargs"]["gamma"])
    for det in (True, False):
        m = actor_episodes(model, make_env, n, seed, det, gamma, bound)
        rows.append({"what": f"actor, {'mean' if det else 'sampled'} noise", **m})
    rows.append({"what": "replay buffer", **buffer_episodes(model.replay_buffer)})
    keys = ["what", "success", "q0", "q0_base_noise", "return", "rms", "edge", "episodes", "return_success",
            "return_failure"]
    print_table(rows, keys)


if __name__ == "__main__":
    main()
