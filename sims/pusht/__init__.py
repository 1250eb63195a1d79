"""Push-T in MuJoCo: push a T-shaped block onto a goal pose with a disc pusher.

``gymnasium.make("robo/PushT-v0", obs_type="state" | "pixels_agent_pos" | "pixels")``; see
``pusht_env`` for spaces and units, ``expert`` for the scripted demonstrator.
"""

import gymnasium as gym

from .config import PushTConfig
from .expert import ExpertConfig, PushTExpert
from .geometry import coverage, t_outline, t_rectangles
from .pusht_env import OBS_TYPES, STATE_DIM, PushTEnv
from .symmetry import GoalMirror

ENV_ID = "robo/PushT-v0"


def register_envs() -> None:
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="sims.pusht.pusht_env:PushTEnv",
                     max_episode_steps=PushTConfig.max_episode_steps)


register_envs()

__all__ = ["ENV_ID", "OBS_TYPES", "STATE_DIM", "ExpertConfig", "GoalMirror", "PushTConfig", "PushTEnv", "PushTExpert",
           "coverage", "t_outline", "t_rectangles"]
