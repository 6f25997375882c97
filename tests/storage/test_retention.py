"""Retention: TTLs per table group, set at start and on config change, and rows past them really go (chDB)."""

from __future__ import annotations

import pytest

from detector.settings.config import ConfigError, parse_config
from detector.settings.service_settings import RetentionSettings
from detector.storage.cluster import cluster_statements
from detector.storage.normalization import normalize_staged
from detector.storage.retention import (
    RETAINED_TABLES,
    UNRETAINED_TABLES,
    apply_retention,
    current_ttl,
    retention_changes,
    ttl_expression,
)
from detector.storage.schema import ddl_statements
from detector.storage.transport import insert_rows


def ttls(store) -> dict[str, str | None]:
    return {r["name"]: current_ttl(r["engine_full"]) for r in store.rows(
        "SELECT name, engine_full FROM system.tables WHERE database = 'otel' AND engine LIKE '%MergeTree'")}


@pytest.mark.parametrize(("seconds", "expr"), [
    (7 * 86400, "toDateTime(Timestamp) + toIntervalDay(7)"),
    (36 * 3600, "toDateTime(Timestamp) + toIntervalHour(36)"),
    (90 * 60, "toDateTime(Timestamp) + toIntervalMinute(90)"),
    (3601, "toDateTime(Timestamp) + toIntervalSecond(3601)"),
])
def test_ttl_expression_is_the_exporters(seconds, expr):
    """internal.GenerateTTLExpr: days when whole days, else hours, minutes, seconds."""
    assert ttl_expression("toDateTime(Timestamp)", seconds) == expr


def test_durations_in_the_config():
    r = parse_config({"retention": {"spans": "36h", "detector": "off"}}).retention
    assert (r.spans, r.detector) == (36 * 3600, None)
    assert parse_config({"retention": {"spans": 0, "detector": 600}}).retention.spans is None
    defaults = RetentionSettings()
    assert (defaults.spans, defaults.detector) == (7 * 86400, 30 * 86400)
    with pytest.raises(ConfigError) as info:
        parse_config({"retention": {"spans": "7 weeks", "detector": -1, "logs": "1d"}})
    text = "\n".join(info.value.errors)
    assert "retention.spans" in text and "retention.detector" in text and "retention.logs" in text


def test_every_table_of_the_ddl_has_a_retention_decision():
    """A new table joins a group in RETAINED_TABLES (one line) or says in UNRETAINED_TABLES why it keeps its rows."""
    created = {s.split()[5].removeprefix("otel.") for s in ddl_statements() if s.startswith("CREATE TABLE")}
    retained = {t.table for t in RETAINED_TABLES}
    assert not retained & set(UNRETAINED_TABLES)
    undecided = created - retained - set(UNRETAINED_TABLES)
    assert not undecided, f"add these tables to RETAINED_TABLES or UNRETAINED_TABLES: {sorted(undecided)}"


def test_schema_creation_applies_the_ttls_and_skips_missing_tables(store):
    store.command("DROP TABLE otel.otel_logs")  # registered, but not created here (say, an older schema)
    changes = apply_retention(store, RetentionSettings())
    changed = {c.table for c in changes}
    assert "otel.otel_logs" not in changed  # registered for a table that does not exist here
    assert changed == {f"otel.{t.table}" for t in RETAINED_TABLES if t.table != "otel_logs"}
    now = ttls(store)
    assert now["otel_traces"] == "toDateTime(Timestamp) + toIntervalDay(7)"
    assert now["otel_traces_trace_id_ts"] == "toDateTime(Start) + toIntervalDay(7)"
    assert now["loop_events"] == "toDateTime(inserted_at) + toIntervalDay(30)"
    assert all(now[name] is None for name in UNRETAINED_TABLES)
    assert apply_retention(store, RetentionSettings()) == []  # nothing to do the second time


