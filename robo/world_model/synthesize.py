"""Synthetic data from a trajectory diffusion model (Policy-Guided Diffusion) and BC fine-tuning
on its successful segments (Ctrl-World's "improve the policy on successful imagined trajectories").

A segment is (horizon, obs_dim + action_dim + 1) ``[state, action, reward]``. Generated segments
are kept when the task's success test holds at some step and, if a dynamics ensemble is given,
when they are dynamically consistent (mean one-step residual under the ensemble below a bound).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from policies.base import weights_device
from policies.mlp import MLPConfig, MLPPolicy
from policies.world_model import EnsembleDynamics, TrajectoryDiffusion, TrajectoryDiffusionConfig

from .tasks import Episode, ImagineTask


def segments_from_episodes(episodes: list[Episode], horizon: int, stride: int = 4,
                           pad_terminal: bool = False) -> np.ndarray:
    """Sliding windows over episodes -> (N, horizon, obs_dim + action_dim + 1).

    ``pad_terminal``: an episode that ended in termination continues in its final state (its
    ``next_obs[-1]``, held for at least ``horizon - 1`` steps with its last action and reward), as
    Diffuser treats termination as absorbing: windows then reach the states where episodes end
    (success, collision), and episodes shorter than ``horizon`` are not dropped."""
    out = []
    for e in episodes:
        x = np.concatenate([e["obs"], e["action"], e["reward"][:, None]], axis=1)
        if pad_terminal and len(x) and bool(np.asarray(e["terminated"])[-1]):
            final = np.concatenate([e["next_obs"][-1], e["action"][-1], e["reward"][-1:]])
            x = np.concatenate([x, np.repeat(final[None], horizon - 1, axis=0)])
        out += [x[s:s + horizon] for s in range(0, len(x) - horizon + 1, stride)]
    if not out:
        raise ValueError(f"no episode is at least {horizon} steps long")
    return np.stack(out).astype(np.float32)


def dynamics_residual(model: EnsembleDynamics, seg: torch.Tensor, obs_dim: int, action_dim: int) -> np.ndarray:
    """(B,) mean |model(s_t, a_t) - s_{t+1}| over a segment's steps (obs units), computed on the model's device."""
    seg = seg.to(getattr(model, "device", seg.device))
    B, H, _ = seg.shape
    states = seg[:, :, :obs_dim]
    prev = torch.cat([states[:, :1], states[:, :-2]], 1).reshape(-1, obs_dim)  # the first step has none
    s, a = states[:, :-1].reshape(-1, obs_dim), seg[:, :-1, obs_dim:obs_dim + action_dim].reshape(-1, action_dim)
    pred = model.predict(s, a, prev_obs=prev).next_obs.reshape(B, H - 1, obs_dim)
    return (pred - seg[:, 1:, :obs_dim]).abs().mean((1, 2)).cpu().numpy()


def synthesize(generator: TrajectoryDiffusion, start_obs, task: ImagineTask, target_policy=None,
               guidance_scale: float = 0.0, model: EnsembleDynamics | None = None, max_residual: float = np.inf,
               seed: int = 0) -> tuple[np.ndarray, dict]:
    """Generate one segment per start obs (on the generator's device, copied to the host once); keep the
    successful, consistent ones -> (K, H, C), stats (``kept_starts`` (K,): the rows of ``start_obs`` the kept
    segments start from)."""
    c = generator.config
    gen = torch.Generator().manual_seed(seed)
    seg = generator.sample(start_obs, target_policy, guidance_scale, generator=gen).cpu()
    H = c.horizon
    ok = task.success_fn(seg[:, :, :c.obs_dim].reshape(-1, c.obs_dim).numpy()).reshape(-1, H).any(1)
    residual = (dynamics_residual(model, seg, c.obs_dim, c.action_dim) if model is not None
                else np.zeros(len(seg)))
    keep = ok & (residual <= max_residual)
    stats = {"generated": len(seg), "successful": int(ok.sum()), "kept": int(keep.sum()),
             "mean_residual": float(residual.mean()), "kept_starts": np.flatnonzero(keep)}
    return seg[keep].numpy(), stats


def bc_pairs(episodes: list[Episode] | None = None, segments: np.ndarray | None = None,
             obs_dim: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(obs (N, D), action (N, A)) from episodes and/or segments (up to their first success is not cut)."""
    obs, act = [], []
    for e in episodes or []:
        obs.append(e["obs"]), act.append(e["action"])
    if segments is not None and len(segments):
        obs.append(segments[:, :, :obs_dim].reshape(-1, obs_dim))
        act.append(segments[:, :, obs_dim:-1].reshape(-1, segments.shape[-1] - obs_dim - 1))
    return np.concatenate(obs).astype(np.float32), np.concatenate(act).astype(np.float32)


def train_bc(obs: np.ndarray, action: np.ndarray, steps: int = 2000, policy: MLPPolicy | None = None,
             lr: float = 1e-3, batch_size: int = 256, seed: int = 0) -> MLPPolicy:
    """Regress actions on observations with an MLP (new, or ``policy`` fine-tuned)."""
    o, a = torch.as_tensor(obs), torch.as_tensor(action)
    if policy is None:
        policy = MLPPolicy(MLPConfig(obs_dim=o.shape[1], action_dim=a.shape[1], hidden_dims=[256, 256],
                                     squash="clip"))
        policy.model.obs_mean.copy_(o.mean(0)), policy.model.obs_std.copy_(o.std(0).clamp_min(1e-6))
    gen = torch.Generator().manual_seed(seed)
    net = policy.model.train()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    for _ in range(steps):
        i = torch.randint(len(o), (batch_size,), generator=gen)
        loss = F.mse_loss(net(o[i]), a[i])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    net.eval()
    return policy


def policy_target(policy: MLPPolicy):
    """A PGD target: states (B, H, D) -> the policy's actions (B, H, A), computed where the policy's weights are
    and handed back on the states' device."""
    def f(states: torch.Tensor) -> torch.Tensor:
        B, H, D = states.shape
        with torch.no_grad():
            actions = policy.model(states.reshape(-1, D).to(weights_device(policy))).reshape(B, H, -1)
        return actions.to(states.device)
    return f


def chunked_policy_target(policy, seed: int = 0):
    """A PGD target from a chunked policy (diffusion or energy): states (B, H, D) raw -> (B, H, A), at
    each step the first executed action of the chunk ``policy`` plans from its last ``n_obs_steps``
    states (the segment's first state repeated before it, as after a reset). The noise comes from a
    generator seeded with ``seed`` at every call, so the target does not jitter between the
    generator's denoising steps."""
    from policies.chunked import draw_noise

    To = policy.n_obs_steps

    def f(states: torch.Tensor) -> torch.Tensor:
        B, H, D = states.shape
        padded = torch.cat([states[:, :1].expand(B, To - 1, D), states], 1)  # (B, To - 1 + H, D)
        history = padded.unfold(1, To, 1).permute(0, 1, 3, 2).reshape(B * H, To, D)
        noise = draw_noise(policy, B * H, torch.Generator().manual_seed(seed))
        chunk = torch.as_tensor(policy.predict_chunk(history, noise))  # (B * H, horizon, A)
        return chunk[:, To - 1].reshape(B, H, -1)
    return f


def segment_episodes(segments: np.ndarray, task: ImagineTask) -> list[Episode]:
    """Kept segments (K, H, D + A + 1) as imitation episodes ``{"obs" (T, D), "action" (T, A)}``, each
    cut after its first successful state (a segment with none is kept whole)."""
    D, A = task.obs_dim, task.action_dim
    episodes = []
    for seg in np.asarray(segments, np.float32):
        ok = task.success_fn(seg[:, :D])
        T = int(np.argmax(ok)) + 1 if ok.any() else len(seg)
        episodes.append({"obs": seg[:T, :D], "action": seg[:T, D:D + A]})
    return episodes


def synthesis_experiment(task: ImagineTask, data: list[Episode], seed: int = 0, demos: int = 5,
                         horizon: int = 32, diffusion_steps: int = 500, bc_steps: int = 1000,
                         eval_episodes: int = 16, samples: int = 256, guidance_scale: float = 0.5,
                         device: str | torch.device = "cpu") -> dict:
    """BC on ``demos`` successful episodes of ``data``; fine-tuned on synthesized successful segments
    from an unguided and a guided generator; every policy scored in the real sim. The generator trains and
    samples on ``device`` (``TrajectoryDiffusion.fit``, ``to``); BC trains on the CPU."""
    torch.manual_seed(seed)
    good = [e for e in data if e["terminated"].any()]
    if len(good) < demos:
        raise ValueError(f"only {len(good)} successful episodes in the data, {demos} demos asked for")
    base = train_bc(*bc_pairs(good[:demos]), steps=bc_steps, seed=seed)
    gen = TrajectoryDiffusion(TrajectoryDiffusionConfig(obs_dim=task.obs_dim, action_dim=task.action_dim,
                                                        horizon=horizon))
    gen_stats = gen.fit(segments_from_episodes(data, horizon), steps=diffusion_steps, seed=seed, device=device)
    gen.to(device)
    # start states from which the data reached success within the horizon
    starts = np.concatenate([e["obs"][max(0, len(e["obs"]) - horizon):] for e in good])
    rng = np.random.default_rng(seed)
    start = starts[rng.integers(len(starts), size=samples)]
    out = {"generator_loss": gen_stats["loss"]}
    _, ok = task.collect(base, eval_episodes, seed=seed + 50_000)
    out["bc_success"] = float(ok.mean())
    demo_obs, demo_act = bc_pairs(good[:demos])
    for label, scale in (("unguided", 0.0), ("guided", guidance_scale)):
        seg, st = synthesize(gen, start, task, policy_target(base), scale, seed=seed)
        out[f"{label}_kept"] = f"{st['kept']}/{st['generated']}"
        if not len(seg):
            out[f"{label}_success"] = out["bc_success"]
            continue
        so, sa = bc_pairs(segments=seg, obs_dim=task.obs_dim)
        tuned = train_bc(np.concatenate([demo_obs, so]), np.concatenate([demo_act, sa]), steps=bc_steps // 2,
                         policy=copy.deepcopy(base), seed=seed)
        _, ok = task.collect(tuned, eval_episodes, seed=seed + 50_000)
        out[f"{label}_success"] = float(ok.mean())
        out[f"{label}_gain"] = out[f"{label}_success"] - out["bc_success"]
    return out
