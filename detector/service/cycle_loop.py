"""The detection cycle's schedule: one cycle every ``interval`` seconds, start to start, and never a skipped tick.

A decision reflects a span one cycle after the span was stored, so the schedule is part of the decision lag. An
interval job of APScheduler (``max_instances=1``, as the cycle ran before) *skips* a tick that comes while the
previous run still runs, so a cycle of 1.1 s put the next one 2 s after its start. Here a cycle that overran is
followed by the next one at once, and the schedule goes on from there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["CycleLoop"]

log = logging.getLogger("loop_detector")


class CycleLoop:
    """Calls ``cycle`` in its own thread every ``interval_seconds`` until :meth:`stop`. ``clock`` and ``wait``
    (seconds -> True when stopped) are the loop's sense of time, replaceable in tests."""

    def __init__(self, cycle: Callable[[], None], interval_seconds: float,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[float], bool] | None = None) -> None:
        self.cycle = cycle
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._stopped = threading.Event()
        self._wait = wait if wait is not None else self._stopped.wait
        self._thread: threading.Thread | None = None

    def next_start(self, started: float, ended: float) -> float:
        """When the cycle after one that ran from ``started`` to ``ended`` starts."""
        return max(started + self.interval_seconds, ended)

    def run(self) -> None:
        """The loop (the thread's target; in tests, called directly with a ``wait`` that stops it)."""
        start = self._clock()
        while True:
            delay = start - self._clock()
            if (delay > 0 and self._wait(delay)) or self._stopped.is_set():
                return
            started = self._clock()
            try:
                self.cycle()
            except Exception:  # keep the schedule alive; the next cycle retries from the same watermark
                log.exception("detection cycle failed")
            start = self.next_start(started, self._clock())

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="detection-cycle", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the cycle running now, if one is (waits for it)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
