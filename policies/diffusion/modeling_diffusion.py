"""Diffusion policy: denoise an action chunk conditioned on an observation window.

``DiffusionModel`` (an nn.Module) holds the normalizers, the optional image encoder and the
U-Net; ``DiffusionPolicy`` implements robo's ``ChunkedPolicy`` around it: training loss,
deterministic-given-noise sampling with diffusers schedulers, EMA weights for inference, and
LeRobot-style per-environment observation / action queues in ``act`` (``policies.chunked.ChunkQueue``).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler, DPMSolverMultistepScheduler
from torch import nn

from ..base import ArrayLike, like_input
from ..checkpoint import load_checkpoint, save_checkpoint
from ..chunked import QueuedActing, check_tensor, split_observation, state_of
from ..ema import AveragedWeights, make_ema
from ..normalize import Normalizer, check_policy_stats
from ..registry import register
from .configuration_diffusion import DiffusionConfig
from .mlp import ConditionalMlp
from .unet import ConditionalUnet1d
from .vision import image_encoder_for, window_features


class DiffusionModel(nn.Module):
    """Normalizers + image encoder + denoiser (a conditional U-Net or MLP; everything saved in the checkpoint)."""

    def __init__(self, config: DiffusionConfig):
        super().__init__()
        self.config = config
        self.obs_normalizer = Normalizer(config.obs_dim, config.normalization)
        self.action_normalizer = Normalizer(config.action_dim, config.normalization)
        self.image_encoder = image_encoder_for(config)
        cond_dim = config.obs_feature_dim * config.n_obs_steps
        if config.denoiser == "unet":
            self.denoiser = ConditionalUnet1d(config.action_dim, cond_dim, config.down_dims, config.kernel_size,
                                              config.n_groups, config.diffusion_step_embed_dim)
        else:
            self.denoiser = ConditionalMlp(config.action_dim, config.horizon, cond_dim, config.mlp_hidden,
                                           config.mlp_blocks, config.diffusion_step_embed_dim)

    def condition(self, obs: torch.Tensor, image: torch.Tensor | None = None) -> torch.Tensor:
        """obs (B, To, obs_dim) raw, image (B, To, 3, H, W) in [0, 1] -> cond (B, To * features)."""
        return window_features(self.obs_normalizer(obs), image, self.image_encoder).flatten(1)


@register(trainable=True)
class DiffusionPolicy(QueuedActing, AveragedWeights):
    """``ChunkedPolicy`` with a diffusion denoiser. See ``policies/chunked.py`` for the shapes.

    ``noise`` is the initial sample x_T of the reverse process, in the normalized action space
    ((B, horizon, action_dim), standard normal); with DDIM (eta = 0) or DPM-Solver++ the chunk is
    a deterministic function of (observations, noise).
    """

    kind = "diffusion"
    config_class = DiffusionConfig

    def __init__(self, config: DiffusionConfig | None = None):
        self.config = config or DiffusionConfig()
        c = self.config
        self.model = DiffusionModel(c)
        self.ema = make_ema(self.model, c.ema_power, c.ema_max_decay) if c.use_ema else None
        self.noise_scheduler = DDPMScheduler(num_train_timesteps=c.num_train_timesteps, beta_schedule=c.beta_schedule,
                                             clip_sample=c.clip_sample, clip_sample_range=c.clip_sample_range,
                                             prediction_type=c.prediction_type)
        self.obs_dim, self.action_dim = c.obs_dim, c.action_dim
        self.n_obs_steps, self.horizon, self.n_action_steps = c.n_obs_steps, c.horizon, c.n_action_steps

    # Weights -------------------------------------------------------------------------------
    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def noise_shape(self) -> tuple[int, int]:
        return (self.horizon, self.action_dim)

    def set_normalization(self, stats: dict[str, dict[str, torch.Tensor]]) -> None:
        """stats: {"obs": {"min", "max"} or {"mean", "std"} (obs_dim,), "action": same (action_dim,)}."""
        check_policy_stats(stats)
        for m in self.weight_copies():
            m.obs_normalizer.set_stats(stats["obs"])
            m.action_normalizer.set_stats(stats["action"])

    # Inputs ---------------------------------------------------------------------------------
    def _inputs(self, obs, time_axis: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(state obs, image or None) validated (``split_observation``), on the weights' device."""
        c = self.config
        return split_observation(obs, c.obs_dim, c.image_shape, c.n_obs_steps if time_axis else None, self.device)

    def _noise(self, noise: ArrayLike | None, B: int, generator: torch.Generator | None) -> torch.Tensor:
        """(B, horizon, action_dim) initial noise on the weights' device: ``noise`` checked, or drawn from
        ``generator`` (default: the global one) where the generator is, so every device draws the same."""
        if noise is None:
            draw = torch.randn(B, *self.noise_shape, generator=generator,
                               device=generator.device if generator is not None else "cpu")
            return draw.to(self.device)
        return check_tensor(noise, (B, *self.noise_shape), "noise", self.device)

    # Training -------------------------------------------------------------------------------
    def compute_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """batch {"obs": (B, n_obs_steps, obs_dim), "action": (B, horizon, action_dim)[, "image"]},
        raw units -> scalar MSE between the denoiser's output and the noise (or the clean chunk)."""
        c = self.config
        self.model.train()
        obs, image = self._inputs({"state": batch["obs"], "image": batch.get("image")}, time_axis=True)
        action = check_tensor(batch["action"], (obs.shape[0], c.horizon, c.action_dim), "action")
        x0 = self.model.action_normalizer(action)
        noise = torch.randn_like(x0)
        t = torch.randint(0, c.num_train_timesteps, (x0.shape[0],), device=x0.device)
        pred = self.model.denoiser(self.noise_scheduler.add_noise(x0, noise, t), t, self.model.condition(obs, image))
        return F.mse_loss(pred, noise if c.prediction_type == "epsilon" else x0)

    # Inference ------------------------------------------------------------------------------
    def make_inference_scheduler(self):
        c = self.config
        if c.inference_scheduler == "ddim":
            s = DDIMScheduler(num_train_timesteps=c.num_train_timesteps, beta_schedule=c.beta_schedule,
                              clip_sample=c.clip_sample, clip_sample_range=c.clip_sample_range,
                              prediction_type=c.prediction_type)
        else:
            # thresholding with sample_max_value = clip range clips the x0 predictions, like DDIM's clip_sample
            s = DPMSolverMultistepScheduler(num_train_timesteps=c.num_train_timesteps, beta_schedule=c.beta_schedule,
                                            prediction_type=c.prediction_type, algorithm_type="dpmsolver++",
                                            thresholding=c.clip_sample, sample_max_value=c.clip_sample_range)
        s.set_timesteps(c.num_inference_steps)
        return s

    @torch.no_grad()
    def predict_chunk(self, obs_history, noise: ArrayLike | None = None,
                      generator: torch.Generator | None = None) -> ArrayLike:
        """obs_history (B, n_obs_steps, obs_dim) (or {"state", "image": (B, To, 3, H, W)}),
        noise (B, horizon, action_dim) or None (drawn from ``generator``) -> (B, horizon, action_dim), numpy for
        numpy input, else a tensor on the input's device; computed on the weights' device."""
        obs, image = self._inputs(obs_history, time_axis=True)
        model = self.inference_model.eval()
        cond = model.condition(obs, image)
        x = self._noise(noise, obs.shape[0], generator)
        scheduler = self.make_inference_scheduler()
        for t in scheduler.timesteps:
            out = model.denoiser(x, t.expand(x.shape[0]).to(x.device), cond)
            x = scheduler.step(out, t, x).prev_sample
        return like_input(model.action_normalizer.unnormalize(x), state_of(obs_history))

    @torch.no_grad()
    def act(self, obs, noise: ArrayLike | None = None) -> ArrayLike:
        """obs (B, obs_dim) (or {"state", "image": (B, 3, H, W)}) -> action (B, action_dim) (numpy for numpy
        input, else a tensor on the input's device; computed on the weights' device).

        Per env: push obs into its n_obs_steps queue (the first obs after a reset fills it), and
        when its planned actions are used up, plan a chunk from ``noise[b]`` and queue its
        executed part (n_action_steps actions)."""
        state, image = self._inputs(obs, time_axis=False)

        def plan(need: torch.Tensor, window) -> torch.Tensor:
            return self.predict_chunk(window, self._noise(noise, state.shape[0], None)[need])

        return like_input(self.queued_action(state, image, plan), state_of(obs))

    # Checkpoints ----------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Atomically write the inference (EMA) weights, normalization stats and config."""
        return save_checkpoint(directory, self.kind, self.config, self.inference_model.state_dict(),
                               {"num_parameters": self.num_parameters, "ema": self.ema is not None})

    @classmethod
    def load(cls, directory: str | Path) -> "DiffusionPolicy":
        kind, cfg, tensors, _ = load_checkpoint(directory)
        if kind != cls.kind:
            raise ValueError(f"{directory} holds a {kind!r} policy, not {cls.kind!r}")
        policy = cls(cls.config_class(**cfg))
        for module in policy.weight_copies():  # the average starts from the loaded weights
            module.load_state_dict(tensors)
        return policy
