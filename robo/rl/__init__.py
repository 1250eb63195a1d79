"""RL on robo's batched sims through stable-baselines3."""
