"""Latent-noise RL steering (DSRL) of frozen chunked policies, and its baselines."""

from .envs import ActionChunkEnv, ChunkEnv, LatentNoiseEnv, ResidualChunkEnv, steering_decoder
from .trainer import SteerTrainer, evaluate_agent, make_chunk_env

__all__ = ["ActionChunkEnv", "ChunkEnv", "LatentNoiseEnv", "ResidualChunkEnv", "SteerTrainer", "evaluate_agent",
           "make_chunk_env", "steering_decoder"]
