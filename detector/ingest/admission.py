"""Admission control, shared by the OTLP/HTTP and OTLP/gRPC receivers: load past what the service stores is refused
at once with a retryable answer, so that memory and the decision lag stay bounded for what is accepted.

Modelled on the OpenTelemetry Collector's ``memory_limiter`` and sending queue (refuse to the sender, which retries,
rather than queue in memory), Envoy's overload manager (shed new work before resources run out) and ClickHouse's
``Too many parts`` insert backpressure (refuse inserts while the background work is behind). Four bounds::

    admission = Admission(settings)                      # one per service, both receivers
    ticket = admission.admit(declared_bytes)             # a Ticket, or a Refusal (why, and Retry-After)
    refusal = ticket.charge(len(chunk))                  # bytes read, then the decoded rows: None, or a Refusal
    ticket.decoded()                                     # the request now waits for its commit
    ticket.release()                                     # answered (or refused): its bytes are free again
    admission.committed()                                # new rows acknowledged: the detector has them to read
    await admission.watch_loop()                         # (a task on the event loop) samples the loop's delay

- **memory** (``ingest.max_inflight_bytes``): the bytes of the requests in flight, counted as they are read, plus
  their decoded rows (the Arrow table each request holds until its commit), until each request is answered. That is
  what load adds to the heap; the heap itself is not measured (it holds the detector's state too). A request that
  would take the figure past the bound is refused before its body is read (``Content-Length``), while it is read,
  or once decoded: the figure never exceeds the bound, except for a lone request (nothing else in flight), always
  admitted so that any request within ``max_body_bytes`` can pass.
- **commit wait** (``ingest.max_commit_wait_seconds``): how long the oldest decoded request has waited for its
  commit. Past it the store is behind the receivers: new requests are refused until the queue drains.
- **detector behind** (``ingest.max_detector_behind_seconds``): how long ago the oldest acknowledged commit that no
  detection cycle has read yet was acknowledged (the detector's watermark, :meth:`Admission.committed`). Past it the
  detection cycle is behind: new requests are refused, so that what is accepted is scored within the decision lag.
  While the detection cycles fail (``stalled``: a full disk, the store away), this bound is not applied: that is a
  fault, not load, and the commit path answers it with its own cause (the free-space guard, the store unavailable).
- **event loop delay** (``ingest.max_loop_delay_seconds``): how late the event loop runs a timer (the decaying
  maximum of :data:`LOOP_PROBE_SECONDS` probes). The enforcement API shares the loop, and the loop shares the GIL
  with the decoding, committing and detection threads: once their work makes it late, ``/v1/check`` waits as long.
  Past the bound new requests are refused, which sheds decoding at once and the detector's work a cycle later
  (Envoy's overload manager sheds on such a measure; Node's ``under-pressure`` on event loop delay).

The three lag bounds apply while other requests are in flight: a request that finds the receivers idle is admitted
(an exporter sends one request at a time, so a lone sender is paced by its own answers, and a request now and then is
never refused for a stall it did not cause).

The receivers answer a refusal with HTTP 503 + ``Retry-After`` / gRPC ``RESOURCE_EXHAUSTED`` + ``RetryInfo`` (both
retried by the OpenTelemetry exporters). Everything here runs on the service's event loop (no locks): the receivers
call it from their handlers. This module is plain bookkeeping; the receivers map its answers to their transport.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from detector.settings.service_settings import IngestSettings

__all__ = [
    "Admission", "AdmissionSnapshot", "COMMIT_COALESCE_SECONDS", "LOOP_DELAY_DECAY", "LOOP_PROBE_SECONDS", "REASONS",
    "REFUSED_DETECTOR", "REFUSED_LOOP", "REFUSED_MEMORY", "REFUSED_WAIT", "RETRY_AFTER_SECONDS", "Refusal",
    "RefusalReason", "Ticket",
]

RefusalReason = Literal["memory", "commit_wait", "detector_behind", "loop_delay"]
REFUSED_MEMORY: Final = "memory"
REFUSED_WAIT: Final = "commit_wait"
REFUSED_DETECTOR: Final = "detector_behind"
REFUSED_LOOP: Final = "loop_delay"
REASONS: Final[tuple[RefusalReason, ...]] = (REFUSED_MEMORY, REFUSED_WAIT, REFUSED_DETECTOR, REFUSED_LOOP)

# The delay a refused sender is told to wait. Short: overload passes as soon as a commit or a cycle ends (well under
# a second at the sustainable rate), and the Python OTLP/HTTP exporter gives up when Retry-After exceeds what is left
# of its 10 s export timeout; 1 s lets it retry several times within one export.
RETRY_AFTER_SECONDS: Final = 1
# Acknowledged commits closer together than this are remembered as one (the oldest of them): the detector-behind
# figure is exact to this much, and its memory is at most one entry per this interval while the bound holds.
COMMIT_COALESCE_SECONDS: Final = 0.01
# The event loop's delay is sampled by a timer this often: fine enough to see the stalls that make a /v1/check p99
# (tens of ms), coarse enough to cost nothing (100 wake-ups a second).
LOOP_PROBE_SECONDS: Final = 0.01
# Each probe, the remembered delay decays by this factor (unless the new one is larger): a stall keeps counting for
# about a quarter of a second (0.93 ** 25 = 0.16), long enough to refuse the requests arriving behind it.
LOOP_DELAY_DECAY: Final = 0.93


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused, for the sender (``message``: figures only, nothing of the request)."""

    reason: RefusalReason
    message: str
    retry_after_seconds: int = RETRY_AFTER_SECONDS


