"""The background threads of a simulated vehicle or protocol peer: loops that run until ``stop``."""

from __future__ import annotations

import threading
from typing import Callable


class BackgroundLoops:
    """Daemon threads, one per loop function; each loop runs ``while loops.running``.

    ``start(*loops)`` starts them (a no-op while they run), ``stop()`` ends them and joins, and
    ``sleep(seconds)`` is a sleep that ``stop`` cuts short. ``owner`` names the threads.
    """

    def __init__(self, owner: str):
        self.owner = owner
        self._stopped = threading.Event()
        self._stopped.set()
        self._threads: list[threading.Thread] = []

    @property
    def running(self) -> bool:
        return not self._stopped.is_set()

    def start(self, *loops: Callable[[], None]) -> None:
        if self._threads:
            return
        self._stopped.clear()
        for loop in loops:
            name = getattr(loop, "__name__", None) or getattr(getattr(loop, "func", None), "__name__", "loop")
            t = threading.Thread(target=loop, name=f"{self.owner}.{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 2.0) -> None:
        self._stopped.set()
        for t in self._threads:
            t.join(timeout=timeout)
        self._threads.clear()

    def sleep(self, seconds: float) -> None:
        self._stopped.wait(seconds)
