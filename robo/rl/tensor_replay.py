"""An SB3 ``ReplayBuffer`` kept as preallocated torch tensors on the model's device.

Same rows, fields, shapes and sampling rule as SB3's numpy ``ReplayBuffer`` (``observations`` and
``next_observations`` (buffer_size, n_envs, obs_dim), ``actions`` (buffer_size, n_envs, action_dim), ``rewards``,
``dones``, ``timeouts`` (buffer_size, n_envs) float32; a sample's ``dones`` is ``done * (1 - timeout)``, so a
truncated episode bootstraps), but ``add_batch`` and ``sample`` never leave the device. It pickles its rows as
numpy arrays (device-free files), so ``robo.rl.replay_file.save_filled`` / ``load_filled`` write and read it as
they do SB3's buffer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from robo.rl.replay_file import ROW_FIELDS


class TensorReplayBuffer(ReplayBuffer):
    """``buffer_size`` transitions (all envs together, as SB3 counts them) of ``n_envs`` envs on ``device``.

    ``optimize_memory_usage`` is not supported (it cannot be combined with timeout handling in SB3 either).
    """

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                 device: torch.device | str = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True):
        if optimize_memory_usage:
            raise ValueError("TensorReplayBuffer keeps next_observations; set optimize_memory_usage=False")
        if not isinstance(observation_space, spaces.Box):
            raise ValueError(f"TensorReplayBuffer stores Box observations, not {type(observation_space).__name__}")
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        rows, obs_dtype = (self.buffer_size, n_envs), torch.from_numpy(np.zeros(0, observation_space.dtype)).dtype
        f = dict(dtype=torch.float32, device=self.device)
        self.observations = torch.zeros(*rows, *self.obs_shape, dtype=obs_dtype, device=self.device)
        self.next_observations = torch.zeros_like(self.observations)
        self.actions = torch.zeros(*rows, self.action_dim, **f)
        self.rewards = torch.zeros(rows, **f)
        self.dones = torch.zeros(rows, **f)
        self.timeouts = torch.zeros(rows, **f)

    # Device and pickling -------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._device

    @device.setter
    def device(self, device: torch.device | str) -> None:
        """Move the rows there (SB3's ``load_replay_buffer`` sets the model's device after unpickling)."""
        self._device = torch.device(device)
        for k in ROW_FIELDS:
            v = self.__dict__.get(k)
            if isinstance(v, torch.Tensor):
                setattr(self, k, v.to(self._device))

    def __getstate__(self) -> dict[str, Any]:
        """Rows as host numpy arrays (a slice pickles only its own rows)."""
        state = dict(self.__dict__)
        for k in ROW_FIELDS:
            if isinstance(state.get(k), torch.Tensor):
                state[k] = state[k].cpu().numpy()
        state["_device"] = str(self._device)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Rows back as CPU tensors; assign ``device`` to move them."""
        self.__dict__.update(state)
        for k in ROW_FIELDS:
            if isinstance(state.get(k), np.ndarray):
                setattr(self, k, torch.from_numpy(state[k]))
        self._device = torch.device("cpu")

    def __copy__(self) -> TensorReplayBuffer:
        """A shallow copy sharing the row tensors (``copy.copy`` would otherwise go through ``__getstate__``)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    # Add -----------------------------------------------------------------------
    def add_batch(self, obs: torch.Tensor, next_obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                  done: torch.Tensor, timeout: torch.Tensor) -> None:
        """One vectorized step: obs, next_obs (n_envs, obs_dim), action (n_envs, action_dim) in [-1, 1],
        reward, done, timeout (n_envs,) (done: terminated or truncated; timeout: truncated and not terminated;
        next_obs of a done env is its episode's last observation, not the reset one)."""
        p = self.pos
        self.observations[p] = obs
        self.next_observations[p] = next_obs
        self.actions[p] = action.reshape(self.n_envs, self.action_dim)
        self.rewards[p] = reward
        self.dones[p] = done
        if self.handle_timeout_termination:
            self.timeouts[p] = timeout
        self.pos = p + 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    def add(self, obs, next_obs, action, reward, done, infos: list[dict[str, Any]]) -> None:
        """SB3's ``add`` (numpy arrays and the per-env ``infos`` list, timeouts from ``TimeLimit.truncated``)."""
        t = lambda x: torch.as_tensor(np.asarray(x), device=self.device)  # noqa: E731
        timeout = [info.get("TimeLimit.truncated", False) for info in infos]
        self.add_batch(t(obs), t(next_obs), t(action).float(), t(reward).float(), t(done).float(),
                       t(timeout).float())

    # Sample --------------------------------------------------------------------
    def sample(self, batch_size: int, env=None) -> ReplayBufferSamples:
        """``batch_size`` transitions drawn uniformly (torch's generator on ``device``): observations (B, obs_dim),
        actions (B, action_dim), next_observations (B, obs_dim), dones and rewards (B, 1)."""
        if env is not None:
            raise ValueError("TensorReplayBuffer does not normalize observations (VecNormalize); "
                             "use SB3's ReplayBuffer (algo=sac or td3) with normalize_observations")
        return self._gather(self._draw(batch_size))

    def sample_batches(self, batches: int, batch_size: int) -> ReplayBufferSamples:
        """``batches`` minibatches drawn at once: every field gets a leading (batches,) axis,
        e.g. observations (batches, batch_size, obs_dim)."""
        s = self._gather(self._draw(batches * batch_size))
        return ReplayBufferSamples(*(x.reshape(batches, batch_size, *x.shape[1:]) for x in s[:5]))

    def _draw(self, n: int) -> torch.Tensor:
        rows = self.buffer_size if self.full else self.pos
        if rows == 0:
            raise ValueError("the replay buffer is empty; add transitions before sampling")
        return torch.randint(0, rows * self.n_envs, (n,), device=self.device)

    def _gather(self, flat: torch.Tensor) -> ReplayBufferSamples:
        """Transitions at flat indices ``row * n_envs + env``."""
        rows = lambda a: a.reshape(-1, *a.shape[2:])[flat]  # noqa: E731
        done = rows(self.dones) * (1 - rows(self.timeouts))
        return ReplayBufferSamples(rows(self.observations), rows(self.actions), rows(self.next_observations),
                                   done[:, None], rows(self.rewards)[:, None])
