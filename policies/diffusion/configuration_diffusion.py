"""Config of the diffusion policy (Diffusion Policy, Chi et al. 2023; LeRobot's ``DiffusionConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .vision import ImageObservationConfig

INFERENCE_SCHEDULERS = ("ddim", "dpmsolver")
PREDICTION_TYPES = ("epsilon", "sample")
DENOISERS = ("unet", "mlp")


@dataclass
class DiffusionConfig(ImageObservationConfig):
    """A denoiser (``denoiser``: a conditional 1-D temporal U-Net, or a residual MLP over the
    flattened chunk, several times cheaper to train on a CPU) denoises a chunk of ``horizon`` actions given the last
    ``n_obs_steps`` observations; ``n_action_steps`` of them are executed before replanning.

    Observations: state (obs_dim,) and, when ``image_shape`` is set ((3, H, W)), an image in
    [0, 1] encoded by a small ResNet with GroupNorm and spatial softmax. Actions and states are
    normalized with ``normalization`` (min_max -> [-1, 1]); the stats live in the checkpoint.
    Training noises with a DDPM schedule of ``num_train_timesteps``; inference runs
    ``num_inference_steps`` of ``inference_scheduler`` (DDIM with eta = 0, or DPM-Solver++),
    both deterministic given the initial noise.
    """

    obs_dim: int = 5
    action_dim: int = 2
    n_obs_steps: int = 2
    horizon: int = 16
    n_action_steps: int = 8
    # denoiser
    denoiser: str = "unet"  # unet | mlp
    down_dims: list[int] = field(default_factory=lambda: [64, 128, 256])
    kernel_size: int = 5
    n_groups: int = 8
    diffusion_step_embed_dim: int = 128
    mlp_hidden: int = 512  # denoiser = mlp: width and number of residual blocks
    mlp_blocks: int = 3
    # noise schedules (diffusers)
    num_train_timesteps: int = 100
    num_inference_steps: int = 10
    inference_scheduler: str = "ddim"  # ddim | dpmsolver
    beta_schedule: str = "squaredcos_cap_v2"
    prediction_type: str = "epsilon"  # epsilon | sample
    clip_sample: bool = True
    clip_sample_range: float = 1.0
    normalization: str = "min_max"  # min_max | mean_std
    # exponential moving average of the weights (Diffusion Policy's warm-up schedule)
    use_ema: bool = True
    ema_power: float = 0.75
    ema_max_decay: float = 0.9999

    def __post_init__(self) -> None:
        for name in ("obs_dim", "action_dim", "n_obs_steps", "horizon", "n_action_steps", "kernel_size",
                     "num_train_timesteps", "num_inference_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.denoiser not in DENOISERS:
            raise ValueError(f"unknown denoiser {self.denoiser!r}; choose one of {list(DENOISERS)}")
        self.down_dims = [int(d) for d in self.down_dims]
        if not self.down_dims:
            raise ValueError("down_dims must list at least one channel count, e.g. [64, 128, 256]")
        factor = 2 ** (len(self.down_dims) - 1)
        if self.denoiser == "unet" and self.horizon % factor:
            raise ValueError(f"horizon {self.horizon} must be a multiple of {factor} (the U-Net halves it "
                             f"{len(self.down_dims) - 1} times for down_dims={self.down_dims})")
        if self.n_obs_steps - 1 + self.n_action_steps > self.horizon:
            raise ValueError(f"n_obs_steps - 1 + n_action_steps = {self.n_obs_steps - 1 + self.n_action_steps} "
                             f"exceeds horizon {self.horizon}: the executed actions must lie inside the chunk")
        if self.inference_scheduler not in INFERENCE_SCHEDULERS:
            raise ValueError(f"unknown inference_scheduler {self.inference_scheduler!r}; "
                             f"choose one of {list(INFERENCE_SCHEDULERS)}")
        if self.prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"unknown prediction_type {self.prediction_type!r}; "
                             f"choose one of {list(PREDICTION_TYPES)}")
        if self.num_inference_steps > self.num_train_timesteps:
            raise ValueError(f"num_inference_steps {self.num_inference_steps} exceeds num_train_timesteps "
                             f"{self.num_train_timesteps}")
        if self.denoiser == "unet" and any(d % self.n_groups for d in self.down_dims):
            raise ValueError(f"every down_dims entry must be divisible by n_groups={self.n_groups}: {self.down_dims}")
        self.validate_image()

    @property
    def executed_slice(self) -> slice:
        """The part of a predicted chunk that is executed: indices [n_obs_steps - 1, + n_action_steps)."""
        return slice(self.n_obs_steps - 1, self.n_obs_steps - 1 + self.n_action_steps)
