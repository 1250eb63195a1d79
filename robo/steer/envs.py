"""Gymnasium wrappers whose one step executes a chunk of actions in any wrapped env.

- ``LatentNoiseEnv(env, policy)``: DSRL's latent-noise action space. The agent's action
  a in [-1, 1]^(horizon * action_dim) sets the frozen chunked policy's initial noise
  ``noise_bound * a`` (DSRL's bounded noise box, scaled so the space is SB3's normalized one);
  the policy decodes it into an action chunk from the current observation window.
- ``ResidualChunkEnv(env, policy)``: residual RL. The base policy plans with N(0, I) noise and
  the agent adds ``residual_scale * a`` (in env action units) to each executed action.
- ``ActionChunkEnv(env)``: plain RL on env actions (the agent's action in [-1, 1] is scaled to
  the env's action bounds), ``n_action_steps`` at a time.

Observation: the last ``n_obs_steps`` env observations, flattened (n_obs_steps * obs_dim,) and
mapped to [-1, 1] by the wrapped env's observation bounds (raw when unbounded); the first
observation after reset fills the window. Reward (``reward``): the undiscounted sum over the
executed actions of ``r - reward_offset``, where r is the env's reward (``"env"``) or, for
``"success"`` (sparse, as DSRL on Robomimic), 1 on the step where the wrapped env reports
``info["is_success"]``, else 0. ``reward_offset = 1`` with ``"success"`` is DSRL's Robomimic
reward: -1 per env step until success, so the return counts the steps it took.
``failure_reward`` is added when the env terminates without success (a collision: without it,
"minus one per step" would pay the agent to crash early). The chunk stops early on
termination/truncation.

Device: ``LatentNoiseEnv`` and ``ResidualChunkEnv`` decode on ``device``, where their base policy's weights are
(``steering_decoder`` makes such a copy): a step sends the window and the noise there and brings the executed
actions back, once; the wrapped env (MuJoCo, gym) stays on the CPU. The default ``device="cpu"`` is the CPU code
path, unchanged bit for bit.

Real-robot use: ``max_env_steps`` caps the env steps of an episode (then ``truncated``), and
``request_stop()`` (thread-safe: call it from a UI or a keyboard thread) stops sending actions
before the next one, calls ``on_stop(env)`` (e.g. a driver's hold/land) and truncates the
episode with ``info["stopped"] = True``; ``reset()`` is then required.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from policies.chunked import ChunkedPolicy, with_single_guess
from policies.steered.modeling_steered import check_base
from robo.device import move_policy

log = logging.getLogger(__name__)
REWARDS = ("env", "success")


class ChunkEnv(gym.Env):
    """Shared chunk execution; a subclass sets ``action_space`` and implements ``decode``."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, env: gym.Env, n_obs_steps: int, n_action_steps: int, reward: str = "env",
                 reward_offset: float = 0.0, failure_reward: float = 0.0, max_env_steps: int | None = None,
                 on_stop: Callable[[gym.Env], None] | None = None):
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; choose one of {list(REWARDS)}")
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"the wrapped env must have a flat Box observation space, got {space}")
        if not isinstance(env.action_space, gym.spaces.Box) or len(env.action_space.shape) != 1:
            raise ValueError(f"the wrapped env must have a flat Box action space, got {env.action_space}")
        if n_obs_steps < 1 or n_action_steps < 1:
            raise ValueError(f"n_obs_steps and n_action_steps must be >= 1, got {n_obs_steps}, {n_action_steps}")
        if max_env_steps is not None and int(max_env_steps) < 1:
            raise ValueError(f"max_env_steps must be >= 1 or None, got {max_env_steps}")
        self.env, self.n_obs_steps, self.n_action_steps = env, int(n_obs_steps), int(n_action_steps)
        self.obs_dim, self.env_action_dim = space.shape[0], env.action_space.shape[0]
        self.reward_mode, self.reward_offset, self.on_stop = reward, float(reward_offset), on_stop
        self.failure_reward = float(failure_reward)
        self.max_env_steps = None if max_env_steps is None else int(max_env_steps)
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        bounded = np.isfinite(low) & np.isfinite(high) & (high > low)
        low, high = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)  # no inf - inf on unbounded axes
        self._center, self._scale = (low + high) / 2, (high - low) / 2
        lim = np.where(bounded, 1.0, np.inf).astype(np.float32)
        self.observation_space = gym.spaces.Box(np.tile(-lim, n_obs_steps), np.tile(lim, n_obs_steps),
                                                dtype=np.float32)
        self.render_mode = getattr(env, "render_mode", None)
        self._window = np.zeros((self.n_obs_steps, self.obs_dim), np.float32)
        self._stop = threading.Event()
        self._needs_reset = True
        self.episode_env_steps = 0
        self.total_env_steps = 0  # over the wrapper's life (the RL budget)

    # subclass API ------------------------------------------------------------------------
    def decode(self, action: np.ndarray) -> np.ndarray:
        """action (action_space.shape) -> env actions (n, env_action_dim), n <= n_action_steps."""
        raise TypeError(f"{type(self).__name__} must implement decode(action)")

    # observation window ------------------------------------------------------------------
    @property
    def window(self) -> np.ndarray:
        """(n_obs_steps, obs_dim) float32 raw observations, oldest first."""
        return self._window.copy()

    def window_normalization(self) -> tuple[np.ndarray, np.ndarray]:
        """(center, scale), each (n_obs_steps * obs_dim,): agent obs = (window - center) / scale."""
        return np.tile(self._center, self.n_obs_steps), np.tile(self._scale, self.n_obs_steps)

    def _agent_obs(self) -> np.ndarray:
        x = (self._window - self._center) / self._scale
        return np.clip(x.reshape(-1), self.observation_space.low, self.observation_space.high).astype(np.float32)

    def _push(self, obs) -> None:
        o = np.asarray(obs, np.float32)
        if o.shape != (self.obs_dim,) or not np.all(np.isfinite(o)):
            raise ValueError(f"the wrapped env returned an observation of shape {o.shape} (or non-finite); "
                             f"expected finite ({self.obs_dim},)")
        self._window = np.concatenate([self._window[1:], o[None]])

    # gym API -----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        self._stop.clear()
        self._needs_reset = False
        self.episode_env_steps = 0
        self._window[:] = np.asarray(obs, np.float32)[None]
        self._push(obs)
        return self._agent_obs(), info

    def request_stop(self) -> None:
        """Human stop: no further env action is sent; the current step returns truncated."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def step(self, action):
        if self._needs_reset:
            raise RuntimeError("the episode has ended (or never started): call reset() before step()")
        a = np.asarray(action, np.float32)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action has shape {a.shape}, expected {self.action_space.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError("action contains NaN or inf")
        actions = self.decode(np.clip(a, self.action_space.low, self.action_space.high))
        actions = np.clip(actions, self.env.action_space.low, self.env.action_space.high)  # safety bound
        total, terminated, truncated, info, executed = 0.0, False, False, {}, 0
        for env_action in actions:
            if self._stop.is_set():
                break
            obs, r, terminated, truncated, info = self.env.step(env_action.astype(self.env.action_space.dtype))
            self._push(obs)
            success = float(bool(info.get("is_success", False)))
            total += (float(r) if self.reward_mode == "env" else success) - self.reward_offset
            executed += 1
            self.episode_env_steps += 1
            self.total_env_steps += 1
            if terminated and not info.get("is_success", False):
                total += self.failure_reward  # e.g. a collision that ends the episode
            if terminated or truncated:
                break
            if self.max_env_steps is not None and self.episode_env_steps >= self.max_env_steps:
                truncated = True
                info = {**info, "step_cap": True}
                break
        info = dict(info)
        if self._stop.is_set():
            truncated, info["stopped"] = True, True
            if self.on_stop is not None:
                self.on_stop(self.env)
        info["env_steps"] = executed
        info["actions"] = actions[:executed]  # (executed, env_action_dim): what the env received
        info.setdefault("is_success", False)
        self._needs_reset = bool(terminated or truncated)
        return self._agent_obs(), total, bool(terminated), bool(truncated), info

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class LatentNoiseEnv(ChunkEnv):
    """DSRL: the action a (horizon * action_dim,) in [-1, 1] is the frozen policy's initial noise
    ``noise_bound * a`` (reshaped (horizon, action_dim)); a step executes the decoded chunk's
    executed part. ``device``: where ``policy``'s weights are and it decodes (``steering_decoder``)."""

    def __init__(self, env: gym.Env, policy: ChunkedPolicy, noise_bound: float = 1.5,
                 n_action_steps: int | None = None, device: str | torch.device = "cpu", **kwargs):
        check_base(policy)
        if not noise_bound > 0:
            raise ValueError(f"noise_bound must be > 0, got {noise_bound}")
        _check_dims(env, policy)
        n_act = _n_action_steps(policy, n_action_steps)
        super().__init__(env, policy.n_obs_steps, n_act, **kwargs)
        self.device = _check_weights_on(policy, device)
        self.policy, self.noise_bound = with_single_guess(policy), float(noise_bound)  # chunk = f(obs, noise)
        self.noise_shape = tuple(policy.noise_shape)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (int(np.prod(self.noise_shape)),), dtype=np.float32)

    def decode(self, action: np.ndarray) -> np.ndarray:
        a = torch.as_tensor(action, dtype=torch.float32, device=self.device)
        noise = self.noise_bound * a.reshape(1, *self.noise_shape)
        return _executed(self.policy, self._window, noise, self.n_action_steps)


