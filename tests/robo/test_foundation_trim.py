"""robo.foundation.trim: a teacher's steady hover offset is measured and removed, exactly, and kept on disk."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from policies.foundation import FoundationConfig, FoundationPolicy, load_raptor
from policies.mlp import MLPConfig, MLPPolicy
from robo.foundation.trim import TRIM_FILE, hover_offset, load_trimmed, shifted, trim_record, trim_teacher
from sims.envs import make_robot


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def heavy_crazyflie():
    """A Crazyflie loaded to 34 g: RAPTOR settles ~10 cm low on it (no integral action, high hover throttle)."""
    return dataclasses.replace(make_robot("crazyflie"), mass=0.034)


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
        trim_teacher(MLPPolicy(), make_robot("crazyflie"), iterations=0)


def test_trimming_removes_a_steady_hover_offset(heavy_crazyflie):
    """RAPTOR on the heavy Crazyflie: offset mostly in -z; trimmed, it hovers on the reference, from new starts too."""
    trimmed, record = trim_teacher(load_raptor(), heavy_crazyflie)
    assert record["median_error_m"] > 0.05
    assert record["offset_m"][2] < -0.05 and abs(record["offset_m"][2]) > 3 * max(map(abs, record["offset_m"][:2]))
    assert record["trimmed_median_error_m"] < 0.005
    _, fresh = hover_offset(trimmed, heavy_crazyflie, starts=8, seed=123)
    assert fresh < 0.005


def test_an_untrimmable_teacher_is_kept_as_it_is(heavy_crazyflie):
    """A teacher that crashes from every start has no offset to measure: returned unchanged."""
    torch.manual_seed(0)
    untrained = MLPPolicy(MLPConfig(hidden_dims=[8]))
    same, record = trim_teacher(untrained, heavy_crazyflie, starts=4)
    assert same is untrained and record["offset_m"] == [0.0, 0.0, 0.0]
    assert record["median_error_m"] == record["trimmed_median_error_m"] == float("inf")


def test_a_trim_is_measured_once_and_read_back(tmp_path, heavy_crazyflie, monkeypatch):
    teacher = {"dir": str(tmp_path), "checkpoint": "teachers/0000/checkpoints/best/policy"}
    assert trim_record(teacher) is None
    first = load_trimmed(teacher, load_raptor(), heavy_crazyflie)
    record = json.loads((tmp_path / TRIM_FILE).read_text())
    assert record == trim_record(teacher) and record["checkpoint"] == teacher["checkpoint"]
    monkeypatch.setattr("robo.foundation.trim.trim_teacher", lambda *a, **k: pytest.fail("measured twice"))
    again = load_trimmed(teacher, load_raptor(), heavy_crazyflie)
    obs = torch.randn(4, 22)
    first.reset(), again.reset()
    torch.testing.assert_close(again.act(obs), first.act(obs))
    monkeypatch.undo()  # a new checkpoint in the same folder is measured anew
    load_trimmed({**teacher, "checkpoint": "other"}, load_raptor(), heavy_crazyflie)
    assert trim_record(teacher)["checkpoint"] == "other"


def test_refine_trims_keeps_only_shifts_that_lower_each_flyer_s_error():
    from robo.foundation.trim import refine_trims

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
