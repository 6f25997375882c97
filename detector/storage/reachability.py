"""Whether the ClickHouse server answers, and failing fast while it does not (the server store's circuit breaker).

A server that is stopped refuses connections at once, but one that accepts and never answers (a hung server, a
dropped route, a full accept queue) holds each statement for the client's whole read timeout. Every caller of the
server store shares one client, one statement at a time: without a breaker, each OTLP request, each detection cycle
and each admin action would queue for that timeout, one after another, and a sender would wait minutes for its 503.

So the first statement that fails on the transport (no answer, a refused or dropped connection: not an error the
server answered) marks the server *unreachable*. From then on statements fail at once with
:class:`StoreUnreachable` (a :class:`~detector.storage.transport.StoreError`: the receivers answer 503, the
detection cycle waits and retries), while a probe in the background asks the server every
:data:`PROBE_INTERVAL_SECONDS` (``GET /ping``, bounded by :data:`PROBE_TIMEOUT_SECONDS`; started by a caller's
attempt, never run in its time); the first probe answered closes the breaker, and the next statement runs. An error the server answered (a syntax error, a refused value) says nothing about
reachability and never opens it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "PROBE_INTERVAL_SECONDS", "PROBE_TIMEOUT_SECONDS", "Breaker", "BreakerState", "quiet_driver_tracebacks",
    "transport_failure",
]

# How often a statement may try the server while it is unreachable: once a second brings the service back within a
# second of the server (the detection cycle's own backoff is at most a few seconds), and costs the server one
# /ping a second.
PROBE_INTERVAL_SECONDS = 1.0
# A /ping needs no work from the server: a server that cannot answer it within 2 s is not serving.
PROBE_TIMEOUT_SECONDS = 2.0
_SERVER_CODE = re.compile(r"Code: \d+")  # in a message: the server answered with this ClickHouse error code


@dataclass(frozen=True, slots=True)
class BreakerState:
    """A snapshot: whether the server is unreachable now, since when (monotonic seconds), and why (no data)."""

    unreachable: bool
    since: float = 0.0
    reason: str = ""


class Breaker:
    """Thread-safe. ``ping(timeout) -> bool`` probes the server; ``clock`` is monotonic seconds."""

    def __init__(self, ping: Callable[[float], bool], clock: Callable[[], float] = time.monotonic) -> None:
        self._ping = ping
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState(False)
        self._next_probe = 0.0
        self._probing = False

    @property
    def state(self) -> BreakerState:
        return self._state

    def admit(self) -> str | None:
        """Before a statement: None when it may run, else why it must fail at once. While the server is unreachable
        every caller fails at once; a probe runs in the background every PROBE_INTERVAL_SECONDS, never in a caller's
        time (a hung server would hold it for the probe's timeout), and closes the breaker when answered."""
        state = self._state
        if not state.unreachable:
            return None
        with self._lock:
            now = self._clock()
            due = now >= self._next_probe and not self._probing
            if due:
                self._next_probe = now + PROBE_INTERVAL_SECONDS
                self._probing = True
        if due:
            threading.Thread(target=self._probe, name=_PROBE_THREAD, daemon=True).start()
        return state.reason

    def _probe(self) -> None:
        try:
            answered = self._ping(PROBE_TIMEOUT_SECONDS)
        except Exception:  # a probe that fails in any way is a server not answering
            answered = False
        finally:
            with self._lock:
                self._probing = False
        if answered:
            self.closed()

    def opened(self, reason: str) -> None:
        """A statement failed on the transport: the server is unreachable (from now, if it was not already)."""
        with self._lock:
            if not self._state.unreachable:
                self._state = BreakerState(True, self._clock(), reason)
                self._next_probe = self._clock() + PROBE_INTERVAL_SECONDS

    def closed(self) -> None:
        """A statement (or a probe) was answered: the server is reachable."""
        if self._state.unreachable:
            with self._lock:
                self._state = BreakerState(False)


_PROBE_THREAD = "store-probe"


class _DriverTracebacks(logging.Filter):
    """clickhouse-connect logs a warning with a traceback for every request that fails on the transport, and urllib3
    one for each retry of the probe's ``/ping``: while the server is down, a line per statement and a line a second.
    The failure reaches the caller as a StoreError, logged by it once per run (the detector's cycles, the receivers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("urllib3"):
            return threading.current_thread().name != _PROBE_THREAD
        return not record.getMessage().startswith("Unexpected Http Driver Exception")


def quiet_driver_tracebacks() -> None:
    for name in ("clickhouse_connect.driver._backend.http_sync", "urllib3.connectionpool"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DriverTracebacks) for f in logger.filters):
            logger.addFilter(_DriverTracebacks())


def transport_failure(exc: BaseException) -> bool:
    """Whether a failure is the transport's (no answer: refused, reset, timed out), not an error the server sent."""
    from urllib3.exceptions import HTTPError

    if _SERVER_CODE.search(str(exc)):
        return False
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (HTTPError, OSError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
