"""The drivers' shared waiting helper: what connect, arm and close wait on."""

import threading
import time

from hardware.drivers.threads import wait_until


def test_wait_until_returns_when_another_thread_makes_it_true_and_gives_up_at_the_timeout():
    assert wait_until(lambda: True, timeout=0.0)  # checked at least once, even with no time left
    flag = threading.Event()
    threading.Timer(0.05, flag.set).start()
    t0 = time.monotonic()
    assert wait_until(flag.is_set, timeout=2.0, interval=0.005)
    assert time.monotonic() - t0 < 1.0
    t0 = time.monotonic()
    assert not wait_until(lambda: False, timeout=0.1, interval=0.01)
    assert 0.1 <= time.monotonic() - t0 < 1.0
