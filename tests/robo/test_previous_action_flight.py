"""RAPTOR-compatible policies fly with RAPTOR's and L2F's previous action (``raw_motor_state``): in
``robo.evaluate.rollout``, in ``robo eval`` and on a ``RobotEnv``; robo's own policies keep ``clipped_hover``."""

import numpy as np
import pytest
import torch

from hardware.safety import SafetyConfig, SafetyLayer
from policies.foundation import load_raptor
from policies.mlp import MLPPolicy
from policies.registry import load_policy
from robo.evaluate import previous_action_convention, previous_action_for, rollout
from robo.real import RobotEnv, RobotEnvConfig
from sims.envs import OBS_SLICES, make_batched_task
from sims.quadrotor.params import preset
from tests.hardware.test_safety import FakeRobot
from tests.hydra_configs import composed

PREV = OBS_SLICES["previous_action"]
# The Crazyflie's thrust-to-weight (1.47) with slow motors (79 / 340 ms): a marginal quadrotor for RAPTOR
MARGINAL = preset("crazyflie", motor_time_constant_rising=(0.079,) * 4, motor_time_constant_falling=(0.34,) * 4)


def _flight(policy, previous_action: str, seconds: float = 1.0):
    task = make_batched_task({"name": "hover", "previous_action": previous_action, "init": {"motors_at_hover": False}},
                             MARGINAL, num_envs=16)
    task.seed(0)
    return rollout(policy, task, seconds), task


def test_raptor_flies_the_l2f_convention_on_an_auto_task():
    raptor = load_raptor(clip_actions=False)
    auto, task = _flight(raptor, "auto")
    l2f, _ = _flight(raptor, "raw_motor_state")
    robo, _ = _flight(raptor, "clipped_hover")  # an explicit choice is kept
    np.testing.assert_array_equal(auto.states, l2f.states)
    assert np.abs(auto.states[1:] - robo.states[1:]).max() > 1e-3  # the first actions already differ
    assert task.previous_action_mode == "clipped_hover"  # the task's own mode comes back after the flight
    assert previous_action_convention(raptor) == "raw_motor_state"


def test_robos_own_policies_keep_clipped_hover():
    torch.manual_seed(0)
    actor = MLPPolicy()  # an untrained SAC-style actor: it reads the previous action like any other input
    auto, _ = _flight(actor, "auto", 0.2)
    robo, _ = _flight(actor, "clipped_hover", 0.2)
    l2f, _ = _flight(actor, "raw_motor_state", 0.2)
    np.testing.assert_array_equal(auto.states, robo.states)
    assert np.abs(auto.states[1:] - l2f.states[1:]).max() > 1e-4
    assert previous_action_convention(actor) == "clipped_hover"


def test_robo_eval_flies_raptor_unclipped_with_the_l2f_convention(tmp_path):
    from robo.commands.eval import run

    common = ("num_envs=4", "seconds=0.3", "video.enabled=false", "plot_envs=2", "threads=1",
              "task.init.motors_at_hover=false")
    l2f = run(composed("eval", *common), tmp_path / "l2f")
    robo = run(composed("eval", *common, "task.previous_action=clipped_hover"), tmp_path / "robo")
    assert l2f["previous_action"] == "raw_motor_state" and robo["previous_action"] == "clipped_hover"
    assert not load_policy(tmp_path / "l2f" / "checkpoints" / "policy").config.clip_actions  # RAPTOR's raw output
    assert load_policy(tmp_path / "robo" / "checkpoints" / "policy").config.clip_actions
    assert l2f["final_median_position_error"] != robo["final_median_position_error"]


class MotorReportingRobot(FakeRobot):
    """A stand-in that reports its motors, as ``BetaflightRobot(read_motors=True)`` does."""

    motors = np.array([0.2, 0.4, 0.6, 0.8])

    def read_state(self):
        state = super().read_state()
        state.extra["motors"] = self.motors.copy()
        return state


@pytest.mark.parametrize("robot_class", [MotorReportingRobot, FakeRobot])
def test_robot_env_reports_the_previous_action_by_the_convention(robot_class):
    hover = preset("crazyflie").hover_action
    action = np.array([1.4, 0.0, -1.2, 0.3])
    for mode in ("clipped_hover", "raw_motor_state"):
        safety = SafetyLayer(robot_class(), SafetyConfig())
        safety.connect()
        env = RobotEnv(safety, RobotEnvConfig(control_period=0.0, previous_action=mode))
        obs, _ = env.reset(seed=0)
        reported = robot_class is MotorReportingRobot and mode == "raw_motor_state"
        expected = 2 * MotorReportingRobot.motors - 1 if reported else np.full(4, hover)
        np.testing.assert_allclose(obs[PREV], expected, atol=1e-6)
        obs, *_ = env.step(action)
        sent = env.previous_action  # what the safety layer sent (clipped, slew-limited): the reward's action
        assert np.abs(sent).max() <= 1.0
        np.testing.assert_allclose(obs[PREV], action if mode == "raw_motor_state" else sent, atol=1e-6)
        env.close()


def test_previous_action_for_sets_a_robot_env_for_one_flight_and_keeps_explicit_settings():
    safety = SafetyLayer(MotorReportingRobot(), SafetyConfig())
    safety.connect()
    env = RobotEnv(safety, RobotEnvConfig(control_period=0.0))
    with previous_action_for(load_raptor(), env) as mode:
        obs, _ = env.reset(seed=0)
        assert mode == "raw_motor_state"
        np.testing.assert_allclose(obs[PREV], 2 * MotorReportingRobot.motors - 1, atol=1e-6)
    assert env.previous_action_mode == "clipped_hover"
    env.close()
    explicit = RobotEnv(SafetyLayer(MotorReportingRobot(), SafetyConfig()),
                        RobotEnvConfig(control_period=0.0, previous_action="clipped_hover"))
    with previous_action_for(load_raptor(), explicit) as mode:
        assert mode == "clipped_hover"
