"""RAPTOR-compatible policies fly with RAPTOR's and L2F's previous action (``raw_motor_state``): in
``robo.evaluate.rollout``, in ``robo eval``, on a ``RobotEnv``, twin in the loop, in ``robo finetune`` and as the
teacher of imitation demos; robo's own policies keep ``clipped_hover``."""

import numpy as np
import pytest
import torch

from hardware.safety import SafetyConfig, SafetyLayer
from policies.foundation import load_raptor
from policies.mlp import MLPPolicy
from policies.registry import load_policy
from robo.evaluate import (clipped_hover_observations, flown_policy, previous_action_convention,
                           previous_action_for, rollout)
from robo.real import RobotEnv, RobotEnvConfig
from sims.envs import OBS_SLICES, make_batched_task
from sims.quadrotor.params import preset
from tests.hardware.test_safety import FakeRobot
from tests.hydra_configs import composed, composed_dict

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


def _recording(fn, log: list, pick=lambda out: out):
    """``fn`` that appends ``pick(its result)`` to ``log`` (a policy's act, an env's reset or step)."""
    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        log.append(pick(out))
        return out
    return wrapped


def test_twin_in_the_loop_flies_a_foundation_policy_with_the_observation_the_robot_env_reports():
    from robo.twin import fly_with_twin
    from sims.twin import DigitalTwin, TwinConfig

    # slew-limited motors (0.05 a command): the commands sent lag RAPTOR's; the watchdog waits for a loaded machine
    safety = SafetyLayer(MotorReportingRobot(), SafetyConfig(max_motor_step=0.05, command_timeout=5.0))
    safety.connect()
    env = RobotEnv(safety, RobotEnvConfig(control_period=0.0, max_steps=20))  # previous_action: auto
    raptor = load_raptor(clip_actions=False)
    seen, reported, sent = [], [], []  # the policy's (twin's) observations, the env's, the commands sent
    original_act = raptor.act
    raptor.act = lambda obs: (seen.append(np.array(obs[0])), original_act(obs))[1]
    env.reset = _recording(env.reset, reported, lambda out: out[0])
    env.step = _recording(env.step, reported, lambda out: (sent.append(env.previous_action.copy()), out[0])[1])
    flight = fly_with_twin(env, DigitalTwin(TwinConfig(robot="crazyflie")), raptor, "twin_in_the_loop", 20)
    env.close()
    assert not flight.terminated and len(seen) == 20 and len(reported) == 21
    np.testing.assert_allclose(seen[0][PREV], 2 * MotorReportingRobot.motors - 1, atol=1e-6)  # L2F: the motors
    for t in range(20):  # tick t's observation reports what the env reported after tick t - 1 (or the reset)
        np.testing.assert_allclose(seen[t][PREV], reported[t][PREV], atol=1e-6)
    # the command sent (clipped, slew-limited) is not what the observation reports: the twin used to read it
    assert max(np.abs(s[PREV] - c).max() for s, c in zip(seen[1:], sent)) > 0.05
    assert env.previous_action_mode == "clipped_hover"  # the env's own mode comes back after the flight


def test_finetune_flies_a_foundation_base_with_the_l2f_convention():
    from robo.commands.finetune import robot_env_config, twin_task

    c = composed_dict("finetune", "base=raptor")
    torch.manual_seed(0)
    assert robot_env_config(c, load_raptor()).previous_action == "raw_motor_state"
    assert robot_env_config(c, MLPPolicy()).previous_action == "clipped_hover"
    task = twin_task(c["twin_pretrain"]["task"], load_raptor())
    assert task["previous_action"] == "raw_motor_state" and task["name"] == "hover"
    assert twin_task({"name": "hover", "previous_action": "clipped_hover"}, load_raptor())["previous_action"] == \
        "clipped_hover"  # an explicit choice is kept
    assert twin_task("hover", MLPPolicy())["previous_action"] == "clipped_hover"


