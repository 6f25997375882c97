"""The server store's breaker (detector/storage/reachability.py): while the server is unreachable every statement
fails at once, and the probe that finds it back runs in the background, never in a caller's time (a hung server
would hold a caller for the probe's whole timeout)."""

from __future__ import annotations

import threading
import time

from detector.storage.reachability import PROBE_INTERVAL_SECONDS, Breaker


def test_callers_fail_at_once_while_a_hung_probe_waits_and_the_answered_probe_closes_it():
    release, asked = threading.Event(), []
    answer = [False]

    def ping(timeout: float) -> bool:  # a hung server: the probe waits until released
        asked.append(timeout)
        release.wait(10)
        return answer[0]

    now = [0.0]
    breaker = Breaker(ping, clock=lambda: now[0])
    assert breaker.admit() is None  # reachable: statements run
    breaker.opened("Connection refused")
    assert breaker.admit() == "Connection refused"  # before the first probe is due
    now[0] += PROBE_INTERVAL_SECONDS
    started = time.monotonic()
    for _ in range(100):  # the probe is due, and hangs: nobody waits for it
        assert breaker.admit() == "Connection refused"
        now[0] += PROBE_INTERVAL_SECONDS
    assert time.monotonic() - started < 1.0
    assert len(asked) == 1  # one probe at a time
    answer[0] = True
    release.set()
    deadline = time.monotonic() + 10
    while breaker.state.unreachable:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert breaker.admit() is None
