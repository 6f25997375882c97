"""Staged spans to ``otel.genai_calls``: the detection cycle's first statement, and the reads around it.

A span reaches the detector in two steps. On insert, the cheap view of ``clickhouse/002_genai_calls.sql`` stages it
in ``otel.genai_spans`` as it is (attributes, events, insertion time). Once per detection cycle, the staged spans since
the cycle's watermark are normalized, fingerprinted and joined to their content logs by **one** statement over the
whole batch: an ``INSERT INTO otel.genai_calls ... SELECT`` from the normalization query
(``clickhouse/genai_calls_normalized.sql.tmpl``, its one home: a SELECT with query parameters). The cycle then reads
the batch's calls from ``otel.genai_calls`` as it always has. The statements below render that query, whole and
unchanged, as a subquery (:func:`render`); its parameters travel as query parameters, never in the text.

Why it is safe to run the transform any number of times over overlapping ranges: a staged span's row keeps the span's
insertion time (``inserted_at``), and the statement skips the (trace, span, insertion) it finds already written in the
range. So a cycle killed after its transform and before its watermark moved transforms nothing twice when it runs
again, and a replica's replay after a restart transforms nothing at all.

Detector replicas (``serve --shard I/N``) each transform the spans of their own sessions
(``cityHash64(session_id) % N = I``), so every staged span is written by exactly one replica; each reads its own calls
from ``otel.genai_calls`` and, since a tool span usually names no session (its session is its trace, hashed anywhere),
every other replica's tool calls of the range too: those already written from the table, the others straight from
the normalization query.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from detector.storage.call_rows import CALL_COLUMNS
from detector.storage.schema import sql_dir
from detector.storage.transport import Store

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CALLS_TABLE", "NORMALIZATION_FILE", "Normalization", "STAGING_TABLE", "normalize_staged", "normalized_calls",
    "shard_read_statement", "transform_statement",
]

CALLS_TABLE: Final = "otel.genai_calls"
STAGING_TABLE: Final = "otel.genai_spans"
NORMALIZATION_FILE: Final = "genai_calls_normalized.sql.tmpl"


@functools.cache
def normalized_calls() -> str:
    """The normalization query (``clickhouse/genai_calls_normalized.sql.tmpl``), as the file holds it: a SELECT of the
    calls of the spans staged in a range, with the query parameters ``watermark``, ``cutoff``, ``shards``, ``shard``
    and ``own_shard``. Why a query and not a parameterized view: analysed as a plain subquery it costs about a third of
    what the same SELECT cost as a view, and it is analysed once per cycle (docs/benchmarks.md)."""
    return (sql_dir() / NORMALIZATION_FILE).read_text().strip()

# The columns the transform writes: every stored column of otel.genai_calls (the normalization gives each by name).
SELECT_CALL_TABLE_COLUMNS: Final = """
SELECT name FROM system.columns
WHERE database = 'otel' AND table = 'genai_calls' AND default_kind NOT IN ('MATERIALIZED', 'ALIAS', 'EPHEMERAL')
ORDER BY position
"""

_RANGE: Final = ("inserted_at > fromUnixTimestamp64Micro({watermark:Int64}) "
                 "AND inserted_at <= fromUnixTimestamp64Micro({cutoff:Int64})")
# Merging the query plan's expression steps folds the normalization's nested steps into one expression; for a statement
# of this size that took about a third of its planning, more than the steps left apart cost to run
# (docs/benchmarks.md, "Measured reasons behind the code").
_SETTINGS: Final = "query_plan_merge_expressions = 0"
# The (trace, span, insertion) already written in the range: what a transform run again must not write twice.
_WRITTEN: Final = f"SELECT trace_id, span_id, inserted_at FROM {CALLS_TABLE} WHERE {_RANGE}"


def transform_statement(columns: Sequence[str]) -> str:
    """Step 0 of a cycle: the replica's staged spans of (watermark, cutoff] as calls, once each. ``columns`` is the
    table's own column list (:data:`SELECT_CALL_TABLE_COLUMNS`): identifiers the store reported, never input."""
    names = ", ".join(f"`{name}`" for name in columns)
    return (f"INSERT INTO {CALLS_TABLE} ({names}) SELECT {names} FROM (\n{normalized_calls()}\n) "
            f"WHERE (trace_id, span_id, inserted_at) NOT IN ({_WRITTEN}) SETTINGS {_SETTINGS}")


