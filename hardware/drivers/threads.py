"""The background loops of a driver (receiver, heartbeat, poller): started at ``connect``, joined at ``close``."""

from __future__ import annotations

import threading
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