class ResidualChunkEnv(ChunkEnv):
    """Residual RL: base chunk from N(0, I) noise (drawn from the env's seeded RNG) plus
    ``residual_scale * a``, a (n_action_steps * action_dim,) in [-1, 1]. ``device``: as ``LatentNoiseEnv``'s."""

    def __init__(self, env: gym.Env, policy: ChunkedPolicy, residual_scale: float = 0.05,
                 n_action_steps: int | None = None, device: str | torch.device = "cpu", **kwargs):
        check_base(policy)
        _check_dims(env, policy)
        n_act = _n_action_steps(policy, n_action_steps)
        super().__init__(env, policy.n_obs_steps, n_act, **kwargs)
        self.device = _check_weights_on(policy, device)
        self.policy, self.residual_scale = with_single_guess(policy), float(residual_scale)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (n_act * self.env_action_dim,), dtype=np.float32)

    def decode(self, action: np.ndarray) -> np.ndarray:
        noise = torch.as_tensor(self.np_random.standard_normal((1, *self.policy.noise_shape)), dtype=torch.float32,
                                device=self.device)
        base = _executed(self.policy, self._window, noise, self.n_action_steps)
        return base + self.residual_scale * action.reshape(self.n_action_steps, self.env_action_dim)


class ActionChunkEnv(ChunkEnv):
    """RL from scratch: a (n_action_steps * action_dim,) in [-1, 1], scaled to the env's bounds."""

    def __init__(self, env: gym.Env, n_obs_steps: int = 1, n_action_steps: int = 1, **kwargs):
        super().__init__(env, n_obs_steps, n_action_steps, **kwargs)
        low, high = env.action_space.low, env.action_space.high
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError("ActionChunkEnv needs a bounded env action space")
        self._a_center, self._a_scale = (low + high) / 2, (high - low) / 2
        self.action_space = gym.spaces.Box(-1.0, 1.0, (n_action_steps * self.env_action_dim,), dtype=np.float32)

    def decode(self, action: np.ndarray) -> np.ndarray:
        return self._a_center + self._a_scale * action.reshape(self.n_action_steps, self.env_action_dim)


