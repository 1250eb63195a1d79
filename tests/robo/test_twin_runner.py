"""The twin beside the stand-in real robot (PX4Robot over loopback UDP), and offline evaluation."""

import numpy as np
import pytest

from policies.foundation import load_raptor
from robo.real import RobotEnv, RobotEnvConfig
from robo.twin import (StandInConfig, evaluate_in_twin, fly_with_twin, hover_scores, perturbed, stand_in,
                       stand_in_robot)
from sims.twin import DigitalTwin, TwinConfig

START = (0.2, -0.2, 1.1)


def test_twin_in_the_loop_through_the_px4_driver_finds_latency_and_moves_estimates():
    truth = perturbed("crazyflie", 1.3, 1.1)
    cfg = StandInConfig(robot=truth, initial_position=START,
                        sensors={"velocity_noise": 0.005, "angular_velocity_noise": 0.005, "latency_steps": 2})
    with stand_in_robot(cfg) as robot:
        env = RobotEnv(robot, RobotEnvConfig(max_steps=150, control_period=0.0))
        twin = DigitalTwin(TwinConfig(robot="crazyflie"), initial_position=START)
        flight = fly_with_twin(env, twin, load_raptor(), "twin_in_the_loop", 150)
        with pytest.raises(ValueError, match="mode"):
            fly_with_twin(env, twin, load_raptor(), "puppet", 10)
    a = flight.arrays()
    assert len(a["position_error"]) == 150 and not flight.terminated
    assert set(flight.safety_events) <= {"stop"}  # no violation
    assert a["latency_steps"][-1] == 2
    # 1.5 s in (no excitation but the start offset), the mass estimate has moved over half the way from
    # nominal (0.0306) to the truth (0.0398); the benchmark flies 10 s with dither: < 1 % error
    assert abs(a["mass"][-1] - truth["mass"]) < 0.5 * abs(0.0306 - truth["mass"])


def test_stand_in_holds_the_drivers_signing_key_from_the_environment(monkeypatch):
    """$ROBO_MAVLINK_KEY set: the driver signs and accepts only signed MAVLink, so the stand-in vehicle must hold
    the same key (an unsigned stand-in's every message is dropped: connecting fails with "no HEARTBEAT")."""
    key = bytes(range(1, 33))
    monkeypatch.setenv("ROBO_MAVLINK_KEY", key.hex())  # 64 hex digits: the 32-byte key itself
    with stand_in(StandInConfig(initial_position=START)) as lab:
        driver, vehicle = lab.robot.robot, lab._vehicle
        env = RobotEnv(lab.robot, RobotEnvConfig(max_steps=30, control_period=0.0))
        obs, info = env.reset()  # arms and switches to offboard, through signed COMMAND_LONGs
        assert vehicle.armed and vehicle.mode == 6  # PX4's offboard main mode
        steps = vehicle.steps
        policy = load_raptor()
        for _ in range(20):  # lockstep: each signed setpoint the vehicle accepts advances it one step
            obs, reward, terminated, truncated, info = env.step(policy.act(obs[None])[0])
            assert not terminated
        assert vehicle.steps == steps + 20 and info["position_error"] < 0.5
        setpoints = vehicle.messages("SET_ACTUATOR_CONTROL_TARGET")
        assert setpoints and all(m.get_signed() for m in setpoints)
        assert driver.signed and driver.rejected_messages == 0 and driver.stats["received"] > 0
        assert vehicle.rejected == {"unsigned": 0, "bad_signature": 0} and vehicle.config.signing_key == key


def test_offline_evaluation_scores_many_policies_at_once():
    class Biased:
        obs_dim, action_dim = 22, 4

        def __init__(self, bias):
            self.base, self.bias = load_raptor(), bias

        def reset(self, mask=None):
            self.base.reset(mask)

        def act(self, obs):
            return (self.base.act(obs) + self.bias).clamp(-1, 1)

    errors = evaluate_in_twin([Biased(0.0), Biased(0.3)], "crazyflie", START, steps=100, envs_per_policy=2)
    assert errors.shape == (100, 2, 2)
    scores = hover_scores(errors.reshape(100, 4))
    assert scores["mean_error"][:2].max() < scores["mean_error"][2:].min()  # the biased one is worse
    with pytest.raises(ValueError, match="no policies"):
        evaluate_in_twin([], "crazyflie", START)
    with pytest.raises(ValueError, match="expected"):
        hover_scores(np.zeros(5))
