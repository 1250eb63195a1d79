"""The compiled RK4 step: ``rk4_step``'s model in C (``rk4_step.c``), called on torch's CPU buffers.

``c_rk4_step`` has ``rk4_step``'s signature and results (to floating-point rounding, float32 or
float64); ``CStep`` is the per-simulator form that keeps the parameter pointers between calls, so
a step at B = 1 costs a few microseconds of Python. The library is compiled at first use with the
host's C compiler (``gcc -O3 -march=native``, cached, see ``c_compile``); CPU tensors only.
"""

from __future__ import annotations

import ctypes
import operator
from pathlib import Path

import torch

from .c_compile import shared_library
from .dynamics import ACTION_DIM, STATE_DIM, ParamsBatch, check_action

SOURCE = Path(__file__).with_name("rk4_step.c")
# C type and block width (environments per vectorized block: one AVX-512 register, two AVX2 ones)
_C_TYPES = {torch.float32: ("float", 16), torch.float64: ("double", 8)}
# the order of the C parameter table (rk4_step.c: MASS ... GRAVITY)
PARAM_FIELDS = ("mass", "inertia", "inertia_inv", "mixer", "thrust_curve", "tau_rising", "tau_falling", "gravity")
PARAM_SIZES = {"mass": 1, "inertia": 9, "inertia_inv": 9, "mixer": 24, "thrust_curve": 12, "tau_rising": 4,
               "tau_falling": 4, "gravity": 3}  # values per environment
_get_fields = operator.attrgetter(*PARAM_FIELDS)
_functions: dict[torch.dtype, ctypes._CFuncPtr] = {}


def c_function(dtype: torch.dtype):
    """The ctypes function ``robo_rk4_step`` for ``dtype`` (float32 or float64), compiled on first use."""
    fn = _functions.get(dtype)
    if fn is None:
        if dtype not in _C_TYPES:
            raise ValueError(f"the C step supports float32 and float64, got {dtype}; use step_backend='torch'")
        real, lanes = _C_TYPES[dtype]
        fn = ctypes.CDLL(str(shared_library(SOURCE, {"REAL": real, "LANES": str(lanes)}))).robo_rk4_step
        fn.restype = ctypes.c_long
        fn.argtypes = [ctypes.c_long, ctypes.c_double, *[ctypes.c_void_p] * 6, ctypes.c_int]
        _functions[dtype] = fn
    return fn


def _cpu(x: torch.Tensor, dtype: torch.dtype, name: str) -> torch.Tensor:
    """``x`` as a contiguous CPU tensor of ``dtype`` (no copy when it already is one)."""
    if x.device.type != "cpu":
        raise ValueError(f"the C step runs on CPU tensors, {name} is on {x.device}; use step_backend='torch'")
    return x if x.dtype == dtype and x.is_contiguous() else x.to(dtype).contiguous()


class CStep:
    """``rk4_step`` in C for one simulator's tensors (float32 or float64, CPU).

    Parameter tensors that are contiguous and of the state's dtype are read in place, so in-place
    updates of ``ParamsBatch`` fields (resets that draw new parameters) are seen without a copy;
    others are copied once and again whenever they change (their version counter moves).
    """

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype
        self.fn = c_function(dtype)
        self._fields: tuple[torch.Tensor, ...] = ()
        self._versions: tuple[int, ...] | None = None  # None: all fields are read in place
        self._table = (ctypes.c_void_p * len(PARAM_FIELDS))()
        self._table_address = ctypes.addressof(self._table)
        self.batch_size = -1

    def _params(self, p: ParamsBatch) -> int:
        """Address of the C table of ``p``'s parameter pointers, rebuilt when a field changed."""
        fields = _get_fields(p)
        if all(map(operator.is_, fields, self._fields)) and self._fields and (
                self._versions is None or self._versions == tuple(t._version for t in fields)):
            return self._table_address
        B = p.batch_size
        for k, t in zip(PARAM_FIELDS, fields):
            if t.shape[:1] != (B,) or t.numel() != B * PARAM_SIZES[k]:
                raise ValueError(f"params.{k} has shape {tuple(t.shape)}, expected ({B}, {PARAM_SIZES[k]} values)")
        tensors = tuple(_cpu(t, self.dtype, f"params.{k}") for k, t in zip(PARAM_FIELDS, fields))
        copied = any(a is not b for a, b in zip(tensors, fields))
        self._fields, self._tensors, self.batch_size = fields, tensors, B  # keep the buffers alive
        self._versions = tuple(t._version for t in fields) if copied else None
        self._table[:] = [t.data_ptr() for t in tensors]
        return self._table_address

    def __call__(self, state: torch.Tensor, action: torch.Tensor, p: ParamsBatch,
                 external_force: torch.Tensor | None = None, time: torch.Tensor | None = None,
                 validate: bool = False) -> torch.Tensor:
        """The next state (B, 17), a new tensor; ``time`` (B,) is advanced by ``p.dt`` in place.

        Wrong shapes raise ``ValueError``; with ``validate`` so do non-finite actions, before anything is stepped."""
        dtype = self.dtype
        B = state.shape[0]
        if state.dtype is not dtype or not state.is_contiguous() or not state.is_cpu:
            state = _cpu(state, dtype, "state")
        if action.dtype is not dtype or not action.is_contiguous() or not action.is_cpu:
            action = _cpu(action, dtype, "action")
        if state.shape != (B, STATE_DIM) or action.shape != (B, ACTION_DIM):  # the C code trusts these
            check_action(action, B)
            raise ValueError(f"state has shape {tuple(state.shape)}, expected (B, {STATE_DIM})")
        ext = None
        if external_force is not None:
            if external_force.shape != (B, 3):
                raise ValueError(f"external_force has shape {tuple(external_force.shape)}, expected ({B}, 3)")
            external_force = _cpu(external_force, dtype, "external_force")  # kept alive over the call
            ext = external_force.data_ptr()
        if time is not None and (time.dtype is not dtype or not time.is_contiguous() or time.shape != (B,)):
            raise ValueError(f"time must be a contiguous ({B},) {dtype} CPU tensor, got {tuple(time.shape)} "
                             f"{time.dtype}")
        table = self._params(p)
        if self.batch_size != B:
            raise ValueError(f"params have batch size {self.batch_size}, state has {B}")
        out = torch.empty_like(state)
        bad = self.fn(B, p.dt, state.data_ptr(), action.data_ptr(), ext, table, out.data_ptr(),
                      None if time is None else time.data_ptr(), validate)
        if bad >= 0:
            check_action(action, B)  # raises, naming the environments
        return out


_steps: dict[torch.dtype, CStep] = {}


def c_rk4_step(state: torch.Tensor, action: torch.Tensor, p: ParamsBatch,
               external_force: torch.Tensor | None = None) -> torch.Tensor:
    """``rk4_step`` in C: ``state`` (B, 17) advanced by ``p.dt`` under actions (B, 4) in [-1, 1] (CPU tensors)."""
    step = _steps.get(state.dtype)
    if step is None:
        step = _steps[state.dtype] = CStep(state.dtype)
    return step(state, action, p, external_force)
