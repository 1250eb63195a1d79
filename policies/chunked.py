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
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Protocol, runtime_checkable

import torch

from .base import ArrayLike, Policy


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


def check_tensor(x: ArrayLike, shape: tuple, name: str) -> torch.Tensor:
    """``x`` as a float32 tensor of ``shape`` (None: any size) with finite values, else a clear error."""
    t = torch.as_tensor(x, dtype=torch.float32)
    if t.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
        want = "(" + ", ".join("B" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {want}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return t


def split_observation(obs, obs_dim: int, image_shape: list[int] | None, time_steps: int | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A chunk policy's observation input -> (state, image or None), float tensors, checked.

    ``obs``: the state array, or for image policies (``image_shape`` (3, H, W) not None) a dict
    ``{"state": ..., "image": ... in [0, 1]}``. Shapes: (B, obs_dim) and (B, 3, H, W) as ``act`` takes them;
    with ``time_steps`` = T (``predict_chunk``, a training batch) (B, T, obs_dim) and (B, T, 3, H, W)."""
    state, image = (obs.get("state"), obs.get("image")) if isinstance(obs, dict) else (obs, None)
    if state is None:
        raise KeyError(f"observation dict needs a 'state' entry, got {sorted(obs)}")
    lead = (None,) if time_steps is None else (None, time_steps)
    state = check_tensor(state, (*lead, obs_dim), "observation" if time_steps is None else "obs_history")
    if image_shape is None:
        return state, None
    if image is None:
        raise ValueError("this policy observes images: pass {'state': ..., 'image': (B, 3, H, W) in [0, 1]}")
    image = check_tensor(image, (*lead, *image_shape), "image")
    if image.shape[0] != state.shape[0]:
        raise ValueError(f"image batch {image.shape[0]} differs from state batch {state.shape[0]}")
    return state, image


def state_of(obs):
    """The state part of an observation input (the array itself, or a dict's "state")."""
    return obs.get("state") if isinstance(obs, dict) else obs


NOISE_DISTRIBUTIONS = ("normal", "uniform")


def standard_noise(distribution: str, shape: tuple, generator: torch.Generator | None = None) -> torch.Tensor:
    """``shape`` draws from N(0, 1) (``"normal"``) or U(-1, 1) (``"uniform"``)."""
    if distribution == "uniform":
        return torch.rand(shape, generator=generator) * 2 - 1
    if distribution == "normal":
        return torch.randn(shape, generator=generator)
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
