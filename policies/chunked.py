"""The protocol of action-chunk policies trained by imitation (diffusion, energy-based).

Such a policy reads the last ``n_obs_steps`` observations, predicts a chunk of ``horizon``
actions and executes the first ``n_action_steps`` of them before planning again (Diffusion
Policy's observation / prediction / action horizons). The chunk is generated from an initial
sample, the diffusion policy's initial noise or the energy policy's initial guess, of shape
``noise_shape = (horizon, action_dim)`` per environment. That sample is an input, because
latent-noise RL (DSRL) steers the policy by choosing it. It is N(0, I) unless the policy's
``noise_distribution`` says "uniform" (U(-1, 1), e.g. an energy policy distilled from a diffusion
teacher); ``draw_noise`` draws it either way.

Shapes (B environments):

- ``act(obs, noise=None)``: obs (B, obs_dim) (or a dict of batched arrays for image policies:
  ``{"state": (B, state_dim), "image": (B, 3, H, W) float in [0, 1]}``) -> action (B, action_dim).
  Keeps a per-env queue of observations and planned actions; ``noise`` (B, horizon, action_dim)
  is used when a new chunk is planned and ignored otherwise. ``reset(mask)`` clears the queues.
- ``predict_chunk(obs_history, noise=None)``: obs_history (B, n_obs_steps, obs_dim) (or a dict
  whose arrays have a time axis after the batch axis) -> actions (B, horizon, action_dim);
  stateless. The executed part is ``[:, n_obs_steps - 1 : n_obs_steps - 1 + n_action_steps]``.
- ``compute_loss(batch)``: batch of torch tensors ``{"obs": (B, n_obs_steps, obs_dim),
  "action": (B, horizon, action_dim)}`` (plus ``"image": (B, n_obs_steps, 3, H, W)`` for image
  policies), raw (unnormalized) units -> scalar training loss.

Devices: a policy computes where its weights are (``QueuedActing.device``; ``robo.device.move_policy`` puts them
there). ``act`` and ``predict_chunk`` take numpy arrays or tensors on any device, copy them (and ``noise``) to the
weights' device once per call, and answer as the caller gave: numpy for numpy, a tensor on the input's device for a
tensor. Random draws (default noise, energy candidates, IBC's search) come from CPU generators and are copied over,
so one seed gives the same draws on every device, and a CPU policy computes exactly as before.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from .base import ArrayLike, Policy, weights_device


@runtime_checkable
class ChunkedPolicy(Policy, Protocol):
    n_obs_steps: int
    horizon: int
    n_action_steps: int
    model: torch.nn.Module

    @property
    def noise_shape(self) -> tuple[int, int]: ...

    def act(self, obs: ArrayLike, noise: ArrayLike | None = None) -> ArrayLike: ...

    def predict_chunk(self, obs_history: ArrayLike, noise: ArrayLike | None = None) -> ArrayLike: ...

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def set_normalization(self, stats: dict[str, dict[str, torch.Tensor]]) -> None: ...


def check_tensor(x: ArrayLike, shape: tuple, name: str, device: torch.device | None = None) -> torch.Tensor:
    """``x`` as a float32 tensor of ``shape`` (None: any size) with finite values, else a clear error; checked
    where it is, then moved to ``device`` when given."""
    t = torch.as_tensor(x, dtype=torch.float32)
    if t.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
        want = "(" + ", ".join("B" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {want}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return t if device is None else t.to(device)


def split_observation(obs, obs_dim: int, image_shape: list[int] | None, time_steps: int | None = None,
                      device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A chunk policy's observation input -> (state, image or None), float tensors, checked (and moved to
    ``device`` when given: one copy each).

    ``obs``: the state array, or for image policies (``image_shape`` (3, H, W) not None) a dict
    ``{"state": ..., "image": ... in [0, 1]}``. Shapes: (B, obs_dim) and (B, 3, H, W) as ``act`` takes them;
    with ``time_steps`` = T (``predict_chunk``, a training batch) (B, T, obs_dim) and (B, T, 3, H, W)."""
    state, image = (obs.get("state"), obs.get("image")) if isinstance(obs, dict) else (obs, None)
    if state is None:
        raise KeyError(f"observation dict needs a 'state' entry, got {sorted(obs)}")
    lead = (None,) if time_steps is None else (None, time_steps)
    state = check_tensor(state, (*lead, obs_dim), "observation" if time_steps is None else "obs_history", device)
    if image_shape is None:
        return state, None
    if image is None:
        raise ValueError("this policy observes images: pass {'state': ..., 'image': (B, 3, H, W) in [0, 1]}")
    image = check_tensor(image, (*lead, *image_shape), "image", device)
    if image.shape[0] != state.shape[0]:
        raise ValueError(f"image batch {image.shape[0]} differs from state batch {state.shape[0]}")
    return state, image


