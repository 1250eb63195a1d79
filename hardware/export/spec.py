"""What to export from a policy: a torch module, named example inputs and outputs, and which
outputs are recurrent state fed back as inputs on the next step.

Every exporter (ONNX, TorchScript) works on a ``ModuleSpec``; a policy family says what its
spec is by registering a builder for its ``kind``:

    register_module_spec("my_kind", lambda policy: ModuleSpec(...))

Built in: ``mlp`` (``obs (B, obs_dim) -> action (B, action_dim)``; with a position integral
``obs, integral (B, 3) -> action, integral_next (B, 3)``) and ``foundation``
(``obs (B, obs_dim), h (B, H) -> action (B, action_dim), h_next (B, H)``, the GRU hidden state an
explicit input and output).

Diffusion and energy-based policies (``policies.chunked.ChunkedPolicy``) export their network,
not the sampling loop; see ``denoiser_spec`` for how to wire one.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch import nn

from policies.mlp import INTEGRAL_DIM, MLPIntegralStep


@dataclass
class ModuleSpec:
    """A torch module to export and how to call it.

    ``module(*inputs.values())`` returns one tensor or a tuple, named by ``outputs`` in order.
    ``inputs``: name -> example tensor, batch axis first (its values are only examples).
    ``recurrent``: output name -> input name it is fed back into on the next step
    (e.g. ``{"h_next": "h"}``); ``initial_state``: input name -> (D,) value of that input at
    the first step. ``dynamic_batch``: the batch axis of every input and output is symbolic.
    ``metadata`` is stored in the exported file (ONNX ``metadata_props``).
    """

    module: nn.Module
    inputs: dict[str, torch.Tensor]
    outputs: list[str]
    recurrent: dict[str, str] = field(default_factory=dict)
    initial_state: dict[str, torch.Tensor] = field(default_factory=dict)
    dynamic_batch: bool = True
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        for out, inp in self.recurrent.items():
            if out not in self.outputs or inp not in self.inputs:
                raise ValueError(f"recurrent {out!r} -> {inp!r}: {out!r} must be an output ({self.outputs}) and "
                                 f"{inp!r} an input ({list(self.inputs)})")
        for name in self.initial_state:
            if name not in self.recurrent.values():
                raise ValueError(f"initial_state given for {name!r}, which is not a recurrent input")

    @property
    def stepped_inputs(self) -> list[str]:
        """The inputs that are not recurrent state (fed from outside at every step)."""
        return [k for k in self.inputs if k not in self.recurrent.values()]

    def call(self, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """Run the module on named inputs -> outputs in ``self.outputs`` order."""
        with torch.no_grad():
            out = self.module(*(inputs[k] for k in self.inputs))
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(out) != len(self.outputs):
            raise ValueError(f"module returned {len(out)} outputs, spec names {len(self.outputs)}: {self.outputs}")
        return out

    def first_state(self, batch_size: int) -> dict[str, torch.Tensor]:
        """Recurrent inputs at the first step, (B, D) each (zeros where no initial state is given)."""
        state = {}
        for name in self.recurrent.values():
            init = self.initial_state.get(name)
            ex = self.inputs[name]
            state[name] = (init.detach().to(ex.dtype).expand(batch_size, *ex.shape[1:]).clone() if init is not None
                           else torch.zeros(batch_size, *ex.shape[1:], dtype=ex.dtype))
        return state


@contextlib.contextmanager
def tracing_mode(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` in eval mode, no grad, no tracer/deprecation warnings, and torch's fused
    ``nn.TransformerEncoder`` inference fast path off (its ``aten::_transformer_encoder_layer_fwd`` has no
    ONNX or traced form); the module's train/eval mode and the fast path setting are restored after."""
    mha = torch.backends.mha
    fastpath, training = mha.get_fastpath_enabled(), module.training
    mha.set_fastpath_enabled(False)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            yield module.eval()
    finally:
        mha.set_fastpath_enabled(fastpath)
        module.train(training)


