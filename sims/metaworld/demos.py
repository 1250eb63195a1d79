"""Demonstrations of a Meta-World task by the package's scripted expert (``metaworld.policies``), as episode dicts.

An episode holds, per control step t (the observation before action t): ``obs`` (T, 39) float32 state (or
(T, 4) hand xyz + gripper opening for image observations), ``action`` (T, 4) float32 as executed (the expert's,
clipped to [-1, 1]), ``reward`` (T,) float32 and ``success`` (T,) float32 after action t, ``state`` (T, 39)
float32, and for image observations ``image`` (T, 3, S, S) uint8 from the env's fixed camera. Episodes end at
the first success (``MetaWorldEnv``'s ``terminate_on_success``) or after 500 steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import gymnasium as gym
import numpy as np

from .env import MAKE_ID
from .multitask import checked_names, with_task_id

Episode = dict[str, np.ndarray]


def expert_policy(env_name: str):
    """Meta-World's scripted policy for ``env_name`` (``get_action(obs (39,)) -> (4,)``)."""
    from metaworld.policies import ENV_POLICY_MAP

    if env_name not in ENV_POLICY_MAP:
        raise ValueError(f"Meta-World has no scripted policy for {env_name!r}; choose one of {sorted(ENV_POLICY_MAP)}")
    return ENV_POLICY_MAP[env_name]()


def rollout_expert(env: gym.Env, expert, seed: int) -> tuple[Episode, bool]:
    """One episode of ``expert`` in a ``MetaWorldEnv`` (any obs_type) reset with ``seed`` -> (episode, success)."""
    inner = env.unwrapped
    image = inner.obs_type != "state"
    obs, _ = env.reset(seed=seed)
    keys = ("obs", "action", "reward", "success", "state") + (("image",) if image else ())
    ep: dict[str, list] = {k: [] for k in keys}
    done, info = False, {"is_success": False}
    while not done:
        state = inner.state.copy()
        action = np.clip(np.asarray(expert.get_action(state), np.float32), -1.0, 1.0)
        ep["state"].append(state)
        if image:
            ep["image"].append(np.ascontiguousarray(obs["pixels"].transpose(2, 0, 1)))
            ep["obs"].append(obs["agent_pos"])
        else:
            ep["obs"].append(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        ep["action"].append(action)
        ep["reward"].append(reward)
        ep["success"].append(float(info["is_success"]))
        done = terminated or truncated
    out = {k: np.stack(v) if k in ("obs", "action", "state", "image") else np.asarray(v, np.float32)
           for k, v in ep.items()}
    return out, bool(info["is_success"])


def iter_demos(n: int, seed: int = 0, env_name: str = "reach-v3", obs_type: str = "state",
               keep_failures: bool = False, max_attempts: int | None = None, camera: str = "corner2",
               image_size: int = 96) -> Iterator[tuple[Episode, int, bool]]:
    """Yield ``n`` (episode, attempt index, success) triples of Meta-World's expert on ``env_name``; failures are
    skipped unless ``keep_failures``. Attempt i resets the env with seed ``seed + i`` (the expert is
    deterministic: the seed draws the object and goal positions). ``obs_type``: ``"state"`` or ``"image"``
    (``camera``, ``image_size`` px). Raises RuntimeError after ``max_attempts`` (default 2n + 10)."""
    if n < 1:
        raise ValueError(f"need n >= 1 episodes, got {n}")
    if obs_type not in ("state", "image"):
        raise ValueError(f"obs_type={obs_type!r}; choose 'state' or 'image'")
    expert = expert_policy(env_name)
    env = gym.make(MAKE_ID, env_name=env_name, obs_type="state" if obs_type == "state" else "pixels_agent_pos",
                   camera=camera, image_size=image_size)
    limit, kept = max_attempts or 2 * n + 10, 0
    try:
        for attempt in range(limit):
            ep, success = rollout_expert(env, expert, seed + attempt)
            if success or keep_failures:
                kept += 1
                yield ep, attempt, success
                if kept == n:
                    return
    finally:
        env.close()
    raise RuntimeError(f"the Meta-World expert succeeded on {env_name} in only {kept} of {limit} attempts, fewer "
                       f"than the {n} demos asked for; pass keep_failures=True or raise max_attempts")


def generate_demos(n: int, seed: int = 0, env_name: str = "reach-v3", obs_type: str = "state",
                   keep_failures: bool = False, **kwargs) -> list[Episode]:
    """``n`` expert episodes of ``env_name`` (see ``iter_demos``): the task's ``demo_generator``
    (``configs/task/metaworld.yaml``)."""
    return [ep for ep, _, _ in iter_demos(n, seed, env_name, obs_type, keep_failures, **kwargs)]



def iter_multitask_demos(n: int, seed: int = 0, env_names: Sequence[str] = (), keep_failures: bool = False,
                         max_attempts: int | None = None) -> Iterator[tuple[str, Episode, int, bool]]:
    """``iter_demos`` of each task of ``env_names`` in turn (``n`` each, attempt i of every task reset with seed
    ``seed + i``, state observations) as (env name, episode, attempt index, success), the one-hot id of the
    task's index appended to the episode's ``obs``: (T, 39 + len(env_names)) as the multi-task env observes it
    (``multitask.py``); its ``state`` stays (T, 39)."""
    names = checked_names(env_names)
    for k, name in enumerate(names):
        for ep, attempt, success in iter_demos(n, seed, name, "state", keep_failures, max_attempts):
            yield name, {**ep, "obs": with_task_id(ep["obs"], k, len(names))}, attempt, success


def generate_multitask_demos(n: int, seed: int = 0, env_names: Sequence[str] = (), obs_type: str = "state",
                             keep_failures: bool = False, **kwargs) -> list[Episode]:
    """``n`` expert episodes of each task of ``env_names``, task after task, with the task id in ``obs`` (see
    ``iter_multitask_demos``): the ``demo_generator`` of ``configs/task/metaworld_multitask.yaml``."""
    if obs_type != "state":
        raise ValueError(f"obs_type={obs_type!r}: multi-task demos have state observations only ('state')")
    return [ep for _, ep, _, _ in iter_multitask_demos(n, seed, env_names, keep_failures, **kwargs)]
