"""Committing decoded OTLP export requests: each sender answered on its own, each batch whole or not at all.

Every ingest path (the OTLP/HTTP route, and any other receiver) hands this module one request's decoded spans
and gets back that request's outcome::

    committer = Committer(store, metrics, journal_dir)
    committer.recover()                                   # once, before serving: repair what a crash left
    outcome = await committer.commit(DecodedRequest(rows, rejected, error_message, digest))
    outcome.status                                        # "committed" or "retryable"
    outcome.accepted, outcome.rejected, outcome.error_message   # the partial success to report

What it guarantees, and how:

- **Group commit.** Requests that queue while an insert runs are committed together in the next insert (the
  materialized view into ``otel.genai_calls`` has a fixed cost per insert, whatever the
  insert's size); every request still waits for the insert that holds its own rows. Before it takes its
  requests, a group lets those arriving alongside join it: it waits one :data:`LINGER_STEP_SECONDS`, and then as
  long as a receiver is still reading or decoding a request (:meth:`Committer.arriving`), at most
  :data:`COMMIT_LINGER_SECONDS`. Senders answered together send again together; without the wait the first of them
  got an insert of its own while the rest queued behind it (groups of 7 and 1 by turns, with 8 senders:
  ``bench/lag.py``).
- **Isolation.** The decoders reject every value the store is known to refuse. If a group's insert still
  fails, its requests are resolved one by one, so each sender gets its own answer: a failure that names the data
  (a ClickHouse data error code) is narrowed down, without writing, by *probing*: the request's rows are staged in
  a temporary table and run through every materialized view on ``otel.otel_traces`` into a ``Null`` table,
  halving the rows until the spans the store refuses are found. Those spans are rejected (partial success, with
  the store's error code and the span's ids: never a value), the rest of the request is committed. A failure that
  does not name the data (the store is down) makes the request retryable (503): nothing of it is acknowledged.
- **All or nothing.** An insert that fails, or a process killed during one, can leave rows in ``otel.otel_traces``
  without their ``otel.genai_calls`` rows (ClickHouse commits the table's part before the view's). So before each
  insert the group is written to a journal file (Arrow IPC, in ``journal_dir``), removed once the outcome is
  known. Resolving a journaled request is idempotent: it reads which of its spans are in ``otel.otel_traces``
  and which in ``otel.genai_calls``, inserts the missing spans, derives the missing calls from the stored spans
  (the view's own SELECT over the staged rows), and deletes the rows of spans the store refused (such a row can
  only be left by a failed insert). After a failed insert this runs at once; after a crash, at the next start
  (:meth:`Committer.recover`). A batch is then in both tables or in neither.
- **Idempotence.** A request is known by the digest of its decompressed body. An exporter that did not see the
  ``200`` resends the same bytes; a request already committed (recorded, with its outcome, in the journal
  directory's ``committed.log``, and remembered for :data:`REMEMBER_SECONDS`) is acknowledged again with the
  same answer and not stored twice, so it is not scored twice; a retry that arrives while the first copy is
  still in flight waits for it.

Durability is the store's own: journal files are written without fsync, like ClickHouse's parts by default, so a
killed process loses nothing, a crashed machine may lose what its page cache held.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from detector.settings.vocabulary import COMMIT_COMMITTED, COMMIT_RETRYABLE, CommitStatus
from detector.storage.transport import Store, StoreError

__all__ = [
    "COMMITTED_LOG", "CommitOutcome", "Committer", "DATA_ERROR_CODES", "DecodedRequest", "IngestMetrics",
    "MAX_GROUP_BYTES", "MAX_PROBES", "REMEMBERED_REQUESTS", "REMEMBER_SECONDS", "RecoveryReport", "TRACES_TABLE",
    "JOURNAL_SUFFIX", "error_code", "read_journal", "request_digest", "safe_error", "take_group", "write_journal",
]

_Item = TypeVar("_Item")  # what a committer queues: a decoded request, a table of log rows
_Waiter = TypeVar("_Waiter")  # and what waits for its outcome

log = logging.getLogger("loop_detector.ingest")

TRACES_TABLE = "otel.otel_traces"
CALLS_TABLE = "otel.genai_calls"
# The settings of every insert into otel.otel_traces. Merging the query plan's expression steps folds the view's
# nested SELECTs into one expression on every insert, and for a view of this size that took ~50 ms of its planning,
# a quarter of a whole insert; the steps left apart cost less than that to run (docs/benchmarks.md, "The store held
# for statements only, a cheaper plan, ..."). On a server the collector's inserts get it from its user's profile
# (docs/scaling.md).
TRACES_INSERT_SETTINGS: Final = {"query_plan_merge_expressions": 0}
# One group commit stops adding requests once its Arrow tables reach this size.
MAX_GROUP_BYTES = 128 * 1024 * 1024
# At most how long a group waits for requests arriving alongside its first (ClickHouse's own asynchronous inserts
# wait 50-200 ms: async_insert_busy_timeout_min_ms / _max_ms), in steps; what it is worth: docs/benchmarks.md,
# "Measured reasons behind the code".
COMMIT_LINGER_SECONDS = 0.1
LINGER_STEP_SECONDS = 0.01
# Committed requests remembered for retries: exporters retry within minutes (the OTel SDKs' and the collector's
# backoff gives up after about 5 minutes by default).
REMEMBER_SECONDS = 3600
REMEMBERED_REQUESTS = 100_000
COMMITTED_LOG = "committed.log"
JOURNAL_SUFFIX = ".arrow"
# Probes (one staged subset through the views each) spent narrowing one request down to the spans the store
# refuses; past it, the subsets still failing are rejected whole.
MAX_PROBES = 256

# ClickHouse error codes that say "this data", not "this store": parse and conversion failures, values out of
# range, a function refusing its argument (throwIf included). Any other failure is taken as the store's.
DATA_ERROR_CODES = frozenset({
    6,  # CANNOT_PARSE_TEXT
    26,  # CANNOT_PARSE_QUOTED_STRING
    27,  # CANNOT_PARSE_INPUT_ASSERTION_FAILED
    36,  # BAD_ARGUMENTS
    38,  # CANNOT_PARSE_DATE
    41,  # CANNOT_PARSE_DATETIME
    43,  # ILLEGAL_TYPE_OF_ARGUMENT
    44,  # ILLEGAL_COLUMN
    53,  # TYPE_MISMATCH
    69,  # ARGUMENT_OUT_OF_BOUND
    70,  # CANNOT_CONVERT_TYPE
    72,  # CANNOT_PARSE_NUMBER
    117,  # INCORRECT_DATA
    128,  # TOO_LARGE_ARRAY_SIZE
    131,  # TOO_LARGE_STRING_SIZE
    190,  # SIZES_OF_ARRAYS_DONT_MATCH
    306,  # TOO_DEEP_RECURSION
    321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
    349,  # CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
    395,  # FUNCTION_THROW_IF_VALUE_IS_NON_ZERO
    407,  # DECIMAL_OVERFLOW
})

STAGE = "loop_ingest_stage"  # a temporary table: the session's own, gone with it
CREATE_STAGE = f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGE} AS {TRACES_TABLE} ENGINE = Memory"
CLEAR_STAGE = f"TRUNCATE TABLE {STAGE}"
SELECT_VIEWS = """
SELECT arrayJoin(arrayZip(dependencies_database, dependencies_table)) AS view
FROM system.tables WHERE database = 'otel' AND name = 'otel_traces'
"""
SELECT_VIEW = "SELECT as_select, create_table_query FROM system.tables WHERE database = {db:String} AND name = {name:String}"
SELECT_COLUMNS = """
SELECT name FROM system.columns
WHERE database = {db:String} AND table = {table:String} AND default_kind NOT IN ('MATERIALIZED', 'ALIAS', 'EPHEMERAL')
ORDER BY position
"""
# Which of the staged spans are stored. Ids travel as parameters (never spliced into the SQL); the time range
# lets the partition key prune.
SELECT_STORED_SPANS = f"""
SELECT DISTINCT TraceId AS t, SpanId AS s FROM {TRACES_TABLE}
WHERE Timestamp >= fromUnixTimestamp64Nano({{lo:Int64}}) AND Timestamp <= fromUnixTimestamp64Nano({{hi:Int64}})
  AND TraceId IN {{traces:Array(String)}} AND (TraceId, SpanId) IN (SELECT TraceId, SpanId FROM {STAGE})
