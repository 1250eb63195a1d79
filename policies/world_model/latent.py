"""A small latent world model for image observations (push-T's top view).

``encode``: images (B, 3, S, S) in [0, 1] -> latents (B, latent_dim); ``step``: (latent, action
(B, action_dim)) -> next latent (residual MLP); ``decode``: latents -> images. Trained on
(image, action, next image) triples with reconstruction + predicted-next-image losses and a
latent consistency term (predicted latent vs the encoded next image).

Devices: ``fit(device=)`` trains anywhere (minibatches drawn by a seeded CPU generator, the same on every device)
and hands the model back on the CPU; ``to(device)`` moves it, and ``predict`` / ``imagine`` take inputs from
anywhere and answer on the model's device.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import load_checkpoint, save_checkpoint
from .configuration_world_model import LatentConfig


def as_images(x, size: int, name: str = "images") -> torch.Tensor:
    """(B, 3, S, S) uint8 or float in [0, 1] -> float32 (B, 3, size, size) (resized if needed)."""
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    if t.ndim != 4 or t.shape[1] != 3:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected (B, 3, H, W)")
    t = t.float() / 255.0 if t.dtype == torch.uint8 else t.float()
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf")
    if t.shape[-1] != size or t.shape[-2] != size:
        t = F.interpolate(t, size=(size, size), mode="area")
    return t


def _actions(x) -> torch.Tensor:
    """Actions (numpy or a tensor) as a float32 tensor where they are."""
    return torch.as_tensor(x if isinstance(x, torch.Tensor) else np.asarray(x), dtype=torch.float32)


class LatentDynamicsNet(nn.Module):
    def __init__(self, c: LatentConfig):
        super().__init__()
        enc, cin = [], 3
        for ch in c.channels:
            enc += [nn.Conv2d(cin, ch, 4, 2, 1), nn.SiLU()]
            cin = ch
        self.feat = c.image_size // 2 ** len(c.channels)
        flat = cin * self.feat ** 2
        self.encoder = nn.Sequential(*enc, nn.Flatten(), nn.Linear(flat, c.latent_dim))
        dec = []
        for ch in reversed(c.channels[:-1]):
            dec += [nn.ConvTranspose2d(cin, ch, 4, 2, 1), nn.SiLU()]
            cin = ch
        self.decoder_in = nn.Linear(c.latent_dim, flat)
        self.decoder = nn.Sequential(*dec, nn.ConvTranspose2d(cin, 3, 4, 2, 1))
        self.dynamics = nn.Sequential(nn.Linear(c.latent_dim + c.action_dim, c.hidden_dim), nn.SiLU(),
                                      nn.Linear(c.hidden_dim, c.hidden_dim), nn.SiLU(),
                                      nn.Linear(c.hidden_dim, c.latent_dim))
        self.register_buffer("action_mean", torch.zeros(c.action_dim))
        self.register_buffer("action_std", torch.ones(c.action_dim))
        self.top = c.channels[-1]

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        h = self.decoder_in(z).reshape(-1, self.top, self.feat, self.feat)
        return torch.sigmoid(self.decoder(h))

    def step(self, z: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        a = (action - self.action_mean) / self.action_std
        return z + self.dynamics(torch.cat([z, a], dim=-1))


class LatentWorldModel:
    """Encoder + latent dynamics + decoder; ``predict(images, actions) -> next images``."""

    kind = "latent_world_model"
    config_class = LatentConfig

    def __init__(self, config: LatentConfig | None = None):
        self.config = config or LatentConfig()
        self.model = LatentDynamicsNet(self.config)

    @property
    def device(self) -> torch.device:
        """Where the networks are, so where ``predict`` and ``imagine`` run."""
        return self.model.action_mean.device

    def to(self, device: str | torch.device) -> "LatentWorldModel":
        """Move the networks to ``device`` (in place); returns the model."""
        self.model.to(torch.device(device))
        return self

    def _batch(self, images, actions, next_images=None, device: torch.device | None = None):
        """Checked (images, actions, next images or None) as float tensors, moved to ``device`` when given."""
        c = self.config
        x = as_images(images, c.image_size)
        a = _actions(actions)
        if a.shape != (x.shape[0], c.action_dim):
            raise ValueError(f"actions have shape {tuple(a.shape)}, expected ({x.shape[0]}, {c.action_dim})")
        y = None if next_images is None else as_images(next_images, c.image_size, "next_images")
        if device is None:
            return x, a, y
        return x.to(device), a.to(device), None if y is None else y.to(device)

    def loss(self, x: torch.Tensor, a: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        m = self.model
        z = m.encoder(x)
        z_next = m.step(z, a)
        target = m.encoder(y).detach()
        return {"recon": F.mse_loss(m.decode(z), x), "predict": F.mse_loss(m.decode(z_next), y),
                "latent": F.mse_loss(z_next, target)}

    def fit(self, images, actions, next_images, steps: int = 500, batch_size: int = 32, lr: float = 1e-3,
            seed: int = 0, device: str | torch.device = "cpu") -> dict[str, float]:
        """images, next_images (N, 3, H, W) uint8 or [0, 1]; actions (N, action_dim) raw units -> the mean
        losses of the last 50 steps. Trains on ``device``; the model is handed back on the CPU."""
        device = torch.device(device)
        m = self.model.to(device)
        x, a, y = self._batch(images, actions, next_images, device)
        m.action_mean.copy_(a.mean(0)), m.action_std.copy_(a.std(0).clamp_min(1e-6))
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(m.parameters(), lr=lr)
        m.train()
        hist = []
        for _ in range(steps):
            i = torch.randint(len(x), (batch_size,), generator=gen).to(device)
            parts = self.loss(x[i], a[i], y[i])
            loss = parts["recon"] + parts["predict"] + 0.1 * parts["latent"]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            hist.append({k: v.detach() for k, v in parts.items()})  # kept on the device: no round trip per step
        m.eval()
        m.to("cpu")
        last = {k: torch.stack([h[k] for h in hist[-50:]]).cpu().numpy() for k in hist[-1]}
        return {k: float(np.mean(v.tolist())) for k, v in last.items()}

    @torch.no_grad()
    def predict(self, images, actions) -> torch.Tensor:
        """images (B, 3, H, W), actions (B, action_dim) -> predicted next images (B, 3, S, S) in [0, 1], on the
        model's device."""
        x, a, _ = self._batch(images, actions, device=self.device)
        m = self.model.eval()
        return m.decode(m.step(m.encoder(x), a))

    @torch.no_grad()
    def imagine(self, images, actions) -> torch.Tensor:
        """images (B, 3, H, W) start frames, actions (B, T, action_dim) -> decoded frames (B, T, 3, S, S), on the
        model's device."""
        a = _actions(actions).to(self.device)
        x, _, _ = self._batch(images, a[:, 0], device=self.device)
        m = self.model.eval()
        z, frames = m.encoder(x), []
        for k in range(a.shape[1]):
            z = m.step(z, a[:, k])
            frames.append(m.decode(z))
        return torch.stack(frames, dim=1)

    def save(self, directory: str | Path) -> Path:
        return save_checkpoint(directory, self.kind, self.config, self.model.state_dict())

    @classmethod
    def load(cls, directory: str | Path) -> "LatentWorldModel":
        kind, cfg, tensors, _ = load_checkpoint(directory)
        if kind != cls.kind:
            raise ValueError(f"{directory} holds a {kind!r} checkpoint, not {cls.kind!r}")
        wm = cls(cls.config_class(**cfg))
        wm.model.load_state_dict(tensors)
        return wm
