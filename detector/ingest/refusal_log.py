"""Requests refused for the store's sake (not acknowledged, retryable: the store down, full or timing out), logged
once per run of refusals rather than once per request.

While the store is away every sender retries every second or so: a line per refusal is hundreds of lines a minute,
saying the same thing. The first refusal of a run is logged in full, the others are counted, and the next request
acknowledged ends the run with one line: how many were refused, over how long.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["RefusalLog"]


class RefusalLog:
    """Thread-safe (the HTTP and gRPC receivers share one); ``clock`` is monotonic seconds."""

    def __init__(self, logger: logging.Logger, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._clock = clock
        self._lock = threading.Lock()
        self._count = 0
        self._since = 0.0

    def refused(self, message: str, *args: object) -> None:
        """A request refused, retryable: ``message % args`` is logged if it is the first of a run."""
        with self._lock:
            self._count += 1
            first = self._count == 1
            if first:
                self._since = self._clock()
        if first:
            self._log.error(message + " (further refusals are counted, not logged, until a request is acknowledged)",
                            *args)

    def acknowledged(self) -> None:
        """A request acknowledged: the end of a run of refusals, if there was one."""
        if not self._count:  # the usual case, without the lock
            return
        with self._lock:
            count, self._count = self._count, 0
            seconds = self._clock() - self._since
        if count:
            self._log.info("OTLP requests acknowledged again after %d refused over %.1f s", count, seconds)
