"""The layer list that C code is generated from: MLP and GRU policies as plain float32 arrays.

A ``CGraph`` is a chain ``obs -> layer -> ... -> action``. Layers: ``Integrator`` (appends the clipped
integral of the position error x[0:3], a position-integral MLP's state), ``Normalize`` ((x - mean) / std,
elementwise, as torch computes it), ``Dense`` (W x + b then an activation), ``GRU`` (torch's
``GRUCell``) and ``Clip``. The states of ``Integrator`` and ``GRU`` layers live in the caller's state struct.
A policy family that C can export registers a builder with ``register_c_graph(kind, builder)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from policies.mlp import INTEGRAL_DIM

C_ACTIVATIONS = ("identity", "relu", "tanh")


def _array(t: torch.Tensor | np.ndarray, name: str) -> np.ndarray:
    a = np.ascontiguousarray(t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t, dtype=np.float32)
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or inf; cannot export it")
    return a


@dataclass(frozen=True)
class Normalize:
    mean: np.ndarray  # (D,)
    std: np.ndarray  # (D,)


@dataclass(frozen=True)
class Dense:
    weight: np.ndarray  # (out, in)
    bias: np.ndarray  # (out,)
    activation: str = "identity"


@dataclass(frozen=True)
class GRU:
    weight_ih: np.ndarray  # (3H, in), gates (r, z, n)
    weight_hh: np.ndarray  # (3H, H)
    bias_ih: np.ndarray  # (3H,)
    bias_hh: np.ndarray  # (3H,)
    initial_hidden: np.ndarray  # (H,)

    @property
    def hidden_dim(self) -> int:
        return self.weight_hh.shape[1]


@dataclass(frozen=True)
class Clip:
    low: float
    high: float


@dataclass(frozen=True)
class Integrator:
    """``y = [x, I]`` (in + 3,), then ``I <- clip(I + dt * x[0:3], -limit, limit)``; ``I`` (3,) m s starts at 0.

    ``policies.mlp``'s position integral: x[0:3] is the position error (m), ``limit`` m s, ``dt`` s."""

    limit: float
    dt: float

    def __post_init__(self):
        if not (self.limit > 0 and self.dt > 0):
            raise ValueError(f"Integrator needs limit > 0 (m s) and dt > 0 (s), got limit={self.limit}, dt={self.dt}")


Layer = Normalize | Dense | GRU | Clip | Integrator


def out_dim(layer: Layer, in_dim: int) -> int:
    if isinstance(layer, Dense):
        return layer.weight.shape[0]
    if isinstance(layer, GRU):
        return layer.hidden_dim
    if isinstance(layer, Integrator):
        return in_dim + INTEGRAL_DIM
    return in_dim


@dataclass(frozen=True)
class CGraph:
    """``obs (obs_dim,) -> layers -> action (action_dim,)``; ``kind`` names the policy family."""

    kind: str
    obs_dim: int
    layers: tuple[Layer, ...]

    def __post_init__(self):
        d = self.obs_dim
        for i, layer in enumerate(self.layers):
            expect = {Dense: lambda lr: lr.weight.shape[1], GRU: lambda lr: lr.weight_ih.shape[1],
                      Normalize: lambda lr: lr.mean.shape[0]}.get(type(layer))
            if expect is not None and expect(layer) != d:
                raise ValueError(f"layer {i} ({type(layer).__name__}) takes {expect(layer)} inputs, gets {d}")
            if isinstance(layer, Integrator) and d < INTEGRAL_DIM:
                raise ValueError(f"layer {i} (Integrator) integrates inputs 0:3, gets {d} inputs")
            if isinstance(layer, Dense) and layer.activation not in C_ACTIVATIONS:
                raise ValueError(f"layer {i}: activation {layer.activation!r} has no C version; use {C_ACTIVATIONS}")
            d = out_dim(layer, d)

    @property
    def action_dim(self) -> int:
        d = self.obs_dim
        for layer in self.layers:
            d = out_dim(layer, d)
        return d

    @property
    def num_floats(self) -> int:
        """Floats stored in the generated source (weights, biases, stats, initial states)."""
        n = 0
        for layer in self.layers:
            if isinstance(layer, (Normalize, Dense, GRU)):
                n += sum(getattr(layer, f).size for f in layer.__dataclass_fields__ if f != "activation")
        return n


