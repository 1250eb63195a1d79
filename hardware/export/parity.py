"""Does an exported artifact compute what the torch module computes? Max absolute differences
on random batches and over multi-step rollouts that carry the recurrent state.

Over a long rollout a recurrent state accumulates float32 rounding, and two correct float32 programs that order
their sums differently drift apart by up to about twice what either drifts from exact arithmetic. So a rollout
also runs a float64 copy of the torch module: each output may differ from torch by ``atol`` or by twice torch
float32's own drift from float64 on that rollout, whichever is larger (``ParityReport.float32_drift``)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .spec import ModuleSpec

# runner(named numpy inputs) -> outputs as numpy arrays, in spec.outputs order
Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


@dataclass
class ParityReport:
    """``max_abs_diff`` over every check and output; ``per_output``: name -> max abs diff; ``float32_drift``:
    name -> max abs diff of torch float32 from torch float64 over the rollouts (empty without one).
    ``passed``: every output within ``allowed(name)`` = max(atol, 2 x its float32 drift), and within ``atol`` on
    the one-call checks (``strict``: name -> their max abs diff), which carry no state to drift."""

    atol: float
    per_output: dict[str, float] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    float32_drift: dict[str, float] = field(default_factory=dict)
    strict: dict[str, float] = field(default_factory=dict)

    @property
    def max_abs_diff(self) -> float:
        return max(self.per_output.values(), default=0.0)

    def allowed(self, name: str) -> float:
        return max(self.atol, 2.0 * self.float32_drift.get(name, 0.0))

    def failures(self) -> list[str]:
        """Each output over its bound, as ``"<name> by <diff> > <bound>"``; empty when the export passes."""
        return ([f"{k} by {v:.3g} > {self.allowed(k):.3g}" for k, v in self.per_output.items() if v > self.allowed(k)]
                + [f"{k} by {v:.3g} in one call" for k, v in self.strict.items() if v > self.atol])

    @property
    def passed(self) -> bool:
        return not self.failures()

    def add(self, name: str, reference: np.ndarray, candidate: np.ndarray, strict: bool = False) -> None:
        reference, candidate = np.asarray(reference), np.asarray(candidate)
        if reference.shape != candidate.shape:
            raise ValueError(f"output {name!r} has shape {candidate.shape}, torch gives {reference.shape}")
        diff = float(np.max(np.abs(reference.astype(np.float64) - candidate.astype(np.float64)), initial=0.0))
        if not np.isfinite(diff):
            diff = float("inf")
        self.per_output[name] = max(self.per_output.get(name, 0.0), diff)
        if strict:
            self.strict[name] = max(self.strict.get(name, 0.0), diff)

    def merge(self, other: "ParityReport") -> "ParityReport":
        for k, v in other.per_output.items():
            self.per_output[k] = max(self.per_output.get(k, 0.0), v)
        for mine, theirs in ((self.float32_drift, other.float32_drift), (self.strict, other.strict)):
            for k, v in theirs.items():
                mine[k] = max(mine.get(k, 0.0), v)
        self.checks += other.checks
        return self

    def as_dict(self) -> dict:
        return {"max_abs_diff": self.max_abs_diff, "per_output": dict(self.per_output), "atol": self.atol,
                "float32_drift": dict(self.float32_drift), "strict": dict(self.strict),
                "allowed": {k: self.allowed(k) for k in self.per_output}, "passed": self.passed,
                "failures": self.failures(),
                "checks": list(self.checks)}


def random_inputs(spec: ModuleSpec, batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random inputs shaped like the spec's examples: N(0, 1) floats, integers in [0, 100)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, ex in spec.inputs.items():
        shape = (batch_size, *ex.shape[1:])
        out[name] = (torch.randn(shape, generator=g, dtype=ex.dtype) if ex.dtype.is_floating_point
                     else torch.randint(0, 100, shape, generator=g, dtype=ex.dtype))
    return out


def observation_sequence(steps: int, obs_dim: int, seed: int = 0, batch_size: int | None = None) -> np.ndarray:
    """A deterministic, smooth observation sequence (T, obs_dim) (or (T, B, obs_dim)) float32:
    an AR(1) process with unit stationary variance, so recurrent state sees correlated inputs."""
    rng = np.random.default_rng(seed)
    shape = (obs_dim,) if batch_size is None else (batch_size, obs_dim)
    x = rng.standard_normal(shape)
    seq = np.empty((steps, *shape), dtype=np.float32)
    for t in range(steps):
        x = 0.9 * x + np.sqrt(1 - 0.81) * rng.standard_normal(shape)
        seq[t] = x
    return seq


def compare_once(spec: ModuleSpec, runner: Runner, inputs: dict[str, torch.Tensor], atol: float) -> ParityReport:
    """One call of torch and of the runner on the same named inputs."""
    ref = spec.call(inputs)
    got = runner({k: v.numpy() for k, v in inputs.items()})
    report = ParityReport(atol, checks=[f"one call, batch {next(iter(inputs.values())).shape[0]}"])
    for name, r, c in zip(spec.outputs, ref, got):
        report.add(name, r.numpy(), c, strict=True)
    return report


def float64_spec(spec: ModuleSpec) -> ModuleSpec | None:
    """A float64 copy of ``spec`` (module and floating inputs), or None where the module cannot run in float64."""
    try:
        module = copy.deepcopy(spec.module).double()
    except (RuntimeError, TypeError, copy.Error):
        return None
    as64 = lambda t: t.double() if t.dtype.is_floating_point else t  # noqa: E731
    return ModuleSpec(module, {k: as64(v) for k, v in spec.inputs.items()}, list(spec.outputs), dict(spec.recurrent),
                      {k: as64(v) for k, v in spec.initial_state.items()}, spec.dynamic_batch, dict(spec.metadata))


def _rollout_outputs(spec: ModuleSpec, sequence: torch.Tensor) -> list[dict[str, np.ndarray]]:
    """Torch's outputs at each step of ``sequence`` (T, B, ...), carrying the recurrent state."""
    stepped, state, outs = spec.stepped_inputs[0], spec.first_state(sequence.shape[1]), []
    for t in range(sequence.shape[0]):
        out = dict(zip(spec.outputs, spec.call({stepped: sequence[t], **state})))
        outs.append({k: v.numpy() for k, v in out.items()})
        state = {inp: out[o] for o, inp in spec.recurrent.items()}
    return outs


