"""Gymnasium environments, registered under the ``robo/`` namespace on import of ``sims``.

=============================  ==============================================
id                             task
=============================  ==============================================
robo/QuadrotorHover-v0         hold the hover point
robo/QuadrotorWaypoint-v0      fly to a random waypoint and hold it
robo/QuadrotorFigureEight-v0   track a figure-eight
=============================  ==============================================

Single: ``gymnasium.make(id)``; batched: ``gymnasium.make_vec(id, num_envs=B,
vectorization_mode="vector_entry_point")`` gives a ``QuadrotorVectorEnv``.
"""

import gymnasium as gym

from .config import InitConfig, QuadrotorTaskConfig, RewardConfig, TerminationConfig
from .observation import OBS_DIM, OBS_SLICES, observe
from .quadrotor_env import (QuadrotorEnv, QuadrotorVectorEnv, make_batched_task, make_robot,
                            make_task_config)
from .task import BatchedQuadrotorTask

ENV_IDS = {"hover": "robo/QuadrotorHover-v0", "waypoint": "robo/QuadrotorWaypoint-v0",
           "figure_eight": "robo/QuadrotorFigureEight-v0"}


def register_envs() -> None:
    for task, env_id in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="sims.envs.quadrotor_env:QuadrotorEnv",
                         vector_entry_point="sims.envs.quadrotor_env:QuadrotorVectorEnv", kwargs={"task": task})


register_envs()

__all__ = [
    "ENV_IDS", "OBS_DIM", "OBS_SLICES", "BatchedQuadrotorTask", "InitConfig", "QuadrotorEnv", "QuadrotorTaskConfig",
    "QuadrotorVectorEnv", "RewardConfig", "TerminationConfig", "make_batched_task", "make_robot", "make_task_config",
    "observe",
]