@dataclass(frozen=True, slots=True)
class AdmissionSnapshot:
    """What ``/metrics`` shows."""

    inflight_bytes: int
    peak_bytes: int
    max_inflight_bytes: int
    inflight_requests: int
    commit_wait_seconds: float
    detector_behind_seconds: float
    loop_delay_seconds: float
    refused: dict[str, int]  # by reason


class Ticket:
    """One admitted request's share of the in-flight bytes (see the module docstring)."""

    __slots__ = ("_admission", "nbytes", "decoded_at", "_released")

    def __init__(self, admission: Admission, nbytes: int) -> None:
        self._admission = admission
        self.nbytes = nbytes
        self.decoded_at = 0.0  # monotonic time it was decoded (0: still being read or decoded)
        self._released = False

    def charge(self, nbytes: int) -> Refusal | None:
        """Add ``nbytes`` (a chunk of the body read, the decoded rows) to this request's share; a refusal, and nothing
        added, when that would take the in-flight bytes past the bound while other requests are in flight."""
        return self._admission._charge(self, nbytes)

    def decoded(self) -> None:
        """The request is decoded and waits for its commit: its commit wait starts."""
        if not self.decoded_at:
            self.decoded_at = self._admission.clock()

    def release(self) -> None:
        """The request is answered: its bytes are free (idempotent)."""
        if not self._released:
            self._released = True
            self._admission._release(self)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Admission:
    """The bounds of :mod:`detector.ingest.admission` over every request of both receivers. ``watermark`` returns the
    detector's watermark as unix seconds (None: no detector-behind bound, e.g. a receiver without a detector);
    ``clock`` (monotonic) and ``wall`` (unix) are replaceable in tests."""

    def __init__(self, max_inflight_bytes: int, max_commit_wait_seconds: float = 0.0,
                 max_detector_behind_seconds: float = 0.0, watermark: Callable[[], float] | None = None,
                 max_loop_delay_seconds: float = 0.0, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, stalled: Callable[[], bool] = lambda: False) -> None:
        self.max_inflight_bytes = max_inflight_bytes
        self.max_commit_wait_seconds = max_commit_wait_seconds
        self.max_detector_behind_seconds = max_detector_behind_seconds
        self.max_loop_delay_seconds = max_loop_delay_seconds
        self.loop_delay = 0.0  # the decaying maximum of the event loop's delay (watch_loop)
        self.watermark = watermark
        self.stalled = stalled
        self.clock = clock
        self.wall = wall
        self.inflight_bytes = 0
        self.peak_bytes = 0  # the highest inflight_bytes since the start
        self.refused: Counter[str] = Counter()
        self._tickets: dict[int, Ticket] = {}  # in admission order (dicts keep it): the oldest first
        self._unread: deque[float] = deque()  # unix times of acknowledged commits no cycle has read yet

    @classmethod
    def from_settings(cls, settings: IngestSettings, watermark: Callable[[], float] | None = None,
                      stalled: Callable[[], bool] = lambda: False) -> Admission:
        return cls(settings.max_inflight_bytes, settings.max_commit_wait_seconds,
                   settings.max_detector_behind_seconds, watermark, settings.max_loop_delay_seconds, stalled=stalled)

    # -- the receivers' interface ---------------------------------------------------------------------------------
    def admit(self, declared_bytes: int = 0) -> Ticket | Refusal:
        """A new request, with the body size it declares (``Content-Length``, the gRPC message's size; 0: unknown):
        its ticket, holding ``declared_bytes`` from now on (charge what is read beyond them), or why it is refused."""
        # alone, a request always passes (the lag bounds: one sender's requests are paced by their own answers)
        refusal = (self._lagging() if self._tickets else None) or self._over(declared_bytes)
        if refusal is not None:
            self.refused[refusal.reason] += 1
            return refusal
        ticket = Ticket(self, declared_bytes)
        self._tickets[id(ticket)] = ticket
        self.inflight_bytes += declared_bytes
        self.peak_bytes = max(self.peak_bytes, self.inflight_bytes)
        return ticket

    def committed(self) -> None:
        """A commit of new rows was acknowledged: the detector has them to read (its watermark will pass now)."""
        if self.watermark is None:
            return
        self.detector_behind_seconds(forget=True)  # what was read is dropped here too (bound off or not)
        now = self.wall()
        if not self._unread or now - self._unread[-1] > COMMIT_COALESCE_SECONDS:
            self._unread.append(now)

    def loop_delayed(self, delay: float) -> None:
        """One probe of the event loop's delay (seconds late)."""
        self.loop_delay = max(delay, self.loop_delay * LOOP_DELAY_DECAY)

    async def watch_loop(self) -> None:
        """Sample the event loop's delay forever (a task on the loop the receivers and the API run on)."""
        while True:
            started = self.clock()
            await asyncio.sleep(LOOP_PROBE_SECONDS)
            self.loop_delayed(max(0.0, self.clock() - started - LOOP_PROBE_SECONDS))

    # -- figures --------------------------------------------------------------------------------------------------
    def commit_wait_seconds(self) -> float:
        """How long the oldest decoded request in flight has waited for its commit (0: none waits)."""
        now = self.clock()
        tickets = tuple(self._tickets.values())  # one C call: safe while the loop changes the dict (a scrape)
        oldest = min((t.decoded_at for t in tickets if t.decoded_at), default=now)
        return now - oldest

    def detector_behind_seconds(self, forget: bool = False) -> float:
        """How long ago the oldest acknowledged commit the detector has not read yet was acknowledged (0: none).
        ``forget``: drop the commits it has read (on the event loop only; a scrape from another thread only reads)."""
        if self.watermark is None:
            return 0.0
        watermark = self.watermark()
        if forget:
            while self._unread and self._unread[0] <= watermark:
                self._unread.popleft()
        unread = next((at for at in tuple(self._unread) if at > watermark), None)
        return self.wall() - unread if unread is not None else 0.0

    def snapshot(self) -> AdmissionSnapshot:
        return AdmissionSnapshot(self.inflight_bytes, self.peak_bytes, self.max_inflight_bytes, len(self._tickets),
                                 self.commit_wait_seconds(), self.detector_behind_seconds(), self.loop_delay,
                                 {reason: self.refused[reason] for reason in REASONS})

    # -- bookkeeping --------------------------------------------------------------------------------------------------
    def _lagging(self) -> Refusal | None:
        if self.max_loop_delay_seconds and self.loop_delay > self.max_loop_delay_seconds:
            return Refusal(REFUSED_LOOP, f"receiver overloaded: the event loop runs {self.loop_delay * 1000:.0f} ms late "
                           f"(bound {self.max_loop_delay_seconds * 1000:.0f} ms); retry later")
        if self.max_commit_wait_seconds:
            waited = self.commit_wait_seconds()
            if waited > self.max_commit_wait_seconds:
                return Refusal(REFUSED_WAIT, f"receiver overloaded: the oldest request has waited {waited:.1f} s for "
                               f"its commit (bound {self.max_commit_wait_seconds:g} s); retry later")
        if self.max_detector_behind_seconds and not self.stalled():
            behind = self.detector_behind_seconds(forget=True)
            if behind > self.max_detector_behind_seconds:
                return Refusal(REFUSED_DETECTOR, f"receiver overloaded: the detector is {behind:.1f} s behind the "
                               f"spans acknowledged (bound {self.max_detector_behind_seconds:g} s); retry later")
        return None

    def _over(self, nbytes: int) -> Refusal | None:
        if self.inflight_bytes and self.inflight_bytes + nbytes > self.max_inflight_bytes:
            return Refusal(REFUSED_MEMORY, f"receiver overloaded: {self.inflight_bytes} bytes of requests in flight, "
                           f"{nbytes} more would pass ingest.max_inflight_bytes ({self.max_inflight_bytes}); "
                           "retry later")
        return None

    def _charge(self, ticket: Ticket, nbytes: int) -> Refusal | None:
        if ticket._released:
            return None
        if self.inflight_bytes > ticket.nbytes:  # other requests are in flight: the bound applies
            refusal = self._over(nbytes)
            if refusal is not None:
                self.refused[refusal.reason] += 1
                return refusal
        ticket.nbytes += nbytes
        self.inflight_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.inflight_bytes)
        return None

    def _release(self, ticket: Ticket) -> None:
        self.inflight_bytes -= ticket.nbytes
        self._tickets.pop(id(ticket), None)