def _check_dims(env: gym.Env, policy: ChunkedPolicy) -> None:
    obs_shape, act_shape = env.observation_space.shape, env.action_space.shape
    if obs_shape != (policy.obs_dim,) or act_shape != (policy.action_dim,):
        raise ValueError(f"env observation/action shapes {obs_shape}/{act_shape} do not match the policy's "
                         f"({policy.obs_dim},)/({policy.action_dim},)")


def _n_action_steps(policy: ChunkedPolicy, n: int | None) -> int:
    n = policy.n_action_steps if n is None else int(n)
    if not 1 <= n <= policy.n_action_steps:
        raise ValueError(f"n_action_steps must be in [1, {policy.n_action_steps}] (the policy's), got {n}")
    return n


def executed_actions(policy: ChunkedPolicy, windows: torch.Tensor, noise: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` executed actions (B, n, action_dim) of the chunks planned from raw observation
    windows (B, n_obs_steps, obs_dim) and noise (B, horizon, action_dim)."""
    chunk = torch.as_tensor(policy.predict_chunk(windows, noise))
    start = policy.n_obs_steps - 1
    return chunk[:, start:start + n]


def _executed(policy: ChunkedPolicy, window: np.ndarray, noise: torch.Tensor, n: int) -> np.ndarray:
    """``executed_actions`` for one window (n_obs_steps, obs_dim) on ``noise``'s device -> (n, action_dim) float64
    on the host."""
    hist = torch.as_tensor(window, dtype=torch.float32, device=noise.device)[None]
    return executed_actions(policy, hist, noise, n)[0].cpu().numpy().astype(np.float64)


def _weight_modules(policy) -> list[torch.nn.Module]:
    """The modules holding ``policy``'s weights (those ``robo.device.move_policy`` moves)."""
    if hasattr(policy, "weight_copies"):
        return list(policy.weight_copies())
    model = getattr(policy, "model", None)
    return [model] if isinstance(model, torch.nn.Module) else []


def _check_weights_on(policy: ChunkedPolicy, device: str | torch.device) -> torch.device:
    """``device`` as a torch device, after checking that ``policy``'s weights are there."""
    device = torch.device(device)
    for m in _weight_modules(policy):
        for p in m.parameters():
            if p.device.type != device.type or device.index not in (None, p.device.index):
                raise ValueError(f"the base policy's weights are on {p.device}, but it decodes on device={device}; "
                                 f"give a copy on {device} (robo.steer.steering_decoder)")
            break
    return device


def steering_decoder(policy: ChunkedPolicy, device: str | torch.device) -> tuple[ChunkedPolicy, torch.device]:
    """(decoder, its device): the base policy that the chunk envs decode with. On the CPU ``policy`` itself; on
    another device a copy with its weights there, when its ``predict_chunk`` of device tensors answers on that
    device (tried once: a diffusion or energy policy does), else ``policy`` and the CPU, with a warning. ``policy``
    itself is left where it is (the steered policy that is saved, evaluated and deployed holds it)."""
    device = torch.device(device)
    if device.type == "cpu":
        return policy, device
    try:
        decoder = move_policy(copy.deepcopy(policy), device)
        window = torch.zeros(1, policy.n_obs_steps, policy.obs_dim, device=device)
        chunk = with_single_guess(decoder).predict_chunk(window, torch.zeros(1, *policy.noise_shape, device=device))
        ok = isinstance(chunk, torch.Tensor) and chunk.device.type == device.type
    except (AttributeError, RuntimeError, TypeError, ValueError) as e:
        ok = False
        log.debug("probe decode on %s failed: %s", device, e)
    if not ok:
        log.warning("device=%s: %s does not decode on %s tensors; the base decodes on the CPU", device,
                    type(policy).__name__, device.type)
        return policy, torch.device("cpu")
    return decoder, device
