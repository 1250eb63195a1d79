import numpy as np
import pytest

from robo.curriculum import (AdaptiveCurriculum, CurriculumLog, PrioritizedLevelReplay, Schedule,
                             ScheduledCurriculum, apply)
from sims.envs import make_task_config


def test_linear_and_exponential_schedules():
    lin = Schedule(start=1.0, end=3.0, begin_step=100, end_step=300)
    assert [lin(s) for s in (0, 100, 200, 300, 10_000)] == [1.0, 1.0, 2.0, 3.0, 3.0]
    exp = Schedule(start=0.1, end=10.0, begin_step=0, end_step=100, shape="exponential")
    assert exp(50) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same sign"):
        Schedule(start=0.0, end=1.0, shape="exponential")
    with pytest.raises(ValueError, match="must not precede"):
        Schedule(start=0.0, end=1.0, begin_step=10, end_step=5)


def test_scheduled_curriculum_writes_into_a_task_config():
    task = make_task_config("hover")
    cur = ScheduledCurriculum({"init.angle_deg": {"start": 5.0, "end": 30.0, "end_step": 1000},
                               "reward.action": Schedule(0.1, 0.5, 0, 1000)})
    apply(cur.update(500), task)
    assert task.init.angle_deg == pytest.approx(17.5) and task.reward.action == pytest.approx(0.3)
    with pytest.raises(KeyError, match="has no field 'tilt'"):
        apply({"init.tilt": 1.0}, task)


def test_adaptive_curriculum_moves_with_success():
    cur = AdaptiveCurriculum({"init.angle_deg": (5.0, 45.0)}, promote_above=0.8, demote_below=0.4, step_size=0.25)
    assert cur.update(0, None) == {"init.angle_deg": 5.0}
    for _ in range(5):
        values = cur.update(0, {"success_rate": 0.9})
    assert cur.difficulty == 1.0 and values["init.angle_deg"] == 45.0
    cur.update(0, {"success_rate": 0.6})  # between thresholds: hold
    assert cur.difficulty == 1.0
    cur.update(0, {"success_rate": 0.1})
    assert cur.difficulty == 0.75
    clone = AdaptiveCurriculum({"init.angle_deg": (5.0, 45.0)})
    clone.load_state_dict(cur.state_dict())
    assert clone.values() == cur.values()


def test_level_replay_prefers_high_scores_and_stale_levels():
    plr = PrioritizedLevelReplay(num_levels=100, replay_prob=1.0, temperature=0.1, staleness_coef=0.0, min_seen=4,
                                 seed=0)
    first = plr.sample(4)
    assert len(set(first.tolist())) == 4  # unseen levels first
    for level, score in zip(first, (0.1, 5.0, 0.2, 0.3)):
        plr.update(int(level), score)
    counts = np.bincount(plr.sample(200), minlength=100)
    assert counts[first[1]] > 150  # the hardest level dominates at low temperature
    stale = PrioritizedLevelReplay(num_levels=3, replay_prob=1.0, staleness_coef=1.0, min_seen=3, seed=0)
    order = stale.sample(3)
    for lv in order:
        stale.update(int(lv), 1.0)
    p = stale.replay_distribution()
    assert p[order[0]] > p[order[1]] > p[order[2]]  # the level sampled longest ago comes first


def test_level_replay_state_round_trip_and_errors():
    a = PrioritizedLevelReplay(num_levels=50, seed=1)
    for lv in a.sample(20):
        a.update(int(lv), float(lv))
    b = PrioritizedLevelReplay(num_levels=50, seed=99)
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a.sample(30), b.sample(30))
    with pytest.raises(ValueError, match="finite"):
        a.update(0, float("nan"))
    with pytest.raises(ValueError, match="replay_prob"):
        PrioritizedLevelReplay(replay_prob=1.5)


def test_curriculum_log_records_what_was_in_force(tmp_path):
    log = CurriculumLog()
    log.record(0, {"init.angle_deg": 5.0}, {"success_rate": 0.0})
    log.record(1000, {"init.angle_deg": 10.0}, {"success_rate": 0.5})
    text = log.write_csv(tmp_path / "c.csv").read_text().splitlines()
    assert text[0] == "step,init.angle_deg,stat/success_rate" and text[2] == "1000,10.0,0.5"