def test_robo_finetune_wires_raptor_unclipped_alone_and_clipped_under_the_residual(tmp_path, monkeypatch):
    import robo.commands.finetune as command

    got = {}

    def finetune(env, adapter, folder, config, reset):  # the learner process is test_finetune's business
        got.update(env=env, adapter=adapter, reset=reset)
        return {"steps": 0, "episodes": 0, "interventions": 0, "learner_restarts": 0, "gate": []}

    monkeypatch.setattr(command, "finetune", finetune)
    monkeypatch.setattr(command, "load_finetuned_actor", lambda folder, config: None)  # None: the base alone
    cfg = composed("finetune", "base=raptor", "reset=fly_back", "reset_steps=5", "episode_steps=5", "eval_episodes=1")
    command.run(cfg, tmp_path / "run")
    env, adapter, fly_back = got["env"], got["adapter"], got["reset"]
    assert env.config.previous_action == "raw_motor_state" and env.previous_action_mode == "raw_motor_state"
    assert not fly_back.policy.config.clip_actions  # RAPTOR alone: its raw output, as robo eval flies it
    assert adapter.base.config.clip_actions  # under the residual: the applied command, as the twin's scoring sees it


def _demos(previous_action: str, teacher=None):
    from robo.imitation.demos import quadrotor_demos

    task = {"name": "hover", "previous_action": previous_action, "init": {"motors_at_hover": False}}
    return quadrotor_demos(teacher or flown_policy("raptor", previous_action), 8, task, "crazyflie", seed=0,
                           seconds=0.5)


def test_teacher_demos_fly_raptor_unclipped_with_l2f_and_record_the_students_observation():
    hover = preset("crazyflie").hover_action
    auto, l2f, robo = _demos("auto"), _demos("raw_motor_state"), _demos("clipped_hover")
    assert not flown_policy("raptor").config.clip_actions  # auto: L2F's convention, RAPTOR's raw output
    assert flown_policy("raptor", "clipped_hover").config.clip_actions
    with pytest.raises(ValueError, match="unknown previous_action"):
        flown_policy("raptor", "raw")
    assert len(auto) == len(l2f) > 0
    for a, r in zip(auto, l2f):  # the same flight (RAPTOR saw L2F's observation) ...
        np.testing.assert_array_equal(a["obs"][:, :PREV.start], r["obs"][:, :PREV.start])
        np.testing.assert_array_equal(a["action"], r["action"])
        # ... recorded as robo's students see it: the hover command at the reset, the applied command after
        np.testing.assert_allclose(a["obs"][0, PREV], np.full(4, hover), atol=1e-6)
        np.testing.assert_allclose(a["obs"][1:, PREV], np.clip(r["obs"][1:, PREV], -1, 1))
        np.testing.assert_allclose(a["obs"][1:, PREV], a["action"][:-1], atol=1e-6)  # no noise: the labels
        assert np.abs(a["action"]).max() <= 1.0
    assert max(np.abs(r["obs"][:, PREV]).max() for r in l2f) > 1.0  # RAPTOR's raw output left [-1, 1]
    assert max(np.abs(r["obs"][0, PREV] - hover).max() for r in l2f) > 0.1  # the motors started off hover
    # flown in robo's convention, RAPTOR flies differently from the same starts
    assert len(robo) != len(auto) or max(np.abs(a["obs"] - b["obs"]).max() for a, b in zip(auto, robo)) > 1e-3


def test_clipped_hover_observations_clip_every_previous_action_and_put_the_hover_command_before_the_first():
    obs = np.zeros((4, 2, 22 + 8 + 3), np.float32)
    obs[:, :, 18:30] = np.linspace(-2, 2, 4 * 2 * 12, dtype=np.float32).reshape(4, 2, 12)
    obs[:, :, 30:] = 7.0  # privileged features after the history stay
    out = clipped_hover_observations(obs, np.array([-0.3, 0.1]), action_history=2)
    np.testing.assert_array_equal(out[:, :, 30:], 7.0)
    np.testing.assert_array_equal(out[:, :, :18], obs[:, :, :18])
    hover = np.array([-0.3, 0.1], np.float32)[:, None]
    for k in range(3):  # slot k: the action of step t - 1 - k, the reset's (hover) for t <= k
        cols = slice(18 + 4 * k, 22 + 4 * k)
        np.testing.assert_allclose(out[:k + 1, :, cols], np.broadcast_to(hover, (k + 1, 2, 4)))
        np.testing.assert_array_equal(out[k + 1:, :, cols], np.clip(obs[k + 1:, :, cols], -1, 1))
    with pytest.raises(ValueError, match="expected"):
        clipped_hover_observations(obs[:, :, :25], np.zeros(2), action_history=2)
