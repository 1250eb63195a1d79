"""Feed a natively batched gymnasium ``VectorEnv`` to stable-baselines3 as a ``VecEnv``.

The adapter forwards whole batches (no loop over single envs for stepping); only SB3's
per-env ``infos`` list is built in Python. The wrapped env must autoreset in the same
step (``AutoresetMode.SAME_STEP``) and report finished episodes' last observations in
``info["final_obs"]`` / ``info["_final_obs"]``, which become SB3's ``terminal_observation``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.vec_env import VecEnv


class SB3VecEnvAdapter(VecEnv):
    """``venv``: a gymnasium VectorEnv with SAME_STEP autoreset (e.g. ``QuadrotorVectorEnv``)."""

    def __init__(self, venv: VectorEnv):
        mode = venv.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"SB3 needs same-step autoreset; {type(venv).__name__} has autoreset_mode={mode}")
        self.venv = venv
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions: np.ndarray | None = None
        self._seed: int | None = None

    def reset(self) -> np.ndarray:
        obs, _ = self.venv.reset(seed=self._seed)
        self._seed = None
        return obs

    def seed(self, seed: int | None = None) -> Sequence[None | int]:
        self._seed = seed
        return [seed] * self.num_envs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, -1)

    def step_wait(self):
        obs, reward, terminated, truncated, info = self.venv.step(self._actions)
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = info["final_obs"][i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        for key, cast in (("position_error", float), ("level", int)):
            if key in info:
                for i, v in enumerate(info[key]):
                    infos[i][key] = cast(v)
        return obs, reward.astype(np.float32), dones, infos

    def close(self) -> None:
        self.venv.close()

    # Attribute access: a batched env is one object, so every index sees the same one.
    def _indices(self, indices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        return [indices] if isinstance(indices, int) else list(indices)

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [getattr(self.venv, attr_name) for _ in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        result = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False for _ in self._indices(indices)]
