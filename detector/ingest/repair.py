"""Repairing a batch whose insert did not simply succeed: completing what a failed or killed insert left, and
isolating the spans the store refuses.

An insert into ``otel.otel_traces`` runs the materialized views on that table: ours stages the GenAI spans in
``otel.genai_spans`` (a cheap view that cannot fail on a value), the exporter's fills the trace-id lookup, and an
operator may have added their own. ClickHouse commits the table's part before the views' parts, so an insert that
fails, or a process killed during one, can leave spans in ``otel.otel_traces`` that were never staged: stored, but
never scored. Every batch is journaled before its insert (:mod:`detector.ingest.journal`); when its outcome is not a
plain success it is resolved here, in one of two ways.

**Completion** (the store failed for a reason other than the data, or the process was killed): idempotent. The spans
of the batch that are not in ``otel.otel_traces`` are inserted; those that are there but were never staged (the
insert died between the two parts) are deleted and inserted again, so that the views see them; those that are
stored and staged are left alone (a detection cycle may have scored them already). A span counts as staged when
``otel.genai_spans`` has it from the batch's journal time on (:data:`CLOCK_MARGIN_SECONDS` earlier, for a server's
clock), or when ``otel.genai_calls`` has it (a batch journaled by a release that normalized on insert). Spans that no
view stages (not GenAI spans) look unstaged too, and are stored again: the same rows, once.

**Isolation** (the insert failed on a value: a ClickHouse error code that names the data). Nothing of loop-detector's
own refuses a value any more (the decoders reject what the table would, the staging view cannot fail), so this
guards against what it cannot foresee: a view or constraint an operator added to ``otel.otel_traces``, or a store
that refuses what it accepted before. Each sender must get its own answer, so the batch is narrowed down by real
inserts: first what the failed insert left is rolled back (the rows identical to the batch's in ``otel_traces``, its
spans staged since its journal time), then halves of the batch are inserted request by request, then the rows of the
refused requests, each insert that fails rolled back the same way, down to the single spans the store refuses
(:data:`MAX_PROBES` inserts at most; past that, what still fails is refused whole). What succeeded is committed;
the refused spans leave no row behind, and get the store's error code and their ids (never a value) in their
request's partial success. While this runs the committer holds the store (``Store.exclusive``), so the embedded
detector never reads a row that is about to be rolled back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from detector.ingest.requests import DecodedRequest
from detector.ingest.store_errors import StoreDown, is_data_error, safe_error
from detector.storage.normalization import CALLS_TABLE, STAGING_TABLE
from detector.storage.transport import Store, StoreError

__all__ = ["CLOCK_MARGIN_SECONDS", "MAX_PROBES", "Repair", "TRACES_TABLE"]

log = logging.getLogger("loop_detector.ingest")

TRACES_TABLE: Final = "otel.otel_traces"
# Inserts spent narrowing one batch down to the spans the store refuses; past it, the subsets still failing are
# refused whole.
MAX_PROBES: Final = 256
# How much earlier than a batch's journal time its staged rows are looked for: the journal's clock is this process's,
# inserted_at is the store's (the same clock for chDB; a server's may be off by this much).
CLOCK_MARGIN_SECONDS: Final = 300

STAGE: Final = "loop_ingest_stage"  # a temporary table: the session's own, gone with it
CREATE_STAGE: Final = f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGE} AS {TRACES_TABLE} ENGINE = Memory"
CLEAR_STAGE: Final = f"TRUNCATE TABLE {STAGE}"
# Which of the staged spans are stored. Ids travel as parameters (never spliced into the SQL); the time range lets the
# partition key prune.
SELECT_STORED_SPANS: Final = f"""
SELECT DISTINCT TraceId AS t, SpanId AS s FROM {TRACES_TABLE}
WHERE Timestamp >= fromUnixTimestamp64Nano({{lo:Int64}}) AND Timestamp <= fromUnixTimestamp64Nano({{hi:Int64}})
  AND TraceId IN {{traces:Array(String)}} AND (TraceId, SpanId) IN (SELECT TraceId, SpanId FROM {STAGE})
"""
# Which of them reached the detector: staged since the batch was journaled, or already a call.
SELECT_STAGED_SPANS: Final = f"""
SELECT trace_id AS t, span_id AS s FROM otel.genai_spans
WHERE inserted_at >= fromUnixTimestamp64Nano({{since:Int64}}) AND (trace_id, span_id) IN (SELECT TraceId, SpanId FROM {STAGE})
UNION ALL
SELECT trace_id AS t, span_id AS s FROM otel.genai_calls
WHERE trace_id IN {{traces:Array(String)}} AND (trace_id, span_id) IN (SELECT TraceId, SpanId FROM {STAGE})
"""
# The staged rows exactly (ids, times, attributes): the rows a failed insert of them can have left.
SELECT_STAGED_IDENTITY: Final = f"""
SELECT TraceId AS t, SpanId AS s, toUnixTimestamp64Nano(Timestamp) AS ts, Duration AS d,
       cityHash64(SpanAttributes) AS h FROM {STAGE}
