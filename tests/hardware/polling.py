"""Waiting in the driver tests for what a driver's or a peer's background thread makes true, for the
Betaflight SITL's fixed ports to be free, and for a SITL process that serves MSP."""

import time

import pytest

from hardware.drivers.threads import wait_until


def wait_for(predicate, timeout: float = 1.0, interval: float = 0.005) -> bool:
    """True as soon as ``predicate()`` is true; False if it is still false after ``timeout`` seconds."""
    return wait_until(predicate, timeout, interval)


def start_firmware(timeout: float = 90.0, **kwargs):
    """A started ``BetaflightFirmware(lockstep=True, **kwargs)`` (stock Betaflight on sim time, see
    ``sims.vehicles.betaflight_firmware``); while another one (another test file, a benchmark) holds the fixed
    ports, wait for it to finish; skip, saying so, if it still holds them after ``timeout`` s."""
    from sims.vehicles.betaflight_firmware import BetaflightFirmware, FirmwareUnavailable

    deadline = time.monotonic() + timeout
    while True:
        try:
            return BetaflightFirmware(**{"lockstep": True, **kwargs}).start()
        except FirmwareUnavailable as e:
            if "busy" not in str(e):
                raise
            if time.monotonic() > deadline:
                pytest.skip(f"Betaflight SITL ports still busy after {timeout:.0f} s: {e}")
            time.sleep(2.0)


def connect_msp(fw, **kwargs):
    """A ``BetaflightRobot(fw.msp_address, position_source=fw.mocap, clock=fw.sim_time, **kwargs)`` connected to the
    firmware ``fw``: its states, and a safety layer over it, on the firmware's sim time."""
    from hardware.drivers.betaflight import BetaflightRobot

    robot = BetaflightRobot(fw.msp_address, position_source=fw.mocap, **{"clock": fw.sim_time, **kwargs})
    robot.connect(timeout=5.0)
    return robot


def connect_provisioned(fw, setup, **kwargs):
    """``connect_msp(fw, **kwargs)``, then ``provision(robot, setup)`` and ``calibrate_accelerometer`` -> (robot,
    whether provisioning asked for a reboot)."""
    from hardware.drivers.betaflight_setup import calibrate_accelerometer, provision

    robot = connect_msp(fw, **kwargs)
    try:
        reboot = provision(robot, setup)
        calibrate_accelerometer(robot)
    except BaseException:
        robot.close()
        raise
    return robot, reboot


def sim_seconds_between(firmware, wall_t0: float, until) -> float:
    """Sim s from the first logged physics step at or after host time ``wall_t0`` to the first one after it whose
    motors satisfy ``until(motors)`` (``firmware.log_motors`` on before ``wall_t0``); AssertionError if none does."""
    log = list(firmware.motor_log)
    start = next((sim for wall, sim, _ in log if wall >= wall_t0), None)
    assert start is not None, "no physics step logged after the event"
    end = next((sim for wall, sim, m in log if wall >= wall_t0 and until(m)), None)
    assert end is not None, "the motors never did"
    return end - start
