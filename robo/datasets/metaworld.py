"""Record a Meta-World task's scripted expert as a LeRobot dataset (``robo record task=metaworld``).

    record_metaworld("data/mw_reach", "reach-v3", episodes=10)               # state (39,)
    record_metaworld("data/mw_reach_img", "reach-v3", episodes=10, obs="image")   # hand (4,) + corner2 image
    record_metaworld_multitask("data/mw_mt", ["reach-v3", "hammer-v3"], episodes=10)   # (39 + 2,): + one-hot id

Only successful episodes are kept (unless ``keep_failures``); the summary counts the attempts, so it carries
the expert's success rate on the task.
"""

from __future__ import annotations

import time
from itertools import groupby
from pathlib import Path

from tqdm import tqdm

from .record import add_episode
from .writer import DatasetWriter

CONTROL_HZ = 80.0   # Meta-World: 5 MuJoCo steps of 2.5 ms per action
HAND_NAMES = ["hand_x", "hand_y", "hand_z", "gripper_opening"]
ACTION_NAMES = ["hand_dx", "hand_dy", "hand_dz", "gripper_effort"]


def _vec(dim: int, names: list[str] | None = None) -> dict:
    return {"dtype": "float32", "shape": [dim], "names": names}


def metaworld_features(obs: str, image_size: int = 96, video: bool = False,
                       task_names: list[str] | None = None) -> dict:
    """Dataset features: the (39,) state, or the hand (4,) + the (39,) state as environment state + the fixed
    camera's image (PNG frames, or an mp4 video with ``video``); with ``task_names`` (multi-task, state only) the
    state is (39 + n,), its last n floats the one-hot task id."""
    action = _vec(4, ACTION_NAMES)
    if video and obs != "image":
        raise ValueError(f"video=true stores the camera image as mp4; use it with obs=image, not obs={obs!r}")
    if task_names and obs != "state":
        raise ValueError(f"multi-task Meta-World demos have state observations only (obs=state), not obs={obs!r}")
    if obs == "state":
        if task_names:
            return {"observation.state": _vec(39 + len(task_names), [f"state_{i}" for i in range(39)] +
                                              [f"task={n}" for n in task_names]), "action": action}
        return {"observation.state": _vec(39), "action": action}
    if obs == "image":
        return {"observation.state": _vec(4, HAND_NAMES), "observation.environment_state": _vec(39),
                "observation.image": {"dtype": "video" if video else "image", "shape": [image_size, image_size, 3],
                                      "names": ["height", "width", "channels"]},
                "action": action}
    raise ValueError(f"obs={obs!r}; choose 'state' or 'image'")


def record_metaworld(out: str | Path, env_name: str, episodes: int, obs: str = "state", seed: int = 0,
                     keep_failures: bool = False, overwrite: bool = False, progress: bool = True,
                     video: bool = False, camera: str = "corner2", image_size: int = 96,
                     max_attempts: int | None = None) -> dict:
    """Run Meta-World's scripted expert on ``env_name`` (attempt i reset with seed ``seed + i``) until
    ``episodes`` episodes are kept and write them to ``out``. Returns the dataset's summary with the expert's
    ``expert_success_rate`` (successes / attempts) and the ``attempts`` it took."""
    from sims.metaworld.demos import iter_demos

    demos = iter_demos(episodes, seed, env_name, obs, keep_failures, max_attempts, camera, image_size)
    t0 = time.time()
    with DatasetWriter(out, CONTROL_HZ, metaworld_features(obs, image_size, video), robot_type="sawyer",
                       overwrite=overwrite) as w:
        counts = _write_demos(w, demos, env_name, episodes, obs, progress)
    return {"dataset": str(out), "task": env_name, **counts, "seconds": time.time() - t0}


def record_metaworld_multitask(out: str | Path, env_names: list[str], episodes: int, seed: int = 0,
                               keep_failures: bool = False, overwrite: bool = False, progress: bool = True,
                               max_attempts: int | None = None) -> dict:
    """``record_metaworld`` of each task of ``env_names`` in turn (``episodes`` each, attempt i of every task
    reset with seed ``seed + i``) into one dataset whose (39 + n,) state ends with the task's one-hot id, as
    ``sims.metaworld.multitask`` observes it; each episode's language task is its env's. Returns the summary
    over all tasks (``episodes`` and ``frames`` in all, ``expert_success_rate`` over all attempts) with
    ``per_task``: each task's own counts."""
    from sims.metaworld.demos import iter_multitask_demos
    from sims.metaworld.multitask import checked_names

    names = checked_names(env_names)
    t0, per_task = time.time(), {}
    demos = iter_multitask_demos(episodes, seed, names, keep_failures, max_attempts)
    with DatasetWriter(out, CONTROL_HZ, metaworld_features("state", task_names=names), robot_type="sawyer",
                       overwrite=overwrite) as w:
        for name, group in groupby(demos, key=lambda d: d[0]):
            per_task[name] = _write_demos(w, (d[1:] for d in group), name, episodes, "state", progress)
    attempts, frames = (sum(p[k] for p in per_task.values()) for k in ("attempts", "frames"))
    successes = round(sum(p["expert_success_rate"] * p["attempts"] for p in per_task.values()))
    return {"dataset": str(out), "task": "multitask", "tasks": names, "episodes": episodes * len(names),
            "frames": frames, "attempts": attempts, "expert_success_rate": successes / attempts,
            "mean_episode_length": frames / (episodes * len(names)), "per_task": per_task,
            "seconds": time.time() - t0}


def _write_demos(w: DatasetWriter, demos, env_name: str, episodes: int, obs: str, progress: bool) -> dict:
    """(episode, attempt, success) triples of ``iter_demos`` -> ``w`` under the language task "Meta-World
    <env_name>" -> {"episodes", "frames", "attempts", "expert_success_rate", "mean_episode_length"}."""
    attempts, frames, successes = 0, 0, 0
    for ep, attempt, success in tqdm(demos, total=episodes, desc=f"record {env_name}", disable=not progress,
                                     leave=False):
        add_episode(w, ep, f"Meta-World {env_name}", obs)
        frames += len(ep["action"])
        successes += success
        attempts = attempt + 1
    return {"episodes": episodes, "frames": frames, "attempts": attempts,
            "expert_success_rate": successes / attempts, "mean_episode_length": frames / episodes}