"""
_IDENTITY: Final = "{rows:Array(Tuple(String, String, Int64, UInt64, UInt64))}"
# Rows to roll back: a condition, counted first (a DELETE with nothing to delete still costs a mutation) and then
# deleted (Store.delete, applied before it returns).
IDENTICAL_SPANS: Final = ("TraceId IN {traces:Array(String)} AND (TraceId, SpanId, toUnixTimestamp64Nano(Timestamp), "
                          f"Duration, cityHash64(SpanAttributes)) IN {_IDENTITY}")
SELECT_IDENTICAL_SPANS: Final = f"SELECT count() AS n FROM {TRACES_TABLE} WHERE {IDENTICAL_SPANS}"
STAGED_SINCE: Final = ("inserted_at >= fromUnixTimestamp64Nano({since:Int64}) "
                       "AND (trace_id, span_id) IN {keys:Array(Tuple(String, String))}")
SELECT_STAGED_SINCE: Final = f"SELECT count() AS n FROM {STAGING_TABLE} WHERE {STAGED_SINCE}"
# A refused span's calls: only a detection cycle that normalized a failed insert's leftovers before they were rolled
# back (another process's, on a server) can have written them.
CALLS_OF: Final = "trace_id IN {traces:Array(String)} AND (trace_id, span_id) IN {keys:Array(Tuple(String, String))}"
SELECT_CALLS_OF: Final = f"SELECT count() AS n FROM {CALLS_TABLE} WHERE {CALLS_OF}"

Key = tuple[str, str]


class Repair:
    """Resolves journaled batches against ``store``; ``insert`` is the committer's own insert into otel_traces."""

    def __init__(self, store: Store, insert: Callable[[pa.Table], None]) -> None:
        self.store = store
        self.insert = insert

    def resolve(self, requests: list[DecodedRequest], journaled_ns: int,
                error: BaseException | None = None) -> list[dict[int, str]]:
        """Make the requests' spans stored exactly once, but the spans the store refuses (none of whose rows may
        stay); ``error`` is what the batch's own insert raised, if it ran. Returns each request's refused rows (row
        index -> the store's error, safely), and raises :class:`StoreDown` when the store fails for a reason other
        than the data (the batch stays pending; resolving it again is safe)."""
        since_ns = journaled_ns - CLOCK_MARGIN_SECONDS * 10**9
        try:
            if error is not None and is_data_error(error):
                return self._isolate(requests, since_ns, error)
            tables = [r.rows for r in requests if r.accepted]
            if tables:
                self._complete(tables[0] if len(tables) == 1 else pa.concat_tables(tables), since_ns)
            return [{} for _ in requests]
        except StoreError as exc:
            if is_data_error(exc):  # completing it inserted a span the store refuses
                try:
                    return self._isolate(requests, since_ns, exc)
                except StoreError as again:
                    raise StoreDown(again) from again
            raise StoreDown(exc) from exc

    # -- completion -----------------------------------------------------------------------------------------------
    def _complete(self, rows: pa.Table, since_ns: int) -> None:
        keys = _keys(rows)
        traces = sorted({t for t, _ in keys})
        starts = rows.column("Timestamp").cast(pa.int64())
        self._stage(rows)
        stored = {(r["t"], r["s"]) for r in self.store.rows(SELECT_STORED_SPANS, {
            "lo": pc.min(starts).as_py(), "hi": pc.max(starts).as_py(), "traces": traces})}
        reached = {(r["t"], r["s"]) for r in self.store.rows(SELECT_STAGED_SPANS, {"since": since_ns, "traces": traces})}
        self.store.command(CLEAR_STAGE)
        todo, seen = [], set()  # a span sent twice within the batch is stored once
        for i, key in enumerate(keys):
            if key not in seen and key not in reached:
                seen.add(key)
                todo.append(i)
        if not todo:
            return
        again = [i for i in todo if keys[i] in stored]  # stored, never staged: the views must see them
        if again:
            self._delete_identical(rows.take(again))
        self.insert(rows if len(todo) == len(keys) else rows.take(todo))

    # -- isolation ------------------------------------------------------------------------------------------------
    def _isolate(self, requests: list[DecodedRequest], since_ns: int, error: BaseException) -> list[dict[int, str]]:
        """Each request's rows the store refuses, every other row committed: the failed insert's leftovers rolled back,
        then halves inserted request-wise, then the refused requests row-wise. ``error`` is the failed insert's."""
        live = [i for i, r in enumerate(requests) if r.accepted]
        tables = [requests[i].rows for i in live]
        out: list[dict[int, str]] = [{} for _ in requests]
        if not tables:
            return out
        self._roll_back(pa.concat_tables(tables), since_ns)
        budget = [MAX_PROBES]
        failed = self._bisect(len(tables), lambda lo, hi: pa.concat_tables(tables[lo:hi]), since_ns, budget, error)
        for k, why in sorted(failed.items()):
            rows = tables[k]
            mine = self._bisect(rows.num_rows, lambda lo, hi, rows=rows: rows.slice(lo, hi - lo), since_ns, budget, why)
            out[live[k]] = {j: safe_error(e) for j, e in mine.items()}
        keys = sorted({_keys(requests[i].rows)[j] for i in live for j in out[i]})
        if keys:
            self._delete_calls(keys)
        return out

    def _bisect(self, count: int, rows_of: Callable[[int, int], pa.Table], since_ns: int, budget: list[int],
                error: BaseException) -> dict[int, BaseException]:
        """The indices in [0, count) whose rows the store refuses, the whole range known to fail with ``error``:
        halves are inserted, a half that fails is rolled back and halved again, down to single items (past the
        budget, a failing range is refused whole). Everything else is committed."""
        if count == 1:
            return {0: error}
        refused: dict[int, BaseException] = {}
        stack = [(count // 2, count), (0, count // 2)]
        while stack:
            lo, hi = stack.pop()
            failure = self._try_insert(rows_of(lo, hi), since_ns)
            budget[0] -= 1
            if failure is None:
                continue
            if hi - lo == 1 or budget[0] <= 0:
                refused.update((i, failure) for i in range(lo, hi))
                continue
            mid = (lo + hi) // 2
            stack.extend([(mid, hi), (lo, mid)])
        return refused

    def _try_insert(self, rows: pa.Table, since_ns: int) -> StoreError | None:
        """Insert the rows; on a data error, roll back what the insert left and return the error."""
        try:
            self.insert(rows)
        except StoreError as exc:
            if not is_data_error(exc):
                raise
            self._roll_back(rows, since_ns)
            return exc
        return None

    def _roll_back(self, rows: pa.Table, since_ns: int) -> None:
        """Remove what a failed insert of ``rows`` can have left: rows identical to them in otel_traces, and their
        spans staged since the batch was journaled."""
        self._delete_identical(rows)
        keys = sorted(set(_keys(rows)))
        params = {"since": since_ns, "keys": keys}
        if self.store.rows(SELECT_STAGED_SINCE, params)[0]["n"]:
            self.store.delete(STAGING_TABLE, STAGED_SINCE, params)

    def _delete_identical(self, rows: pa.Table) -> None:
        """Delete the rows of otel_traces identical to ``rows`` (ids, times, attributes). A row that cannot even be
        staged in a table of otel_traces' shape was never stored: it is skipped."""
        identity: list[tuple[str, str, int, int, int]] = []
        try:
            self._stage(rows)
            staged = [rows]
        except StoreError as exc:
            if not is_data_error(exc):
                raise
            staged = [rows.slice(i, 1) for i in range(rows.num_rows)]
        for part in staged:
            if len(staged) > 1:
                try:
                    self._stage(part)
                except StoreError as exc:
                    if not is_data_error(exc):
                        raise
                    continue
            identity.extend((r["t"], r["s"], int(r["ts"]), int(r["d"]), int(r["h"]))
                            for r in self.store.rows(SELECT_STAGED_IDENTITY))
        self.store.command(CLEAR_STAGE)
        if not identity:
            return
        params = {"traces": sorted({t for t, *_ in identity}), "rows": identity}
        if self.store.rows(SELECT_IDENTICAL_SPANS, params)[0]["n"]:
            self.store.delete(TRACES_TABLE, IDENTICAL_SPANS, params)

    def _delete_calls(self, keys: list[Key]) -> None:
        params = {"traces": sorted({t for t, _ in keys}), "keys": keys}
        if self.store.rows(SELECT_CALLS_OF, params)[0]["n"]:
            self.store.delete(CALLS_TABLE, CALLS_OF, params)

    def _stage(self, rows: pa.Table) -> None:
        self.store.command(CREATE_STAGE)
        self.store.command(CLEAR_STAGE)
        if rows.num_rows:
            self.store.insert_arrow(STAGE, rows)


def _keys(rows: pa.Table) -> list[Key]:
    return list(zip(rows.column("TraceId").to_pylist(), rows.column("SpanId").to_pylist(), strict=True))
