"""Meta-World (Yu et al. 2019; the ``metaworld`` package, v3 envs on MuJoCo + gymnasium): its 50 Sawyer tasks as
robo tasks (one at a time, or several as one multi-task env with a one-hot task id: ``multitask.py``), and
demonstrations from its scripted experts. Importing this package imports no ``metaworld``;
the env and the demos do, when made (``pip install 'robo[metaworld]'``)."""

from .env import ENV_ID, MAKE_ID, MetaWorldEnv, env_names
from .multitask import MetaWorldMultiTaskEnv, one_hot, with_task_id
from .tasks import DIFFICULTY, GROUPS, select_tasks

__all__ = ["DIFFICULTY", "ENV_ID", "GROUPS", "MAKE_ID", "MetaWorldEnv", "MetaWorldMultiTaskEnv", "env_names",
           "one_hot", "select_tasks", "with_task_id"]
