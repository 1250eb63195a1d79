"""The batched ("Isaac-style") quadrotor simulator: one call steps B quadrotors."""

from __future__ import annotations

import warnings

import torch

from .c_compile import CompilerNotFound
from .compiled_step import CompileFailed, warm_up, zero_force
from .dynamics import STATE_DIM, ParamsBatch, check_action, hover_state, rk4_step

STEP_BACKENDS = ("torch", "c", "compiled")

__all__ = ["STEP_BACKENDS", "BatchedQuadrotorSim", "check_action"]


def _c_step(params: ParamsBatch):
    """The compiled step for ``params``' dtype, or None (with a warning) when no C compiler is found."""
    from .c_step import CStep  # compiles on first use

    if params.mass.device.type != "cpu":
        raise ValueError(f"step_backend='c' runs on CPU tensors, params are on {params.mass.device}; "
                         "use step_backend='torch' on other devices")
    try:
        return CStep(params.mass.dtype)
    except CompilerNotFound as e:
        warnings.warn(f"{e}; stepping with step_backend='torch' instead", RuntimeWarning, stacklevel=3)
        return None


def _compiled_step(params: ParamsBatch):
    """``torch.compile(rk4_step)``, compiled now for ``params``, or None (with a warning) when it cannot be built."""
    try:
        return warm_up(params)
    except CompileFailed as e:
        warnings.warn(f"{e}; stepping with step_backend='torch' instead", RuntimeWarning, stacklevel=3)
        return None


class BatchedQuadrotorSim:
    """B quadrotors, each with its own parameters, stepped together with RK4.

    Args:
        params: per-environment parameters (``ParamsBatch``, batch size B).
        step_backend: ``"torch"`` (``rk4_step``, any device), ``"c"`` (``c_step.CStep``: the same model
            compiled with the host's C compiler, CPU only, float32 or float64; on one core 5x faster than
            torch at B = 16384, 16x at B = 1024, 150x at B = 1, see ``benchmarks/sim_throughput.py``) or
            ``"compiled"`` (``compiled_step``: ``torch.compile`` of ``rk4_step``, any device: a few fused kernels
            per step, Triton on CUDA; on one CPU core 1.5x torch at B = 16384, 3x at B = 1024, 5x at B = 1;
            compiled here for this batch size, dtype and device: 15 to 30 s on a small CPU the first time,
            seconds from inductor's on-disk cache). Without a C compiler ``"c"`` warns and steps with torch; so
            does ``"compiled"`` where torch.compile cannot build the step (no C++ compiler, no Triton).
        device: move ``params`` there first (default: stay on their device); state and time live on it.

    Attributes:
        state: (B, 17) current states, layout in ``sims.quadrotor.dynamics``; every step makes a new tensor.
        time: (B,) seconds since each environment's last reset.
        external_force: (B, 3) world-frame force, N, added on every step, or None.
    """

    def __init__(self, params: ParamsBatch, step_backend: str = "torch", device: str | torch.device | None = None):
        if step_backend not in STEP_BACKENDS:
            raise ValueError(f"unknown step_backend {step_backend!r}; choose one of {list(STEP_BACKENDS)}")
        if device is not None:
            params = params.to(device=device)
        self.params = params
        self._c = _c_step(params) if step_backend == "c" else None
        self._compiled = _compiled_step(params) if step_backend == "compiled" else None
        self.step_backend = "c" if self._c is not None else "compiled" if self._compiled is not None else "torch"
        self.state = hover_state(params)
        self.time = torch.zeros(params.batch_size, dtype=params.mass.dtype, device=params.mass.device)
        self.external_force: torch.Tensor | None = None  # (B, 3) world frame, N
        self._zero_force = zero_force(params) if self._compiled is not None else None

    @property
    def batch_size(self) -> int:
        return self.params.batch_size

    @property
    def dt(self) -> float:
        return self.params.dt

    def set_params(self, params: ParamsBatch) -> None:
        if params.batch_size != self.batch_size:
            raise ValueError(f"params have batch size {params.batch_size}, simulator has {self.batch_size}")
        self.params = params

    def reset(self, state: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Set the state of all environments, or of those where ``mask`` (B,) bool is true.

        ``state`` is (B, 17), or (mask.sum(), 17) when a mask is given.
        """
        if mask is None:
            if state.shape != (self.batch_size, STATE_DIM):
                raise ValueError(f"state has shape {tuple(state.shape)}, expected ({self.batch_size}, {STATE_DIM})")
            self.state = state.to(self.state.dtype).clone()
            self.time.zero_()
        else:
            self.state[mask] = state.to(self.state.dtype)
            self.time[mask] = 0.0

    def step(self, action: torch.Tensor, validate: bool = True) -> torch.Tensor:
        """Advance every environment by ``dt`` under actions (B, 4) in [-1, 1]; returns the new state.

        ``validate`` checks the action's shape and finiteness first (in C, nearly free, with ``step_backend='c'``;
        outside the compiled graph with ``step_backend='compiled'``)."""
        if self._c is not None:
            self.state = self._c(self.state, action, self.params, self.external_force, self.time, validate)
            return self.state
        if validate:
            check_action(action, self.batch_size)
        if self._compiled is not None:
            self.state = self._compiled(self.state.contiguous(), action.to(self.state.dtype).contiguous(),
                                        self.params, self._force())
        else:
            self.state = rk4_step(self.state, action.to(self.state.dtype), self.params, self.external_force)
        self.time += self.dt
        return self.state

    def _force(self) -> torch.Tensor:
        """The compiled step's (B, 3) world force: ``external_force`` (checked, contiguous, the state's dtype) or
        zeros, so that one compiled graph serves both."""
        f = self.external_force
        if f is None:
            return self._zero_force
        if f.shape != (self.batch_size, 3):
            raise ValueError(f"external_force has shape {tuple(f.shape)}, expected ({self.batch_size}, 3)")
        return f.to(self.state.dtype).contiguous()
