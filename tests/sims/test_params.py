import math

import numpy as np
import pytest

from sims.quadrotor import PRESETS, QuadrotorParams, preset


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_physical_and_can_hover(name):
    p = preset(name)
    assert 1.3 < p.thrust_to_weight < 10
    assert 0.0 < p.hover_command < 1.0
    c0, c1, c2 = np.mean(p.thrust_curve, axis=0)
    u = p.hover_command
    assert math.isclose(4 * (c0 + c1 * u + c2 * u * u), p.mass * 9.81, rel_tol=1e-9)


def test_preset_masses_match_the_issue():
    assert 0.027 <= preset("crazyflie").mass <= 0.032
    assert math.isclose(preset("x500").mass, 2.0)


def test_unknown_preset_is_named():
    with pytest.raises(ValueError, match="unknown quadrotor preset 'hummingbird'.*crazyflie"):
        preset("hummingbird")


@pytest.mark.parametrize("change, message", [
    ({"mass": -0.1}, "mass must be a positive"),
    ({"mass": float("nan")}, "mass"),
    ({"inertia": ((1e-5, 0, 0), (0, -1e-5, 0), (0, 0, 1e-5))}, "positive definite"),
    ({"inertia": ((1e-5, 2e-6, 0), (0, 1e-5, 0), (0, 0, 1e-5))}, "symmetric"),
    ({"inertia": ((1e-6, 0, 0), (0, 1e-6, 0), (0, 0, 1e-5))}, "triangle"),
    ({"motor_time_constant_rising": (0.05, 0.05, 0.0, 0.05)}, "time constants"),
    ({"rotor_thrust_directions": ((0, 0, 2),) * 4}, "unit vectors"),
    ({"rotor_positions": ((0, 0, 0),) * 3}, r"shape \(3, 3\), expected \(4, 3\)"),
    ({"dt": 0.0}, "dt must be positive"),
])
def test_unphysical_parameters_are_rejected(change, message):
    with pytest.raises(ValueError, match=message):
        preset("crazyflie", **change)


def test_dict_round_trip_and_unknown_keys():
    p = preset("racer5")
    assert QuadrotorParams.from_dict(p.to_dict()) == p
    with pytest.raises(ValueError, match="unknown quadrotor parameter"):
        QuadrotorParams.from_dict({**p.to_dict(), "wingspan": 1.0})
