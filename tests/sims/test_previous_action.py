"""The previous-action observation (obs[18:22]): robo's ``clipped_hover`` and RAPTOR's / L2F's ``raw_motor_state``."""

import pytest
import torch

from sims.envs import OBS_SLICES, make_batched_task, make_task_config
from sims.quadrotor.dynamics import MOTOR
from sims.quadrotor.params import preset

PREV = OBS_SLICES["previous_action"]
# A marginal quadrotor: the Crazyflie's thrust-to-weight (1.47, below RAPTOR's 1.5-5 training range) with slow
# motors (79 ms up, 340 ms down: held-out quadrotor 7 of docs/experiments/foundation.md, whose pushes RAPTOR's
# students miss).
MARGINAL = preset("crazyflie", motor_time_constant_rising=(0.079,) * 4, motor_time_constant_falling=(0.34,) * 4)


def _task(previous_action: str, motors_at_hover: bool = False, action_history: int = 0, seed: int = 0):
    task = make_batched_task({"name": "hover", "previous_action": previous_action, "action_history": action_history,
                              "init": {"motors_at_hover": motors_at_hover}}, MARGINAL, num_envs=16,
                             dtype=torch.float64)
    task.seed(seed)
    return task


def test_the_conventions_differ_at_reset_and_after_a_step():
    robo, l2f = _task("clipped_hover", action_history=2), _task("raw_motor_state", action_history=2)
    assert MARGINAL.thrust_to_weight < 1.5
    obs_r, obs_l = robo.reset(), l2f.reset()
    torch.testing.assert_close(robo.state, l2f.state)  # the same starts: only the observation differs
    torch.testing.assert_close(obs_r[:, :PREV.start], obs_l[:, :PREV.start])
    hover = 2 * MARGINAL.hover_command - 1
    motors = (2 * l2f.state[:, MOTOR] - 1).float()
    torch.testing.assert_close(obs_r[:, PREV], torch.full((16, 4), hover, dtype=torch.float32))
    torch.testing.assert_close(obs_l[:, PREV], motors)
    torch.testing.assert_close(obs_l[:, 22:], motors.repeat(1, 2))  # the history starts at the motor states too
    assert (obs_l[:, PREV] - obs_r[:, PREV]).abs().max() > 0.5

    # a saturating command, as RAPTOR's unclipped output on a marginal quadrotor (up to 2.7 measured)
    action = torch.tensor([1.6, 1.2, -1.3, 0.4], dtype=torch.float64).expand(16, 4)
    r, l_ = robo.step(action), l2f.step(action)
    torch.testing.assert_close(robo.state, l2f.state)  # the same command applied (clipped), the same reward
    torch.testing.assert_close(r.reward, l_.reward)
    torch.testing.assert_close(r.obs[:, PREV], action.clamp(-1, 1).float())
    torch.testing.assert_close(l_.obs[:, PREV], action.float())
    torch.testing.assert_close(l_.obs[:, 22:26], motors)  # the history shifts the reset's entry back


def test_the_conventions_agree_when_the_motors_start_at_hover_and_commands_stay_in_range():
    robo, l2f = _task("clipped_hover", motors_at_hover=True), _task("raw_motor_state", motors_at_hover=True)
    torch.testing.assert_close(robo.reset(), l2f.reset())
    action = torch.full((16, 4), 0.3, dtype=torch.float64)
    torch.testing.assert_close(robo.step(action).obs, l2f.step(action).obs)


def test_a_partial_reset_reports_the_new_motor_states_of_the_reset_envs_only():
    task = _task("raw_motor_state")
    task.reset()
    action = torch.tensor([1.5, -0.2, 0.1, 0.9], dtype=torch.float64).expand(16, 4)
    task.step(action)
    mask = torch.arange(16) % 2 == 1
    obs = task.reset(mask)
    torch.testing.assert_close(obs[mask, PREV], (2 * task.state[mask][:, MOTOR] - 1).float())
    torch.testing.assert_close(obs[~mask, PREV], action[~mask].float())


def test_auto_is_robos_convention_and_bad_names_are_rejected():
    assert make_task_config("hover").previous_action == "auto"
    assert _task("auto").previous_action_mode == "clipped_hover"
    with pytest.raises(ValueError, match=r"unknown previous_action 'raw'; choose one of \['auto', 'clipped_hover', "
                                         r"'raw_motor_state'\]"):
        make_task_config("hover", previous_action="raw")
