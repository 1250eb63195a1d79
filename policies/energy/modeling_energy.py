"""EBT-Policy-style energy transformer: actions by a few steps of gradient descent on a learned energy.

``EnergyTransformer(obs_n (B, n_obs_steps, obs_feature_dim), chunk (B, horizon, action_dim)) -> energy (B,)``
scores an action chunk for an observation window (both normalized; ``obs_n`` is the normalized state, and
the image's features for image observations: ``ChunkInputs.features``). ``descend`` minimizes it
from an initial guess; training backpropagates through the unrolled descent (Energy-Based
Transformers, Gladstone et al. 2025; EBT-Policy, 2025), so the model learns an energy landscape
whose few-step gradient flow lands on the demonstrated chunk.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..chunked import check_tensor, draw_noise, standard_noise
from ..diffusion.mlp import ResidualBlock
from ..registry import register
from .chunking import ChunkPolicyBase
from .configuration_energy import EnergyConfig
from .energy_mlp import ChunkInputs, EnergyMLP


class LearnedStepSize:
    """Mixin for energy models that ``descend`` runs on: ``step_size``, the exp of a parameter
    initialized to ``config.step_size`` (trained unless ``config.learn_step_size`` is false)."""

    def _init_step_size(self, config: EnergyConfig) -> None:
        self.log_step_size = nn.Parameter(torch.tensor(math.log(config.step_size)),
                                          requires_grad=config.learn_step_size)

    @property
    def step_size(self) -> torch.Tensor:
        return self.log_step_size.exp()


class DescentEnergy(LearnedStepSize, ChunkInputs):
    """Mixin for the energies ``descend`` runs on: ``_init_config`` first (validate, keep the config, make the
    normalizers and the image encoder), ``_init_step_size`` last (after the network's layers)."""

    def _init_config(self, config: EnergyConfig) -> None:
        config.validate()
        self.config = config
        self._init_inputs(config)


class EnergyTransformer(DescentEnergy, nn.Module):
    """Tokens ``[obs_1 .. obs_T, a_1 .. a_H, CLS]`` (``actions_per_token`` actions per action token)
    -> TransformerEncoder -> Linear(CLS output) = energy (B,)."""

    def __init__(self, config: EnergyConfig):
        super().__init__()
        self._init_config(config)
        d = config.d_model
        self.obs_embed = nn.Linear(config.obs_feature_dim, d)
        self.action_embed = nn.Linear(config.action_dim * config.actions_per_token, d)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        n_tokens = config.n_obs_steps + config.horizon // config.actions_per_token + 1
        self.pos = nn.Parameter(0.02 * torch.randn(1, n_tokens, d))
        layer = nn.TransformerEncoderLayer(d, config.n_heads, config.ff_dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 1))
        self._init_step_size(config)

    def forward(self, obs_n: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """obs_n (B, n_obs_steps, obs_feature_dim), chunk (B, horizon, action_dim), normalized -> energy (B,)."""
        b = obs_n.shape[0]
        actions = chunk.reshape(b, -1, self.action_embed.in_features)  # (B, H / actions_per_token, k * A)
        tokens = torch.cat([self.obs_embed(obs_n), self.action_embed(actions), self.cls.expand(b, -1, -1)], dim=1)
        h = self.encoder(tokens + self.pos)
        return self.head(h[:, -1]).squeeze(-1)


class DescentEnergyMLP(DescentEnergy, EnergyMLP):
    """The energy policy's ``backbone: mlp``: ``EnergyMLP`` over ``config.hidden_dims`` with SiLU
    (smooth, so dE/da changes continuously along the descent) and a learned step size."""

    def __init__(self, config: EnergyConfig):
        super().__init__(config, activation=nn.SiLU)
        self._init_step_size(config)


class DescentEnergyResMLP(DescentEnergy, nn.Module):
    """The energy policy's ``backbone: resmlp``: the flattened window and chunk -> Linear to width
    ``hidden_dims[0]`` -> ``len(hidden_dims)`` pre-LayerNorm residual blocks (``ResidualBlock``, Mish: smooth)
    -> LayerNorm, Mish, Linear -> energy (B,); the diffusion policy's MLP denoiser with a scalar head."""

    def __init__(self, config: EnergyConfig):
        super().__init__()
        self._init_config(config)
        width = config.hidden_dims[0]
        self.inp = nn.Linear(self.flat_width(config), width)
        self.blocks = nn.Sequential(*[ResidualBlock(width) for _ in config.hidden_dims])
        self.out = nn.Sequential(nn.LayerNorm(width), nn.Mish(), nn.Linear(width, 1))
        self._init_step_size(config)

    def forward(self, obs_n: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """obs_n (B, T, obs_feature_dim), chunk (B, H, A), normalized -> energy (B,)."""
        return self.out(self.blocks(self.inp(self.flatten(obs_n, chunk)))).squeeze(-1)


# configuration_energy.BACKBONE_NAMES lists these keys for the config's check (the config cannot import this module)
BACKBONES = {"transformer": EnergyTransformer, "mlp": DescentEnergyMLP, "resmlp": DescentEnergyResMLP}


def build_energy_model(config: EnergyConfig) -> nn.Module:
    """The energy network ``config.backbone`` names (``BACKBONES``)."""
    return BACKBONES[config.backbone](config)


def clip_per_sample(g: torch.Tensor, max_norm: float | None) -> torch.Tensor:
    """Scale each sample's gradient g (B, ...) to norm <= max_norm (no-op for None)."""
    if max_norm is None:
        return g
    norm = g.flatten(1).norm(dim=1).clamp_min(1e-12)
    return g * (max_norm / norm).clamp(max=1.0).view(-1, *([1] * (g.ndim - 1)))


def straight_through_clamp(a: torch.Tensor) -> torch.Tensor:
    """``clamp(a, -1, 1)`` in the forward pass, identity in the backward pass. A hard clamp has zero
    gradient outside the box, so a chunk that overshot the action bounds would teach the model
    nothing; with this, training still sees how far it overshot and pulls it back."""
    return a + (a.clamp(-1.0, 1.0) - a).detach()


def descend(model: nn.Module, obs_n: torch.Tensor, init: torch.Tensor, n_steps: int,
            grad_clip: float | None = None, create_graph: bool = False) -> list[torch.Tensor]:
    """Gradient descent on the energy: ``a <- clamp(a - step * clip(dE/da), -1, 1)``, ``n_steps`` times,
    the clamp straight-through (``straight_through_clamp``) so that saturated actions still get
    gradients. ``model``: an energy network of ``build_energy_model`` (``BACKBONES``).

    obs_n (B, T, obs_feature_dim), init (B, H, A) -> [a_1, ..., a_n_steps], each (B, H, A). With
    ``create_graph`` the steps stay differentiable w.r.t. the model (training); otherwise
    they are detached (inference). Training uses the math attention kernel, the one whose
    backward is itself differentiable on CPU.
    """
    a = init.clamp(-1.0, 1.0)
    step = model.step_size
    chunks = []
    kernel = sdpa_kernel(SDPBackend.MATH) if create_graph else contextlib.nullcontext()
    with torch.enable_grad(), kernel:
        for _ in range(n_steps):
            if not a.requires_grad:
                a = a.detach().requires_grad_(True)
            energy = model(obs_n, a)
            (grad,) = torch.autograd.grad(energy.sum(), a, create_graph=create_graph)
            a = straight_through_clamp(a - step * clip_per_sample(grad, grad_clip))
            if not create_graph:
                a = a.detach()
            chunks.append(a)
    return chunks


def energy_score(chunk: torch.Tensor, target: torch.Tensor, m: int, eps: float = 1e-8,
                 spread_weight: float = 1.0) -> torch.Tensor:
    """Energy score (Gneiting & Raftery 2007), a strictly proper scoring rule for samples:
    chunk (B * m, H, A) holds m samples per demo, target (B * m, H, A) the demo repeated m times ->
    ``mean_b [ mean_m |x_m - y| - spread_weight / (2 m (m - 1)) sum_{m != m'} |x_m - x_m'| ]`` (Euclidean
    norms over the flattened chunk). Its minimizer is the demos' conditional distribution, not their mean:
    the second term pays for spread, so samples from different initial guesses cover the modes.
    ``spread_weight`` < 1 makes it improper, like a lower temperature: well-separated modes keep their
    place (for demos at +-1 the samples still settle at +-1), but each mode's samples draw together and
    the likelier mode gains weight (p -> 1/2 + (p - 1/2) / spread_weight for two modes, within [0, 1])."""
    if m < 2:
        raise ValueError(f"the energy score needs >= 2 samples per demo, got n_hypotheses={m}")
    x = chunk.flatten(1).view(-1, m, chunk[0].numel())  # (B, m, H * A)
    y = target.flatten(1).view(-1, m, x.shape[-1])[:, :1]  # (B, 1, H * A)
    fit = ((x - y).pow(2).sum(-1) + eps).sqrt().mean(1)  # (B,)
    i, j = torch.triu_indices(m, m, offset=1)
    spread = ((x[:, i] - x[:, j]).pow(2).sum(-1) + eps).sqrt().mean(1)  # (B,) mean over unordered pairs
    return (fit - 0.5 * spread_weight * spread).mean()


def select_lowest_energy(chunks: torch.Tensor, energy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """chunks (B, N, H, A), energy (B, N) -> the chunk (B, H, A) of lowest energy per row, and its energy (B,)."""
    best = energy.argmin(dim=1)
    rows = torch.arange(chunks.shape[0], device=chunks.device)
    return chunks[rows, best], energy[rows, best]


@register(trainable=True)
class EnergyPolicy(ChunkPolicyBase):
    """``ChunkedPolicy`` around an energy network (``build_energy_model``): kind "energy".

    ``noise`` (B, horizon, action_dim) is the initial guess of the normalized chunk that the
    descent starts from (zeros, or N(0, 1) clamped to [-1, 1] with ``default_init="noise"``,
    when None). ``last_energy`` (B,) holds the final energy: an uncertainty, lower is surer.
    With ``config.n_candidates`` = N > 1 the guess is one of N candidates descended together, the
    others drawn by ``self.candidates`` (a generator: a chunk then depends on its draws too); the
    chunk of lowest final energy is returned (``select_lowest_energy``).
    """

    config_class = EnergyConfig
    kind = "energy"
    learns_from_pairs = True

    def __init__(self, config: EnergyConfig | None = None, model: nn.Module | None = None):
        config = config or (model.config if model is not None else EnergyConfig())
        super().__init__(config, model if model is not None else build_energy_model(config))
        self.candidates = torch.Generator().manual_seed(self.config.candidate_seed)

    def __copy__(self) -> "EnergyPolicy":
        """A shallow copy (shared weights) with its own candidate generator, in the same state: a copy
        that draws or resets must not move the original's draws."""
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.candidates = torch.Generator()
        out.candidates.set_state(self.candidates.get_state())
        return out

    def reset(self, mask=None) -> None:
        """Clear the queues (``ChunkPolicyBase.reset``); a full reset also reseeds ``candidates``."""
        super().reset(mask)
        if mask is None:
            self.candidates.manual_seed(self.config.candidate_seed)

    @property
    def noise_distribution(self) -> str:
        """Where random guesses come from: U(-1, 1) with ``default_init="uniform"``, else N(0, 1)."""
        return "uniform" if self.config.default_init == "uniform" else "normal"

    def _default_init(self, batch: int) -> torch.Tensor:
        """(batch, horizon, action_dim) on the CPU: zeros, or drawn from the global generator."""
        shape = (batch, self.horizon, self.action_dim)
        return torch.zeros(shape) if self.config.default_init == "zeros" else draw_noise(self, batch)

    def _infer(self, obs_n: torch.Tensor, init: torch.Tensor | None, n_steps: int | None = None,
               n_candidates: int | None = None, candidates: torch.Tensor | None = None):
        """``candidates`` (B, N - 1, horizon, action_dim), normalized: the extra candidates instead of the
        generator's draws (e.g. those a deployed C policy's PRNG drew)."""
        b, n = obs_n.shape[0], self.config.n_candidates if n_candidates is None else int(n_candidates)
        if n < 1:
            raise ValueError(f"n_candidates={n} must be >= 1")
        init = self._default_init(b).to(obs_n.device) if init is None else init
        if candidates is not None:
            extra = check_tensor(candidates, (b, n - 1, *init.shape[1:]), "candidates")
        if n > 1:  # the candidates are drawn on the CPU (the same draws on every device)
            if candidates is None:
                extra = standard_noise(self.noise_distribution, (b, n - 1, *init.shape[1:]), self.candidates)
            init = torch.cat([init[:, None], extra.to(obs_n.device)], dim=1).flatten(0, 1)  # (B * N, H, A)
            obs_n = obs_n.repeat_interleave(n, 0)
        model = self.inference_model
        chunk = descend(model, obs_n, init, n_steps or self.config.n_steps, self.config.grad_clip)[-1]
        energy = model(obs_n, chunk).detach()
        return select_lowest_energy(chunk.view(b, n, *chunk.shape[1:]), energy.view(b, n))

    def _loss(self, obs_n: torch.Tensor, action_n: torch.Tensor, init: torch.Tensor | None = None) -> torch.Tensor:
        """Demos (``init`` None): ``n_hypotheses`` random guesses per demo, ``objective`` over them.
        (guess, chunk) pairs (``init`` (B, H, A)): the descent from each guess regresses onto its chunk.
        Either way plus ``denoise_weight`` times ``_denoise_loss`` when it is on."""
        cfg = self.config
        if init is None:
            m = cfg.n_hypotheses
            obs_m, target = obs_n.repeat_interleave(m, 0), action_n.repeat_interleave(m, 0)  # (B * M, ...)
            init = (cfg.init_std * torch.randn_like(target)).clamp(-1.0, 1.0)
        else:
            m, obs_m, target = 1, obs_n, action_n
        chunks = descend(self.model, obs_m, init, cfg.train_steps, cfg.grad_clip, create_graph=True)
        if cfg.objective == "energy_score" and m > 1:
            errors = torch.stack([energy_score(c, target, m, spread_weight=cfg.spread_weight) for c in chunks])
        else:  # one guess per demo (n_hypotheses 1) or per (guess, chunk) pair
            errors = torch.stack([F.mse_loss(c, target) for c in chunks])
        if cfg.loss_on == "last":
            loss = errors[-1]
        else:  # weights 1..K normalized: later steps count more, every step must make progress
            w = torch.arange(1, len(chunks) + 1, dtype=errors.dtype, device=errors.device)
            loss = (w * errors).sum() / w.sum()
        if cfg.denoise_weight > 0:
            loss = loss + cfg.denoise_weight * self._denoise_loss(obs_n, action_n)
        return loss

    def _denoise_loss(self, obs_n: torch.Tensor, action_n: torch.Tensor) -> torch.Tensor:
        """The descent from noised demos back onto them (``EnergyConfig.denoise_weight``): obs_n (B, T, O),
        action_n (B, H, A) -> mean over demos of |descend(y + s eps) - y| (flattened chunk), s ~ U(0, max_std)."""
        cfg = self.config
        std = cfg.denoise_max_std * torch.rand(action_n.shape[0], *([1] * (action_n.ndim - 1)),
                                               device=action_n.device)
        noised = action_n + std * torch.randn_like(action_n)
        landed = descend(self.model, obs_n, noised, cfg.train_steps, cfg.grad_clip, create_graph=True)[-1]
        return (landed - action_n).flatten(1).norm(dim=1).mean()
