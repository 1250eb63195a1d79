"""Trajectory diffusion with policy guidance (Policy-Guided Diffusion, Jackson et al. 2024).

A denoiser (the diffusion policy's 1-D temporal U-Net) generates whole segments
``x = [state, action, reward]`` of shape (B, horizon, obs_dim + action_dim + 1), conditioned on
(and in-painted with) the first state. Guidance toward a target policy pi acts on the action
part: at every reverse step the predicted clean segment's actions are moved toward pi's actions
at the predicted states, ``a0 <- a0 + scale * (pi(s0) - a0)`` in normalized units. For a Gaussian
pi(a|s) = N(mu(s), sigma^2) this adds ``scale * sigma^2 * grad_a log pi(a|s)`` (the policy's score)
to the denoiser's estimate, which is PGD's guidance with a stop-gradient through pi.

    gen = TrajectoryDiffusion(TrajectoryDiffusionConfig(obs_dim=5, action_dim=2, horizon=32))
    gen.fit(segments, steps=2000)                  # segments: (N, horizon, channels) raw units
    seg = gen.sample(start_obs, target_policy=f, guidance_scale=0.5)   # f: (B, H, 5) -> (B, H, 2)

Devices: ``fit(device=)`` trains anywhere and hands the model back on the CPU; ``to(device)`` moves it, and
``sample`` runs where it is (the initial noise drawn by a CPU generator and copied over, so one seed samples the
same on every device; ``target_policy`` gets the states on that device).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler
from torch import nn

from ..checkpoint import load_checkpoint, save_checkpoint
from ..diffusion.unet import ConditionalUnet1d
from ..normalize import Normalizer
from .configuration_world_model import TrajectoryDiffusionConfig

TargetPolicy = Callable[[torch.Tensor], torch.Tensor]


class TrajectoryDenoiser(nn.Module):
    def __init__(self, c: TrajectoryDiffusionConfig):
        super().__init__()
        self.normalizer = Normalizer(c.channels, "min_max")
        self.unet = ConditionalUnet1d(c.channels, c.obs_dim, c.down_dims, c.kernel_size, c.n_groups, c.step_embed_dim)


class TrajectoryDiffusion:
    """Generator of (state, action, reward) segments; see the module docstring for shapes."""

    kind = "trajectory_diffusion"
    config_class = TrajectoryDiffusionConfig

    def __init__(self, config: TrajectoryDiffusionConfig | None = None):
        self.config = c = config or TrajectoryDiffusionConfig()
        self.model = TrajectoryDenoiser(c)
        kw = dict(num_train_timesteps=c.num_train_timesteps, beta_schedule=c.beta_schedule, clip_sample=True,
                  prediction_type="epsilon")
        self.train_scheduler = DDPMScheduler(**kw)
        self.sample_scheduler = DDIMScheduler(**kw)

    @property
    def device(self) -> torch.device:
        """Where the denoiser is, so where ``sample`` runs."""
        return self.model.normalizer.offset.device

    def to(self, device: str | torch.device) -> "TrajectoryDiffusion":
        """Move the denoiser and its normalization to ``device`` (in place); returns the generator."""
        self.model.to(torch.device(device))
        return self

    def _segments(self, x, name: str = "segments") -> torch.Tensor:
        c = self.config
        t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x, dtype=torch.float32)
        if t.ndim != 3 or t.shape[1:] != (c.horizon, c.channels):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected (N, {c.horizon}, {c.channels}) "
                             f"[state {c.obs_dim}, action {c.action_dim}, reward 1]")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} contains NaN or inf")
        return t

    def fit(self, segments, steps: int = 2000, batch_size: int = 64, lr: float = 3e-4, seed: int = 0,
            device: str | torch.device = "cpu") -> dict:
        """segments (N, horizon, channels) raw units -> {"loss"} (mean of the last 100 steps).

        ``device``: where the U-Net trains; indices, noise and timesteps are drawn by a CPU generator seeded
        with ``seed`` (the same draws on every device), and the model is handed back on the CPU."""
        device = torch.device(device)
        seg = self._segments(segments)
        m = self.model
        m.normalizer.set_stats({"min": seg.flatten(0, 1).min(0).values, "max": seg.flatten(0, 1).max(0).values})
        x0_all = m.normalizer(seg).to(device)
        m.to(device)
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=1e-6)
        m.train()
        losses = []
        for _ in range(steps):
            x0 = x0_all[torch.randint(len(x0_all), (batch_size,), generator=gen).to(device)]
            noise = torch.randn(x0.shape, generator=gen).to(device)
            t = torch.randint(self.config.num_train_timesteps, (batch_size,), generator=gen).to(device)
            pred = m.unet(self.train_scheduler.add_noise(x0, noise, t), t, x0[:, 0, :self.config.obs_dim])
            loss = F.mse_loss(pred, noise)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())  # kept on the device: no host round trip per step
        m.eval()
        m.to("cpu")
        return {"loss": float(np.mean(torch.stack(losses[-100:]).cpu().numpy(), dtype=np.float64))}

    @torch.no_grad()
    def sample(self, start_obs, target_policy: TargetPolicy | None = None, guidance_scale: float = 0.0,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """start_obs (B, obs_dim) raw -> segments (B, horizon, channels) raw units, on the model's device.

        ``target_policy``: states (B, horizon, obs_dim) raw (on the model's device) -> actions (B, horizon,
        action_dim) raw (any device); with ``guidance_scale`` in (0, 1] the generated actions are pulled toward
        it (0: unguided). ``generator`` draws the initial noise where it is (default: the global CPU one)."""
        c, m, device = self.config, self.model, self.device
        s0 = torch.as_tensor(start_obs, dtype=torch.float32).to(device)
        if s0.ndim != 2 or s0.shape[1] != c.obs_dim:
            raise ValueError(f"start_obs has shape {tuple(s0.shape)}, expected (B, {c.obs_dim})")
        if not 0.0 <= guidance_scale <= 1.0:
            raise ValueError(f"guidance_scale must lie in [0, 1], got {guidance_scale}")
        if guidance_scale > 0 and target_policy is None:
            raise ValueError("guidance_scale > 0 needs a target_policy")
        B, D, A = s0.shape[0], c.obs_dim, c.action_dim
        cond = (s0 - m.normalizer.offset[:D]) / m.normalizer.scale[:D]
        sched = self.sample_scheduler
        sched.set_timesteps(c.num_inference_steps)
        drawn_on = generator.device if generator is not None else torch.device("cpu")
        x = torch.randn(B, c.horizon, c.channels, generator=generator, device=drawn_on).to(device)
        for t in sched.timesteps:
            x[:, 0, :D] = cond  # in-paint the known first state (at the clean level, as in Diffuser)
            eps = m.unet(x, t.expand(B).to(device), cond)
            if guidance_scale > 0:
                ab = sched.alphas_cumprod[t]
                x0 = ((x - (1 - ab).sqrt() * eps) / ab.sqrt()).clamp(-1, 1)
                raw = m.normalizer.unnormalize(x0)
                target = torch.as_tensor(target_policy(raw[..., :D]), dtype=torch.float32).to(device)
                if target.shape != (B, c.horizon, A):
                    raise ValueError(f"target_policy returned {tuple(target.shape)}, expected ({B}, {c.horizon}, {A})")
                goal = (target - m.normalizer.offset[D:D + A]) / m.normalizer.scale[D:D + A]
                x0[..., D:D + A] += guidance_scale * (goal - x0[..., D:D + A])
                eps = (x - ab.sqrt() * x0) / (1 - ab).sqrt()
            x = sched.step(eps, t, x).prev_sample
        x[:, 0, :D] = cond
        return m.normalizer.unnormalize(x)

    def save(self, directory: str | Path) -> Path:
        return save_checkpoint(directory, self.kind, self.config, self.model.state_dict())

    @classmethod
    def load(cls, directory: str | Path) -> "TrajectoryDiffusion":
        kind, cfg, tensors, _ = load_checkpoint(directory)
        if kind != cls.kind:
            raise ValueError(f"{directory} holds a {kind!r} checkpoint, not {cls.kind!r}")
        gen = cls(cls.config_class(**cfg))
        gen.model.load_state_dict(tensors)
        return gen
