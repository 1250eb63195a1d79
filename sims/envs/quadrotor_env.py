"""Gymnasium front ends of the quadrotor tasks: one env, and a native batched VectorEnv."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sims.quadrotor.dynamics import ParamsBatch
from sims.quadrotor.params import QuadrotorParams, preset
from sims.quadrotor.randomization import RandomizationConfig, sample_params

from .config import QuadrotorTaskConfig
from .task import BatchedQuadrotorTask, ParamSampler

ACTION_SPACE = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def make_task_config(task: str | dict | QuadrotorTaskConfig, **overrides) -> QuadrotorTaskConfig:
    """A task config from a task name (``hover``, ``waypoint``, ``figure_eight``), dict or config."""
    if isinstance(task, QuadrotorTaskConfig):
        return task
    d = {"name": task} if isinstance(task, str) else dict(task)
    d.update(overrides)
    return QuadrotorTaskConfig.from_dict(d)


def make_robot(robot: str | dict | QuadrotorParams) -> QuadrotorParams:
    """Robot parameters from a preset name, a dict ``{preset: name, **field overrides}`` or params."""
    if isinstance(robot, QuadrotorParams):
        return robot
    if isinstance(robot, str):
        return preset(robot)
    d = {k: v for k, v in dict(robot).items() if v is not None}  # null keeps the preset's value
    if "preset" not in d:
        raise ValueError(f"robot config {dict(robot)} needs a 'preset' (crazyflie, racer5, x500)")
    return preset(d.pop("preset"), **d)


def randomization_sampler(randomization: RandomizationConfig | dict, dtype: torch.dtype = torch.float32,
                          device: str | torch.device = "cpu") -> ParamSampler:
    """A ``(n, rng) -> ParamsBatch`` sampler drawing domain-randomized quadrotors (on ``device``)."""
    cfg = randomization if isinstance(randomization, RandomizationConfig) else RandomizationConfig.from_dict(
        dict(randomization))
    return lambda n, rng: sample_params(cfg, n, rng, dtype=dtype, device=device)


def make_batched_task(task="hover", robot="crazyflie", num_envs: int = 1, param_sampler: ParamSampler | None = None,
                      dtype: torch.dtype = torch.float32, privileged: bool = False,
                      randomization: RandomizationConfig | dict | None = None,
                      step_backend: str = "torch", device: str | torch.device = "cpu") -> BatchedQuadrotorTask:
    """A ``BatchedQuadrotorTask`` of ``num_envs`` quadrotors (see ``make_task_config``, ``make_robot``).

    ``step_backend``: ``"torch"``, ``"c"`` (the RK4 step in C, CPU) or ``"compiled"`` (``torch.compile`` of the
    torch step, any device, compiled when the task is made); see ``BatchedQuadrotorSim``.
    ``device``: a torch device (``"cpu"``, ``"cuda"``, ``"cuda:N"``) for the parameters, states, rewards and
    randomized parameters; the same seed flies the same episodes on every device (to float32 rounding).

    ``randomization`` (a ``RandomizationConfig`` or its dict) draws new parameters for every
    env at every reset; ``param_sampler`` is the general form of the same hook.
    """
    if randomization is not None:
        if param_sampler is not None:
            raise ValueError("give either randomization or param_sampler, not both")
        param_sampler = randomization_sampler(randomization, dtype, device)
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    params = ParamsBatch.from_params(make_robot(robot), num_envs, dtype=dtype, device=device)
    return BatchedQuadrotorTask(make_task_config(task), params, param_sampler, privileged, step_backend)


class QuadrotorEnv(gym.Env):
    """One quadrotor (``gymnasium.Env``). Observation (22,), action (4,), see ``sims.envs.observation``.

    Args:
        task: task name, dict or ``QuadrotorTaskConfig``.
        robot: preset name, ``{preset: ..., field: value}`` or ``QuadrotorParams``.
        param_sampler: optional ``(n, rng) -> ParamsBatch`` drawn at every reset.
        randomization: domain randomization (``RandomizationConfig`` or dict), drawn at every reset.
        dtype: simulation dtype (observations are always float32).
        render_mode: None or ``"rgb_array"`` (MuJoCo offscreen).
        step_backend: the simulator's RK4 step, ``"torch"``, ``"c"`` or ``"compiled"`` (see ``BatchedQuadrotorSim``).
        device: the simulator's torch device (numpy at the gymnasium boundary).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 100}

    def __init__(self, task="hover", robot="crazyflie", param_sampler: ParamSampler | None = None,
                 dtype: torch.dtype = torch.float64, render_mode: str | None = None,
                 randomization: RandomizationConfig | dict | None = None, step_backend: str = "torch",
                 device: str | torch.device = "cpu"):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} not supported; use None or 'rgb_array'")
        self.core = make_batched_task(task, robot, 1, param_sampler, dtype, randomization=randomization,
                                      step_backend=step_backend, device=device)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.core.obs_dim,), np.float32)
        self.action_space = ACTION_SPACE
        self.render_mode = render_mode
        self.metadata = dict(self.metadata, render_fps=int(round(1 / self.core.dt)))
        self._renderer = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.core.seed(seed)
        obs = self.core.reset()
        return obs[0].cpu().numpy(), {}

    def step(self, action):
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (4,):
            raise ValueError(f"action has shape {a.shape}, expected (4,)")
        r = self.core.step(torch.as_tensor(a)[None])
        info = {"position_error": float(self.position_error()[0])}
        return (r.obs[0].cpu().numpy(), float(r.reward[0]), bool(r.terminated[0]), bool(r.truncated[0]), info)

    def position_error(self) -> np.ndarray:
        ref, _ = self.core.reference()
        return (self.core.state[:, :3] - ref).norm(dim=-1).cpu().numpy()

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        from sims.quadrotor.render import StateRenderer

        if self._renderer is None:
            self._renderer = StateRenderer(self.core.sim.params.to_params(0))
        return self._renderer.render(self.core.state[0].cpu().numpy(),
                                     target=self.core.reference()[0][0].cpu().numpy())

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