def dense(linear: nn.Linear, activation: str = "identity") -> Dense:
    b = linear.bias if linear.bias is not None else torch.zeros(linear.out_features)
    return Dense(_array(linear.weight, "weight"), _array(b, "bias"), activation)


def gru(cell: nn.GRUCell, initial_hidden: torch.Tensor | None = None) -> GRU:
    h = cell.hidden_size
    h0 = initial_hidden if initial_hidden is not None else torch.zeros(h)
    zeros = torch.zeros(3 * h)
    return GRU(_array(cell.weight_ih, "weight_ih"), _array(cell.weight_hh, "weight_hh"),
               _array(cell.bias_ih if cell.bias_ih is not None else zeros, "bias_ih"),
               _array(cell.bias_hh if cell.bias_hh is not None else zeros, "bias_hh"), _array(h0, "initial_hidden"))


_ACTIVATION_MODULES = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Identity: "identity"}


def sequential_layers(seq: nn.Sequential) -> list[Layer]:
    """Linear and activation modules of a ``Sequential`` -> Dense layers (activations fused)."""
    layers: list[Layer] = []
    for m in seq:
        if isinstance(m, nn.Linear):
            layers.append(dense(m))
        elif type(m) in _ACTIVATION_MODULES:
            act = _ACTIVATION_MODULES[type(m)]
            if layers and isinstance(layers[-1], Dense) and layers[-1].activation == "identity":
                last = layers.pop()
                layers.append(Dense(last.weight, last.bias, act))
            elif act != "identity":
                raise ValueError(f"activation {type(m).__name__} must follow a Linear layer for C export")
        else:
            raise ValueError(f"module {type(m).__name__} has no C version (C export supports Linear, ReLU, Tanh)")
    return layers


def _activation_name(module: nn.Module) -> str:
    if type(module) not in _ACTIVATION_MODULES:
        raise ValueError(f"activation {type(module).__name__} has no C version")
    return _ACTIVATION_MODULES[type(module)]


def mlp_graph(policy) -> CGraph:
    """``MLPPolicy``: [Integrator (with a position integral)] -> Normalize (when not identity) -> Dense ...
    -> [tanh | clip].

    The normalization stays a separate ``(x - mean) / std`` step, as torch computes it, rather than
    being multiplied into the first layer: folding divides weights by small stds and subtracts large
    ``W mean / std`` biases, which loses float32 digits (and parity) exactly for badly scaled inputs."""
    m, c = policy.model, policy.config
    layers: list[Layer] = []
    if c.position_integral > 0:
        layers.append(Integrator(float(c.position_integral), float(c.integral_dt)))
    mean, std = _array(m.obs_mean, "obs_mean"), _array(m.obs_std, "obs_std")
    if np.any(mean != 0) or np.any(std != 1):
        layers.append(Normalize(mean, std))
    layers += sequential_layers(m.net)
    if m.config.squash == "clip":
        layers.append(Clip(-1.0, 1.0))
    return CGraph(policy.kind, policy.obs_dim, tuple(layers))


def foundation_graph(policy) -> CGraph:
    """``FoundationPolicy``: Dense(act) -> GRU -> Dense(act) -> [clip]."""
    m = policy.model
    layers: list[Layer] = [dense(m.input_layer, _activation_name(m.input_activation)),
                           gru(m.gru, m.initial_hidden),
                           dense(m.output_layer, _activation_name(m.output_activation))]
    if m.config.clip_actions:
        layers.append(Clip(-1.0, 1.0))
    return CGraph(policy.kind, policy.obs_dim, tuple(layers))


_GRAPHS: dict[str, Callable[[object], CGraph]] = {"mlp": mlp_graph, "foundation": foundation_graph}


def register_c_graph(kind: str, builder: Callable[[object], CGraph]) -> None:
    """Let C export handle policies of ``kind`` (``builder(policy) -> CGraph``)."""
    _GRAPHS[kind] = builder


def c_exportable_kinds() -> list[str]:
    return sorted(_GRAPHS)


def c_graph(policy) -> CGraph:
    """The ``CGraph`` of an MLP or GRU policy; other kinds raise a ``ValueError`` saying what to do."""
    kind = getattr(policy, "kind", None)
    if kind not in _GRAPHS:
        raise ValueError(f"C export supports MLP and GRU policies (kinds {c_exportable_kinds()}) and action-chunk "
                         f"policies (export_c), not {kind!r}; export this policy with format=onnx or "
                         "format=torchscript instead")
    return _GRAPHS[kind](policy)