# Whether anything was staged in the range at all: most cycles of a quiet service find nothing, and the transform's
# statement is a long one to analyse.
SELECT_ANY_STAGED: Final = f"SELECT count() > 0 AS any FROM (SELECT 1 FROM {STAGING_TABLE} WHERE {_RANGE} LIMIT 1)"

# The calls of (watermark, cutoff] as the engine reads them (detector.core.models.Call), in span order. One
# detector: every row of the range.
SELECT_NEW_CALLS: Final = f"""
SELECT {CALL_COLUMNS}
FROM {CALLS_TABLE}
WHERE {_RANGE}
ORDER BY ts_ns, span_id
"""
# Several replicas: the replica's own calls and every replica's tool calls, as written so far...
_OWN_OR_TOOL: Final = "(call_kind = 'tool' OR cityHash64(session_id) % {shards:UInt32} = {shard:UInt32})"
SELECT_NEW_SHARD_CALLS_WRITTEN: Final = f"""
SELECT {CALL_COLUMNS}
FROM {CALLS_TABLE}
WHERE {_RANGE} AND {_OWN_OR_TOOL}
ORDER BY ts_ns, span_id
"""


@functools.cache
def shard_read_statement() -> str:
    """... and, when spans were staged in the range, the other replicas' tool calls not written yet, straight from the
    normalization (a replica transforms only its own share, and may run behind)."""
    return (f"SELECT * FROM (\nSELECT {CALL_COLUMNS} FROM {CALLS_TABLE} WHERE {_RANGE} AND {_OWN_OR_TOOL}\n"
            f"UNION ALL\nSELECT {CALL_COLUMNS} FROM (\n{normalized_calls()}\n)\n"
            f"WHERE (trace_id, span_id, inserted_at) NOT IN ({_WRITTEN}))\nORDER BY ts_ns, span_id SETTINGS {_SETTINGS}")


class Normalization:
    """The transform and the read of one detector (replica ``shard`` of ``shards``). The write's column list is read
    from the store once, on first use (the table an older data directory was upgraded to has every column: the DDL
    adds them at start)."""

    def __init__(self, store: Store, shard: int = 0, shards: int = 1) -> None:
        self.store = store
        self.shard = shard
        self.shards = shards
        self._transform: str | None = None

    def transform(self, watermark_us: int, cutoff_us: int) -> bool:
        """Write the calls of this replica's spans staged in (watermark, cutoff] into ``otel.genai_calls``; those
        already written are skipped. Returns whether any span (of any replica) was staged in the range."""
        range_ = {"watermark": watermark_us, "cutoff": cutoff_us}
        if not self.store.rows(SELECT_ANY_STAGED, range_)[0]["any"]:
            return False
        if self._transform is None:
            self._transform = transform_statement([r["name"] for r in self.store.rows(SELECT_CALL_TABLE_COLUMNS)])
        self.store.command(self._transform, self._arguments(watermark_us, cutoff_us, own=True))
        return True

    def read(self, watermark_us: int, cutoff_us: int, staged: bool = True) -> pa.Table:
        """The calls of (watermark, cutoff] this replica scores, as ``Call`` columns in span order. ``staged``: whether
        spans were staged in the range (:meth:`transform` says); without, no other replica's call can be pending."""
        if self.shards == 1:
            return self.store.arrow(SELECT_NEW_CALLS, {"watermark": watermark_us, "cutoff": cutoff_us})
        statement = shard_read_statement() if staged else SELECT_NEW_SHARD_CALLS_WRITTEN
        return self.store.arrow(statement, self._arguments(watermark_us, cutoff_us, own=False))

    def _arguments(self, watermark_us: int, cutoff_us: int, own: bool) -> dict[str, int]:
        return {"watermark": watermark_us, "cutoff": cutoff_us, "shards": self.shards, "shard": self.shard,
                "own_shard": int(own)}


SELECT_NOW_US: Final = "SELECT toUnixTimestamp64Micro(now64(6)) AS now_us"


def normalize_staged(store: Store, after_us: int = 0) -> int:
    """Transform every span staged after ``after_us`` up to now (one detector's share: all of them), as a detection
    cycle would; returns the range's end. For tools and tests that read ``otel.genai_calls`` without running a
    detector."""
    now_us = int(store.rows(SELECT_NOW_US)[0]["now_us"])
    Normalization(store).transform(after_us, now_us)
    return now_us
