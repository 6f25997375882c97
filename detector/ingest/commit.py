"""Committing decoded OTLP export requests: each sender answered on its own, each batch whole or not at all.

Every ingest path (the OTLP/HTTP route, the OTLP/gRPC service) hands this module one request's decoded spans and
gets back that request's outcome::

    committer = Committer(store, metrics, journal_dir)
    committer.recover()                                   # once, before serving: repair what a crash left
    outcome = await committer.commit(DecodedRequest(rows, rejected, error_message, digest))
    outcome.status                                        # "committed" or "retryable"
    outcome.accepted, outcome.rejected, outcome.error_message   # the partial success to report

The rooms of the commit path, each in its module:

- **group commit** (:mod:`detector.ingest.group_commit`): requests that queue while an insert runs are committed
  together in the next one; a group lets the requests arriving alongside join it (:data:`COMMIT_LINGER_SECONDS`);
- **the journal** (:mod:`detector.ingest.journal`): each group is written down before its insert and removed once
  its outcome is known; the requests committed are remembered, so that a retry is answered again and not stored
  twice (a retry that arrives while its first copy is in flight waits for it);
- **repair** (:mod:`detector.ingest.repair`): a group whose insert failed, or that a killed process left journaled,
  is completed (a failure that does not name the data: the store is down, the request stays retryable until it
  comes back) or narrowed down to the spans the store refuses (a failure that names the data: those spans are
  rejected with the store's error code, the rest committed);
- **counters** (:mod:`detector.ingest.counters`).

This module ties them together: dedupe, journal, insert, and on failure repair, in the committer's worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa

from detector.ingest.counters import IngestMetrics
from detector.ingest.group_commit import MAX_GROUP_BYTES, GroupCommitter
from detector.ingest.journal import Journal, JournaledBatch
from detector.ingest.refusal_log import RefusalLog
from detector.ingest.repair import TRACES_TABLE, Repair
from detector.ingest.requests import CommitOutcome, DecodedRequest
from detector.ingest.store_errors import StoreDown, safe_error
from detector.settings.vocabulary import COMMIT_COMMITTED, COMMIT_RETRYABLE
from detector.storage.disk_space import FreeSpace
from detector.storage.transport import Store, StoreError

__all__ = ["COMMIT_LINGER_SECONDS", "Committer", "RecoveryReport"]

log = logging.getLogger("loop_detector.ingest")

# At most how long a group waits for requests arriving alongside its first (ClickHouse's own asynchronous inserts
# wait 50-200 ms: async_insert_busy_timeout_min_ms / _max_ms); what it is worth: docs/benchmarks.md, "Measured
# reasons behind the code".
COMMIT_LINGER_SECONDS: Final = 0.1


@dataclass(slots=True)
class RecoveryReport:
    batches: int = 0  # journal files found at start
    requests: int = 0
    resolved: int = 0  # requests resolved (committed or refused)
    pending: int = 0  # requests still pending (the store failed again): retried later


@dataclass(slots=True)
class _Pending:
    """A journaled batch whose requests are not all resolved yet."""

    batch: JournaledBatch
    outcomes: dict[int, CommitOutcome] = field(default_factory=dict)  # index -> outcome once resolved

    @property
    def unresolved(self) -> int:
        return len(self.batch.requests) - len(self.outcomes)


class Committer:
    """Commits decoded export requests to ``otel.otel_traces`` (see the module docstring for the guarantees).

    ``commit`` is called from the event loop; the store is used from one worker thread at a time."""

    def __init__(self, store: Store, metrics: IngestMetrics | None = None, journal_dir: str | os.PathLike[str] | None = None,
                 max_group_bytes: int = MAX_GROUP_BYTES, linger_seconds: float = COMMIT_LINGER_SECONDS,
                 free_space: FreeSpace | None = None) -> None:
        self.store = store
        # the data directory's free space (ingest.min_free_bytes): below it requests are refused before any write
        self.free_space = free_space
        self.metrics = metrics if metrics is not None else IngestMetrics()
        self.journal = Journal(journal_dir)
        self.remembered = self.journal.committed
        self.repair = Repair(store, self._insert_rows)
        self.refusals = RefusalLog(log)  # the receivers' refusals for the store's sake, logged once per run
        self._group: GroupCommitter[DecodedRequest, CommitOutcome] = GroupCommitter(
            self._commit_group, lambda request: request.rows.nbytes, self._aborted,
            max_group_bytes=max_group_bytes, linger_seconds=linger_seconds)
        self._inflight: dict[bytes, asyncio.Future[CommitOutcome]] = {}
        self._pending: list[_Pending] = []  # journaled batches not resolved yet (the store failed again)
        self._busy = threading.Lock()  # held by the worker while it uses the store
        self._closed = False
        # called (in the worker thread) after a group committed new rows: the detection cycle's schedule listens
        self.on_committed: Callable[[], None] | None = None

    # -- the interface ---------------------------------------------------------------------------------------
    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Around a request's reading and decoding (on the event loop): a group about to start waits for it."""
        with self._group.arriving():
            yield

    def known(self, digest: bytes) -> CommitOutcome | None:
        """The outcome of a request already committed with this digest (a retry), else None."""
        if not digest:
            return None
        outcome = self.remembered.get(digest)
        if outcome is None:
            return None
        return CommitOutcome(COMMIT_COMMITTED, outcome.accepted, outcome.rejected, outcome.error_message,
                             duplicate=True)

    async def commit(self, request: DecodedRequest) -> CommitOutcome:
        """Commit one request's rows; return its outcome. Never raises for a store failure (that is ``retryable``)."""
        known = self.known(request.digest)
        if known is not None:
            self.metrics.duplicates += 1
            return known
        if request.accepted == 0:
            return CommitOutcome(COMMIT_COMMITTED, 0, request.rejected, request.error_message)
        shortage = self.free_space.shortage() if self.free_space is not None else None
        if shortage is not None:  # refused at once, not queued behind an insert that would fail (or wait)
            self.metrics.disk_refusals += 1
            return CommitOutcome(COMMIT_RETRYABLE, retry_reason=f"{shortage}: retry once space is freed")
        inflight = self._inflight.get(request.digest) if request.digest else None
        if inflight is not None:  # the same request, resent while its first copy is being committed
            outcome = await asyncio.shield(inflight)
            if outcome.status == COMMIT_COMMITTED:
                self.metrics.duplicates += 1
                return CommitOutcome(COMMIT_COMMITTED, outcome.accepted, outcome.rejected, outcome.error_message,
                                     duplicate=True)
            return outcome
        future: asyncio.Future[CommitOutcome] = asyncio.get_running_loop().create_future()  # for its resends
        if request.digest:
            self._inflight[request.digest] = future
        try:
            outcome = await self._group.submit(request)
        except BaseException as exc:  # cancelled: a resend waiting for this copy is not acknowledged either
            future.set_result(CommitOutcome(COMMIT_RETRYABLE, retry_reason=safe_error(exc)))
            raise
        finally:
            if request.digest:
                self._inflight.pop(request.digest, None)
        future.set_result(outcome)
        return outcome

    def recover(self) -> RecoveryReport:
        """Resolve every batch a previous process journaled and did not finish (call before serving)."""
        report = RecoveryReport()
        for batch in self.journal.leftovers():
            report.batches += 1
            report.requests += len(batch.requests)
            pending = _Pending(batch)
            self._resolve(pending)
            report.resolved += len(pending.outcomes)
            if pending.unresolved:
                self._pending.append(pending)
        report.pending = self.pending_requests
        if report.batches:
            log.info("ingest journal recovered", extra={"batches": report.batches, "requests": report.requests,
                                                         "resolved": report.resolved, "pending": report.pending})
        return report

    @property
    def pending_requests(self) -> int:
        return sum(p.unresolved for p in self._pending)

    def close(self, timeout: float = 60.0) -> None:
        """Wait for the group being committed (so that the store can be closed under nobody); later groups are
        answered retryable. What is still pending stays journaled for the next start."""
        self._closed = True
        if self._busy.acquire(timeout=timeout):
            self._busy.release()
        else:
            log.error("ingest commit still running after %.0f s at shutdown; its journal is repaired at next start",
                      timeout)

    # -- the worker thread ----------------------------------------------------------------------------------------
    @staticmethod
    def _aborted(exc: BaseException) -> CommitOutcome:
        """A group whose worker was cancelled (shutdown) or failed (a bug): nothing of it is acknowledged."""
        reason = safe_error(exc)
        # (the store unreachable: the receivers log the refusal, once per run; anything else is a bug, logged each time)
        log.log(logging.DEBUG if isinstance(exc, StoreError) else logging.ERROR, "OTLP group commit aborted: %s", reason)
        return CommitOutcome(COMMIT_RETRYABLE, retry_reason=reason)

    def _commit_group(self, requests: list[DecodedRequest]) -> list[CommitOutcome]:
        """One group's insert, or its resolution request by request."""
        with self._busy:
            if self._closed:
                return [CommitOutcome(COMMIT_RETRYABLE, retry_reason="shutting down")] * len(requests)
            # held from the insert to the end of any repair: the embedded detector never reads a row being rolled back
            with self.store.exclusive():
                outcomes = self._commit_group_held(requests)
        listener = self.on_committed  # read once: the service may unset it meanwhile, as it stops
        if listener is not None and any(o.status == COMMIT_COMMITTED and o.accepted for o in outcomes):
            listener()
        return outcomes

    def _commit_group_held(self, requests: list[DecodedRequest]) -> list[CommitOutcome]:
        # checked afresh before anything is written: a repair (a DELETE, a reinsert) or a journal on a full disk fails
        shortage = self.free_space.shortage(fresh=True) if self.free_space is not None else None
        if shortage is not None:
            self.metrics.disk_refusals += len(requests)
            reason = f"{shortage}: retry once space is freed"
            return [self._known_or(r, CommitOutcome(COMMIT_RETRYABLE, retry_reason=reason)) for r in requests]
        if self._pending:
            for pending in list(self._pending):  # paced by the arrival of new requests (senders back off)
                self._resolve(pending)
                if not pending.unresolved:
                    self._pending.remove(pending)
            if self._pending:  # the store still fails: do not pile more batches onto it
                reason = "store unavailable: earlier batches are still being recovered"
                return [self._known_or(r, CommitOutcome(COMMIT_RETRYABLE, retry_reason=reason)) for r in requests]
        known = [self.known(r.digest) for r in requests]  # resolved meanwhile (a pending batch held them)
        todo = [r for r, k in zip(requests, known, strict=True) if k is None]
        inserted = iter(self._insert(todo) if todo else [])
        result = []
        for k in known:
            if k is not None:
                self.metrics.duplicates += 1
            result.append(k if k is not None else next(inserted))
        return result

    def _known_or(self, request: DecodedRequest, outcome: CommitOutcome) -> CommitOutcome:
        known = self.known(request.digest)
        return known if known is not None else outcome

    def _insert(self, requests: list[DecodedRequest]) -> list[CommitOutcome]:
        try:
            batch = self.journal.write(requests)
        except OSError as exc:
            log.error("ingest journal write failed: %s; %d requests not acknowledged", type(exc).__name__, len(requests))
            return [CommitOutcome(COMMIT_RETRYABLE, retry_reason=f"journal write failed: {type(exc).__name__}")] * len(requests)
        started = time.perf_counter()
        try:
            tables = [r.rows for r in requests]
            self._insert_rows(tables[0] if len(tables) == 1 else pa.concat_tables(tables))
        except Exception as exc:
            self.metrics.insert_seconds += time.perf_counter() - started
            self.metrics.failed_inserts += 1
            log.error("OTLP group insert failed: %s; resolving its %d requests one by one", safe_error(exc),
                      len(requests))
            pending = _Pending(batch)
            self._resolve(pending, exc)
            if pending.unresolved:
                self._pending.append(pending)
            reason = f"store unavailable: insert failed: {safe_error(exc)}"
            return [pending.outcomes.get(i, CommitOutcome(COMMIT_RETRYABLE, retry_reason=reason))
                    for i in range(len(requests))]
        self.metrics.insert_seconds += time.perf_counter() - started
        self.metrics.inserts += 1
        outcomes = [CommitOutcome(COMMIT_COMMITTED, r.accepted, r.rejected, r.error_message) for r in requests]
        self.remembered.add((r.digest, o) for r, o in zip(requests, outcomes, strict=True))
        self.journal.remove(batch)
        return outcomes

    def _insert_rows(self, rows: pa.Table) -> None:
        self.store.insert_arrow(TRACES_TABLE, rows)

    def _resolve(self, pending: _Pending, error: BaseException | None = None) -> None:
        """Resolve the unresolved requests of a journaled batch (:class:`detector.ingest.repair.Repair`); drop the
        journal once all are. Each request gets its own answer: its spans the store refuses, if any, are rejected."""
        todo = [i for i in range(len(pending.batch.requests)) if i not in pending.outcomes]
        if not todo:
            return
        requests = [pending.batch.requests[i] for i in todo]
        try:
            refused = self.repair.resolve(requests, pending.batch.journaled_ns, error)
        except StoreDown as exc:
            log.debug("OTLP batch left pending: the store failed again (%s)", exc)  # (its first failure is logged)
            return
        for i, request, mine in zip(todo, requests, refused, strict=True):
            self.metrics.store_rejected += len(mine)
            if mine:
                outcome = CommitOutcome(COMMIT_COMMITTED, request.accepted - len(mine), request.rejected + len(mine),
                                        _merge_messages(request, mine))
            else:
                outcome = CommitOutcome(COMMIT_COMMITTED, request.accepted, request.rejected, request.error_message)
            pending.outcomes[i] = outcome
        self.remembered.add((r.digest, pending.outcomes[i]) for i, r in zip(todo, requests, strict=True))
        self.metrics.repaired_batches += 1
        self.journal.remove(pending.batch)


def _merge_messages(request: DecodedRequest, refused: dict[int, str]) -> str:
    """The decoder's partial-success message with the store's refusals added (reasons, then the first spans by id)."""
    reasons = Counter(f"rejected by the store: {error}" for error in refused.values())
    traces, spans = request.rows.column("TraceId"), request.rows.column("SpanId")
    examples = [f"trace {traces[i].as_py()} span {spans[i].as_py()}: rejected by the store ({refused[i]})"
                for i in sorted(refused)[:5]]
    more = f" (and {len(refused) - len(examples)} more)" if len(refused) > len(examples) else ""
    store_part = (f"rejected {len(refused)} of {request.accepted} decoded spans in the store ["
                  + ", ".join(f"{r}: {n}" for r, n in reasons.items()) + "]; " + "; ".join(examples) + more)
    return f"{request.error_message}; {store_part}" if request.error_message else store_part
