"""robo.foundation.trim: a teacher's trim is measured once and kept on disk with its checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from policies.foundation import load_raptor
from robo.foundation.trim import TRIM_FILE, load_trimmed, trim_record


pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_trim_is_measured_once_and_read_back(tmp_path, heavy_crazyflie, monkeypatch):
    teacher = {"dir": str(tmp_path), "checkpoint": "teachers/0000/checkpoints/best/policy"}
    assert trim_record(teacher) is None
    first = load_trimmed(teacher, load_raptor(), heavy_crazyflie)
    record = json.loads((tmp_path / TRIM_FILE).read_text())
    assert record == trim_record(teacher) and record["checkpoint"] == teacher["checkpoint"]
    monkeypatch.setattr("robo.foundation.trim.trim_policy", lambda *a, **k: pytest.fail("measured twice"))
    again = load_trimmed(teacher, load_raptor(), heavy_crazyflie)
    obs = torch.randn(4, 22)
    first.reset(), again.reset()
    torch.testing.assert_close(again.act(obs), first.act(obs))
    monkeypatch.undo()  # a new checkpoint in the same folder is measured anew
    load_trimmed({**teacher, "checkpoint": "other"}, load_raptor(), heavy_crazyflie)
    assert trim_record(teacher)["checkpoint"] == "other"