def test_a_config_change_modifies_and_removes_ttls(store):
    apply_retention(store, RetentionSettings())
    changes = apply_retention(store, RetentionSettings(spans="36h", detector="off"))
    assert {c.table: c.after for c in changes}["otel.otel_traces"] == "toDateTime(Timestamp) + toIntervalHour(36)"
    now = ttls(store)
    assert now["otel_traces"] == "toDateTime(Timestamp) + toIntervalHour(36)"
    assert now["genai_calls"] is None and now["loop_scores"] is None
    assert {c.statement(None) for c in changes} >= {"ALTER TABLE otel.loop_scores REMOVE TTL"}


def test_rows_past_the_ttl_go_and_younger_rows_stay(store):
    """Rows written while the tables had no TTL (as after an upgrade): the TTL set afterwards removes the old ones
    at the next merge (OPTIMIZE ... FINAL forces it here) and keeps the young ones."""
    span = {"ServiceName": "svc", "SpanName": "chat m", "SpanKind": "SPAN_KIND_CLIENT", "StatusCode": "Unset",
            "SpanAttributes": {"gen_ai.operation.name": "chat"}}
    old = store.rows("SELECT toString(now64(9) - INTERVAL 10 DAY) AS t")[0]["t"]
    young = store.rows("SELECT toString(now64(9) - INTERVAL 2 DAY) AS t")[0]["t"]
    insert_rows(store, "otel.otel_traces", [{**span, "Timestamp": old, "TraceId": "old", "SpanId": "o"}])
    insert_rows(store, "otel.otel_traces", [{**span, "Timestamp": young, "TraceId": "young", "SpanId": "y"}])
    normalize_staged(store)  # the calls, as a detection cycle writes them
    old_us = store.rows("SELECT toString(now64(6) - INTERVAL 40 DAY) AS t")[0]["t"]
    event = {"kind": "escalation", "scope": "session", "scope_id": "s", "ts": young}
    insert_rows(store, "otel.loop_events", [{**event, "session_id": "gone", "inserted_at": old_us}])
    insert_rows(store, "otel.loop_events", [{**event, "session_id": "kept"}])

    apply_retention(store, RetentionSettings())
    for table in ("otel_traces", "otel_traces_trace_id_ts", "genai_spans", "genai_calls", "loop_events"):
        store.command(f"OPTIMIZE TABLE otel.{table} FINAL")
    assert store.rows("SELECT TraceId FROM otel.otel_traces ORDER BY TraceId") == [{"TraceId": "young"}]
    assert store.rows("SELECT DISTINCT TraceId FROM otel.otel_traces_trace_id_ts") == [{"TraceId": "young"}]
    assert store.rows("SELECT session_id FROM otel.loop_events") == [{"session_id": "kept"}]
    # staged spans and calls count from their insertion: 10-day-old spans inserted now are young, and stay
    assert store.rows("SELECT trace_id FROM otel.genai_spans ORDER BY trace_id") == [
        {"trace_id": "old"}, {"trace_id": "young"}]
    assert store.rows("SELECT trace_id FROM otel.genai_calls ORDER BY trace_id") == [
        {"trace_id": "old"}, {"trace_id": "young"}]


def test_on_a_cluster_the_local_tables_are_altered_on_cluster():
    engines = {"otel_traces_local": "ReplicatedMergeTree('/p', '{replica}') PARTITION BY toDate(Timestamp) "
                                    "ORDER BY x SETTINGS index_granularity = 8192",
               "otel_traces": "Distributed('c', 'otel', 'otel_traces_local', cityHash64(TraceId))",
               "loop_events_local": "ReplicatedMergeTree('/p', '{replica}') ORDER BY x "
                                    "TTL toDateTime(inserted_at) + toIntervalDay(30) SETTINGS index_granularity = 8192"}
    changes = retention_changes(engines, RetentionSettings(), cluster="prod")
    assert [c.statement("prod") for c in changes] == [
        "ALTER TABLE otel.otel_traces_local ON CLUSTER 'prod' MODIFY TTL toDateTime(Timestamp) + toIntervalDay(7)"]
    # the cluster DDL still has no TTL of its own: the service sets it
    assert not [s for s in cluster_statements(ddl_statements(), "prod") if " TTL " in s]
