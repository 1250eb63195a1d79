"""What C code is generated from for action-chunk policies: their networks and samplers as float32 arrays.

A ``ChunkedGraph`` holds everything a chunk policy computes between an observation window and a chunk:

- ``DiffusionSampler``: the residual-MLP denoiser (``policies.diffusion.mlp.ConditionalMlp``) with its step
  embeddings evaluated at the sampler's timesteps (a table: they depend on the step only), and DDIM's
  coefficients per step (eta = 0, as ``DiffusionPolicy.make_inference_scheduler`` sets it), computed with the
  same float32 operations as diffusers' ``DDIMScheduler.step``;
- ``EnergySampler``: the MLP energy (``backbone: mlp``, SiLU) whose gradient with respect to the chunk C
  computes analytically (backpropagation through the dense layers), the learned step size, the descent steps,
  the candidates and the per-sample gradient clip;
- ``NoiseActor``: a DSRL-steered policy's noise actor (``policies.steered``), run before the base's sampler.

The chunk queue (``n_obs_steps`` window, ``n_action_steps`` executed per chunk) and the normalizers are the
policy's. ``chunked_graph(policy)`` builds one; a policy C cannot run raises a ``ValueError`` naming what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .cgraph import Dense, _array, dense, sequential_layers

CHUNKED_KINDS = ("diffusion", "energy", "steered")


@dataclass(frozen=True)
class LayerNorm:
    weight: np.ndarray  # (D,)
    bias: np.ndarray  # (D,)
    eps: float


@dataclass(frozen=True)
class ResidualBlock:
    """h + W2 Mish(W1 LayerNorm(h))."""

    norm: LayerNorm
    inner: Dense  # (2 D, D)
    outer: Dense  # (D, 2 D)


@dataclass(frozen=True)
class DiffusionSampler:
    """DDIM over ``ConditionalMlp``: x (horizon * A,) normalized, starting at the initial noise."""

    step_embedding: np.ndarray  # (S, E) the step encoder's output at each inference timestep
    inp: Dense  # (hidden, horizon * A + E + cond_dim), input [x, embedding, cond]
    blocks: tuple[ResidualBlock, ...]
    out_norm: LayerNorm
    out: Dense  # (horizon * A, hidden)
    sqrt_alpha: np.ndarray  # (S,) alpha_prod_t ** 0.5
    sqrt_beta: np.ndarray  # (S,) (1 - alpha_prod_t) ** 0.5
    sqrt_alpha_prev: np.ndarray  # (S,) alpha_prod_t_prev ** 0.5
    direction: np.ndarray  # (S,) (1 - alpha_prod_t_prev) ** 0.5
    prediction_type: str  # epsilon | sample
    clip_sample: float | None  # clip range of the predicted clean sample, or None

    @property
    def hidden(self) -> int:
        return self.inp.weight.shape[0]


@dataclass(frozen=True)
class EnergySampler:
    """``a <- st_clamp(a - step * clip(dE/da))`` ``n_steps`` times from clamp(guess), for each candidate; the
    candidate of lowest final energy wins. E = Dense_L(silu(... silu(Dense_1([obs_n, a])))) (out (1,))."""

    layers: tuple[Dense, ...]  # hidden layers (SiLU) then the (1, d) output layer
    step_size: float
    n_steps: int
    n_candidates: int
    grad_clip: float | None

    @property
    def widths(self) -> list[int]:
        return [d.weight.shape[0] for d in self.layers[:-1]]


@dataclass(frozen=True)
class NoiseActor:
    """window (n_obs_steps * obs_dim,) raw -> noise_bound * tanh(...) (horizon * A,): the mean MLP, and for a
    stochastic actor the log-std layer (clamped to [log_std_min, log_std_max]) on the last hidden layer."""

    mean: np.ndarray  # (W,) input normalization
    std: np.ndarray  # (W,)
    hidden: tuple[Dense, ...]  # with their activations
    head: Dense  # identity: the pre-tanh mean
    log_std: Dense | None
    log_std_min: float
    log_std_max: float
    noise_bound: float


@dataclass(frozen=True)
class ChunkedGraph:
    kind: str  # the base family: diffusion | energy; ``steer`` set for a steered policy
    obs_dim: int
    action_dim: int
    n_obs_steps: int
    horizon: int
    n_action_steps: int
    obs_offset: np.ndarray  # (obs_dim,) normalized = (x - offset) / scale
    obs_scale: np.ndarray
    action_offset: np.ndarray  # (action_dim,) raw = y * scale + offset
    action_scale: np.ndarray
    initial: str  # what the initial sample is when drawn in C: normal | uniform | zeros
    sampler: DiffusionSampler | EnergySampler
    steer: NoiseActor | None = None

    @property
    def chunk_size(self) -> int:
        return self.horizon * self.action_dim

    @property
    def window_size(self) -> int:
        return self.n_obs_steps * self.obs_dim

    @property
    def policy_kind(self) -> str:
        return "steered" if self.steer is not None else self.kind

    @property
    def num_floats(self) -> int:
        """Floats stored in the generated source."""
        def count(obj) -> int:
            if isinstance(obj, np.ndarray):
                return obj.size
            if isinstance(obj, (tuple, list)):
                return sum(count(o) for o in obj)
            if hasattr(obj, "__dataclass_fields__"):
                return sum(count(getattr(obj, f)) for f in obj.__dataclass_fields__)
            return 0
        return count(self)


def _layer_norm(m: torch.nn.LayerNorm) -> LayerNorm:
    return LayerNorm(_array(m.weight, "LayerNorm weight"), _array(m.bias, "LayerNorm bias"), float(m.eps))


def _residual_block(block) -> ResidualBlock:
    norm, inner, _, outer = block.net
    return ResidualBlock(_layer_norm(norm), dense(inner), dense(outer))


def _f32(t: torch.Tensor) -> np.ndarray:
    return np.asarray(t.detach().to(torch.float32).cpu().numpy(), np.float32)


def diffusion_sampler(policy) -> DiffusionSampler:
    """The DDIM sampler of a ``DiffusionPolicy`` with an MLP denoiser (its EMA weights)."""
    c = policy.config
    if c.denoiser != "mlp":
        raise ValueError(f"C export of a diffusion policy needs denoiser=mlp (the residual MLP), not "
                         f"{c.denoiser!r}: train with policy.denoiser=mlp, or export the U-Net with format=onnx")
    if c.inference_scheduler != "ddim":
        raise ValueError(f"C export runs DDIM; this policy samples with {c.inference_scheduler!r}: set "
                         "policy.inference_scheduler=ddim (the same weights sample with either)")
    net = policy.inference_model.denoiser
    scheduler = policy.make_inference_scheduler()
    if scheduler.config.timestep_spacing != "leading" or not scheduler.config.set_alpha_to_one:
        raise ValueError("C export expects DDIM with timestep_spacing='leading' and set_alpha_to_one=True")
    steps = scheduler.timesteps
    with torch.no_grad():
        emb = net.step_encoder(steps.to(torch.long))
    ratio = scheduler.config.num_train_timesteps // scheduler.num_inference_steps
    ac = scheduler.alphas_cumprod
    coef = {"sqrt_alpha": [], "sqrt_beta": [], "sqrt_alpha_prev": [], "direction": []}
    for t in steps.tolist():  # the float32 tensors and operations of DDIMScheduler.step (eta = 0)
        prev = t - ratio
        a_t = ac[t]
        a_prev = ac[prev] if prev >= 0 else scheduler.final_alpha_cumprod
        coef["sqrt_alpha"].append(a_t ** 0.5)
        coef["sqrt_beta"].append((1 - a_t) ** 0.5)
        coef["sqrt_alpha_prev"].append(a_prev ** 0.5)
        coef["direction"].append((1 - a_prev - torch.tensor(0.0) ** 2) ** 0.5)
    norm, _, out = net.out
    return DiffusionSampler(
        _array(emb, "step embedding"), dense(net.inp), tuple(_residual_block(b) for b in net.blocks),
        _layer_norm(norm), dense(out), **{k: _f32(torch.stack(v)) for k, v in coef.items()},
        prediction_type=c.prediction_type, clip_sample=float(c.clip_sample_range) if c.clip_sample else None)


def energy_sampler(policy) -> EnergySampler:
    """The gradient-descent sampler of an ``EnergyPolicy`` with ``backbone: mlp``."""
    c, model = policy.config, policy.inference_model
    if c.backbone != "mlp":
        raise ValueError(f"C export of an energy policy needs backbone=mlp (its gradient is computed analytically "
                         f"in C), not {c.backbone!r}; export this one with format=onnx")
    if c.image_shape:
        raise ValueError("C export of image-observing policies is not supported (the image encoder runs on a "
                         "companion computer); export with format=onnx")
    layers = sequential_layers_silu(model.net)
    return EnergySampler(tuple(layers), float(model.step_size.detach()), int(c.n_steps), int(c.n_candidates),
                         None if c.grad_clip is None else float(c.grad_clip))


def sequential_layers_silu(seq: torch.nn.Sequential) -> list[Dense]:
    """Linear, SiLU, ..., Linear -> Dense layers (the hidden ones marked "silu")."""
    layers: list[Dense] = []
    for m in seq:
        if isinstance(m, torch.nn.Linear):
            layers.append(dense(m))
        elif isinstance(m, torch.nn.SiLU) and layers and layers[-1].activation == "identity":
            last = layers.pop()
            layers.append(Dense(last.weight, last.bias, "silu"))
        else:
            raise ValueError(f"the energy MLP's {type(m).__name__} has no C version (Linear and SiLU only)")
    if layers[-1].weight.shape[0] != 1 or layers[-1].activation != "identity":
        raise ValueError("the energy MLP must end in a Linear layer with one output")
    return layers


def noise_actor(steered) -> NoiseActor:
    """A ``SteeredPolicy``'s actor (``MLPActor`` or ``GaussianNoiseActor``)."""
    from policies.steered.modeling_steered import LOG_STD_MAX, LOG_STD_MIN, GaussianNoiseActor

    model = steered.model
    actor = model.actor if isinstance(model, GaussianNoiseActor) else model
    layers = sequential_layers(actor.net)  # ..., Dense(tanh) (the head's tanh fused)
    head = layers[-1]
    if head.activation != "tanh":
        raise ValueError("a steered policy's noise actor must end in tanh")
    return NoiseActor(_array(actor.obs_mean, "obs_mean"), _array(actor.obs_std, "obs_std"), tuple(layers[:-1]),
                      Dense(head.weight, head.bias, "identity"),
                      dense(model.log_std) if isinstance(model, GaussianNoiseActor) else None,
                      LOG_STD_MIN, LOG_STD_MAX, float(steered.config.noise_bound))


