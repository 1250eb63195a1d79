"""Waiting in the driver tests for what a driver's or a peer's background thread makes true, and for the
Betaflight SITL's fixed ports to be free."""

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