"""
SELECT_STORED_CALLS = f"""
SELECT DISTINCT trace_id AS t, span_id AS s FROM {CALLS_TABLE}
WHERE trace_id IN {{traces:Array(String)}} AND (trace_id, span_id) IN (SELECT TraceId, SpanId FROM {STAGE})
"""
# A refused span's rows, exactly (ids, times, attributes): only a failed insert can have left such a row.
SELECT_STAGED_IDENTITY = f"""
SELECT TraceId AS t, SpanId AS s, toUnixTimestamp64Nano(Timestamp) AS ts, Duration AS d,
       cityHash64(SpanAttributes) AS h FROM {STAGE}
"""
DELETE_SPANS = f"""
DELETE FROM {TRACES_TABLE} WHERE TraceId IN {{traces:Array(String)}}
  AND (TraceId, SpanId, toUnixTimestamp64Nano(Timestamp), Duration, cityHash64(SpanAttributes))
      IN {{rows:Array(Tuple(String, String, Int64, UInt64, UInt64))}}
"""
SELECT_SPANS_LEFT = f"""
SELECT DISTINCT TraceId AS t, SpanId AS s FROM {TRACES_TABLE}
WHERE TraceId IN {{traces:Array(String)}} AND (TraceId, SpanId) IN {{keys:Array(Tuple(String, String))}}
"""
SELECT_CALLS_BY_KEY = f"""
SELECT DISTINCT trace_id AS t, span_id AS s FROM {CALLS_TABLE}
WHERE trace_id IN {{traces:Array(String)}} AND (trace_id, span_id) IN {{keys:Array(Tuple(String, String))}}
"""
DELETE_CALLS = f"""
DELETE FROM {CALLS_TABLE} WHERE trace_id IN {{traces:Array(String)}}
  AND (trace_id, span_id) IN {{keys:Array(Tuple(String, String))}}
