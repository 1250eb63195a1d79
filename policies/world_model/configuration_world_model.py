"""Configs of robo's world models: the probabilistic dynamics ensemble (MBPO), the latent
image model (encoder + latent dynamics + decoder) and the trajectory diffusion model (PGD)."""

from __future__ import annotations

from dataclasses import dataclass, field


def _positive(cfg, names: tuple[str, ...]) -> None:
    for name in names:
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{type(cfg).__name__}.{name} must be > 0, got {getattr(cfg, name)}")


@dataclass
class EnsembleConfig:
    """``num_members`` MLPs, each (obs, action) -> Gaussian over (next_obs - obs, reward) and a
    termination logit (MBPO's probabilistic ensemble, Janner et al. 2019).

    Inputs and targets are normalized to zero mean, unit variance with stats stored in the
    checkpoint. ``angle_dims`` lists observation indices that are angles in rad: their delta is
    wrapped to [-pi, pi) and the predicted next value is wrapped again.

    Object-centric mode (planar manipulation, ``policies.world_model.frames.PlanarFrame``):
    ``frame_pose_dims`` = the (x, y, yaw) indices of a body; ``frame_point_dims`` = flat (x, y)
    index pairs of points expressed in its frame; ``frame_action_is_point``: the action is a
    position. Empty ``frame_pose_dims``: plain (obs, action) inputs.

    ``nll_beta``: beta-NLL (Seitzer et al. 2022): each element's Gaussian NLL is weighted by its
    predicted variance ** beta (not differentiated). 0 is MBPO's plain NLL, which on push-T lets the
    members explain every push as noise (a large variance) and predict no block motion; 0.5-1 fits
    the mean like a squared error while still learning the variance.

    ``use_prev_change``: the last observation change (obs - prev_obs, as the target is expressed) is
    an input too, for states whose velocities are not observed (push-T's pusher); transitions then
    need ``prev_obs`` and callers pass it to ``predict``.
    """

    obs_dim: int = 5
    action_dim: int = 2
    num_members: int = 5
    hidden_dims: list[int] = field(default_factory=lambda: [200, 200, 200])
    angle_dims: list[int] = field(default_factory=list)
    min_logvar: float = -10.0
    max_logvar: float = 0.5
    frame_pose_dims: list[int] = field(default_factory=list)
    frame_point_dims: list[int] = field(default_factory=list)
    frame_action_is_point: bool = False
    nll_beta: float = 0.0
    use_prev_change: bool = False

    def __post_init__(self) -> None:
        _positive(self, ("obs_dim", "action_dim", "num_members"))
        self.hidden_dims = [int(h) for h in self.hidden_dims]
        self.angle_dims = [int(i) for i in self.angle_dims]
        self.frame_pose_dims = [int(i) for i in self.frame_pose_dims]
        self.frame_point_dims = [int(i) for i in self.frame_point_dims]
        self._check_frame()
        if not self.hidden_dims or min(self.hidden_dims) < 1:
            raise ValueError(f"hidden_dims must be positive widths, got {self.hidden_dims}")
        bad = [i for i in self.angle_dims if not 0 <= i < self.obs_dim]
        if bad:
            raise ValueError(f"angle_dims {bad} are outside the observation (obs_dim={self.obs_dim})")
        if not 0.0 <= self.nll_beta <= 1.0:
            raise ValueError(f"nll_beta must lie in [0, 1], got {self.nll_beta}")
        if self.min_logvar >= self.max_logvar:
            raise ValueError(f"min_logvar {self.min_logvar} must be below max_logvar {self.max_logvar}")

    def _check_frame(self) -> None:
        pose, points = self.frame_pose_dims, self.frame_point_dims
        if not pose:
            if points or self.frame_action_is_point:
                raise ValueError("frame_point_dims / frame_action_is_point need frame_pose_dims (x, y, yaw)")
            return
        if len(pose) != 3:
            raise ValueError(f"frame_pose_dims must be the 3 indices (x, y, yaw), got {pose}")
        if len(points) % 2:
            raise ValueError(f"frame_point_dims must be (x, y) pairs, got {points}")
        bad = [i for i in pose + points if not 0 <= i < self.obs_dim]
        if bad:
            raise ValueError(f"frame dims {bad} are outside the observation (obs_dim={self.obs_dim})")
        if self.frame_action_is_point and self.action_dim != 2:
            raise ValueError(f"frame_action_is_point needs a 2-D action, got action_dim={self.action_dim}")


@dataclass
class LatentConfig:
    """Images (3, H, W) in [0, 1] -> conv encoder -> latent (latent_dim,); an MLP predicts the next
    latent from (latent, action); a transposed-conv decoder maps latents back to images."""

    image_size: int = 64
    action_dim: int = 2
    latent_dim: int = 32
    channels: list[int] = field(default_factory=lambda: [16, 32, 64, 64])
    hidden_dim: int = 256

    def __post_init__(self) -> None:
        _positive(self, ("image_size", "action_dim", "latent_dim", "hidden_dim"))
        self.channels = [int(c) for c in self.channels]
        if self.image_size % (2 ** len(self.channels)):
            raise ValueError(f"image_size {self.image_size} must be divisible by 2 ** len(channels) = "
                             f"{2 ** len(self.channels)}")


@dataclass
class TrajectoryDiffusionConfig:
    """A 1-D temporal U-Net (the diffusion policy's) denoises a whole segment of ``horizon`` steps of
    ``[state, action, reward]`` (obs_dim + action_dim + 1 channels), conditioned on the first state."""

    obs_dim: int = 5
    action_dim: int = 2
    horizon: int = 32
    down_dims: list[int] = field(default_factory=lambda: [32, 64, 128])
    kernel_size: int = 5
    n_groups: int = 8
    step_embed_dim: int = 64
    num_train_timesteps: int = 100
    num_inference_steps: int = 20
    beta_schedule: str = "squaredcos_cap_v2"

    def __post_init__(self) -> None:
        _positive(self, ("obs_dim", "action_dim", "horizon", "num_train_timesteps", "num_inference_steps"))
        self.down_dims = [int(d) for d in self.down_dims]
        factor = 2 ** (len(self.down_dims) - 1)
        if self.horizon % factor:
            raise ValueError(f"horizon {self.horizon} must be a multiple of {factor} for down_dims={self.down_dims}")
        if self.num_inference_steps > self.num_train_timesteps:
            raise ValueError(f"num_inference_steps {self.num_inference_steps} exceeds num_train_timesteps "
                             f"{self.num_train_timesteps}")

    @property
    def channels(self) -> int:
        return self.obs_dim + self.action_dim + 1
