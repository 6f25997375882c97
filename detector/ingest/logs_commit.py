"""Group commit of OTLP log records into ``otel.otel_logs`` (both receivers share one :class:`LogsCommitter`).

Log records carry GenAI content only; the calls themselves come from spans, whose commit path
(:mod:`detector.ingest.commit`) gives the stronger guarantees (isolation between senders, all or nothing with
the materialized view, idempotent retries). ``otel_logs`` has no view and no derived table, so a failed insert
leaves nothing half-stored, and a retried request stores its records twice at worst: the content join
(:mod:`detector.storage.log_content`) reads one record per span and event name, so a duplicate changes no
evidence. What the log decoder can check is checked before the insert (:mod:`detector.ingest.logs`).
"""

from __future__ import annotations

import asyncio
import time

import anyio
import pyarrow as pa

from detector.ingest.commit import MAX_GROUP_BYTES, IngestMetrics, take_group
from detector.ingest.logs import LOGS_TABLE
from detector.storage.transport import Store

__all__ = ["LogsCommitter"]


class LogsCommitter:
    """Commits Arrow tables of log rows one insert at a time, merging the tables of the requests that queued up
    while the previous insert ran. ``commit`` raises what the store raised (the receiver answers retryable)."""

    def __init__(self, store: Store, metrics: IngestMetrics, max_group_bytes: int = MAX_GROUP_BYTES) -> None:
        self.store = store
        self.metrics = metrics
        self.max_group_bytes = max_group_bytes
        self._pending: list[tuple[pa.Table, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def commit(self, rows: pa.Table) -> None:
        """Return once ``rows`` are committed; raise what the store raised otherwise."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((rows, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._pending:
            group = take_group(self._pending, lambda rows: rows.nbytes, self.max_group_bytes)
            try:
                await anyio.to_thread.run_sync(self._insert, [p for p, _ in group])
            except BaseException as exc:  # every request of the group gets the store's failure
                for _, future in group:
                    if not future.done():
                        future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("insert cancelled"))
                if not isinstance(exc, Exception):
                    raise
            else:
                for _, future in group:
                    if not future.done():
                        future.set_result(None)

    def _insert(self, tables: list[pa.Table]) -> None:
        started = time.perf_counter()
        try:
            self.store.insert_arrow(LOGS_TABLE, tables[0] if len(tables) == 1 else pa.concat_tables(tables))
        finally:
            self.metrics.insert_seconds += time.perf_counter() - started
