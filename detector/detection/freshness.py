"""How far behind the decisions are: the age of the last detection cycle that succeeded, and whether cycles fail now.

The enforcement API answers from memory (the decision book), so it keeps answering while the store is down; what it
cannot know by itself is that its decisions have stopped moving. :class:`Freshness` is that knowledge, plain data
updated by the cycle's schedule (:class:`detector.service.cycle_loop.CycleLoop`) and read by ``/v1/check``,
``/healthz`` and ``/metrics``.

``stale_seconds`` is the time since the start of the last cycle that succeeded: the decisions include every call
stored before that moment (less the detector's ``watermark_lag_seconds``) and none after. Healthy, it stays under
one cycle interval plus a cycle's duration; while cycles fail (the store unreachable, a full disk) it grows by one
second a second; after the store comes back it drops at the end of the first cycle that catches up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Freshness", "FreshnessView"]


@dataclass(frozen=True, slots=True)
class FreshnessView:
    """A snapshot for an answer: the decisions' age, and the failing run of cycles if there is one."""

    stale_seconds: float
    failing_cycles: int  # consecutive failed cycles (0: the last one succeeded)
    failing_seconds: float  # since the first of them
    reason: str  # the last failure, type and short message ('' when the last cycle succeeded)

    def note(self) -> str:
        """One line for ``/healthz`` ('' when the detector is current)."""
        if not self.failing_cycles:
            return ""
        return (f"detector behind: {self.failing_cycles} cycles failed over {self.failing_seconds:.0f} s "
                f"({self.reason}); decisions are those of {self.stale_seconds:.0f} s ago")


class Freshness:
    """Thread-safe; ``clock`` is monotonic seconds. Starts as of its creation (the decisions loaded at start)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._current_as_of = clock()  # the start of the last cycle that succeeded
        self._failing = 0
        self._failing_since = 0.0
        self._reason = ""
        self.failures_total = 0

    def succeeded(self, started: float) -> tuple[int, float]:
        """A cycle that started at ``started`` succeeded. Returns the failing run it ends: (cycles, seconds)."""
        with self._lock:
            ended = (self._failing, self._clock() - self._failing_since if self._failing else 0.0)
            self._current_as_of = max(self._current_as_of, started)
            self._failing, self._reason = 0, ""
            return ended

    def failed(self, reason: str) -> bool:
        """A cycle failed; True when it is the first of a failing run (the state changed)."""
        with self._lock:
            self.failures_total += 1
            self._reason = reason
            self._failing += 1
            if self._failing == 1:
                self._failing_since = self._clock()
                return True
            return False

    @property
    def failing_cycles(self) -> int:
        return self._failing

    def stale_seconds(self) -> float:
        return max(0.0, self._clock() - self._current_as_of)

    def view(self) -> FreshnessView:
        with self._lock:
            now = self._clock()
            return FreshnessView(max(0.0, now - self._current_as_of), self._failing,
                                 now - self._failing_since if self._failing else 0.0, self._reason)
