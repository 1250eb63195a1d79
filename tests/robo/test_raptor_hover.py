"""The issue's acceptance check for the simulator: RAPTOR's released policy hovers."""

import pytest
import torch

from policies.foundation import load_raptor
from robo.evaluate import flight_metrics, rollout
from sims.envs import make_batched_task


@pytest.mark.parametrize("robot", ["crazyflie", "x500"])
def test_raptor_hovers_from_random_starts(robot):
    task = make_batched_task("hover", robot, num_envs=256)
    task.seed(0)
    m = flight_metrics(rollout(load_raptor(), task, seconds=5.0))
    assert m["crashes"] == 0
    assert m["final_median_position_error"] < 0.10


def test_untrained_policy_does_not_hover():
    """The hover check can fail: a random GRU of the same shape crashes or drifts."""
    from policies.foundation import FoundationPolicy

    torch.manual_seed(0)
    task = make_batched_task("hover", "crazyflie", num_envs=64)
    task.seed(0)
    m = flight_metrics(rollout(FoundationPolicy(), task, seconds=5.0))
    assert m["crashes"] > 0 or m["final_median_position_error"] > 0.10


def test_raptor_hovers_domain_randomized_quadrotors():
    """RAPTOR flies 20 g to 3 kg zero-shot: a check on the randomization sampler and the sim."""
    from sims.quadrotor.randomization import RandomizationConfig

    task = make_batched_task("hover", "crazyflie", num_envs=256, randomization=RandomizationConfig())
    task.seed(0)
    r = rollout(load_raptor(), task, seconds=5.0)
    masses = task.sim.params.mass
    assert masses.min() < 0.05 and masses.max() > 1.5  # the batch really spans the range
    m = flight_metrics(r)
    assert m["crashes"] <= 3 and m["final_median_position_error"] < 0.10
