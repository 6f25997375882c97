"""Retention: how long each group of tables keeps its rows, applied as ClickHouse TTLs.

The DDL in ``clickhouse/`` carries no TTL (``otel_traces`` must stay the exporter's table, and the exporter renders
its own ``ttl`` only when it creates the schema itself), so the service sets one per table with
``ALTER TABLE ... MODIFY TTL`` at start and whenever the ``retention:`` config changes, on chDB and on a server
alike (``ON CLUSTER`` on the ``_local`` tables of a cluster). A TTL already in place is left alone, so a restart
with the same config costs one read of ``system.tables``.

Tables join a group in :data:`RETAINED_TABLES`, one line each. A table that does not exist (yet) is skipped, so a
line may name a table another part of the project adds later (``otel_logs``). The expression is the exporter's
own (``GenerateTTLExpr``: ``TTL <time> + toIntervalDay(N)``, hours, minutes or seconds when the period is not a
whole number of the larger unit), so a TTL set here reads the same as one the exporter would have created.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from detector.settings.service_settings import RetentionSettings
from detector.storage.transport import Store

__all__ = ["RETAINED_TABLES", "RetainedTable", "RetentionChange", "RetentionGroup", "UNRETAINED_TABLES", "apply_retention",
           "current_ttl", "retention_changes", "ttl_expression"]

RetentionGroup = Literal["spans", "detector"]


@dataclass(frozen=True, slots=True)
class RetainedTable:
    """A table of database ``otel`` in a retention group; ``time`` is the DateTime expression its TTL counts from."""

    table: str
    time: str
    group: RetentionGroup


# One line per table of append-only rows (tables in UNRETAINED_TABLES are kept on purpose).
RETAINED_TABLES: tuple[RetainedTable, ...] = (
    RetainedTable("otel_traces", "toDateTime(Timestamp)", "spans"),
    RetainedTable("otel_traces_trace_id_ts", "toDateTime(Start)", "spans"),
    RetainedTable("otel_logs", "toDateTime(Timestamp)", "spans"),  # OTLP logs, once that table exists
    RetainedTable("genai_spans", "toDateTime(inserted_at)", "spans"),  # the staged spans: attributes, content
    RetainedTable("genai_calls", "toDateTime(inserted_at)", "detector"),
    RetainedTable("loop_scores", "toDateTime(inserted_at)", "detector"),
    RetainedTable("loop_events", "toDateTime(inserted_at)", "detector"),
    RetainedTable("loop_webhook_outbox", "toDateTime(created_at)", "detector"),
)

# Current-state tables: one row per scope, key or setting, bounded by what exists; a TTL would forget live blocks,
# manual actions, decisions or the detector's watermark. tests/storage/test_retention.py checks that every table of
# the DDL is in one of the two lists.
UNRETAINED_TABLES: dict[str, str] = {
    "loop_state": "one row per scope; evicted and reset scopes are removed by the detector's own GC",
    "loop_decisions": "the current decision per scope (what the enforcement API serves)",
    "loop_manual": "operators' blocks and revocations: they last until lifted or until their own expires_at",
    "loop_meta": "the detector's watermarks, checkpoints and persisted policy",
}

_UNITS = ((86400, "Day"), (3600, "Hour"), (60, "Minute"), (1, "Second"))


def ttl_expression(time: str, seconds: int) -> str:
    """The TTL expression the contrib exporter renders for a period (``internal.GenerateTTLExpr``), without the
    ``TTL`` keyword: the largest unit that divides the period."""
    for size, unit in _UNITS:
        if seconds % size == 0:
            return f"{time} + toInterval{unit}({seconds // size})"
    raise AssertionError("unreachable: every period is a whole number of seconds")


def current_ttl(engine_full: str) -> str | None:
    """The table TTL in ``system.tables.engine_full`` (ClickHouse prints it between `` TTL `` and `` SETTINGS ``)."""
    marker = " TTL "
    start = engine_full.find(marker)
    if start < 0:
        return None
    rest = engine_full[start + len(marker):]
    end = rest.find(" SETTINGS ")
    return (rest if end < 0 else rest[:end]).strip()


@dataclass(frozen=True, slots=True)
class RetentionChange:
    table: str  # as altered: otel.NAME, or otel.NAME_local on a cluster
    before: str | None
    after: str | None

    def statement(self, cluster: str | None) -> str:
        on = f" ON CLUSTER '{cluster}'" if cluster else ""
        if self.after is None:
            return f"ALTER TABLE {self.table}{on} REMOVE TTL"
        return f"ALTER TABLE {self.table}{on} MODIFY TTL {self.after}"


def _period(settings: RetentionSettings, group: RetentionGroup) -> int | None:
    value: int | None = getattr(settings, group)
    return value


def retention_changes(engines: Mapping[str, str], settings: RetentionSettings, cluster: str | None = None,
                      tables: Iterable[RetainedTable] = RETAINED_TABLES) -> list[RetentionChange]:
    """What must change for the tables that exist (``engines``: table name -> ``engine_full``)."""
    changes = []
    for entry in tables:
        name = f"{entry.table}_local" if cluster else entry.table
        if name not in engines:
            continue
        period = _period(settings, entry.group)
        wanted = ttl_expression(entry.time, period) if period else None
        have = current_ttl(engines[name])
        if have != wanted:
            changes.append(RetentionChange(f"otel.{name}", have, wanted))
    return changes


def apply_retention(store: Store, settings: RetentionSettings, cluster: str | None = None) -> list[RetentionChange]:
    """Bring every retained table's TTL to the configured period; returns what changed. Existing parts are
    re-evaluated by ClickHouse (``materialize_ttl_after_modify``) in the background, rows past the TTL go at the
    next merge."""
    rows = store.rows("SELECT name, engine_full FROM system.tables WHERE database = 'otel'")
    changes = retention_changes({r["name"]: r["engine_full"] for r in rows}, settings, cluster)
    for change in changes:
        store.command(change.statement(cluster))
    return changes
