"""The batched ("Isaac-style") quadrotor simulator: one call steps B quadrotors."""

from __future__ import annotations

import torch

from .dynamics import ACTION_DIM, STATE_DIM, ParamsBatch, hover_state, rk4_step


def check_action(action: torch.Tensor, batch_size: int) -> None:
    """Raise ``ValueError`` unless ``action`` is a finite (batch_size, 4) tensor."""
    if action.shape != (batch_size, ACTION_DIM):
        raise ValueError(f"action has shape {tuple(action.shape)}, expected ({batch_size}, {ACTION_DIM})")
    if not bool(torch.isfinite(action).all()):
        bad = (~torch.isfinite(action)).any(-1).nonzero().flatten()[:8].tolist()
        raise ValueError(f"action contains NaN or inf (environments {bad}...); motors need finite commands")


class BatchedQuadrotorSim:
    """B quadrotors, each with its own parameters, stepped together with RK4.

    Args:
        params: per-environment parameters (``ParamsBatch``, batch size B).

    Attributes:
        state: (B, 17) current states, layout in ``sims.quadrotor.dynamics``.
        time: (B,) seconds since each environment's last reset.
    """

    def __init__(self, params: ParamsBatch):
        self.params = params
        self.state = hover_state(params)
        self.time = torch.zeros(params.batch_size, dtype=params.mass.dtype, device=params.mass.device)
        self.external_force: torch.Tensor | None = None  # (B, 3) world frame, N

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
        """Advance every environment by ``dt`` under actions (B, 4) in [-1, 1]; returns the new state."""
        if validate:
            check_action(action, self.batch_size)
        self.state = rk4_step(self.state, action.to(self.state.dtype), self.params, self.external_force)
        self.time += self.dt
        return self.state
