"""Group commit of OTLP log records into ``otel.otel_logs`` (both receivers share one :class:`LogsCommitter`).

Log records carry GenAI content only; the calls themselves come from spans, whose commit path
(:mod:`detector.ingest.commit`) gives the stronger guarantees (isolation between senders, all or nothing with
the staging view, idempotent retries). ``otel_logs`` has no view and no derived table, so a failed insert
leaves nothing half-stored, and a retried request stores its records twice at worst: the normalization's content
join (``clickhouse/genai_calls_normalized.sql.tmpl``) reads one record per span and event name, so a duplicate changes
no evidence. What the log decoder can check is checked before the insert (:mod:`detector.ingest.logs`). The grouping
itself is the spans' (:class:`detector.ingest.group_commit.GroupCommitter`), without the linger: with no view to pay
for, an insert of log records costs about what its rows do.
"""

from __future__ import annotations

import time

import pyarrow as pa

from detector.ingest.counters import IngestMetrics
from detector.ingest.group_commit import MAX_GROUP_BYTES, GroupCommitter
from detector.ingest.logs import LOGS_TABLE
from detector.storage.transport import Store

__all__ = ["LogsCommitter"]


class LogsCommitter:
    """Commits Arrow tables of log rows one insert at a time, merging the tables of the requests that queued up
    while the previous insert ran. ``commit`` raises what the store raised (the receiver answers retryable)."""

    def __init__(self, store: Store, metrics: IngestMetrics, max_group_bytes: int = MAX_GROUP_BYTES) -> None:
        self.store = store
        self.metrics = metrics
        self._group: GroupCommitter[pa.Table, Exception | None] = GroupCommitter(
            self._insert, lambda rows: rows.nbytes, _as_failure, max_group_bytes=max_group_bytes)

    async def commit(self, rows: pa.Table) -> None:
        """Return once ``rows`` are committed; raise what the store raised otherwise."""
        failure = await self._group.submit(rows)
        if failure is not None:
            raise failure

    def _insert(self, tables: list[pa.Table]) -> list[Exception | None]:
        """Worker thread: one group's insert; every table of the group gets the store's failure, if any."""
        started = time.perf_counter()
        try:
            self.store.insert_arrow(LOGS_TABLE, tables[0] if len(tables) == 1 else pa.concat_tables(tables))
        except Exception as exc:
            return [exc] * len(tables)
        finally:
            self.metrics.insert_seconds += time.perf_counter() - started
        return [None] * len(tables)


def _as_failure(exc: BaseException) -> Exception:
    return exc if isinstance(exc, Exception) else RuntimeError("insert cancelled")
