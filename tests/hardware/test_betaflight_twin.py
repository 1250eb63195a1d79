"""The digital twin shadowing a quadrotor flown through the real Betaflight firmware (SITL): its action is the
motor outputs the firmware reports over MSP (MSP_MOTOR), and it identifies the hidden mass.

The numbers (and the same measurement on the stand-in) come from ``benchmarks/twin_firmware.py``.
"""

import shutil
from contextlib import closing

import numpy as np
import pytest

from hardware.drivers.base import AttitudeThrustCommand
from hardware.drivers.betaflight import BetaflightRobot
from hardware.drivers.betaflight_setup import (SetupConfig, arming_disable_names, disable_runaway_takeoff,
                                               throttle_for_motor, wait_ready)
from hardware.drivers.position_hold import PositionHold, fly, hover_then_eight
from hardware.safety import SafetyConfig, SafetyLayer
from robo.twin.runner import ShadowRobot, n_step_errors
from sims.quadrotor import preset
from sims.twin import DigitalTwin, TwinConfig
from sims.vehicles.betaflight_sitl import BetaflightMSPServer
from sims.vehicles.sim_vehicle import SimVehicle
from tests.hardware.polling import connect_provisioned, start_firmware, wait_for

PERIOD = 0.02  # s: the control tick and the twin's
NOMINAL = preset("betaflight_quadx")
TRUTH = NOMINAL.replace(mass=NOMINAL.mass * 1.3, name="heavier")  # hidden from the twin


def hover_motor(params) -> float:
    """The motor command (all four equal) that carries ``params``' weight: c0 + c1 u + c2 u^2 = m g / 4."""
    c0, c1, c2 = params.thrust_curve[0]
    return float(np.roots([c2, c1, c0 - params.mass * 9.81 / 4]).max())


def test_the_driver_reads_the_motor_outputs_over_msp_from_the_stand_in():
    vehicle = SimVehicle(NOMINAL, position=(0.0, 0.0, 0.0))
    with BetaflightMSPServer(vehicle) as server:
        robot = BetaflightRobot(server.address, read_motors=True)
        robot.connect(timeout=5.0)
        try:
            assert wait_for(lambda: robot.read_state().extra["motors"] is not None, timeout=1.0)
            np.testing.assert_array_equal(robot.read_state().extra["motors"], np.zeros(4))  # disarmed: 1000 us
            robot.arm(timeout=2.0)
            robot.send(AttitudeThrustCommand(np.array([0.9962, 0.0872, 0.0, 0.0]), 0.3))  # rolled 10 deg right
            assert wait_for(lambda: robot.read_state().extra["motors"].max() > 0.1, timeout=1.0)
            reported = robot.read_state().extra["motors"]
            np.testing.assert_allclose(reported, vehicle.commanded, atol=0.05)  # robo's order, [0, 1]
            assert reported.argmax() in (2, 3)  # a roll to the right (FLU +x) lifts the left motors (BL, FL)
        finally:
            robot.close()


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                    reason="building Betaflight SITL needs gcc and make")
def test_the_twin_identifies_the_mass_of_the_firmware_flown_quad(tmp_path):
    firmware_mod = pytest.importorskip("sims.vehicles.betaflight_firmware")
    try:
        firmware_mod.lockstep_binary()
    except firmware_mod.FirmwareUnavailable as e:
        pytest.skip(str(e))
    with closing(start_firmware(params=TRUTH, run_dir=tmp_path)) as fw:
        setup = SetupConfig(failsafe_delay=0.5, failsafe_procedure="DROP", rate_pid_scale=0.5)
        robot, _ = connect_provisioned(fw, setup, acc_1g=256, read_motors=True)
        sim_clock = fw.sim_time  # ticks, command gaps and state ages on sim time (the driver's clock)
        safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2))
        try:
            wait_ready(robot, timeout=60.0)
            disable_runaway_takeoff(robot)
            twin = DigitalTwin(TwinConfig(robot={"preset": "betaflight_quadx", "dt": PERIOD}))
            shadow = ShadowRobot(safe, twin, live=False)
            trajectory = hover_then_eight(height=1.0, hover_s=4.0)  # 2 s climb + 4 s hover
            controller = PositionHold(hover_thrust=throttle_for_motor(NOMINAL.hover_command))
            safe.arm()
            log = fly(shadow, controller, trajectory, trajectory.duration, period=PERIOD,
                      clock=sim_clock)  # ticks of sim time: the twin's PERIOD
            flags = arming_disable_names(robot.status_ex().arming_disable) if log["stopped"] else []
        finally:
            safe.close()
    assert log["stopped"] is None, f"{log['stopped']}; the firmware's arming-disable flags then: {flags}"
    shadow.catch_up()
    actions = np.array([a for _, a, _ in shadow.record[1:]])
    assert len(actions) > 150  # > 3 s above 0.3 m
    # the firmware's reported motor outputs carry the hidden weight (mixer, idle and PWM scaling included)
    assert abs(np.median((actions[-100:] + 1) / 2) - hover_motor(TRUTH)) < 0.02
    mass = twin.estimate["mass"]
    assert abs(mass - TRUTH.mass) < 0.02, f"identified {mass:.4f} kg, truth {TRUTH.mass:.4f} kg"
    assert 0 <= twin.latency_steps <= 2
    one_step = n_step_errors(shadow.record, twin.calibrated_params(), 1, twin.latency_steps, start=50)
    assert np.median(one_step) < 0.01  # m
