"""The detection cycle's schedule: one cycle every ``interval`` seconds, start to start, never a skipped tick, and
sooner when new spans were committed.

A decision reflects a span one cycle after the span was stored, so the schedule is part of the decision lag. An
interval job of APScheduler (``max_instances=1``, as the cycle ran before) *skips* a tick that comes while the
previous run still runs, so a cycle of 1.1 s put the next one 2 s after its start. Here a cycle that overran is
followed by the next one at once, and the schedule goes on from there.

On a clock alone, a span committed just after a cycle read waits out the rest of the interval before a cycle looks
at it: half an interval on average, a whole one at worst. The embedded receiver therefore *nudges* the loop after
each commit (:meth:`CycleLoop.nudge`), and a nudged loop starts the next cycle ``min_interval`` after the last start
(or when it ends, if it runs longer): new spans are read at once, and the cycle's fixed cost is paid at most once
per ``min_interval``. Spans written by an OpenTelemetry Collector straight into ClickHouse are not seen arriving,
so they keep the interval's schedule.

When nothing arrives, the embedded service slows down (``idle_interval_seconds``; None keeps the interval, as a
ClickHouse server that a Collector writes to must). Every span of the embedded store arrives through the receiver,
which nudges, so once a cycle has started after the last commit (and ``settle_seconds`` after it: the watermark's
lag, which leaves the newest spans to a later cycle), the next one can have nothing new to read. Such a cycle still
costs statements (the read, the watermark's rows) and the merges of what it writes, at every interval, for as long as
the service is up. So each quiet cycle doubles the gap to the next one, from the interval up to
``idle_interval_seconds``; a nudge brings the next cycle back at once. Work queued for the next cycle by something
other than a span (``pending``: the budget exhaustions the API announced) is looked at every interval and brings a
cycle as a nudge does. A cycle still runs at the idle interval, so the checkpoint is never left for good; and a
caller that waits for the watermark to pass "now" after its last span is answered by the quiet cycle one interval
later, as before.

A cycle that fails (the store unreachable, a disk full) is retried from the same watermark after a backoff that
doubles from one interval up to :data:`MAX_BACKOFF_SECONDS`, nudges ignored meanwhile. The log says so once when
cycles start failing and once when they succeed again, never once per attempt; :class:`Freshness` keeps the count
and the decisions' age for the API.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from detector.detection.freshness import Freshness
from detector.storage.transport import StoreError

__all__ = ["CycleLoop", "MAX_BACKOFF_SECONDS", "failure_reason"]

log = logging.getLogger("loop_detector")

# The longest wait between two attempts while cycles fail: a failed attempt on a store that is down costs almost
# nothing (the server store fails fast: detector.storage.reachability), and the catch-up starts at most this long
# after the store is back.
MAX_BACKOFF_SECONDS = 5.0


def failure_reason(exc: BaseException) -> str:
    """A cycle's failure in one short line: the type, and for the store's own errors the first line of the message
    (cut: a store's message may quote a statement, never row content the detector reads)."""
    if isinstance(exc, StoreError):
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"{type(exc).__name__}: {first[:160]}"
    return type(exc).__name__


def _log_cycle(stats: object, started_at: float) -> None:
    """A cycle's timings in the debug log (wall clock): where a span's decision lag goes (``bench/lag.py``)."""
    log.debug("detection cycle", extra={"cycle_started_at": started_at, "cycle_ended_at": time.time(),
                                        "calls_read": getattr(stats, "calls_read", None),
                                        "watermark_us": getattr(stats, "watermark_us", None),
                                        "phases": getattr(stats, "phases", None)})


class CycleLoop:
    """Calls ``cycle`` in its own thread every ``interval_seconds`` (every ``min_interval_seconds`` while nudged; up
    to every ``idle_interval_seconds`` when nothing was committed, see the module) until :meth:`stop`. ``clock`` and
    ``wait`` (seconds -> True when stopped; it may return early after a nudge) are the loop's sense of time,
    replaceable in tests."""

    def __init__(self, cycle: Callable[[], object], interval_seconds: float, min_interval_seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[float], bool] | None = None,
                 idle_interval_seconds: float | None = None, settle_seconds: float = 0.0,
                 pending: Callable[[], bool] | None = None, freshness: Freshness | None = None) -> None:
        self.cycle = cycle
        self.freshness = freshness if freshness is not None else Freshness(clock)
        self.interval_seconds = interval_seconds
        self.min_interval_seconds = interval_seconds if min_interval_seconds is None else min_interval_seconds
        self.idle_interval_seconds = idle_interval_seconds
        self.settle_seconds = settle_seconds
        self.pending = pending  # work queued for the next cycle other than spans (looked at every interval)
        self._clock = clock
        self._last_nudge = clock()  # (at start: what a previous run left is read by the first cycles)
        self._quiet_cycles = 0  # cycles in a row that started with every commit read
        self._stopped = threading.Event()
        self._nudged = threading.Event()  # new spans were committed since the last cycle started
        self._wake = threading.Event()  # a nudge or stop() ends the wait
        self._wait = wait if wait is not None else self._wait_or_wake
        self._thread: threading.Thread | None = None

    def nudge(self) -> None:
        """New spans were committed (any thread): the next cycle comes ``min_interval_seconds`` after the last one
        started, not a whole interval."""
        self._last_nudge = self._clock()
        self._nudged.set()
        self._wake.set()

    def next_start(self, started: float, ended: float) -> float:
        """When the cycle after one that ran from ``started`` to ``ended`` starts, as things stand now."""
        failing = self.freshness.failing_cycles
        if failing:  # a bounded exponential backoff; new spans do not bring it forward
            return ended + min(self.interval_seconds * 2 ** (failing - 1), max(MAX_BACKOFF_SECONDS,
                                                                               self.interval_seconds))
        gap = self.interval_seconds
        if self._nudged.is_set():
            gap = min(gap, self.min_interval_seconds)
        elif self.idle_interval_seconds is not None and self._quiet_cycles:
            gap = max(gap, min(self.idle_interval_seconds, gap * 2 ** (self._quiet_cycles - 1)))
        return max(started + gap, ended)

    def run(self) -> None:
        """The loop (the thread's target; in tests, called directly with a ``wait`` that stops it)."""
        start = self._clock()
        started = ended = previous = None
        while True:
            while (delay := start - self._clock()) > 0:
                # a long quiet gap is waited an interval at a time when something else may queue work for a cycle
                if self._wait(min(delay, self.interval_seconds) if self.pending else delay) or self._stopped.is_set():
                    return
                if self.pending is not None and self.pending():
                    self._nudged.set()
                if started is not None and ended is not None:  # a nudge may have brought the start forward
                    start = self.next_start(started, ended)
            if self._stopped.is_set():
                return
            started = self._clock()
            self._nudged.clear()
            # quiet: the cycle before this one started after every commit (and its settling), so this one reads
            # nothing new; the first cycle after a commit never is
            quiet = previous is not None and self._last_nudge + self.settle_seconds <= previous
            self._quiet_cycles = self._quiet_cycles + 1 if quiet else 0
            previous = started
            wall = time.time()
            try:
                stats = self.cycle()
            except Exception as exc:  # keep the schedule alive; the next cycle retries from the same watermark
                self._failed(exc)
            else:
                self._succeeded(started)
                if log.isEnabledFor(logging.DEBUG):
                    _log_cycle(stats, wall)
            ended = self._clock()
            start = self.next_start(started, ended)

    def _failed(self, exc: Exception) -> None:
        reason = failure_reason(exc)
        if not self.freshness.failed(reason):
            return
        message = ("detection cycles failing (%s): retrying from the same watermark, every %.1f s at most after a "
                   "backoff; /v1/check serves the last decisions meanwhile (stale_seconds)")
        if isinstance(exc, StoreError):
            log.error(message, reason, MAX_BACKOFF_SECONDS)
        else:  # not the store: a bug, with its traceback (once)
            log.exception(message, reason, MAX_BACKOFF_SECONDS)

    def _succeeded(self, started: float) -> None:
        cycles, seconds = self.freshness.succeeded(started)
        if cycles:
            log.info("detection cycles resumed after %d failed cycles over %.1f s; caught up to the watermark",
                     cycles, seconds)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="detection-cycle", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the cycle running now, if one is (waits for it)."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _wait_or_wake(self, seconds: float) -> bool:
        self._wake.wait(seconds)
        self._wake.clear()
        return self._stopped.is_set()
