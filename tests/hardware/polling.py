"""Waiting in the driver tests for what a driver's or a peer's background thread makes true."""

from hardware.drivers.threads import wait_until


def wait_for(predicate, timeout: float = 1.0, interval: float = 0.005) -> bool:
    """True as soon as ``predicate()`` is true; False if it is still false after ``timeout`` seconds."""
    return wait_until(predicate, timeout, interval)
