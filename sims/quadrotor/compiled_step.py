"""The fused RK4 step (``step_backend="compiled"``): ``torch.compile`` of ``dynamics.rk4_step``.

The same Python model as ``step_backend="torch"`` (no second copy of the physics), traced whole by TorchDynamo
(``fullgraph=True``) and compiled by TorchInductor into fused kernels instead of the hundreds of small ones the
eager step launches: on the CPU one C++ kernel (inductor's C++ backend, which needs a C++ compiler), on CUDA
Triton kernels (the CUDA test is written but not yet run on a GPU). Results match the eager step to float32
rounding (inductor may reorder a sum or fuse a multiply-add; ``tests/sims/test_compiled_step.py``).

``compiled_rk4_step(device_type)`` is the compiled function, one per process and device type (a cached factory).
It is compiled with ``dynamic=False``: a simulator's batch size is fixed, so every batch size, dtype and device is
a graph of its own, compiled on its first call (``warm_up``) and kept for the process (TorchDynamo's
``recompile_limit``, 8 by default, bounds the graphs of one function; past it, steps run eagerly with
TorchDynamo's warning). A step without a world force is given zeros (``zero_force``): adding 0.0 leaves every
force unchanged, and one graph serves both cases. Inputs with other strides than the last call's (a transposed
parameter tensor, an expanded action) compile again, so ``BatchedQuadrotorSim`` passes contiguous tensors.

Compiling takes time: on this project's loaded 2-core CPU, 15 to 30 s per graph the first time (most of it
inductor's Python code generation; the first graph of a process also imports TorchInductor, about 5 s), 1 to 2 s
when inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``, default ``/tmp/torchinductor_<user>``) already holds
it. On the CPU the C++ kernel is compiled without explicit SIMD (``cpp.vec_isa_ok=False``, an option of this
compile only): inductor's vectorizer took 2 to 3 times as long to compile this graph (over a minute here) and
its kernel was no faster.

No CUDA graphs (``mode="reduce-overhead"``): a replay writes its output into the same static buffer every step,
but callers keep earlier states (rollouts stack them, a task reads ``sim.state`` after stepping) and
``BatchedQuadrotorSim.reset`` writes into the state in place, so every output would need a copy; with the step
fused into a handful of kernels the launches they would save are few.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from .dynamics import ACTION_DIM, ParamsBatch, hover_state, rk4_step

__all__ = ["CompileFailed", "compiled_rk4_step", "warm_up", "zero_force"]

# per-compile inductor options by device type (torch.compile's ``options``; inductor's global config is untouched)
_OPTIONS: dict[str, dict] = {"cpu": {"cpp.vec_isa_ok": False}}


class CompileFailed(RuntimeError):
    """``torch.compile`` could not build the step on this machine (no C++ compiler, no Triton, ...)."""


@functools.cache
def compiled_rk4_step(device_type: str) -> Callable:
    """``torch.compile(rk4_step)`` for tensors on ``device_type`` ("cpu", "cuda", ...), one per process.

    Same signature and results (to float32 rounding) as ``rk4_step``: ``(state (B, 17), action (B, 4),
    params, external_force (B, 3) or None) -> (B, 17)``. Compiles lazily, per batch size, dtype and device.
    """
    return torch.compile(rk4_step, dynamic=False, fullgraph=True, options=_OPTIONS.get(device_type))


def zero_force(params: ParamsBatch) -> torch.Tensor:
    """(B, 3) zeros of ``params``' dtype and device: the world force of a step without one."""
    return torch.zeros(params.batch_size, 3, dtype=params.mass.dtype, device=params.mass.device)


def warm_up(params: ParamsBatch) -> Callable:
    """``compiled_rk4_step`` for ``params``' device, compiled for their batch size and dtype by one step from
    hover (with ``zero_force``); raises ``CompileFailed`` (one line) where torch.compile cannot build it."""
    device = params.mass.device
    try:
        fn = compiled_rk4_step(device.type)
        action = torch.zeros(params.batch_size, ACTION_DIM, dtype=params.mass.dtype, device=device)
        fn(hover_state(params), action, params, zero_force(params))
    except Exception as e:  # noqa: BLE001 (the inputs are valid: whatever fails here is the toolchain)
        cause = e
        while cause.__cause__ is not None:  # TorchDynamo wraps the backend's error: name the innermost
            cause = cause.__cause__
        lines = str(cause).strip().splitlines()
        raise CompileFailed(f"torch.compile of the RK4 step failed on {device} ({type(cause).__name__}: "
                            f"{lines[0][:200] if lines else 'no message'})") from e
    return fn