def compare_rollout(spec: ModuleSpec, runner: Runner, sequence: np.ndarray, atol: float) -> ParityReport:
    """Feed ``sequence`` (T, B, ...) as the single stepped input for T steps, each side carrying its own
    recurrent state from ``spec.initial_state``; compare every output at every step. Also measures torch
    float32's drift from a float64 copy on the same rollout (the report's ``float32_drift``)."""
    stepped = spec.stepped_inputs
    if len(stepped) != 1:
        raise ValueError(f"a rollout needs exactly one stepped input, the spec has {stepped}")
    seq = torch.as_tensor(sequence, dtype=spec.inputs[stepped[0]].dtype)
    reference = _rollout_outputs(spec, seq)
    got_state = {k: v.numpy() for k, v in spec.first_state(seq.shape[1]).items()}
    report = ParityReport(atol, checks=[f"rollout, {seq.shape[0]} steps, batch {seq.shape[1]}"])
    for t, ref in enumerate(reference):
        got = dict(zip(spec.outputs, runner({stepped[0]: seq[t].numpy(), **got_state})))
        for name in spec.outputs:
            report.add(name, ref[name], got[name])
        got_state = {inp: np.asarray(got[out]) for out, inp in spec.recurrent.items()}
    spec64 = float64_spec(spec) if seq.dtype == torch.float32 else None
    if spec64 is not None:
        exact = ParityReport(atol)
        for ref, ref64 in zip(reference, _rollout_outputs(spec64, seq.double())):
            for name in spec.outputs:
                exact.add(name, ref64[name], ref[name])
        report.float32_drift = dict(exact.per_output)
        report.checks.append("torch float32 vs float64 on that rollout")
    return report


def verify(spec: ModuleSpec, runner: Runner, atol: float = 1e-5, batch_size: int = 8, steps: int = 100,
           seed: int = 0) -> ParityReport:
    """Random-input parity (all inputs random, state included) and, for recurrent specs with one stepped
    input, a ``steps``-step rollout on ``observation_sequence``."""
    report = compare_once(spec, runner, random_inputs(spec, batch_size, seed), atol)
    if spec.recurrent and len(spec.stepped_inputs) == 1:
        ex = spec.inputs[spec.stepped_inputs[0]]
        if ex.ndim == 2:
            seq = observation_sequence(steps, ex.shape[1], seed, batch_size=batch_size)
            report.merge(compare_rollout(spec, runner, seq, atol))
    return report


def reference_rollout(spec: ModuleSpec, sequence: np.ndarray) -> np.ndarray:
    """Torch's first output at each step for ``sequence`` (T, B, ...) (or (T, ...) for batch 1, the
    result then (T, ...)), carrying the recurrent state from ``spec.initial_state``."""
    seq = np.asarray(sequence)
    stepped = spec.stepped_inputs[0]
    single = seq.ndim == spec.inputs[stepped].ndim
    x = torch.as_tensor(seq[:, None] if single else seq, dtype=spec.inputs[stepped].dtype)
    outs = np.stack([out[spec.outputs[0]] for out in _rollout_outputs(spec, x)])
    return outs[:, 0] if single else outs
