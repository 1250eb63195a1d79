"""robo.rl.trim: a policy's steady hover offset is measured and removed, exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from policies.foundation import FoundationConfig, FoundationPolicy, load_raptor
from policies.mlp import MLPConfig, MLPPolicy
from robo.rl.trim import hover_offset, refine_trims, shifted, trim_policy
from sims.envs import make_robot


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("policy", [MLPPolicy(MLPConfig(hidden_dims=[8])), FoundationPolicy(FoundationConfig())],
                         ids=["mlp", "gru"])
def test_a_shifted_policy_reads_a_shifted_position_error(policy):
    torch.manual_seed(0)
    obs, offset = torch.randn(5, 22), np.array([0.03, -0.02, 0.07])
    moved = obs.clone()
    moved[:, 0:3] += torch.as_tensor(offset, dtype=torch.float32)
    policy.reset()
    expected = policy.act(moved)
    trimmed = shifted(policy, offset)
    trimmed.reset()
    torch.testing.assert_close(trimmed.act(obs), expected, atol=1e-6, rtol=1e-5)
    policy.reset()
    assert not torch.allclose(policy.act(obs), expected)  # the original is untouched


def test_only_known_policies_can_be_trimmed():
    with pytest.raises(TypeError, match="cannot trim a object"):
        shifted(object(), np.zeros(3))
    with pytest.raises(ValueError, match="iterations must be >= 1"):
        trim_policy(MLPPolicy(), make_robot("crazyflie"), iterations=0)


def test_trimming_removes_a_steady_hover_offset(heavy_crazyflie):
    """RAPTOR on the heavy Crazyflie: offset mostly in -z; trimmed, it hovers on the reference, from new starts too."""
    trimmed, record = trim_policy(load_raptor(), heavy_crazyflie)
    assert record["median_error_m"] > 0.05
    assert record["offset_m"][2] < -0.05 and abs(record["offset_m"][2]) > 3 * max(map(abs, record["offset_m"][:2]))
    assert record["trimmed_median_error_m"] < 0.005
    _, fresh = hover_offset(trimmed, heavy_crazyflie, starts=8, seed=123)
    assert fresh < 0.005


def test_an_untrimmable_policy_is_kept_as_it_is(heavy_crazyflie):
    """A policy that crashes from every start has no offset to measure: returned unchanged."""
    torch.manual_seed(0)
    untrained = MLPPolicy(MLPConfig(hidden_dims=[8]))
    same, record = trim_policy(untrained, heavy_crazyflie, starts=4)
    assert same is untrained and record["offset_m"] == [0.0, 0.0, 0.0]
    assert record["median_error_m"] == record["trimmed_median_error_m"] == float("inf")


def test_refine_trims_keeps_only_shifts_that_lower_each_flyer_s_error():
    true = np.array([[0.03, -0.02, 0.05], [0.0, 0.0, 0.0], [0.1, 0.0, 0.0]])
    calls = []

    def measure(shift):  # flyer 0: offset = true - shift; flyer 1 crashes; flyer 2 overshoots once shifted
        calls.append(shift.copy())
        offsets = true - shift
        offsets[1] = np.nan
        offsets[2] = true[2] if not shift[2].any() else -2 * true[2]
        errors = np.linalg.norm(offsets, axis=1)
        errors[1] = np.inf
        return offsets, errors

    total, before, after = refine_trims(measure, 3, iterations=2)
    np.testing.assert_allclose(total[0], true[0])  # exact after one step; the second adds nothing
    assert not total[1].any() and not total[2].any()  # crashed: nothing to trim; worse: trim rejected
    assert after[0] < before[0] and before[1] == after[1] == np.inf and after[2] == before[2]
    np.testing.assert_allclose(calls[2][2], 0.0)  # a rejected flyer is not shifted again
    with pytest.raises(ValueError, match="iterations"):
        refine_trims(measure, 3, iterations=0)