def chunked_graph(policy) -> ChunkedGraph:
    """The ``ChunkedGraph`` of a diffusion (MLP denoiser, DDIM), energy (MLP) or steered policy."""
    kind = getattr(policy, "kind", None)
    if kind not in CHUNKED_KINDS:
        raise ValueError(f"not an action-chunk policy C can export: kind {kind!r} (chunked kinds {CHUNKED_KINDS})")
    steer = noise_actor(policy) if kind == "steered" else None
    base = policy.base if kind == "steered" else policy
    if getattr(base.config, "image_shape", None):
        raise ValueError("C export of image-observing policies is not supported (the image encoder runs on a "
                         "companion computer); export with format=onnx")
    if base.kind == "diffusion":
        sampler, initial = diffusion_sampler(base), "normal"
    elif base.kind == "energy":
        sampler = energy_sampler(base)
        initial = {"zeros": "zeros", "uniform": "uniform"}.get(base.config.default_init, "normal")
    else:
        raise ValueError(f"C export of chunked policies covers diffusion and energy bases, not {base.kind!r}")
    m = base.inference_model
    return ChunkedGraph(base.kind, base.obs_dim, base.action_dim, base.n_obs_steps, base.horizon,
                        base.n_action_steps, _array(m.obs_normalizer.offset, "obs offset"),
                        _array(m.obs_normalizer.scale, "obs scale"), _array(m.action_normalizer.offset, "act offset"),
                        _array(m.action_normalizer.scale, "action scale"), initial, sampler, steer)
