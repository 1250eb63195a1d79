"""robo.foundation.trim: a teacher's trim is measured once and kept on disk with its checkpoint."""

from __future__ import annotations

import json

import numpy as np
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


def test_the_students_mean_is_trimmed_on_each_quadrotor(heavy_crazyflie):
    """``trimmed_students``: two copies of RAPTOR as the students, on the heavy Crazyflie (settles ~10 cm low)
    and a plain one: the heavy one's shift is mostly -z, and the shifted mean then hovers on the reference."""
    from robo.evaluate import make_fleet_task, rollout
    from robo.foundation.fleet import StudentLabeller
    from robo.foundation.trim import trimmed_students
    from robo.rl.trim import settled_offsets
    from sims.envs import make_robot

    quads, starts = [heavy_crazyflie, make_robot("crazyflie")], 8
    students = [load_raptor(), load_raptor()]
    shift = trimmed_students(students, quads, starts=starts)
    assert shift.shape == (2, 3) and shift[0, 2] < -0.05 and abs(shift[0, 2]) > 3 * abs(shift[0, :2]).max()
    task = make_fleet_task("hover", quads, starts, seed=123)  # new starts
    errors = [settled_offsets(rollout(StudentLabeller(students, s), task, 5.0), 2, 100)[1]
              for s in (None, np.repeat(shift, starts, axis=0))]
    assert errors[0][0] > 0.05 and errors[1][0] < 0.01 and errors[1][1] <= errors[0][1] + 0.002
