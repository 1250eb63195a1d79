"""Imagination: gymnasium envs backed by learned world models, policy ranking and training in
imagination, and synthetic data for BC (``robo imagine evaluate|train|synthesize``)."""

from .imagined_env import ImaginedEnv, MixedVectorEnv, SingleImaginedEnv
from .rollout import imagine_rollout, open_loop_error, rank_policies, spearman
from .tasks import ImagineTask, make_real_vec_env, make_task, transitions

__all__ = ["ImagineTask", "ImaginedEnv", "MixedVectorEnv", "SingleImaginedEnv", "imagine_rollout", "make_real_vec_env",
           "make_task", "open_loop_error", "rank_policies", "spearman", "transitions"]
