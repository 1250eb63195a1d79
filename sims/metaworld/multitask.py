"""Several Meta-World v3 tasks as one env whose observation names the task: Meta-World's MT10 / MT50 form.

``gymnasium.make("sims.metaworld.multitask:robo/MetaWorldMultiTask-v0", env_names=["reach-v3", "hammer-v3"])``
(the ``module:`` prefix imports this module, which registers the id; it needs the ``metaworld`` package).

Each episode is one of the tasks ``env_names`` (each a ``MetaWorldEnv``, state observations): drawn per episode
from the env's generator (``reset(seed=s)`` seeds it, so seed s is always the same task and scene), or, with
``task`` (an index into ``env_names`` or a name), always that task. The scene of task k reset with seed s is the
single-task env's (``MetaWorldEnv(env_names[k]).reset(seed=s)``): demos and evaluations per task keep their seeds.

Observation: (39 + n,) float32, n = len(env_names): the task's 39-float Meta-World state (see ``env.py``) followed
by the one-hot task id (slot 39 + k is 1 on task k), as Meta-World's ``OneHotWrapper`` appends it in MT10 / MT50.
Its bounds are those of the tasks the env can be on (the goal bounds differ by task: ``task`` fixes one, else
their union). Action (4,), reward, success and the 500-step episode are the task's; ``info`` adds ``task``
(the env name) and ``task_index`` (k).
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from .env import MAX_PATH_LENGTH, STATE_DIM, MetaWorldEnv
from .tasks import GROUPS

ENV_ID = "robo/MetaWorldMultiTask-v0"
MAKE_ID = f"{__name__}:{ENV_ID}"   # gym.make(MAKE_ID) imports this module first


def one_hot(index: int, n: int) -> np.ndarray:
    """(n,) float32, 1 at ``index``: the task id appended to the state."""
    if not 0 <= index < n:
        raise ValueError(f"task index {index} is outside 0..{n - 1}")
    v = np.zeros(n, np.float32)
    v[index] = 1.0
    return v


def with_task_id(state: np.ndarray, index: int, n: int) -> np.ndarray:
    """(..., 39) state(s) -> (..., 39 + n) float32 with the one-hot id of task ``index`` of ``n`` appended."""
    state = np.asarray(state, np.float32)
    if state.shape[-1] != STATE_DIM:
        raise ValueError(f"state has shape {state.shape}, expected (..., {STATE_DIM}) (Meta-World's state)")
    tail = np.broadcast_to(one_hot(index, n), state.shape[:-1] + (n,))
    return np.concatenate([state, tail], axis=-1)


def checked_names(env_names: Sequence[str]) -> list[str]:
    """``env_names`` as a list; ValueError unless they are one or more distinct names."""
    names = [env_names] if isinstance(env_names, str) else list(env_names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"env_names must be distinct Meta-World env names, at least one; got {names}")
    return names


def task_index(env_names: Sequence[str], task: int | str) -> int:
    """``task`` (an index or an env name) -> its index in ``env_names``; ValueError if it is neither."""
    if isinstance(task, str):
        if task not in env_names:
            raise ValueError(f"task {task!r} is not one of this env's tasks {list(env_names)}")
        return list(env_names).index(task)
    k = int(task)
    if not 0 <= k < len(env_names):
        raise ValueError(f"task index {k} is outside 0..{len(env_names) - 1} ({len(env_names)} tasks)")
    return k


class MetaWorldMultiTaskEnv(gym.Env):
    """Meta-World tasks with a one-hot task id in the state; see the module."""

    metadata = MetaWorldEnv.metadata

    def __init__(self, env_names: Sequence[str] = tuple(GROUPS["all"]), task: int | str | None = None,
                 obs_type: str = "state", render_size: int = 240, render_mode: str | None = None,
                 terminate_on_success: bool = True, **env_kwargs):
        names = checked_names(env_names)
        if obs_type != "state":
            raise ValueError(f"obs_type {obs_type!r}: the multi-task env has state observations only ('state')")
        self.env_names, self.render_mode = names, render_mode
        self.task = None if task is None else task_index(names, task)
        kw = dict(render_size=render_size, render_mode=render_mode, terminate_on_success=terminate_on_success,
                  **env_kwargs)   # camera, effects; image_size is unused with state observations
        ids = range(len(names)) if self.task is None else [self.task]
        self.envs = {k: MetaWorldEnv(names[k], **kw) for k in ids}   # only the fixed task's when one is fixed
        n = len(names)
        low = np.min([e.observation_space.low for e in self.envs.values()], axis=0)
        high = np.max([e.observation_space.high for e in self.envs.values()], axis=0)
        self.observation_space = gym.spaces.Box(np.concatenate([low, np.zeros(n, np.float32)]),
                                                np.concatenate([high, np.ones(n, np.float32)]), dtype=np.float32)
        self.action_space = next(iter(self.envs.values())).action_space
        self.current = self.task if self.task is not None else 0   # the task of the episode under way

    @property
    def env(self) -> MetaWorldEnv:
        """The current task's single-task env."""
        return self.envs[self.current]

    @property
    def state(self) -> np.ndarray:
        """(39,) the current task's last Meta-World state (no task id)."""
        return self.env.state

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        k = self.task if self.task is not None else int(self.np_random.integers(len(self.env_names)))
        # seed s resets the task's scene as the single-task env's seed s does; no seed: the next draw of ours
        inner_seed = int(seed) if seed is not None else int(self.np_random.integers(2**31))
        self.current = k
        obs, info = self.env.reset(seed=inner_seed)
        return self._obs(obs), self._info(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._obs(obs), reward, terminated, truncated, self._info(info)

    def render(self) -> np.ndarray | None:
        return self.env.render()

    def close(self) -> None:
        for e in self.envs.values():
            e.close()

    def _obs(self, state: np.ndarray) -> np.ndarray:
        return with_task_id(state, self.current, len(self.env_names))

    def _info(self, info: dict) -> dict:
        return {**info, "task": self.env_names[self.current], "task_index": self.current}


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=f"{__name__}:MetaWorldMultiTaskEnv", max_episode_steps=MAX_PATH_LENGTH)
