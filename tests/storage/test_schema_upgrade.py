"""A data directory created by an older DDL is brought up to date in place: the previous release's (a copy of its
``clickhouse/`` at 6a852c8, in ``tests/data/schema_6a852c8``: calls normalized by a materialized view on insert)
keeps its calls and its detector's progress, and the staging view takes over; new columns are added in place, a
materialized view whose statement changed is replaced (its hash kept in otel.loop_meta), and the cluster rewrite
knows every statement kind of the upgrade."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.otlp_senders import PROTOBUF, chat_spans, encode, new_conversation

from detector.core.decisions import DecisionBook
from detector.detection.job import DetectorJob
from detector.ingest.otlp import decode_json
from detector.ingest.receiver import decode_request
from detector.settings.config import AppConfig
from detector.settings.service_settings import IngestSettings
from detector.storage.cluster import cluster_statements
from detector.storage.normalization import normalize_staged
from detector.storage.schema import VIEW_KEY_PREFIX, apply_schema, ddl_statements, view_statements
from detector.storage.transport import ChdbStore, insert_rows

PREVIOUS_RELEASE = Path(__file__).resolve().parent.parent / "data" / "schema_6a852c8"
NEW_CALL_COLUMNS = ("observation_fp", "observation_simhash", "observation_empty", "observation_chars", "args_fp",
                    "args_simhash", "output_fp", "output_norm_simhash", "out_tool_arg_simhashes", "observation_failed",
                    "observation_shape_fp", "observation_pending", "observation_ack")


def columns(store, table: str) -> set[str]:
    rows = store.rows("SELECT name FROM system.columns WHERE database = 'otel' AND table = {t:String}", {"t": table})
    return {r["name"] for r in rows}


def views(store) -> set[str]:
    return {r["name"] for r in store.rows("SELECT name FROM system.tables WHERE database = 'otel' "
                                          "AND engine IN ('MaterializedView', 'View')")}


def insert_spans(store, count: int, conversation: str) -> set[str]:
    """Real SDK spans, decoded as the receiver decodes them, inserted as the committer inserts them; their span ids."""
    request = decode_request(encode(chat_spans(count, conversation, tool_every=3)), "identity", PROTOBUF,
                             IngestSettings())
    store.insert_arrow("otel.otel_traces", request.rows)
    return set(request.rows.column("SpanId").to_pylist())


def new_job(store) -> DetectorJob:
    job = DetectorJob(store, AppConfig(), DecisionBook())
    job.load()
    return job


def scored(store, spans: set[str]) -> dict[str, int]:
    """How many session-scope score rows each of these model calls has (a tool call is scored with its turn)."""
    rows = store.rows("SELECT span_id, count() AS n FROM otel.loop_scores WHERE span_id IN {s:Array(String)} "
                      "AND scope = 'session' GROUP BY span_id", {"s": sorted(spans)})
    return {r["span_id"]: int(r["n"]) for r in rows}


def test_a_data_directory_of_the_previous_release_is_upgraded_in_place(tmp_path):
    """The previous release normalized each span on insert (otel.genai_calls_mv). Its data directory, with calls
    scored and calls not scored yet, is opened by this release: the old view goes, the staging view takes over, and
    every call is scored exactly once: those the old view wrote before the upgrade, and the spans staged after it."""
    store = ChdbStore(tmp_path)
    apply_schema(store, PREVIOUS_RELEASE)
    assert "genai_calls_mv" in views(store) and not columns(store, "genai_spans")
    before = insert_spans(store, 6, new_conversation())
    # the previous release's cycle, played by this release's job: its view had written the calls; its reader read the
    # columns it had, this one reads the newer ones too (which the upgrade adds: the test below), given ahead here
    store.command("ALTER TABLE otel.genai_calls ADD COLUMN IF NOT EXISTS observation_ack UInt8")
    job = new_job(store)
    job.normalization.transform = lambda *_: None
    job.run_cycle()
    job.checkpoint()
    pending = insert_spans(store, 6, new_conversation())  # written by the old view, not scored before the upgrade
    assert len(store.rows("SELECT span_id FROM otel.genai_calls")) == 12

    apply_schema(store)
    assert {"genai_spans_mv", "otel_traces_trace_id_ts_mv"} <= views(store)
    assert "genai_calls_mv" not in views(store)
    after = insert_spans(store, 6, new_conversation())
    assert not store.rows("SELECT span_id FROM otel.genai_calls WHERE span_id IN {s:Array(String)}",
                          {"s": sorted(after)})  # staged, not normalized on insert any more

    job = new_job(store)  # the next start of the service, on the upgraded directory
    job.run_cycle()
    calls = store.rows("SELECT span_id, count() AS n FROM otel.genai_calls GROUP BY span_id")
    assert {r["span_id"] for r in calls} == before | pending | after and {r["n"] for r in calls} == {1}
    model_calls = {r["span_id"] for r in store.rows("SELECT span_id FROM otel.genai_calls WHERE call_kind = 'llm'")}
    assert len(model_calls) == 12 and scored(store, model_calls) == dict.fromkeys(model_calls, 1)
    job.run_cycle()
    assert scored(store, model_calls) == dict.fromkeys(model_calls, 1)
    store.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ChdbStore(tmp_path_factory.mktemp("upgrade"))
    yield s
    s.close()


def tool_span_request(result: str) -> bytes:
    now = time.time_ns()
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "execute_tool x",
            "startTimeUnixNano": str(now), "endTimeUnixNano": str(now + 1000),
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                           {"key": "gen_ai.tool.name", "value": {"stringValue": "search_docs"}},
                           {"key": "gen_ai.tool.call.arguments", "value": {"stringValue": '{"query": "key rotation"}'}},
                           {"key": "gen_ai.tool.call.result", "value": {"stringValue": result}}]}
    return json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": [span]}]}]}).encode()


def test_tables_of_an_older_data_directory_get_their_new_columns(store):
    apply_schema(store)
    # what a data directory of an older release holds: the tables without the newer columns, no view hash
    store.command("ALTER TABLE otel.genai_calls DROP COLUMN evidence_source")  # (an ALIAS of the columns below)
    for name in NEW_CALL_COLUMNS:
        store.command(f"ALTER TABLE otel.genai_calls DROP COLUMN {name}")
    store.command("ALTER TABLE otel.loop_events DROP COLUMN evidence")
    store.command("ALTER TABLE otel.loop_decisions DROP COLUMN evidence")
    store.command("ALTER TABLE otel.loop_scores DROP COLUMN evidence")
    store.command("TRUNCATE TABLE otel.loop_meta")
    insert_rows(store, "otel.loop_decisions", [{"scope": "session", "scope_id": "old", "action": "warn",
                                                "level": "warn", "version": 1}])

    apply_schema(store)
    assert {*NEW_CALL_COLUMNS, "evidence_source"} <= columns(store, "genai_calls")
    assert "evidence" in columns(store, "loop_events") and "evidence" in columns(store, "loop_decisions")
    hashes = store.rows("SELECT key, value FROM otel.loop_meta FINAL WHERE startsWith(key, {p:String})",
                        {"p": VIEW_KEY_PREFIX})
    assert sorted(r["key"] for r in hashes) == [VIEW_KEY_PREFIX + "genai_spans_mv",
                                                VIEW_KEY_PREFIX + "otel_traces_trace_id_ts_mv"]
    # rows written before the upgrade are kept, with the new column's default
    assert store.rows("SELECT action, evidence FROM otel.loop_decisions FINAL WHERE scope_id = 'old'") == [
        {"action": "warn", "evidence": "none"}]
    # the normalization fills the new columns; the tool's echo of its arguments is not part of what came back
    store.insert_arrow("otel.otel_traces", decode_json(tool_span_request(
        '{"query": "key rotation", "total": 0, "took_ms": 12, "results": []}')).spans.to_arrow())
    normalize_staged(store)
    row = store.rows("SELECT observation_fp, observation_empty, args_fp, evidence_source FROM otel.genai_calls")[0]
    assert row["observation_fp"] and row["observation_empty"] == 1 and row["args_fp"]
    assert row["evidence_source"] == "content"


def test_a_materialized_view_whose_statement_changed_is_replaced(store):
    apply_schema(store)
    store.command("DROP VIEW otel.genai_spans_mv")
    store.command("CREATE MATERIALIZED VIEW otel.genai_spans_mv TO otel.genai_spans AS SELECT Timestamp AS ts, "
                  "TraceId AS trace_id, SpanId AS span_id FROM otel.otel_traces WHERE 0")  # an older statement
    store.command("TRUNCATE TABLE otel.loop_meta")  # from before the hashes were kept: replaced once
    apply_schema(store)
    assert "hasAny(mapKeys(SpanAttributes)" in view_sql(store, "genai_spans_mv")


def view_sql(store, name: str) -> str:
    return store.rows("SELECT create_table_query AS q FROM system.tables WHERE database = 'otel' AND name = {n:String}",
                      {"n": name})[0]["q"]


def test_applying_the_schema_again_changes_nothing(store):
    apply_schema(store)
    before = {name: view_sql(store, name) for name in ("genai_spans_mv", "otel_traces_trace_id_ts_mv")}
    apply_schema(store)
    apply_schema(store)
    assert {name: view_sql(store, name) for name in before} == before
    assert store.rows("SELECT count() AS n FROM otel.loop_meta FINAL WHERE startsWith(key, {p:String})",
                      {"p": VIEW_KEY_PREFIX}) == [{"n": 2}]  # the staging view's and the trace-id lookup's


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
    assert "DROP VIEW IF EXISTS otel.genai_calls_mv" in ddl_statements()  # the previous releases' view goes
    views = view_statements(ddl_statements())
    assert sorted(views) == ["genai_spans_mv", "otel_traces_trace_id_ts_mv"]
    assert "TO otel.genai_spans_local" in cluster_statements([views["genai_spans_mv"]], "prod")[0]
