"""The detection cycle's schedule, on a clock the test moves: every interval start to start, a cycle that
overran followed by the next at once (an APScheduler interval job skipped that tick), a failing cycle not the
end of the schedule."""

from __future__ import annotations

import contextlib
import threading

from detector.service.cycle_loop import CycleLoop


class FakeTime:
    """A clock, and a wait that advances it; the loop stops after ``cycles`` cycles."""

    def __init__(self, durations: list[float]) -> None:
        self.now = 100.0
        self.durations = list(durations)
        self.starts: list[float] = []

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        return False

    def cycle(self) -> None:
        self.starts.append(self.now)
        if not self.durations:
            raise SystemExit  # the end of the test's run (not an Exception: the loop does not catch it)
        self.now += self.durations.pop(0)


def run(durations: list[float], interval: float = 1.0) -> list[float]:
    t = FakeTime(durations)
    loop = CycleLoop(t.cycle, interval, clock=t.clock, wait=t.wait)
    with contextlib.suppress(SystemExit):  # the fake time's end
        loop.run()
    return [round(s - 100.0, 6) for s in t.starts]


def test_cycles_start_every_interval():
    assert run([0.2, 0.3, 0.1]) == [0.0, 1.0, 2.0, 3.0]


def test_a_cycle_that_overran_is_followed_at_once_not_a_tick_later():
    # APScheduler (max_instances=1) skipped the tick at 1.0 and started the second cycle at 2.0
    assert run([1.1, 0.2, 0.2]) == [0.0, 1.1, 2.1, 3.1]


def test_a_failing_cycle_keeps_the_schedule():
    t = FakeTime([0.1, 0.1])
    calls = []

    def flaky() -> None:
        calls.append(t.now)
        if len(calls) == 1:
            raise RuntimeError("store unavailable")
        t.cycle()

    loop = CycleLoop(flaky, 1.0, clock=t.clock, wait=t.wait)
    with contextlib.suppress(SystemExit):  # the fake time's end
        loop.run()
    assert [round(c - 100.0, 6) for c in calls] == [0.0, 1.0, 2.0, 3.0]


def test_stop_ends_the_loop_thread():
    loop = CycleLoop(lambda: None, 0.01)
    loop.start()
    assert "detection-cycle" in {t.name for t in threading.enumerate()}
    loop.stop(timeout=10)
    assert "detection-cycle" not in {t.name for t in threading.enumerate()}
