"""A frozen chunked policy steered by a latent-noise actor (DSRL, Wagenmaker et al. 2025).

``SteeredPolicy`` composes any ``ChunkedPolicy`` (diffusion: the noise is x_T; energy: the
initial guess of its descent) with an ``MLPActor`` that picks that noise from the observation
window. It is one robo policy: ``save(dir)`` writes the actor (``config.json`` +
``model.safetensors``) and the base policy in ``dir/base``; ``load(dir)`` restores both.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..base import ArrayLike, as_obs_tensor
from ..checkpoint import atomic_directory, load_checkpoint, save_checkpoint
from ..chunked import ChunkedPolicy, with_single_guess
from ..mlp import MLPActor, MLPConfig
from ..registry import load_policy, register
from .configuration_steered import SteeredConfig

BASE_DIR = "base"


LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SB3's SAC clamps its actor's log-std to this range


class GaussianNoiseActor(torch.nn.Module):
    """SAC's squashed Gaussian over the noise: ``tanh(mean + exp(log_std) * N(0, I))``, the mean
    from ``actor`` (an ``MLPActor``) and the log-std from a linear layer on its last hidden layer.
    ``forward(window (B, W), eps (B, noise_dim) | None) -> (B, noise_dim)`` in [-1, 1]: ``eps`` is the
    standard-normal draw (None: a fresh one from the global generator)."""

    def __init__(self, actor: MLPActor, log_std: torch.nn.Linear | None = None):
        super().__init__()
        self.actor = actor
        hidden = actor.config.hidden_dims[-1] if actor.config.hidden_dims else actor.config.obs_dim
        self.log_std = log_std if log_std is not None else torch.nn.Linear(hidden, actor.config.action_dim)

    def forward(self, window: torch.Tensor, eps: torch.Tensor | None = None) -> torch.Tensor:
        a = self.actor
        latent = a.net[:-2]((window - a.obs_mean) / a.obs_std)  # all but the mean layer and its tanh
        std = self.log_std(latent).clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
        return torch.tanh(a.net[-2](latent) + std * (torch.randn_like(std) if eps is None else eps))


def make_noise_actor(config: SteeredConfig) -> MLPActor | GaussianNoiseActor:
    """window (B, n_obs_steps * obs_dim) -> tanh output (B, horizon * action_dim) in [-1, 1]."""
    mean = MLPActor(MLPConfig(obs_dim=config.window_dim, action_dim=config.noise_dim,
                              hidden_dims=config.hidden_dims, activation=config.activation, squash="tanh"))
    return GaussianNoiseActor(mean) if config.stochastic else mean


def check_base(base: ChunkedPolicy) -> None:
    """Raise if ``base`` cannot be steered (not chunked, or observes images)."""
    for attr in ("noise_shape", "predict_chunk", "n_obs_steps", "n_action_steps"):
        if not hasattr(base, attr):
            raise TypeError(f"{type(base).__name__} is not a ChunkedPolicy (no {attr!r}); only noise-conditioned "
                            f"chunk policies (diffusion, energy) can be steered")
    if getattr(base.config, "image_shape", None):
        raise ValueError("steering image-observing policies is not supported yet; use a state-only base policy")


@register
class SteeredPolicy:
    """``ChunkedPolicy`` whose initial noise comes from a learned actor instead of N(0, I).

    ``act(obs (B, obs_dim), noise=None) -> (B, action_dim)``: the actor chooses the base's noise. A
    stochastic actor (``config.stochastic``) takes ``noise`` (B, horizon, action_dim), N(0, I) as the chunked
    evaluation path draws it per episode, for its Gaussian's standard-normal draw, so a seeded evaluation
    scores the same policy the same; None draws it afresh. A deterministic actor ignores ``noise``.
    """

    kind = "steered"
    config_class = SteeredConfig

    def __init__(self, base: ChunkedPolicy, config: SteeredConfig,
                 actor: MLPActor | GaussianNoiseActor | None = None):
        check_base(base)
        self.base, self.config = with_single_guess(base), config  # the actor's noise alone sets a chunk
        expected = (base.obs_dim, base.action_dim, base.n_obs_steps, list(base.noise_shape))
        got = (config.obs_dim, config.action_dim, config.n_obs_steps, config.noise_shape)
        if expected != got:
            raise ValueError(f"steered config (obs_dim, action_dim, n_obs_steps, noise_shape) = {got} does not match "
                             f"the base policy's {expected}")
        self.model = actor if actor is not None else make_noise_actor(config)
        if isinstance(self.model, GaussianNoiseActor) != config.stochastic:
            raise ValueError(f"steered config stochastic={config.stochastic} needs "
                             f"{'a GaussianNoiseActor' if config.stochastic else 'an MLPActor'}, "
                             f"got {type(self.model).__name__}")
        self.model.eval()
        self.obs_dim, self.action_dim = config.obs_dim, config.action_dim
        self.n_obs_steps, self.horizon, self.n_action_steps = base.n_obs_steps, base.horizon, base.n_action_steps
        self._window: torch.Tensor | None = None  # (B, n_obs_steps, obs_dim) raw
        self._fresh: torch.Tensor | None = None  # (B,) bool

    @classmethod
    def for_base(cls, base: ChunkedPolicy, noise_bound: float = 1.5, hidden_dims=(256, 256),
                 activation: str = "relu") -> "SteeredPolicy":
        check_base(base)
        cfg = SteeredConfig(obs_dim=base.obs_dim, action_dim=base.action_dim, n_obs_steps=base.n_obs_steps,
                            noise_shape=list(base.noise_shape), noise_bound=noise_bound,
                            hidden_dims=list(hidden_dims), activation=activation)
        return cls(base, cfg)

    @property
    def noise_shape(self) -> tuple[int, int]:
        return tuple(self.base.noise_shape)

    @torch.no_grad()
    def noise(self, window: torch.Tensor, eps: ArrayLike | None = None) -> torch.Tensor:
        """window (B, n_obs_steps, obs_dim) raw -> noise (B, horizon, action_dim) in [-bound, bound]. A stochastic
        config samples it with the standard-normal draw ``eps`` (B, horizon, action_dim) (None: drawn afresh);
        a deterministic one ignores ``eps``."""
        B = window.shape[0]
        flat = window.reshape(B, -1).float()
        if self.config.stochastic:
            if eps is not None:
                eps = torch.as_tensor(eps, dtype=torch.float32)
                if tuple(eps.shape) != (B, *self.noise_shape):
                    raise ValueError(f"noise has shape {tuple(eps.shape)}, expected ({B}, "
                                     f"{', '.join(map(str, self.noise_shape))})")
                eps = eps.reshape(B, -1)
            out = self.model(flat, eps)
        else:
            out = self.model(flat)
        return (self.config.noise_bound * out).reshape(B, *self.noise_shape)

    def reset(self, mask: ArrayLike | None = None) -> None:
        self.base.reset(mask)
        if mask is None or self._window is None:
            self._window = None
            return
        self._fresh |= torch.as_tensor(mask, dtype=torch.bool)

    @torch.no_grad()
    def act(self, obs: ArrayLike, noise: ArrayLike | None = None) -> ArrayLike:
        x = as_obs_tensor(obs, self.obs_dim)
        B = x.shape[0]
        if self._window is None or self._window.shape[0] != B:
            self._window = x[:, None].repeat(1, self.n_obs_steps, 1)
            self._fresh = torch.zeros(B, dtype=torch.bool)
        shifted = torch.cat([self._window[:, 1:], x[:, None]], dim=1)
        filled = x[:, None].expand_as(self._window)
        self._window = torch.where(self._fresh[:, None, None], filled, shifted)
        self._fresh = torch.zeros(B, dtype=torch.bool)
        steer = self.noise(self._window, noise)
        action = torch.as_tensor(self.base.act(x, noise=steer))
        return action.numpy() if isinstance(obs, np.ndarray) else action

    @torch.no_grad()
    def predict_chunk(self, obs_history: ArrayLike, noise: ArrayLike | None = None) -> ArrayLike:
        """obs_history (B, n_obs_steps, obs_dim) -> (B, horizon, action_dim); ``noise``: as ``act``'s."""
        hist = torch.as_tensor(obs_history, dtype=torch.float32)
        if hist.ndim != 3 or tuple(hist.shape[1:]) != (self.n_obs_steps, self.obs_dim):
            raise ValueError(f"obs_history has shape {tuple(hist.shape)}, expected (B, {self.n_obs_steps}, "
                             f"{self.obs_dim})")
        chunk = self.base.predict_chunk(hist, self.noise(hist, noise))
        return np.asarray(chunk) if isinstance(obs_history, np.ndarray) else torch.as_tensor(chunk)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise TypeError("a steered policy is trained by RL over its noise (robo steer), not by imitation")

    def set_normalization(self, stats: dict[str, dict[str, torch.Tensor]]) -> None:
        raise TypeError("set the base policy's normalization before steering it")

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def save(self, directory: str | Path) -> Path:
        """Atomically write the actor (config.json, model.safetensors) and the base in ``base/``."""
        directory = Path(directory)
        with atomic_directory(directory) as tmp:
            save_checkpoint(tmp, self.kind, self.config, self.model.state_dict(),
                            {"base_kind": self.base.kind, "num_parameters": self.num_parameters})
            self.base.save(tmp / BASE_DIR)
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "SteeredPolicy":
        kind, cfg, tensors, _ = load_checkpoint(directory)
        if kind != cls.kind:
            raise ValueError(f"{directory} holds a {kind!r} policy, not {cls.kind!r}")
        base_dir = Path(directory) / BASE_DIR
        if not base_dir.is_dir():
            raise FileNotFoundError(f"{directory} is a steered policy without its base policy folder {base_dir}")
        policy = cls(load_policy(base_dir), cls.config_class(**cfg))
        policy.model.load_state_dict(tensors)
        return policy
