"""A data directory created by an older DDL is brought up to date: new columns added in place, a materialized view whose
statement changed replaced (its hash kept in otel.loop_meta), and the cluster rewrite knows both statement kinds."""

from __future__ import annotations

import json
import time

import pytest

from detector.ingest.otlp import decode_json
from detector.storage.cluster import cluster_statements
from detector.storage.schema import VIEW_KEY_PREFIX, apply_schema, ddl_statements, view_statements
from detector.storage.transport import ChdbStore, insert_rows

NEW_CALL_COLUMNS = ("observation_fp", "observation_simhash", "observation_empty", "observation_chars", "args_fp",
                    "args_simhash", "output_fp", "output_norm_simhash", "out_tool_arg_simhashes")
# the view as an older release created it: without the progress fingerprints
LEGACY_VIEW = """
CREATE MATERIALIZED VIEW otel.genai_calls_mv TO otel.genai_calls AS
SELECT Timestamp AS ts, Timestamp AS end_ts, TraceId AS trace_id, SpanId AS span_id, TraceId AS session_id,
       SpanAttributes['gen_ai.operation.name'] AS operation, 'llm' AS call_kind
FROM otel.otel_traces WHERE SpanAttributes['gen_ai.operation.name'] != ''
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ChdbStore(tmp_path_factory.mktemp("upgrade"))
    yield s
    s.close()


def columns(store, table: str) -> set[str]:
    rows = store.rows("SELECT name FROM system.columns WHERE database = 'otel' AND table = {t:String}", {"t": table})
    return {r["name"] for r in rows}


def view_sql(store) -> str:
    return store.rows("SELECT create_table_query AS q FROM system.tables WHERE database = 'otel' "
                      "AND name = 'genai_calls_mv'")[0]["q"]


def tool_span_request(result: str) -> bytes:
    now = time.time_ns()
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "execute_tool x",
            "startTimeUnixNano": str(now), "endTimeUnixNano": str(now + 1000),
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                           {"key": "gen_ai.tool.name", "value": {"stringValue": "search_docs"}},
                           {"key": "gen_ai.tool.call.arguments", "value": {"stringValue": '{"query": "key rotation"}'}},
                           {"key": "gen_ai.tool.call.result", "value": {"stringValue": result}}]}
    return json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": [span]}]}]}).encode()


def test_an_older_data_directory_is_upgraded_in_place(store):
    apply_schema(store)
    # what a data directory of the previous release holds: the tables without the new columns, the old view, no hash
    store.command("DROP VIEW otel.genai_calls_mv")
    for name in NEW_CALL_COLUMNS:
        store.command(f"ALTER TABLE otel.genai_calls DROP COLUMN {name}")
    store.command("ALTER TABLE otel.loop_events DROP COLUMN evidence")
    store.command("ALTER TABLE otel.loop_decisions DROP COLUMN evidence")
    store.command("ALTER TABLE otel.loop_scores DROP COLUMN evidence")
    store.command(LEGACY_VIEW)
    store.command("TRUNCATE TABLE otel.loop_meta")
    insert_rows(store, "otel.loop_decisions", [{"scope": "session", "scope_id": "old", "action": "warn",
                                                "level": "warn", "version": 1}])

    apply_schema(store)
    assert set(NEW_CALL_COLUMNS) <= columns(store, "genai_calls")
    assert "evidence" in columns(store, "loop_events") and "evidence" in columns(store, "loop_decisions")
    assert "observation_fp" in view_sql(store)  # the view was replaced by the current statement
    hashes = store.rows("SELECT key, value FROM otel.loop_meta FINAL WHERE startsWith(key, {p:String})",
                        {"p": VIEW_KEY_PREFIX})
    assert sorted(r["key"] for r in hashes) == [VIEW_KEY_PREFIX + "genai_calls_mv",
                                                VIEW_KEY_PREFIX + "otel_traces_trace_id_ts_mv"]
    # rows written before the upgrade are kept, with the new column's default
    assert store.rows("SELECT action, evidence FROM otel.loop_decisions FINAL WHERE scope_id = 'old'") == [
        {"action": "warn", "evidence": "none"}]
    # the replaced view fills the new columns; the tool's echo of its arguments is not part of what came back
    store.insert_arrow("otel.otel_traces", decode_json(tool_span_request(
        '{"query": "key rotation", "total": 0, "took_ms": 12, "results": []}')).spans.to_arrow())
    row = store.rows("SELECT observation_fp, observation_empty, args_fp FROM otel.genai_calls")[0]
    assert row["observation_fp"] and row["observation_empty"] == 1 and row["args_fp"]


def test_applying_the_schema_again_changes_nothing(store):
    before = view_sql(store)
    apply_schema(store)
    apply_schema(store)
    assert view_sql(store) == before
    assert store.rows("SELECT count() AS n FROM otel.loop_meta FINAL WHERE startsWith(key, {p:String})",
                      {"p": VIEW_KEY_PREFIX}) == [{"n": 2}]  # the calls' view and the trace-id lookup's


def test_the_cluster_rewrite_understands_the_upgrade_statements():
    alters = [s for s in ddl_statements() if s.startswith("ALTER TABLE") and "ADD COLUMN" in s]
    assert {s.split()[2] for s in alters} == {"otel.genai_calls", "otel.loop_scores", "otel.loop_events",
                                              "otel.loop_decisions"}
    rewritten = cluster_statements(alters, "prod")
    assert len(rewritten) == 2 * len(alters)  # the local table and the Distributed one over it
    assert all("ON CLUSTER 'prod'" in s and "ADD COLUMN IF NOT EXISTS" in s for s in rewritten)
    assert {s.split()[2] for s in rewritten} >= {"otel.genai_calls_local", "otel.genai_calls"}
    assert cluster_statements(["DROP VIEW IF EXISTS otel.genai_calls_mv"], "prod") == [
        "DROP VIEW IF EXISTS otel.genai_calls_mv ON CLUSTER 'prod'"]
    views = view_statements(ddl_statements())
    assert sorted(views) == ["genai_calls_mv", "otel_traces_trace_id_ts_mv"]
    assert "TO otel.genai_calls_local" in cluster_statements([views["genai_calls_mv"]], "prod")[0]
