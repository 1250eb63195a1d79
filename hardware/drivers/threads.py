"""The background loops of a driver (receiver, heartbeat, poller): started at ``connect``, joined at ``close``;
``wait_until`` waits for what they make true (first telemetry, the armed flag)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable


def start_loops(owner: str, loops: Iterable[Callable[[], None]]) -> list[threading.Thread]:
    """Start each of ``loops`` in a daemon thread named ``"<owner>.<loop name>"``; -> the started threads.
    Each loop runs until the driver's own stop flag (an ``Event``) tells it to return."""
    threads = [threading.Thread(target=loop, name=f"{owner}.{loop.__name__}", daemon=True) for loop in loops]
    for t in threads:
        t.start()
    return threads


def join_loops(threads: list[threading.Thread], timeout: float = 1.0) -> None:
    """Join ``threads`` (each for at most ``timeout`` s, after the driver set its stop flag) and empty the list."""
    for t in threads:
        t.join(timeout=timeout)
    threads.clear()


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    """Poll ``predicate()`` every ``interval`` s: True as soon as it is true (checked at least once), False once
    ``timeout`` s have passed without it."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
