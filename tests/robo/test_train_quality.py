"""Training must actually learn: a short run of the default recipe (SAC, 150k env steps, 160 s
alone on this CPU, 203 s in CI, so slow: `make test-all`) against random and untrained actors. (100k steps was too
short on a fresh install on 2026-11-22: the policy survived 1.8 s against 3 x 0.62 s for a random one; 150k: 5.0 s.)"""

import numpy as np
import pytest
import torch

from policies.mlp import MLPPolicy
from robo.evaluate import rollout
from robo.rl.trainer import Trainer
from sims.envs import make_batched_task
from tests.hydra_configs import composed_dict


class RandomPolicy:
    obs_dim, action_dim = 22, 4

    def __init__(self):
        self.rng = np.random.default_rng(0)

    def reset(self, mask=None):
        return None

    def act(self, obs):
        return self.rng.uniform(-1, 1, (obs.shape[0], 4)).astype(np.float32)


def survival_seconds(policy) -> float:
    """Mean time (s) before crashing over 64 Crazyflies from 0.5 m / 30 deg starts, capped at 5 s."""
    task = make_batched_task("hover", "crazyflie", 64)
    task.seed(1)
    r = rollout(policy, task, 5.0)
    return float(np.where(r.crashed_at < 0, len(r.times) - 1, r.crashed_at).mean() * task.dt)


@pytest.mark.slow
def test_short_run_flies_far_longer_than_random_or_untrained(tmp_path):
    torch.set_num_threads(1)
    c = composed_dict("train", "total_steps=150000", "eval_every=1000000", "checkpoint_every=1000000")
    trainer = Trainer(c, tmp_path)
    trainer.train(progress=False)
    trained = survival_seconds(trainer.policy())
    torch.manual_seed(0)
    untrained = MLPPolicy(trainer.policy().config)
    assert trained > 3 * survival_seconds(RandomPolicy())
    assert trained > 2 * survival_seconds(untrained)
