"""The exporter's schema, as ClickHouse itself reports it once our DDL ran on chDB.

The expected values are the contrib ClickHouse exporter's templates for the collector version docker-compose.yml
pins (0.162.0: internal/sqltemplates/traces_table.sql, traces_id_ts_lookup_table.sql, traces_id_ts_lookup_mv.sql;
docs/scaling.md says how they were read and what could not be verified), rendered for database ``otel``, table
``otel_traces``, engine ``MergeTree()``, no cluster and no TTL. They are
compared with what ``system.columns``, ``system.tables`` and ``system.data_skipping_indices`` say, so a column,
type, codec, key, partition or index that drifts from the exporter's fails here, whatever the DDL's spelling.
"""

from __future__ import annotations

import pytest

from detector.storage.normalization import normalize_staged
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore, insert_rows

MAP = "Map(LowCardinality(String), String)"
Z = "CODEC(ZSTD(1))"

OTEL_TRACES_COLUMNS = [
    ("Timestamp", "DateTime64(9)", "CODEC(Delta(8), ZSTD(1))"),
    ("TraceId", "String", Z), ("SpanId", "String", Z), ("ParentSpanId", "String", Z), ("TraceState", "String", Z),
    ("SpanName", "LowCardinality(String)", Z), ("SpanKind", "LowCardinality(String)", Z),
    ("ServiceName", "LowCardinality(String)", Z), ("ResourceAttributes", MAP, Z), ("ScopeName", "String", Z),
    ("ScopeVersion", "String", Z), ("SpanAttributes", MAP, Z), ("Duration", "UInt64", Z),
    ("StatusCode", "LowCardinality(String)", Z), ("StatusMessage", "String", Z),
    ("Events.Timestamp", "Array(DateTime64(9))", Z), ("Events.Name", "Array(LowCardinality(String))", Z),
    ("Events.Attributes", f"Array({MAP})", Z),
    ("Links.TraceId", "Array(String)", Z), ("Links.SpanId", "Array(String)", Z), ("Links.TraceState", "Array(String)", Z),
    ("Links.Attributes", f"Array({MAP})", Z),
]
OTEL_TRACES_INDEXES = [
    ("idx_trace_id", "bloom_filter", "TraceId", 1),
    ("idx_res_attr_key", "bloom_filter", "mapKeys(ResourceAttributes)", 1),
    ("idx_res_attr_value", "bloom_filter", "mapValues(ResourceAttributes)", 1),
    ("idx_span_attr_key", "bloom_filter", "mapKeys(SpanAttributes)", 1),
    ("idx_span_attr_value", "bloom_filter", "mapValues(SpanAttributes)", 1),
    ("idx_duration", "minmax", "Duration", 1),
]
LOOKUP_COLUMNS = [
    ("TraceId", "String", Z),
    ("Start", "DateTime", "CODEC(Delta(4), ZSTD(1))"),
    ("End", "DateTime", "CODEC(Delta(4), ZSTD(1))"),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ChdbStore(tmp_path_factory.mktemp("schema"))
    apply_schema(s)
    yield s
    s.close()


def columns(store, table):
    return [(r["name"], r["type"], r["compression_codec"]) for r in store.rows(
        "SELECT name, type, compression_codec FROM system.columns WHERE database = 'otel' AND table = {t:String} "
        "ORDER BY position", {"t": table})]


def table_info(store, table):
    return store.rows("SELECT engine, partition_key, sorting_key, primary_key, engine_full FROM system.tables "
                      "WHERE database = 'otel' AND name = {t:String}", {"t": table})[0]


def indexes(store, table):
    return [(r["name"], r["type"], r["expr"], r["granularity"]) for r in store.rows(
        "SELECT name, type, expr, granularity FROM system.data_skipping_indices "
        "WHERE database = 'otel' AND table = {t:String} ORDER BY name", {"t": table})]


def test_otel_traces_is_the_exporters_table(store):
    assert columns(store, "otel_traces") == OTEL_TRACES_COLUMNS
    info = table_info(store, "otel_traces")
    assert (info["engine"], info["partition_key"], info["sorting_key"], info["primary_key"]) == (
        "MergeTree", "toDate(Timestamp)", "ServiceName, SpanName, toDateTime(Timestamp)",
        "ServiceName, SpanName, toDateTime(Timestamp)")
    assert info["engine_full"].endswith("SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1")
    assert indexes(store, "otel_traces") == sorted(OTEL_TRACES_INDEXES)
    bloom = store.rows("SELECT type_full FROM system.data_skipping_indices WHERE database = 'otel' "
                       "AND table = 'otel_traces' AND name = 'idx_trace_id'")[0]["type_full"]
    assert bloom == "bloom_filter(0.001)"


def test_trace_id_lookup_table_and_view_are_the_exporters(store):
    assert columns(store, "otel_traces_trace_id_ts") == LOOKUP_COLUMNS
    info = table_info(store, "otel_traces_trace_id_ts")
    assert (info["engine"], info["partition_key"], info["sorting_key"]) == ("MergeTree", "toDate(Start)",
                                                                            "TraceId, Start")
    assert info["engine_full"].endswith("SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1")
    assert [(r["name"], r["type_full"], r["expr"]) for r in store.rows(
        "SELECT name, type_full, expr FROM system.data_skipping_indices WHERE database = 'otel' "
        "AND table = 'otel_traces_trace_id_ts'")] == [("idx_trace_id", "bloom_filter(0.01)", "TraceId")]
    view = store.rows("SELECT engine, as_select FROM system.tables WHERE database = 'otel' "
                      "AND name = 'otel_traces_trace_id_ts_mv'")[0]
    assert view["engine"] == "MaterializedView"
    assert "min(Timestamp) AS Start" in view["as_select"] and "max(Timestamp) AS End" in view["as_select"]
    assert "WHERE TraceId != ''" in view["as_select"] and view["as_select"].endswith("GROUP BY TraceId")


def test_inserted_spans_fill_the_lookup_table_and_genai_calls(store):
    """What the Grafana plugin's trace-id search reads: per trace, the first and last span start (seconds), and
    spans without a trace id are left out. The project's own staging view still runs beside it: the GenAI span is
    staged (and becomes a call once normalized), the others are not."""
    base = {"ServiceName": "svc", "SpanKind": "SPAN_KIND_CLIENT", "StatusCode": "Unset"}
    spans = [
        {**base, "Timestamp": "2026-03-01 10:00:00.250000000", "TraceId": "lk1", "SpanId": "a", "SpanName": "chat m",
         "SpanAttributes": {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}},
        {**base, "Timestamp": "2026-03-01 10:00:07.900000000", "TraceId": "lk1", "SpanId": "b", "SpanName": "x"},
        {**base, "Timestamp": "2026-03-01 10:00:03.000000000", "TraceId": "", "SpanId": "c", "SpanName": "x"},
    ]
    insert_rows(store, "otel.otel_traces", spans)
    rows = store.rows("SELECT TraceId, min(Start) AS s, max(End) AS e FROM otel.otel_traces_trace_id_ts "
                      "GROUP BY TraceId ORDER BY TraceId")
    assert rows == [{"TraceId": "lk1", "s": "2026-03-01 10:00:00", "e": "2026-03-01 10:00:07"}]
    assert store.rows("SELECT span_id FROM otel.genai_spans WHERE trace_id IN ('lk1', '')") == [{"span_id": "a"}]
    normalize_staged(store)
    assert store.rows("SELECT span_id FROM otel.genai_calls WHERE trace_id = 'lk1'") == [{"span_id": "a"}]
