"""benchmarks/l2f_validation.py: Learning to Fly's validation as robo flies it (starts up to 90 deg, 1 m/s, 1 rad/s,
a constant random force, the 0.6 m box)."""

import pytest


@pytest.fixture
def l2f(benchmark):
    return benchmark("l2f_validation")


def test_the_starts_are_l2fs_and_raptor_passes_most_of_them(l2f):
    task = l2f.validation_task(64, seed=0)
    init = task.config.init
    assert (init.position_radius, init.angle_deg, init.velocity, init.angular_velocity, init.guidance) == \
        (0.2, 90.0, 1.0, 1.0, 0.1)
    row = l2f.score(l2f.make_policy({"kind": "raptor"}), 64, seed=0, settle=0.2)
    terminated, settled = (float(row[k].rstrip("%")) / 100 for k in ("terminated", "settled"))
    assert 0.0 < terminated < 0.4 and settled > 0.6, row   # 256 episodes: 16.8 % terminated, 82.8 % settled
    assert row["mean max error after 200 steps (m)"] < 0.2


def test_a_bad_policy_spec_is_refused_in_one_line(l2f):
    with pytest.raises(SystemExit) as e:
        l2f.main(["--policy", "x=/nonexistent/policy"])
    assert e.value.code == 2
