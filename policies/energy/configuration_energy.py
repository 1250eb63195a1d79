"""Configs of the energy-based chunk policies: the EBT-style energy transformer and implicit BC."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from policies.diffusion.vision import ImageObservationConfig

NORM_MODES = ("min_max", "mean_std", "identity")
GUESSES = ("zeros", "noise", "uniform")
BACKBONE_NAMES = ("transformer", "mlp", "resmlp")  # the networks of modeling_energy.BACKBONES


@dataclass
class ChunkConfig(ImageObservationConfig):
    """Shapes and normalization shared by the chunk policies (Diffusion Policy's horizons).

    The policy reads ``n_obs_steps`` observations (obs_dim,), predicts ``horizon`` actions
    (action_dim,) and executes ``n_action_steps`` of them, from index ``n_obs_steps - 1``.
    Observations are normalized with ``obs_norm``; actions always with min_max to [-1, 1].
    With ``image_shape`` an observation is ``{"state", "image"}``: each step's image goes through a small
    ResNet (the diffusion policy's ``ImageEncoder``, trained with the energy) and its features follow the
    normalized state, ``obs_feature_dim`` floats per step.
    """

    obs_dim: int = 5
    action_dim: int = 2
    n_obs_steps: int = 2
    horizon: int = 16
    n_action_steps: int = 8
    obs_norm: str = "min_max"  # min_max | mean_std | identity
    use_ema: bool = False  # act with (and save) a moving average of the weights (policies.ema)
    ema_power: float = 0.75  # the average's warm-up: decay 1 - (1 + step) ** -power ...
    ema_max_decay: float = 0.9999  # ... capped here

    # options that were removed -> the value their code ran with by default, the one the code runs now
    REMOVED_OPTIONS: ClassVar[dict[str, Any]] = {"obs_noise_std": 0.0}

    @classmethod
    def from_saved(cls, saved: dict[str, Any]) -> "ChunkConfig":
        """The config of a checkpoint's ``config.json`` fields. A checkpoint saved before an option was removed
        still has its key: it is dropped when it holds the value the code now runs (``REMOVED_OPTIONS``), and
        refused with a ValueError naming it otherwise (the policy was trained with code that no longer exists)."""
        fields = dict(saved)
        for key, default in cls.REMOVED_OPTIONS.items():
            if key in fields and fields.pop(key) != default:
                raise ValueError(f"this checkpoint was trained with {key}={saved[key]!r}, an option robo no longer "
                                 f"has (it now always runs {key}={default!r}); retrain the policy")
        return cls(**fields)

    def validate(self) -> None:
        self.validate_image()
        for name in ("obs_dim", "action_dim", "n_obs_steps", "horizon", "n_action_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.n_obs_steps - 1 + self.n_action_steps > self.horizon:
            raise ValueError(f"horizon={self.horizon} is too short to execute n_action_steps={self.n_action_steps} "
                             f"after n_obs_steps={self.n_obs_steps}: need horizon >= n_obs_steps - 1 + n_action_steps")
        if self.obs_norm not in NORM_MODES:
            raise ValueError(f"unknown obs_norm {self.obs_norm!r}; choose one of {list(NORM_MODES)}")
        if not 0.0 <= self.ema_max_decay < 1.0 or not self.ema_power > 0:
            raise ValueError(f"ema_max_decay={self.ema_max_decay} must lie in [0, 1) and ema_power={self.ema_power} "
                             "be positive")


@dataclass
class EnergyConfig(ChunkConfig):
    """EBT-Policy-style energy transformer: E(obs window, action chunk) -> scalar.

    Tokens: one per observation step, one per ``actions_per_token`` actions of the chunk and a learned energy (CLS)
    token, through a ``torch.nn.TransformerEncoder``; the energy is read from the CLS token.
    ``backbone="mlp"`` replaces the transformer by an MLP (``hidden_dims``, SiLU) over the flattened
    window and chunk, which is cheaper per sample (``"resmlp"``: pre-LayerNorm residual blocks, as the
    diffusion policy's MLP denoiser).
    Actions are found by ``n_steps`` steps of gradient descent on the normalized chunk,
    ``a <- clamp(a - step_size * clip(dE/da), -1, 1)``, from an initial guess (the steering input).
    Training unrolls ``train_steps`` steps with ``create_graph=True`` and regresses every
    step's chunk (``loss_on="all"``, later steps weigh more) or only the last onto the demo chunk;
    the initial guesses are drawn as ``clamp(N(0, init_std^2))`` so descent converges from anywhere.
    Regression from independent guesses learns the demos' mean; ``objective="energy_score"`` replaces it by
    the energy score over ``n_hypotheses`` = M >= 2 samples of each demo (a proper scoring rule: it rewards
    matching the demos' distribution, so different guesses land in different modes by construction, and the
    guess then selects the mode, which is what steering needs; use noise guesses);
    ``spread_weight`` < 1 weighs its spread term less, which sharpens the samples like a lower temperature.
    ``n_candidates`` > 1 is EBT's self-verification at inference: the given guess and
    ``n_candidates - 1`` guesses drawn from N(0, 1) by the policy's own generator (seeded with
    ``candidate_seed`` at construction and at every full ``reset()``) are descended in one batch,
    and the chunk with the lowest final energy is kept.
    ``denoise_weight`` > 0 adds a denoising term, as a diffusion model trains at every noise level: each
    demo chunk y gets N(0, s^2) noise with s ~ U(0, ``denoise_max_std``) per demo, and the same descent from
    that noised chunk must land back on y (mean Euclidean error over the chunk, the energy score's units).
    The demos become the energy's fixed points with basins around them, more constraints per demo on the
    landscape the descent from random guesses crosses last.
    A batch with an ``init`` key (B, horizon, action_dim) trains on (guess, chunk) pairs instead:
    the descent from each guess regresses onto its own chunk (distillation of a teacher's
    noise -> chunk map, ``robo.imitation.distill``); ``default_init="uniform"`` then draws guesses
    (and candidates) from U(-1, 1), the distribution they were trained on.
    """

    backbone: str = "transformer"  # transformer | mlp (an MLP over the flattened window and chunk, hidden_dims)
    # | resmlp (residual blocks of width hidden_dims[0], one per entry)
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256, 256])  # backbone = mlp / resmlp
    d_model: int = 64
    actions_per_token: int = 2  # transformer: consecutive actions embedded in one token (horizon must be a multiple)
    n_heads: int = 4
    n_layers: int = 2
    ff_dim: int = 128
    n_steps: int = 2  # gradient steps at inference
    train_steps: int = 2  # unrolled gradient steps in training
    step_size: float = 1.0  # initial value of the step size
    learn_step_size: bool = True
    grad_clip: float | None = None  # per-sample max norm of dE/da (None: no clipping)
    denoise_weight: float = 0.0  # training: weight of the descent from noised demos back onto them (0: off)
    denoise_max_std: float = 0.3  # ... their noise: N(0, s^2) per demo, s ~ U(0, denoise_max_std) (normalized units)
    init_std: float = 1.0  # std of the random initial guesses in training
    default_init: str = "zeros"  # initial guess when none is given: zeros | noise (N(0, 1)) | uniform (U(-1, 1))
    loss_on: str = "all"  # all | last
    objective: str = "regression"  # regression (MSE, n_hypotheses 1) | energy_score (needs n_hypotheses >= 2)
    n_hypotheses: int = 1  # guesses per demo in training: the energy score's samples
    spread_weight: float = 1.0  # energy score: weight of its spread term; < 1 sharpens the samples (improper)
    n_candidates: int = 1  # guesses descended per chunk at inference; the lowest final energy wins
    candidate_seed: int = 0  # seeds the generator of the extra candidates

    REMOVED_OPTIONS: ClassVar[dict[str, Any]] = {
        **ChunkConfig.REMOVED_OPTIONS, "step_conditioned": False, "kernel_size": 5, "n_groups": 8,
        "energy_form": "scalar", "dropout": 0.0, "langevin_std": 0.0, "step_size_jitter": 0.0, "hypothesis_mix": 0.1,
        "contrastive_weight": 0.0, "n_negatives": 16, "contrastive_negatives": "uniform"}

    def validate(self) -> None:
        super().validate()
        if self.n_candidates < 1:
            raise ValueError(f"n_candidates={self.n_candidates} must be >= 1")
        if self.backbone not in BACKBONE_NAMES:
            names = ", ".join(map(repr, BACKBONE_NAMES))
            raise ValueError(f"unknown backbone {self.backbone!r}; choose one of {names}")
        if not self.hidden_dims or min(self.hidden_dims) < 1:
            raise ValueError(f"hidden_dims={self.hidden_dims} must be a non-empty list of positive widths")
        if self.backbone == "resmlp" and len(set(self.hidden_dims)) > 1:
            raise ValueError(f"backbone='resmlp' has one width (its residual blocks add to their input): "
                             f"hidden_dims={self.hidden_dims} must repeat one width")
        if self.actions_per_token < 1:
            raise ValueError(f"actions_per_token={self.actions_per_token} must be >= 1")
        if self.backbone == "transformer" and self.horizon % self.actions_per_token:
            raise ValueError(f"horizon={self.horizon} must be a multiple of actions_per_token={self.actions_per_token} "
                             "(the transformer embeds that many actions per token; the MLP backbone takes any horizon)")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.n_steps < 1 or self.train_steps < 1:
            raise ValueError(f"n_steps={self.n_steps} and train_steps={self.train_steps} must be >= 1")
        if self.step_size <= 0:
            raise ValueError(f"step_size={self.step_size} must be > 0")
        if not self.denoise_weight >= 0 or not self.denoise_max_std > 0:
            raise ValueError(f"denoise_weight={self.denoise_weight} must be >= 0 and denoise_max_std="
                             f"{self.denoise_max_std} > 0")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip={self.grad_clip} must be > 0 or None")
        if self.default_init not in GUESSES:
            raise ValueError(f"unknown default_init {self.default_init!r}; choose one of {list(GUESSES)}")
        if self.objective not in ("regression", "energy_score"):
            raise ValueError(f"unknown objective {self.objective!r}; choose 'regression' or 'energy_score'")
        if self.objective == "energy_score" and self.n_hypotheses < 2:
            raise ValueError(f"objective='energy_score' compares samples: needs n_hypotheses >= 2, "
                             f"got {self.n_hypotheses}")
        if self.objective == "regression" and self.n_hypotheses != 1:
            raise ValueError(f"objective='regression' regresses one guess per demo: n_hypotheses={self.n_hypotheses} "
                             "must be 1 (several samples per demo: objective='energy_score')")
        if not 0 < self.spread_weight <= 1:
            raise ValueError(f"spread_weight={self.spread_weight} must lie in (0, 1]: 1 is the proper energy score, "
                             "less sharpens its samples (0 would collapse them onto the demos' median)")
        if self.loss_on not in ("all", "last"):
            raise ValueError(f"unknown loss_on {self.loss_on!r}; choose 'all' or 'last'")


@dataclass
class ImplicitBCConfig(ChunkConfig):
    """Implicit BC (Florence et al. 2021): an MLP energy over (flattened obs window, chunk),
    trained with InfoNCE against ``n_negatives`` chunks drawn uniformly in [-1, 1];
    actions by derivative-free optimization: ``dfo_iters`` rounds of resampling a population of
    ``n_samples`` chunks by softmax(-E) and perturbing it with Gaussian noise whose scale starts
    at ``noise_scale`` and shrinks by ``noise_shrink`` each round. The initial population is
    uniform in [-1, 1], or ``clamp(guess + noise_scale * N(0, 1))`` around a given guess.
    DFO draws from a generator seeded with ``seed`` at every call, so a chunk is a deterministic
    function of (observations, initial guess). IBC is used with short chunks: uniform sampling
    does not cover a 32-dimensional chunk.
    """

    horizon: int = 2
    n_action_steps: int = 1
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256, 256])
    n_negatives: int = 256
    n_samples: int = 1024
    dfo_iters: int = 3
    noise_scale: float = 0.33
    noise_shrink: float = 0.5
    seed: int = 0

    def validate(self) -> None:
        super().validate()
        if self.n_negatives < 1 or self.n_samples < 1 or self.dfo_iters < 1:
            raise ValueError("n_negatives, n_samples and dfo_iters must be >= 1, got "
                             f"{self.n_negatives}, {self.n_samples}, {self.dfo_iters}")
        if not 0 < self.noise_shrink <= 1 or self.noise_scale <= 0:
            raise ValueError(f"need noise_scale > 0 and 0 < noise_shrink <= 1, got {self.noise_scale}, "
                             f"{self.noise_shrink}")
