"""Scaled mode: the cluster DDL, detector shards, and the ClickHouse server backend."""

from __future__ import annotations

import pytest
from support.calls import genai_rows, healthy, looping

from detector.core.decisions import DecisionBook
from detector.detection.job import DetectorJob
from detector.settings.config import AppConfig
from detector.storage.schema import apply_schema, committed_cluster_schema, ddl_statements, render_cluster_schema
from detector.storage.transport import ChdbStore, insert_rows


def test_cluster_ddl_is_generated_and_parses(tmp_path):
    assert committed_cluster_schema().read_text() == render_cluster_schema(), "regenerate with: python -m detector.storage.schema"
    from detector.storage.cluster import cluster_statements

    store = ChdbStore(tmp_path)
    statements = cluster_statements(ddl_statements(), "prod")
    for statement in statements:
        store.rows("EXPLAIN AST " + statement)  # parses as ClickHouse SQL
    tables = [s for s in statements if "ENGINE = Distributed" in s]
    assert {s.split()[5] for s in tables} >= {"otel.otel_traces", "otel.genai_calls", "otel.loop_state",
                                              "otel.loop_events", "otel.loop_decisions"}
    assert all("ON CLUSTER 'prod'" in s for s in statements)
    mv = next(s for s in statements if "MATERIALIZED VIEW IF NOT EXISTS otel.genai_spans_mv" in s)
    assert "TO otel.genai_spans_local" in mv and "FROM otel.otel_traces_local" in mv
    assert not [s for s in statements if "ENGINE = MergeTree" in s or "ENGINE = ReplacingMergeTree" in s]
    lookup = next(s for s in statements if "MATERIALIZED VIEW IF NOT EXISTS otel.otel_traces_trace_id_ts_mv" in s)
    assert "TO otel.otel_traces_trace_id_ts_local" in lookup and "FROM otel.otel_traces_local" in lookup


def test_two_shards_together_decide_like_one_detector(tmp_path):
    calls = []
    for i in range(6):
        make = looping if i % 2 else healthy
        calls += make(12, session=f"s{i}", trace=f"t{i}")
    store = ChdbStore(tmp_path)
    apply_schema(store)
    insert_rows(store, "otel.genai_calls", genai_rows(calls))

    def clean() -> None:
        for table in ("loop_state", "loop_scores", "loop_events", "loop_decisions", "loop_meta"):
            store.command(f"TRUNCATE TABLE otel.{table}")

    def run(shard: str) -> tuple[dict, int]:
        config = AppConfig()
        config.detector.shard = shard
        produced: dict = {}
        job = DetectorJob(store, config, DecisionBook(), on_cycle=[lambda out, _: produced.update(
            {(d.scope, d.scope_id): (d.action, d.level, round(d.confidence, 9)) for d in out.decisions})])
        job.load()
        stats = job.run_cycle()
        return produced, stats.calls_scored

    single, scored = run("0/1")
    clean()  # the two shards share the same detector tables, as in production, starting from scratch
    first, scored_0 = run("0/2")
    second, scored_1 = run("1/2")
    assert scored == 72 and scored_0 + scored_1 == 72
    assert scored_0 and scored_1, "both shards must get work"
    assert not set(first) & set(second)
    assert {**first, **second} == single
    assert any(v[0] != "allow" for v in single.values())


@pytest.mark.server
def test_server_backend_runs_the_same_ddl_and_pipeline(clickhouse_url):
    from detector.storage.transport import ServerStore

    store = ServerStore(clickhouse_url)
    apply_schema(store)
    apply_schema(store)  # idempotent
    calls = looping(12, session="srv-s1", trace="srv-t1")
    insert_rows(store, "otel.genai_calls", genai_rows(calls))
    book = DecisionBook()
    job = DetectorJob(store, AppConfig(), book)
    job.load()
    job.run_cycle()
    assert book.lookup("srv-s1").action != "allow"