SpecBuilder = Callable[[object], ModuleSpec]
_SPECS: dict[str, SpecBuilder] = {}


def register_module_spec(kind: str, builder: SpecBuilder) -> None:
    """Tell the exporters how to export policies of ``kind`` (``builder(policy) -> ModuleSpec``)."""
    _SPECS[kind] = builder


def exportable_kinds() -> list[str]:
    return sorted(_SPECS)


def module_spec(policy) -> ModuleSpec:
    """The ``ModuleSpec`` of a policy, chosen by ``policy.kind``."""
    kind = getattr(policy, "kind", None)
    if kind not in _SPECS:
        raise ValueError(f"no export spec for policy kind {kind!r}; exportable kinds: {exportable_kinds()}. "
                         "Register one with hardware.export.register_module_spec(kind, builder) "
                         "(for diffusion/energy policies build it with hardware.export.denoiser_spec)")
    return _SPECS[kind](policy)


def _example_obs(policy, batch_size: int = 2) -> torch.Tensor:
    return torch.zeros(batch_size, policy.obs_dim, dtype=torch.float32)


def mlp_spec(policy) -> ModuleSpec:
    """``MLPPolicy``: obs (B, obs_dim) -> action (B, action_dim); normalization is inside the module.

    With a position integral (``config.position_integral`` > 0): obs (B, obs_dim), integral (B, 3) m s ->
    action (B, action_dim), integral_next (B, 3) m s, the integral an explicit input and output as a GRU's hidden
    state (``policies.mlp.MLPIntegralStep``). Start with ``integral = 0`` and feed ``integral_next`` back at the
    next step; the clip (m s) and the period (s) are metadata ``position_integral`` and ``integral_dt``."""
    model = policy.model.eval()
    metadata = {"policy_kind": policy.kind, "obs_dim": str(policy.obs_dim), "action_dim": str(policy.action_dim)}
    if not policy.config.position_integral > 0:
        return ModuleSpec(model, {"obs": _example_obs(policy)}, ["action"], metadata=metadata)
    c, zero = policy.config, torch.zeros(INTEGRAL_DIM)
    inputs = {"obs": _example_obs(policy), "integral": zero.expand(2, -1).clone()}
    return ModuleSpec(MLPIntegralStep(model).eval(), inputs, ["action", "integral_next"],
                      recurrent={"integral_next": "integral"}, initial_state={"integral": zero},
                      metadata={**metadata, "position_integral": f"{c.position_integral:.9g}",
                                "integral_dt": f"{c.integral_dt:.9g}"})


def foundation_spec(policy) -> ModuleSpec:
    """``FoundationPolicy``: obs (B, obs_dim), h (B, H) -> action (B, action_dim), h_next (B, H).

    Start with ``h = initial_hidden`` (stored as ONNX metadata ``initial_hidden``, comma-separated)
    and feed ``h_next`` back as ``h`` at the next step."""
    model = policy.model.eval()
    h0 = model.initial_hidden.detach().float()
    return ModuleSpec(model, {"obs": _example_obs(policy), "h": h0.expand(2, -1).clone()}, ["action", "h_next"],
                      recurrent={"h_next": "h"}, initial_state={"h": h0},
                      metadata={"policy_kind": policy.kind, "obs_dim": str(policy.obs_dim),
                                "action_dim": str(policy.action_dim),
                                "initial_hidden": ",".join(f"{v:.9g}" for v in h0.tolist())})