"""


@dataclass
class IngestMetrics:
    """Counters the receiver and the committer update (read by ``/metrics`` and tests)."""

    spans_accepted: int = 0
    spans_rejected: int = 0
    requests_by_status: Counter[int] = field(default_factory=Counter)
    grpc_requests_by_code: Counter[str] = field(default_factory=Counter)  # OTLP/gRPC answers by status code
    logs_accepted: int = 0
    logs_rejected: int = 0
    inserts: int = 0  # store inserts of a group (one per group commit)
    insert_seconds: float = 0.0  # wall time spent inside the store's insert
    failed_inserts: int = 0  # group inserts the store failed (each then resolved request by request)
    store_rejected: int = 0  # spans the store refused, found by probing
    duplicates: int = 0  # retried requests acknowledged again without storing anything
    repaired_batches: int = 0  # journaled batches resolved after a failure or at start


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    """One export request, decoded: the accepted spans as ``otel.otel_traces`` columns (an Arrow table, e.g.
    ``SpanBatch.to_arrow()``), what the decoder rejected, and the request's identity for retries."""

    rows: pa.Table
    rejected: int = 0
    error_message: str = ""
    digest: bytes = b""  # request_digest() of the body; b"": not deduplicated

    @property
    def accepted(self) -> int:
        return int(self.rows.num_rows)


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """What to tell the sender. ``committed``: every accepted span is stored (``rejected`` of them were refused,
    ``error_message`` says why). ``retryable``: nothing of the request is acknowledged; send it again."""

    status: CommitStatus
    accepted: int = 0
    rejected: int = 0
    error_message: str = ""
    retry_reason: str = ""  # for retryable: the store's failure as type and error code only
    duplicate: bool = False  # a retry of a request already committed: nothing was stored this time


@dataclass(slots=True)
class RecoveryReport:
    batches: int = 0  # journal files found at start
    requests: int = 0
    resolved: int = 0  # requests resolved (committed or refused)
    pending: int = 0  # requests still pending (the store failed again): retried later


def request_digest(media_type: str, body: bytes) -> bytes:
    """The identity of an export request: its media type and decompressed body (exporters resend the same bytes)."""
    return hashlib.blake2b(media_type.encode() + b"\x00" + body, digest_size=16).digest()


def error_code(exc: BaseException) -> int | None:
    match = re.search(r"Code: (\d+)", str(exc))
    return int(match.group(1)) if match else None


def safe_error(exc: BaseException) -> str:
    """An exception as type and ClickHouse error code only: messages may quote row data."""
    code = error_code(exc)
    return f"{type(exc).__name__}{f' (ClickHouse code {code})' if code is not None else ''}"


def _is_data_error(exc: BaseException) -> bool:
    return error_code(exc) in DATA_ERROR_CODES


