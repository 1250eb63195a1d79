"""A fleet of quadrotors in one batched sim, laid out teacher-major, and its teachers as one policy.

Env ``b`` of a fleet of ``N`` groups of ``k`` envs belongs to group ``b // k``: DAgger's groups are
the teachers' quadrotors, the held-out evaluation's the held-out quadrotors.
``TeacherEnsemble`` evaluates N same-architecture teachers in one ``vmap``; ``Labeller`` is that
ensemble as a batched robo policy, each env labelled by its own teacher. ``StudentLabeller`` labels every
env with the mean action of several students (recurrent ones keep their own hidden states), optionally
with a per-env shift of the position error they read (a trim, see ``robo.rl.trim``).
``feedforward_observations`` lets teachers label a moving reference as if they fed its acceleration forward.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch.func import functional_call, stack_module_state, vmap

from policies.mlp import MLPPolicy
from sims.envs.observation import OBS_SLICES
from sims.envs.task import BatchedQuadrotorTask

POSITION = OBS_SLICES["position_error"]
VELOCITY = OBS_SLICES["velocity_error"]


class TeacherEnsemble:
    """N MLP teachers acting on their own envs' observations.

    ``__call__(obs: (N, k, D)) -> (N, k, 4)``: teacher n acts on group n. Teachers with one
    architecture are evaluated in a single ``vmap``; otherwise group by group.
    """

    def __init__(self, teachers: list[MLPPolicy]):
        if not teachers:
            raise ValueError("no teachers to distil; train at least one (manifest has none done)")
        if any(getattr(t.config, "position_integral", 0.0) > 0 for t in teachers):
            raise ValueError("teachers that integrate their position error keep a state the ensemble does not carry; "
                             "distil teachers trained with task.position_integral=0")
        self.models = [t.model for t in teachers]
        self.obs_dim = teachers[0].obs_dim
        if any(t.obs_dim != self.obs_dim for t in teachers):
            raise ValueError(f"teachers read different observation sizes {sorted({t.obs_dim for t in teachers})}; "
                             f"train them with one task config")
        self.uniform = all(m.config == self.models[0].config for m in self.models)
        if self.uniform:
            self.params, self.buffers = stack_module_state(self.models)
            self.base = copy.deepcopy(self.models[0]).to("meta")

    def __len__(self) -> int:
        return len(self.models)

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.ndim != 3 or obs.shape[0] != len(self) or obs.shape[2] != self.obs_dim:
            raise ValueError(f"teacher observations have shape {tuple(obs.shape)}, expected "
                             f"({len(self)}, k, {self.obs_dim})")
        if self.uniform:
            call = lambda p, b, x: functional_call(self.base, (p, b), (x,))  # noqa: E731
            return vmap(call)(self.params, self.buffers, obs)
        return torch.stack([m(x) for m, x in zip(self.models, obs)])


class Labeller:
    """``ensemble`` as one policy over a teacher-major batch: ``act(obs (B, D)) -> (B, 4)``, env ``b``
    acted on by teacher ``b // (B / N)``. B must be a multiple of the N teachers."""

    def __init__(self, ensemble: TeacherEnsemble):
        self.ensemble = ensemble

    def reset(self, mask: torch.Tensor | None = None) -> None:  # the teachers are stateless MLPs
        pass

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        n = len(self.ensemble)
        if obs.ndim != 2 or obs.shape[0] % n:
            raise ValueError(f"observations have shape {tuple(obs.shape)}: need (B, D) with B a multiple of the "
                             f"{n} teachers")
        x = obs[:, :self.ensemble.obs_dim]
        return self.ensemble(x.reshape(n, x.shape[0] // n, -1)).reshape(x.shape[0], -1)


class StudentLabeller:
    """The mean action of ``students`` (robo policies reading the first ``obs_dim`` floats, e.g. GRU
    students of several DAgger seeds), each keeping its own per-env hidden state: a labeller for any
    quadrotor, not only the teachers'. ``act(obs (B, D)) -> (B, 4)``; ``reset(mask)`` restarts the
    students' states where ``mask`` (B,) is true (all when None), as episodes restart. With ``shift``
    (B, 3) m, world FLU, env ``b``'s students read their position error as ``p - p_ref + shift[b]`` (a trim)."""

    def __init__(self, students: list, shift: np.ndarray | torch.Tensor | None = None):
        if not students:
            raise ValueError("no students to label with")
        self.students = list(students)
        self.shift = as_shift(shift)
        self.obs_dim = self.students[0].obs_dim
        if any(s.obs_dim != self.obs_dim or s.action_dim != self.students[0].action_dim for s in self.students):
            raise ValueError("the students read or write different sizes; label with one kind of student")

    def reset(self, mask: torch.Tensor | None = None) -> None:
        for s in self.students:
            s.reset(mask)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        x = shifted_observations(obs[:, :self.obs_dim], self.shift)
        return sum(s.act(x) for s in self.students) / len(self.students)


def as_shift(shift: np.ndarray | torch.Tensor | None) -> torch.Tensor | None:
    """A labeller's per-env position shift as a (B, 3) float32 tensor (None stays None)."""
    if shift is None:
        return None
    out = torch.as_tensor(np.asarray(shift), dtype=torch.float32)
    if out.ndim != 2 or out.shape[1] != 3:
        raise ValueError(f"shift has shape {tuple(out.shape)}, expected (B, 3)")
    return out


def shifted_observations(x: torch.Tensor, shift: torch.Tensor | None) -> torch.Tensor:
    """``x`` (B, D) with ``shift`` (B, 3) m added to its position error (a copy; ``x`` itself when None)."""
    if shift is None:
        return x
    if shift.shape[0] != x.shape[0]:
        raise ValueError(f"shift is for {shift.shape[0]} envs, observations for {x.shape[0]}")
    x = x.clone()
    x[:, POSITION] += shift.to(x.dtype)
    return x


def feedforward_observations(obs: torch.Tensor, task: BatchedQuadrotorTask, gain: float) -> torch.Tensor:
    """``obs`` (B, D) as a controller reads them that aims ``gain`` (s^2) times the reference acceleration
    ahead: at ``p_ref + gain a_ref`` with velocity ``v_ref + gain j_ref`` (jerk), which cancels the lag of
    a controller that pulls its acceleration towards ``-(p - p_ref) / gain``. A copy; ``obs`` unchanged."""
    if not (gain >= 0 and np.isfinite(gain)):
        raise ValueError(f"feedforward gain must be finite and >= 0 (s^2), got {gain}")
    acc, jerk = task.reference_derivatives()
    out = obs.clone()
    out[:, POSITION] -= gain * acc.to(obs.dtype)
    out[:, VELOCITY] -= gain * jerk.to(obs.dtype)
    return out