def denoiser_spec(network: nn.Module, horizon: int, action_dim: int, cond_dim: int,
                  timestep_dtype: torch.dtype = torch.int64, metadata: dict[str, str] | None = None) -> ModuleSpec:
    """Spec of a diffusion policy's denoiser: ``network(noisy_actions, timestep, global_cond) -> noise``.

    Shapes: noisy_actions (B, horizon, action_dim) float32 (normalized action space), timestep (B,)
    ``timestep_dtype``, global_cond (B, cond_dim) float32 (the flattened, normalized features of the
    last ``n_obs_steps`` observations, Diffusion Policy's ``global_cond``) -> predicted noise
    (B, horizon, action_dim) (the clean sample for ``prediction_type="sample"``).

    Wiring the ``diffusion`` branch's ``DiffusionPolicy`` (its ``ConditionalUnet1d.forward(x, t, cond)``
    has exactly this signature)::

        def diffusion_spec(policy):
            model, c = policy.inference_model, policy.config          # EMA weights
            cond_dim = c.obs_feature_dim * c.n_obs_steps              # state (+ image features) per step
            return denoiser_spec(model.denoiser, c.horizon, c.action_dim, cond_dim, metadata={
                "policy_kind": policy.kind, "inference_scheduler": c.inference_scheduler,
                "num_inference_steps": str(c.num_inference_steps), "num_train_timesteps": str(c.num_train_timesteps),
                "beta_schedule": c.beta_schedule, "prediction_type": c.prediction_type,
                "n_obs_steps": str(c.n_obs_steps), "n_action_steps": str(c.n_action_steps)})
        register_module_spec("diffusion", diffusion_spec)

    Then ``export_onnx(policy, path)`` and ``robo export format=onnx|torchscript`` work for it; C export
    refuses it (``c_graph`` raises). The sampling loop stays outside the graph; with onnxruntime,
    mirroring ``DiffusionPolicy.predict_chunk``::

        cond = policy.inference_model.condition(obs_history)          # normalize + flatten (B, cond_dim)
        x = noise                                                    # (B, horizon, action_dim) ~ N(0, I)
        scheduler = policy.make_inference_scheduler()                # diffusers DDIM / DPM-Solver, timesteps set
        for t in scheduler.timesteps:
            eps = ort_session.run(["noise"], {"noisy_actions": x, "timestep": t.expand(B), "global_cond": cond})[0]
            x = scheduler.step(torch.as_tensor(eps), t, x).prev_sample
        actions = policy.inference_model.action_normalizer.unnormalize(x)
        execute actions[:, n_obs_steps - 1 : n_obs_steps - 1 + n_action_steps]

    Checked against the diffusion branch's default U-Net: the ONNX denoiser matched torch to 1e-6 and
    the 10-step DDIM loop above matched ``predict_chunk`` to 5e-6. For image policies add the image
    encoder as a second spec (``image (B, 3, H, W) -> features``), or wrap ``condition`` and the U-Net
    in one module taking the raw observation history.

    Energy-based policies export their energy network with ``ModuleSpec`` directly, e.g. the energy
    branch's ``EnergyTransformer.forward(obs_n, chunk) -> energy (B,)``::

        ModuleSpec(policy.model, {"obs_n": (B, n_obs_steps, obs_dim), "chunk": (B, horizon, action_dim)},
                   ["energy"])  # inputs normalized; its TransformerEncoder exports (fast path off while tracing)

    Implicit BC's derivative-free optimizer needs only energies, so its sampling loop runs around the
    exported network. Gradient-descent inference (EBT's ``descend``) needs dE/d(chunk): tracing
    ``torch.autograd.grad`` fails in ``torch.onnx.export(dynamo=False)`` and ``torch.jit.trace``, so
    such a policy deploys with torch (or is distilled into an MLP/GRU student, which exports to C).
    """
    b = 2
    inputs = {"noisy_actions": torch.zeros(b, horizon, action_dim),
              "timestep": torch.zeros(b, dtype=timestep_dtype),
              "global_cond": torch.zeros(b, cond_dim)}
    meta = {"horizon": str(horizon), "action_dim": str(action_dim), "cond_dim": str(cond_dim), **(metadata or {})}
    return ModuleSpec(network.eval(), inputs, ["noise"], metadata=meta)


register_module_spec("mlp", mlp_spec)
register_module_spec("foundation", foundation_spec)