class _StoreDown(Exception):
    """The store failed for a reason other than the data: the request stays pending."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(safe_error(cause))
        self.cause = cause


@dataclass(slots=True)
class _View:
    """A materialized view on otel.otel_traces, as a probe: its SELECT over the stage into a Null table."""

    name: str
    target: str
    probe: str  # INSERT INTO <null copy of target> SELECT ... FROM (<its select over the stage>)
    complete: str  # INSERT INTO <target> SELECT ... FROM (<its select over the stage>) (the calls table only)


@dataclass(slots=True)
class _Pending:
    """A journaled batch whose requests are not all resolved yet."""

    path: Path | None
    requests: list[DecodedRequest]
    outcomes: dict[int, CommitOutcome] = field(default_factory=dict)  # index -> outcome once resolved


class _Remembered:
    """Committed requests by digest, bounded in count and age, persisted as JSON lines in ``committed.log``."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, tuple[float, CommitOutcome]] = OrderedDict()
        self._lines = 0
        if path is not None and path.exists():
            now = time.time()
            for line in path.read_bytes().splitlines():
                try:
                    doc = orjson.loads(line)
                    digest = bytes.fromhex(doc["d"])
                    outcome = CommitOutcome(COMMIT_COMMITTED, int(doc["a"]), int(doc["r"]), str(doc["m"]))
                    at = float(doc["t"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line after a crash
                if now - at <= REMEMBER_SECONDS:
                    self._put(digest, at, outcome)
            self._rewrite()

    def _put(self, digest: bytes, at: float, outcome: CommitOutcome) -> None:
        self._entries[digest] = (at, outcome)
        self._entries.move_to_end(digest)
        while len(self._entries) > REMEMBERED_REQUESTS:
            self._entries.popitem(last=False)

    def get(self, digest: bytes) -> CommitOutcome | None:
        with self._lock:
            entry = self._entries.get(digest)
        if entry is None or time.time() - entry[0] > REMEMBER_SECONDS:
            return None
        return entry[1]

    def add(self, items: Iterable[tuple[bytes, CommitOutcome]]) -> None:
        now = time.time()
        lines = []
        with self._lock:
            for digest, outcome in items:
                if not digest:
                    continue
                self._put(digest, now, outcome)
                lines.append(orjson.dumps({"d": digest.hex(), "a": outcome.accepted, "r": outcome.rejected,
                                           "m": outcome.error_message, "t": now}))
            if self.path is None or not lines:
                return
            with self.path.open("ab") as fh:
                fh.write(b"\n".join(lines) + b"\n")
            self._lines += len(lines)
            if self._lines > 2 * REMEMBERED_REQUESTS:
                self._rewrite()

    def _rewrite(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            for digest, (at, outcome) in self._entries.items():
                fh.write(orjson.dumps({"d": digest.hex(), "a": outcome.accepted, "r": outcome.rejected,
                                       "m": outcome.error_message, "t": at}) + b"\n")
        os.replace(tmp, self.path)
        self._lines = len(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def take_group(queue: list[tuple[_Item, _Waiter]], nbytes: Callable[[_Item], int],
               max_bytes: int) -> list[tuple[_Item, _Waiter]]:
    """Take the next group off ``queue``: its oldest entries while their sizes fit ``max_bytes`` (one at least,
    however large). Both committers (spans here, log records in :mod:`detector.ingest.logs_commit`) group so."""
    group: list[tuple[_Item, _Waiter]] = []
    size = 0
    while queue and (not group or size + nbytes(queue[0][0]) <= max_bytes):
        item = queue.pop(0)
        group.append(item)
        size += nbytes(item[0])
    return group


class Committer:
    """Commits decoded export requests to ``otel.otel_traces`` (see the module docstring for the guarantees).

    ``commit`` is called from the event loop; the store is used from one worker thread at a time."""

    def __init__(self, store: Store, metrics: IngestMetrics | None = None, journal_dir: str | os.PathLike[str] | None = None,
                 max_group_bytes: int = MAX_GROUP_BYTES, linger_seconds: float = COMMIT_LINGER_SECONDS) -> None:
        self.store = store
        self.metrics = metrics if metrics is not None else IngestMetrics()
        self.journal_dir = Path(journal_dir) if journal_dir is not None else None
        if self.journal_dir is not None:
            self.journal_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.max_group_bytes = max_group_bytes
        self.linger_seconds = linger_seconds
        self._arriving = 0  # requests received and not yet handed to commit() (being read or decoded)
        self.remembered = _Remembered(self.journal_dir / COMMITTED_LOG if self.journal_dir is not None else None)
        self._queue: list[tuple[DecodedRequest, asyncio.Future[CommitOutcome]]] = []
        self._inflight: dict[bytes, asyncio.Future[CommitOutcome]] = {}
        self._task: asyncio.Task[None] | None = None
        self._pending: list[_Pending] = []  # journaled batches not resolved yet (the store failed again)
        self._views: list[_View] | None = None
        self._sequence = 0
        self._busy = threading.Lock()  # held by the worker while it uses the store
        self._closed = False
        # called (in the worker thread) after a group committed new rows: the detection cycle's schedule listens
        self.on_committed: Callable[[], None] | None = None

    # -- the interface ---------------------------------------------------------------------------------------
    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Around a request's reading and decoding (on the event loop): a group about to start waits for it."""
        self._arriving += 1
        try:
            yield
        finally:
            self._arriving -= 1

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
        inflight = self._inflight.get(request.digest) if request.digest else None
        if inflight is not None:  # the same request, resent while its first copy is being committed
            outcome = await asyncio.shield(inflight)
            if outcome.status == COMMIT_COMMITTED:
                self.metrics.duplicates += 1
                return CommitOutcome(COMMIT_COMMITTED, outcome.accepted, outcome.rejected, outcome.error_message,
                                     duplicate=True)
            return outcome
        future: asyncio.Future[CommitOutcome] = asyncio.get_running_loop().create_future()
        if request.digest:
            self._inflight[request.digest] = future
            future.add_done_callback(lambda _f, d=request.digest: self._inflight.pop(d, None))
        self._queue.append((request, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return await asyncio.shield(future)

    def recover(self) -> RecoveryReport:
        """Resolve every batch a previous process journaled and did not finish (call before serving)."""
        report = RecoveryReport()
        if self.journal_dir is None:
            return report
        for stray in self.journal_dir.glob("*.tmp"):
            stray.unlink(missing_ok=True)
        for path in sorted(self.journal_dir.glob("*" + JOURNAL_SUFFIX)):
            try:
                requests = read_journal(path)
            except (OSError, pa.ArrowInvalid, ValueError, KeyError):  # torn before the rename: never inserted
                log.warning("ingest journal %s unreadable; removed (its insert never started)", path.name)
                path.unlink(missing_ok=True)
                continue
            report.batches += 1
            report.requests += len(requests)
            pending = _Pending(path, requests)
            self._resolve_pending(pending)
            report.resolved += len(pending.outcomes)
            if len(pending.outcomes) < len(requests):
                self._pending.append(pending)
        report.pending = sum(len(p.requests) - len(p.outcomes) for p in self._pending)
        if report.batches:
            log.info("ingest journal recovered", extra={"batches": report.batches, "requests": report.requests,
                                                         "resolved": report.resolved, "pending": report.pending})
        return report

    @property
    def pending_requests(self) -> int:
        return sum(len(p.requests) - len(p.outcomes) for p in self._pending)

    # -- group commit -----------------------------------------------------------------------------------------
    async def _drain(self) -> None:
        while self._queue:
            await self._gather()
            group = take_group(self._queue, lambda request: request.rows.nbytes, self.max_group_bytes)
            try:
                outcomes = await anyio.to_thread.run_sync(self._commit_group, [r for r, _ in group])
            except BaseException as exc:  # cancelled (shutdown) or a bug: nothing is acknowledged
                reason = safe_error(exc)
                log.error("OTLP group commit aborted: %s", reason)
                for _, future in group:
                    if not future.done():
                        future.set_result(CommitOutcome(COMMIT_RETRYABLE, retry_reason=reason))
                if not isinstance(exc, Exception):
                    raise
                continue
            for (_, future), outcome in zip(group, outcomes, strict=True):
                if not future.done():
                    future.set_result(outcome)

    async def _gather(self) -> None:
        """Let the requests arriving alongside join this group: wait while some are being read or decoded, at
        least one step (a sender answered a moment ago is sending again), at most ``linger_seconds``."""
        waited = 0.0
        while waited < self.linger_seconds:
            await asyncio.sleep(LINGER_STEP_SECONDS)
            waited += LINGER_STEP_SECONDS
            if not self._arriving:
                return

    def close(self, timeout: float = 60.0) -> None:
        """Wait for the group being committed (so that the store can be closed under nobody); later groups are
        answered retryable. What is still pending stays journaled for the next start."""
        self._closed = True
        if self._busy.acquire(timeout=timeout):
            self._busy.release()
        else:
            log.error("ingest commit still running after %.0f s at shutdown; its journal is repaired at next start",
                      timeout)

    def _commit_group(self, requests: list[DecodedRequest]) -> list[CommitOutcome]:
        """Worker thread: one group's insert, or its resolution request by request."""
        with self._busy:
            if self._closed:
                return [CommitOutcome(COMMIT_RETRYABLE, retry_reason="shutting down")] * len(requests)
            outcomes = self._commit_group_locked(requests)
        listener = self.on_committed  # read once: the service may unset it meanwhile, as it stops
        if listener is not None and any(o.status == COMMIT_COMMITTED and o.accepted for o in outcomes):
            listener()
        return outcomes

    def _commit_group_locked(self, requests: list[DecodedRequest]) -> list[CommitOutcome]:
        if self._pending:
            self._retry_pending()
            if self._pending:  # the store still fails: do not pile more batches onto it
                reason = "store unavailable: earlier batches are still being recovered"
                return [self._known_or(r, CommitOutcome(COMMIT_RETRYABLE, retry_reason=reason)) for r in requests]
        known = [self.known(r.digest) for r in requests]  # resolved meanwhile (a pending batch held them)
        todo = [r for r, k in zip(requests, known, strict=True) if k is None]
        outcomes: dict[int, CommitOutcome] = {}
        if todo:
            for index, outcome in zip((i for i, k in enumerate(known) if k is None), self._insert(todo), strict=True):
                outcomes[index] = outcome
        result = []
        for i, k in enumerate(known):
            if k is not None:
                self.metrics.duplicates += 1
                result.append(k)
            else:
                result.append(outcomes[i])
        return result

    def _known_or(self, request: DecodedRequest, outcome: CommitOutcome) -> CommitOutcome:
        known = self.known(request.digest)
        return known if known is not None else outcome

    def _insert(self, requests: list[DecodedRequest]) -> list[CommitOutcome]:
        try:
            path = self._journal(requests)
        except OSError as exc:
            log.error("ingest journal write failed: %s; %d requests not acknowledged", type(exc).__name__, len(requests))
            return [CommitOutcome(COMMIT_RETRYABLE, retry_reason=f"journal write failed: {type(exc).__name__}")]  * len(requests)
        started = time.perf_counter()
        try:
            tables = [r.rows for r in requests]
            self.store.insert_arrow(TRACES_TABLE, tables[0] if len(tables) == 1 else pa.concat_tables(tables),
                                    TRACES_INSERT_SETTINGS)
        except Exception as exc:
            self.metrics.insert_seconds += time.perf_counter() - started
            self.metrics.failed_inserts += 1
            log.error("OTLP group insert failed: %s; resolving its %d requests one by one", safe_error(exc),
                      len(requests))
            pending = _Pending(path, requests)
            self._resolve_pending(pending, suspect_data=_is_data_error(exc), error=exc)
            if len(pending.outcomes) < len(requests):
                self._pending.append(pending)
            reason = f"store unavailable: insert failed: {safe_error(exc)}"
            return [pending.outcomes.get(i, CommitOutcome(COMMIT_RETRYABLE, retry_reason=reason))
                    for i in range(len(requests))]
        self.metrics.insert_seconds += time.perf_counter() - started
        self.metrics.inserts += 1
        outcomes = [CommitOutcome(COMMIT_COMMITTED, r.accepted, r.rejected, r.error_message) for r in requests]
        self.remembered.add((r.digest, o) for r, o in zip(requests, outcomes, strict=True))
        if path is not None:
            path.unlink(missing_ok=True)
        return outcomes

    def _journal(self, requests: Sequence[DecodedRequest]) -> Path | None:
        if self.journal_dir is None:
            return None
        self._sequence += 1
        return write_journal(self.journal_dir / f"{time.time_ns():020d}-{self._sequence:06d}{JOURNAL_SUFFIX}",
                             requests)

    # -- resolution ---------------------------------------------------------------------------------------------
    def _retry_pending(self) -> None:
        """Resolve the batches still pending, first: paced by the arrival of new requests (senders back off)."""
        for pending in list(self._pending):
            self._resolve_pending(pending)
            if len(pending.outcomes) == len(pending.requests):
                self._pending.remove(pending)

    def _resolve_pending(self, pending: _Pending, suspect_data: bool = False, error: BaseException | None = None) -> None:
        """Resolve the unresolved requests of a journaled batch; drop the journal once all are. Each request gets
        its own answer: the spans the store refuses are found request by request (probing); the rest of the batch
        is then completed in one go (one insert and one view run, rather than one per request)."""
        todo = [i for i in range(len(pending.requests)) if i not in pending.outcomes]
        if not todo:
            return
        requests = [pending.requests[i] for i in todo]
        try:
            refused = self._resolve(requests, suspect_data, error)
        except _StoreDown as exc:
            log.error("OTLP batch left pending: the store failed again (%s)", exc)
            return
        for i, request, mine in zip(todo, requests, refused, strict=True):
            self.metrics.store_rejected += len(mine)
            if mine:
                outcome = CommitOutcome(COMMIT_COMMITTED, request.accepted - len(mine), request.rejected + len(mine),
                                        _merge_messages(request, request.rows, mine))
            else:
                outcome = CommitOutcome(COMMIT_COMMITTED, request.accepted, request.rejected, request.error_message)
            pending.outcomes[i] = outcome
        self.remembered.add((r.digest, pending.outcomes[i]) for i, r in zip(todo, requests, strict=True))
        self.metrics.repaired_batches += 1
        if pending.path is not None:
            pending.path.unlink(missing_ok=True)

    def _resolve(self, requests: list[DecodedRequest], suspect_data: bool,
                 error: BaseException | None = None) -> list[dict[int, str]]:
        """Make the requests' spans stored exactly once in both tables, but the spans the store refuses (none of
        whose rows may stay); returns each request's refused rows. Idempotent; raises :class:`_StoreDown` when the
        store fails for a reason other than the data."""
        tables = [r.rows for r in requests if r.accepted]
        rows = tables[0] if len(tables) == 1 else pa.concat_tables(tables) if tables else requests[0].rows
        try:
            refused = self._refused_by_request(requests, error) if suspect_data else [{} for _ in requests]
            combined: dict[int, str] = {}
            offset = 0
            for request, mine in zip(requests, refused, strict=True):
                combined.update((offset + i, error) for i, error in mine.items())
                offset += request.accepted
            self._complete(rows, combined)
        except StoreError as exc:
            if not suspect_data and _is_data_error(exc):
                return self._resolve(requests, suspect_data=True, error=exc)
            raise _StoreDown(exc) from exc
        return refused

    def _refused_by_request(self, requests: list[DecodedRequest], error: BaseException | None) -> list[dict[int, str]]:
        """Each request's rows the store refuses, so that one sender's refusal is attributed to that sender only:
        halves of the batch are probed request-wise, then the refused requests row-wise. Probes run the view the
        store's error named (the others are costly: the calls view's SQL is analysed on every run), and then,
        once, every view over what was not refused; should that fail, everything again with every view."""
        views = self._probe_views()
        named = _view_named(error, views)
        probed = [named] if named is not None else views
        live = [i for i, r in enumerate(requests) if r.accepted]
        tables = [requests[i].rows for i in live]
        bad = self._bisect(len(live), lambda lo, hi: self._probe(
            tables[lo] if hi - lo == 1 else pa.concat_tables(tables[lo:hi]), probed))
        out: list[dict[int, str]] = [{} for _ in requests]
        for k in sorted(bad):
            rows = tables[k]
            out[live[k]] = self._bisect(rows.num_rows, lambda lo, hi, rows=rows: self._probe(
                rows.slice(lo, hi - lo), probed))
        if named is not None and len(views) > 1:
            kept = [t if not out[i] else t.take([j for j in range(t.num_rows) if j not in out[i]])
                    for i, t in zip(live, tables, strict=True)]
            if self._probe(pa.concat_tables(kept), views) is not None:
                return self._refused_by_request(requests, None)
        self.store.command(CLEAR_STAGE)
        return out

    def _probe(self, rows: pa.Table, views: list[_View]) -> StoreError | None:
        """Stage the rows and run them through the views into Null tables: the store's data error, or None."""
        try:
            self._stage(rows)
            for view in views:
                self.store.command(view.probe)
        except StoreError as exc:
            if not _is_data_error(exc):
                raise
            return exc
        return None

    @staticmethod
    def _bisect(count: int, probe: Any, budget: int = MAX_PROBES) -> dict[int, str]:
        """The indices in [0, count) that ``probe(lo, hi)`` refuses, halving refused ranges down to single items
        (past ``budget`` probes, a refused range is refused whole)."""
        refused: dict[int, str] = {}
        stack = [(0, count)] if count else []
        while stack:
            lo, hi = stack.pop()
            budget -= 1
            error = probe(lo, hi)
            if error is None:
                continue
            if hi - lo == 1 or budget <= 0:
                refused.update((i, safe_error(error)) for i in range(lo, hi))
                continue
            mid = (lo + hi) // 2
            stack.extend([(mid, hi), (lo, mid)])
        return refused

    def _complete(self, rows: pa.Table, refused: dict[int, str]) -> None:
        keys = list(zip(rows.column("TraceId").to_pylist(), rows.column("SpanId").to_pylist(), strict=True))
        good = [i for i in range(len(keys)) if i not in refused]
        if refused:
            self._remove_refused(rows, keys, sorted(refused))
        if not good:
            return
        good_rows = rows if len(good) == len(keys) else rows.take(good)
        traces = sorted({keys[i][0] for i in good})
        starts = good_rows.column("Timestamp").cast(pa.int64())
        self._stage(good_rows)
        stored = {(r["t"], r["s"]) for r in self.store.rows(SELECT_STORED_SPANS, {
            "lo": pc.min(starts).as_py(), "hi": pc.max(starts).as_py(), "traces": traces})}
        calls = {(r["t"], r["s"]) for r in self.store.rows(SELECT_STORED_CALLS, {"traces": traces})}
        missing, seen = [], set(stored)  # a span sent twice within the batch is stored once
        for j, i in enumerate(good):
            if keys[i] not in seen:
                seen.add(keys[i])
                missing.append(j)
        uncalled = [j for j, i in enumerate(good) if keys[i] in stored and keys[i] not in calls]
        if uncalled:  # spans stored without their calls (a failed insert): the calls from the view's own SELECT
            self._stage(good_rows.take(uncalled))
            for view in self._probe_views():
                if view.complete:
                    self.store.command(view.complete)
        self.store.command(CLEAR_STAGE)
        if missing:
            self.store.insert_arrow(TRACES_TABLE, good_rows if len(missing) == len(good) else good_rows.take(missing),
                                    TRACES_INSERT_SETTINGS)

    def _remove_refused(self, rows: pa.Table, keys: list[tuple[str, str]], refused: list[int]) -> None:
        """Delete every row a failed insert left of the spans the store refuses. Such a row is identical to the
        refused span (ids, times, attributes), and the store refuses it wherever it comes from: no accepted row
        can be identical to it."""
        bad_keys = sorted({keys[i] for i in refused})
        traces = sorted({t for t, _ in bad_keys})
        present = {(r["t"], r["s"]) for r in self.store.rows(SELECT_SPANS_LEFT, {"traces": traces, "keys": bad_keys})}
        present |= {(r["t"], r["s"]) for r in self.store.rows(SELECT_CALLS_BY_KEY, {"traces": traces, "keys": bad_keys})}
        if not present:
            return
        identity: list[tuple[str, str, int, int, int]] = []
        for i in refused:
            if keys[i] not in present:
                continue
            try:
                self._stage(rows.slice(i, 1))
            except StoreError as exc:
                if not _is_data_error(exc):
                    raise
                continue  # not even a row of otel.otel_traces: nothing of it can be stored
            identity.extend((r["t"], r["s"], int(r["ts"]), int(r["d"]), int(r["h"]))
                            for r in self.store.rows(SELECT_STAGED_IDENTITY))
        self.store.command(CLEAR_STAGE)
        if identity:
            self.store.command(DELETE_SPANS, {"traces": sorted({t for t, *_ in identity}), "rows": identity})
        left = {(r["t"], r["s"]) for r in self.store.rows(SELECT_SPANS_LEFT, {"traces": traces, "keys": bad_keys})}
        orphaned = [k for k in bad_keys if k in present and k not in left]
        if orphaned:
            self.store.command(DELETE_CALLS, {"traces": sorted({t for t, _ in orphaned}), "keys": orphaned})

    def _stage(self, rows: pa.Table) -> None:
        self.store.command(CREATE_STAGE)
        self.store.command(CLEAR_STAGE)
        if rows.num_rows:
            self.store.insert_arrow(STAGE, rows)

    def _probe_views(self) -> list[_View]:
        """Every materialized view on otel.otel_traces, as probe and completion statements over the stage."""
        if self._views is not None:
            return self._views
        views = []
        self.store.command(CREATE_STAGE)
        for row in self.store.rows(SELECT_VIEWS):
            db, name = row["view"]
            info = self.store.rows(SELECT_VIEW, {"db": db, "name": name})
            if not info:
                continue
            target = re.match(r"CREATE MATERIALIZED VIEW \S+ TO (\S+)", info[0]["create_table_query"])
            select, replaced = re.subn(r"`?otel`?\.`?otel_traces`?(?![\w`])", STAGE, info[0]["as_select"])
            if target is None or not replaced:  # an implicit target table, or a SELECT not naming the table
                log.warning("materialized view %s.%s cannot be probed", db, name)
                continue
            target_name = target.group(1).replace("`", "")
            target_db, _, target_table = target_name.rpartition(".")
            produced = {r["name"] for r in self.store.rows(f"DESCRIBE TABLE ({select})")}
            columns = [r["name"] for r in self.store.rows(SELECT_COLUMNS, {"db": target_db or db, "table": target_table})
                       if r["name"] in produced]
            names = ", ".join(f"`{c}`" for c in columns)
            null_copy = f"loop_ingest_probe_{len(views)}"
            self.store.command(f"CREATE TEMPORARY TABLE IF NOT EXISTS {null_copy} AS {target_name} ENGINE = Null")
            probe = f"INSERT INTO {null_copy} ({names}) SELECT {names} FROM ({select})"
            complete = ""
            if target_name == CALLS_TABLE:
                complete = (f"INSERT INTO {CALLS_TABLE} ({names}) SELECT {names} FROM ({select}) "
                            f"WHERE (trace_id, span_id) NOT IN (SELECT trace_id, span_id FROM {CALLS_TABLE} "
                            f"WHERE trace_id IN (SELECT TraceId FROM {STAGE}))")
            views.append(_View(f"{db}.{name}", target_name, probe, complete))
        self._views = views
        return views


def _view_named(error: BaseException | None, views: list[_View]) -> _View | None:
    """The view a ClickHouse error names ("... while pushing to view otel.genai_calls_mv. (...)"), if one of these."""
    match = re.search(r"pushing to view ([\w`.]+?)\.?(?:\s|$)", str(error)) if error is not None else None
    name = match.group(1).replace("`", "") if match else ""
    return next((v for v in views if v.name == name), None)


def _merge_messages(request: DecodedRequest, rows: pa.Table, refused: dict[int, str]) -> str:
    """The decoder's partial-success message with the store's refusals added (reasons, then the first spans by id)."""
    reasons = Counter(f"rejected by the store: {error}" for error in refused.values())
    traces, spans = rows.column("TraceId"), rows.column("SpanId")
    examples = [f"trace {traces[i].as_py()} span {spans[i].as_py()}: rejected by the store ({refused[i]})"
                for i in sorted(refused)[:5]]
    more = f" (and {len(refused) - len(examples)} more)" if len(refused) > len(examples) else ""
    store_part = (f"rejected {len(refused)} of {request.accepted} decoded spans in the store ["
                  + ", ".join(f"{r}: {n}" for r, n in reasons.items()) + "]; " + "; ".join(examples) + more)
    return f"{request.error_message}; {store_part}" if request.error_message else store_part


def write_journal(path: Path, requests: Sequence[DecodedRequest]) -> Path:
    """Journal a batch (before its insert): its rows as Arrow IPC, each request's digest, row count and decoder
    result in the schema's metadata. Written to a temporary name and renamed: a journal file is whole or absent."""
    tmp = path.with_suffix(".tmp")
    meta = [{"digest": r.digest.hex(), "rows": r.accepted, "rejected": r.rejected, "message": r.error_message}
            for r in requests]
    schema = requests[0].rows.schema.with_metadata({b"loop_detector.requests": orjson.dumps(meta)})
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for r in requests:
            if r.accepted:
                writer.write_table(r.rows)
    os.replace(tmp, path)
    return path


def read_journal(path: Path) -> list[DecodedRequest]:
    """The requests of a journal file (:func:`write_journal`)."""
    with pa.OSFile(str(path), "rb") as source:
        table = pa.ipc.open_file(source).read_all()
    meta: list[dict[str, Any]] = orjson.loads(table.schema.metadata[b"loop_detector.requests"])
    table = table.replace_schema_metadata(None)
    out, offset = [], 0
    for item in meta:
        n = int(item["rows"])
        out.append(DecodedRequest(table.slice(offset, n), int(item["rejected"]), str(item["message"]),
                                  bytes.fromhex(item["digest"])))
        offset += n
    return out