class QuadrotorVectorEnv(VectorEnv):
    """B quadrotors stepped by one batched simulator call (not a loop over single envs).

    Autoreset is ``SAME_STEP``: an env that terminates or truncates is reset inside the same
    ``step``; the returned observation is the new episode's first, and the last observation
    of the finished episode is in ``info["final_obs"]`` (masked by ``info["_final_obs"]``).
    ``info["position_error"]`` (B,) is the distance to the reference before any reset, m, and
    ``info["level"]`` (B,) the curriculum level each env played (-1 without level replay).
    With ``privileged=True`` observations end with ``privileged_observation`` (14 floats) for an
    asymmetric critic, after the deployable part (22 floats + the task's action history).
    ``step_backend``: the simulator's RK4 step, ``"torch"``, ``"c"`` or ``"compiled"`` (see ``BatchedQuadrotorSim``).
    ``device``: where the task's tensors live between steps; ``reset`` and ``step`` take and return numpy (the
    gymnasium API), so each step copies its actions in and its results out once. A consumer on the device
    steps ``self.core`` (``BatchedQuadrotorTask``) with tensors instead.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, task="hover", robot="crazyflie",
                 param_sampler: ParamSampler | None = None, dtype: torch.dtype = torch.float32,
                 privileged: bool = False, randomization: RandomizationConfig | dict | None = None,
                 step_backend: str = "torch", device: str | torch.device = "cpu"):
        self.core = make_batched_task(task, robot, num_envs, param_sampler, dtype, privileged, randomization,
                                      step_backend, device)
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (self.core.obs_dim,), np.float32)
        self.single_action_space = ACTION_SPACE
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(ACTION_SPACE, num_envs)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.core.seed(seed)
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
        return self.core.reset().cpu().numpy(), {}

    def step(self, actions):
        a = torch.as_tensor(np.asarray(actions), dtype=self.core.state.dtype)
        if a.shape != (self.num_envs, 4):
            raise ValueError(f"actions have shape {tuple(a.shape)}, expected ({self.num_envs}, 4)")
        obs, final_obs, reward, terminated, truncated, t_info = autoreset_step(self.core, a)
        info: dict[str, Any] = {"position_error": _host(t_info["position_error"]), "level": _host(t_info["level"])}
        done_host = _host(terminated | truncated)
        if done_host.any():
            info["final_obs"] = _host(final_obs).copy()
            info["_final_obs"] = done_host.copy()
        return _host(obs), _host(reward), _host(terminated), _host(truncated), info


def autoreset_step(task: BatchedQuadrotorTask, actions: torch.Tensor):
    """One step of ``task`` with same-step autoreset, on tensors (``QuadrotorVectorEnv.step`` is this on numpy;
    robo's fast off-policy rollouts call it directly).

    actions (B, 4) in [-1, 1]. Returns ``(obs, final_obs, reward, terminated, truncated, info)``: obs (B, obs_dim)
    after the resets (a done env's new first observation), final_obs (B, obs_dim) before them, reward (B,),
    terminated / truncated (B,) bool, and info ``{"position_error": (B,) m before any reset, "level": (B,)}``.
    """
    r = task.step(actions)
    ref, _ = task.reference()
    info = {"position_error": (task.state[:, :3] - ref).norm(dim=-1), "level": task.levels.clone()}
    done = r.terminated | r.truncated
    obs = task.reset(done) if bool(done.any()) else r.obs
    return obs, r.obs, r.reward, r.terminated, r.truncated, info


def _host(x: torch.Tensor) -> np.ndarray:
    """``x`` as a numpy array (a view of a CPU tensor; a copy from any other device)."""
    return x.cpu().numpy()
