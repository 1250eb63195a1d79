"""Record a Meta-World task's scripted expert as a LeRobot dataset (``robo record task=metaworld``).

    record_metaworld("data/mw_reach", "reach-v3", episodes=10)               # state (39,)
    record_metaworld("data/mw_reach_img", "reach-v3", episodes=10, obs="image")   # hand (4,) + corner2 image

Only successful episodes are kept (unless ``keep_failures``); the summary counts the attempts, so it carries
the expert's success rate on the task.
"""

from __future__ import annotations

import time
from pathlib import Path

from tqdm import tqdm

from .record import add_episode
from .writer import DatasetWriter

CONTROL_HZ = 80.0   # Meta-World: 5 MuJoCo steps of 2.5 ms per action
HAND_NAMES = ["hand_x", "hand_y", "hand_z", "gripper_opening"]
ACTION_NAMES = ["hand_dx", "hand_dy", "hand_dz", "gripper_effort"]


def _vec(dim: int, names: list[str] | None = None) -> dict:
    return {"dtype": "float32", "shape": [dim], "names": names}


def metaworld_features(obs: str, image_size: int = 96, video: bool = False) -> dict:
    """Dataset features: the (39,) state, or the hand (4,) + the (39,) state as environment state + the fixed
    camera's image (PNG frames, or an mp4 video with ``video``)."""
    action = _vec(4, ACTION_NAMES)
    if video and obs != "image":
        raise ValueError(f"video=true stores the camera image as mp4; use it with obs=image, not obs={obs!r}")
    if obs == "state":
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

    features = metaworld_features(obs, image_size, video)
    demos = iter_demos(episodes, seed, env_name, obs, keep_failures, max_attempts, camera, image_size)
    t0 = time.time()
    attempts, frames, successes = 0, 0, 0
    with DatasetWriter(out, CONTROL_HZ, features, robot_type="sawyer", overwrite=overwrite) as w:
        for ep, attempt, success in tqdm(demos, total=episodes, desc=f"record {env_name}", disable=not progress,
                                         leave=False):
            add_episode(w, ep, f"Meta-World {env_name}", obs)
            frames += len(ep["action"])
            successes += success
            attempts = attempt + 1
    return {"dataset": str(out), "task": env_name, "episodes": episodes, "frames": frames, "attempts": attempts,
            "expert_success_rate": successes / attempts, "mean_episode_length": frames / episodes,
            "seconds": time.time() - t0}