def state_of(obs):
    """The state part of an observation input (the array itself, or a dict's "state")."""
    return obs.get("state") if isinstance(obs, dict) else obs


class ChunkQueue:
    """Receding-horizon execution of action chunks for B envs (LeRobot's ``select_action`` queues).

    Per env it keeps the window of the last ``n_obs_steps`` observations, ``state`` (B, n_obs_steps, obs_dim)
    and for image policies ``image`` (B, n_obs_steps, 3, H, W), and ``plan`` (B, n_action_steps, action_dim),
    the executed part ``[n_obs_steps - 1 : n_obs_steps - 1 + n_action_steps]`` of the env's last chunk, with
    ``used`` (B,), the index of its next action (``n_action_steps``: plan again). An env's first observation
    (at the start and after ``reset(mask)``) fills its whole window, and it plans again at once. All of it lives
    on ``device``, where the policy computes.
    """

    def __init__(self, batch: int, n_obs_steps: int, n_action_steps: int, device: torch.device | str = "cpu"):
        self.n_obs_steps, self.n_action_steps = n_obs_steps, n_action_steps
        self.state: torch.Tensor | None = None  # made by the first ``step``, as are image and plan
        self.image: torch.Tensor | None = None
        self.plan: torch.Tensor | None = None
        self.used = torch.full((batch,), n_action_steps, dtype=torch.long, device=device)
        self.fresh = torch.ones(batch, dtype=torch.bool, device=device)  # (B,) the next obs fills the env's window

    @property
    def batch(self) -> int:
        return self.fresh.shape[0]

    @property
    def device(self) -> torch.device:
        return self.fresh.device

    def reset(self, mask: ArrayLike) -> None:
        """Restart the envs where ``mask`` (B,) is true: their next observation fills the window and plans."""
        m = mask if isinstance(mask, torch.Tensor) else torch.as_tensor(np.asarray(mask))
        m = m.to(device=self.device, dtype=torch.bool).flatten()
        if m.shape != self.fresh.shape:
            raise ValueError(f"reset mask has shape {tuple(m.shape)}, expected ({self.batch},)")
        self.fresh |= m
        self.used[m] = self.n_action_steps

    def step(self, state: torch.Tensor, image: torch.Tensor | None,
             plan: Callable[[torch.Tensor, ArrayLike], ArrayLike]) -> torch.Tensor:
        """Push state (B, obs_dim) (and image (B, 3, H, W)), plan where the plans are used up, pop one action each
        -> (B, action_dim). ``plan(need (B,) bool, window)`` returns the N = need.sum() envs' chunks (N, horizon,
        action_dim) from their windows, given as ``predict_chunk`` takes them: (N, n_obs_steps, obs_dim), or
        ``{"state": that, "image": (N, n_obs_steps, 3, H, W)}``."""
        self.state = self._push(self.state, state)
        if image is not None:
            self.image = self._push(self.image, image)
        self.fresh = torch.zeros_like(self.fresh)
        need = self.used >= self.n_action_steps
        if bool(need.any()):
            window = self.state[need] if image is None else {"state": self.state[need], "image": self.image[need]}
            start = self.n_obs_steps - 1
            executed = torch.as_tensor(plan(need, window), device=self.device)[:, start:start + self.n_action_steps]
            if self.plan is None:
                self.plan = torch.zeros(self.batch, *executed.shape[1:], device=self.device)
            self.plan[need] = executed
            self.used[need] = 0
        action = self.plan[torch.arange(self.batch, device=self.device), self.used]
        self.used += 1
        return action

    def _push(self, window: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
        """window (B, n_obs_steps, ...) shifted by one step with x (B, ...) as the newest; fresh envs' windows
        are x repeated."""
        filled = x[:, None].expand(-1, self.n_obs_steps, *x.shape[1:])
        if window is None:
            return filled.clone()
        shifted = torch.cat([window[:, 1:], x[:, None]], dim=1)
        return torch.where(self.fresh.view(-1, *([1] * (shifted.ndim - 1))), filled, shifted)


class QueuedActing:
    """``reset(mask)`` and ``queued_action`` for a ``ChunkedPolicy`` acting through a ``ChunkQueue``.

    The queue is made by the first ``act`` after a full reset, or when the batch size or the device changes, with
    the policy's own ``n_obs_steps`` and ``n_action_steps`` (a weight-sharing copy, ``with_config``, gets its own),
    on the device of the policy's weights."""

    _queue: ChunkQueue | None = None

    @property
    def device(self) -> torch.device:
        """Where the acting weights (``inference_model``) are, so where ``act`` and ``predict_chunk`` compute."""
        return weights_device(self)

    def reset(self, mask: ArrayLike | None = None) -> None:
        """Clear the observation and action queues of the envs where ``mask`` (B,) is true (all if None)."""
        if mask is None or self._queue is None:
            self._queue = None
        else:
            self._queue.reset(mask)

    def queued_action(self, state: torch.Tensor, image: torch.Tensor | None,
                      plan: Callable[[torch.Tensor, ArrayLike], ArrayLike]) -> torch.Tensor:
        """``ChunkQueue.step`` on this policy's queue: state (B, obs_dim), image (B, 3, H, W) or None ->
        action (B, action_dim), all on ``state``'s device."""
        q = self._queue
        if q is None or q.batch != state.shape[0] or q.device != state.device:
            self._queue = ChunkQueue(state.shape[0], self.n_obs_steps, self.n_action_steps, state.device)
        return self._queue.step(state, image, plan)


NOISE_DISTRIBUTIONS = ("normal", "uniform")


def standard_noise(distribution: str, shape: tuple, generator: torch.Generator | None = None,
                   device: torch.device | str | None = None) -> torch.Tensor:
    """``shape`` draws from N(0, 1) (``"normal"``) or U(-1, 1) (``"uniform"``), made on ``device`` (default: the
    generator's, else the CPU)."""
    device = device if device is not None else generator.device if generator is not None else "cpu"
    if distribution == "uniform":
        return torch.rand(shape, generator=generator, device=device) * 2 - 1
    if distribution == "normal":
        return torch.randn(shape, generator=generator, device=device)
    raise ValueError(f"unknown noise distribution {distribution!r}; choose one of {list(NOISE_DISTRIBUTIONS)}")


def draw_noise(policy: ChunkedPolicy, batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """(batch, *noise_shape) initial samples from ``policy``'s own ``noise_distribution`` (default normal)."""
    return standard_noise(getattr(policy, "noise_distribution", "normal"), (batch, *policy.noise_shape), generator)


def with_execution_horizon(policy: ChunkedPolicy, n_action_steps: int) -> ChunkedPolicy:
    """A copy of ``policy`` that executes ``n_action_steps`` actions of each chunk before replanning.

    The execution (action) horizon is an inference setting: the model predicts the whole
    ``horizon`` whatever it is, so a checkpoint can be flown with a shorter one (replanning more
    often, more closed-loop) or a longer one. The copy shares the weights, has its own config
    (validated: ``1 <= n_action_steps <= horizon - n_obs_steps + 1``) and empty queues; saving it
    saves the new setting.
    """
    n = int(n_action_steps)
    if n < 1 or n_action_steps != n:
        raise ValueError(f"n_action_steps must be a positive integer, got {n_action_steps!r}")
    out = with_config(policy, n_action_steps=n)
    out.n_action_steps = n
    return out


def with_single_guess(policy: ChunkedPolicy) -> ChunkedPolicy:
    """``policy`` itself, or, for an energy policy that keeps the best of several candidate guesses
    (``config.n_candidates > 1``), a weight-sharing copy that descends only the guess it is given.

    Latent-noise steering needs a chunk that is a function of (observations, noise) alone; extra
    candidates from the policy's own generator would make the steered env stochastic and let them
    override the actor's choice.
    """
    if getattr(policy.config, "n_candidates", 1) == 1:
        return policy
    return with_config(policy, n_candidates=1)


def with_config(policy: ChunkedPolicy, **changes) -> ChunkedPolicy:
    """A weight-sharing copy of ``policy`` with ``changes`` to its config (validated by the config's own
    checks) and empty queues."""
    config = dataclasses.replace(policy.config, **changes)
    out = copy.copy(policy)
    out.config = config
    out.reset()
    return out
