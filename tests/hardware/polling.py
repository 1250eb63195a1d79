"""Waiting in the driver tests for what a driver's or a peer's background thread makes true, for the
Betaflight SITL's fixed ports to be free, and for a SITL process that serves MSP."""

import time

import pytest

from hardware.drivers.threads import wait_until


def wait_for(predicate, timeout: float = 1.0, interval: float = 0.005) -> bool:
    """True as soon as ``predicate()`` is true; False if it is still false after ``timeout`` seconds."""
    return wait_until(predicate, timeout, interval)


def start_firmware(timeout: float = 90.0, **kwargs):
    """A started ``BetaflightFirmware(**kwargs)``; while another one (another test file, a benchmark) holds the
    fixed ports, wait for it to finish; skip, saying so, if it still holds them after ``timeout`` s."""
    from sims.vehicles.betaflight_firmware import BetaflightFirmware, FirmwareUnavailable

    deadline = time.monotonic() + timeout
    while True:
        try:
            return BetaflightFirmware(**kwargs).start()
        except FirmwareUnavailable as e:
            if "busy" not in str(e):
                raise
            if time.monotonic() > deadline:
                pytest.skip(f"Betaflight SITL ports still busy after {timeout:.0f} s: {e}")
            time.sleep(2.0)


def connect_msp(fw, **kwargs):
    """A ``BetaflightRobot(fw.msp_address, position_source=fw.mocap, **kwargs)`` connected to the firmware ``fw``.

    Now and then (in 4 of 20 runs of the SITL test files on this 2-core VM, about ten starts each) a SITL process
    answers state packets but sends no MSP telemetry within 5 s; a fresh process does, so such a start is replaced
    once (its run folder and eeprom.bin stay) before the test fails.
    """
    from hardware.drivers.base import RobotError
    from hardware.drivers.betaflight import BetaflightRobot

    for attempt in range(2):
        robot = BetaflightRobot(fw.msp_address, position_source=fw.mocap, **kwargs)
        try:
            robot.connect(timeout=5.0)
            return robot
        except RobotError:
            if attempt == 1:
                raise
            fw.restart(timeout=0.0)


def connect_provisioned(fw, setup, **kwargs):
    """``connect_msp(fw, **kwargs)``, then ``provision(robot, setup)`` and ``calibrate_accelerometer`` -> (robot,
    whether provisioning asked for a reboot). A SITL process whose clock stalls after its start (the calibration
    never ends: in 4 of 20 runs of the SITL test files here) is replaced once, and provisioned again."""
    from hardware.drivers.base import RobotError
    from hardware.drivers.betaflight_setup import calibrate_accelerometer, provision

    for attempt in range(2):
        robot = connect_msp(fw, **kwargs)
        try:
            reboot = provision(robot, setup)
            calibrate_accelerometer(robot)
            return robot, reboot
        except RobotError:
            robot.close()
            if attempt == 1:
                raise
            fw.restart(timeout=0.0)
