"""A detection cycle whose writes fail part-way (the store going away between its scores and its watermark) scores
nothing twice and leaves nothing out (issue 32, part 2: no gap, no double scoring).

The failure is the store's own, at a precise statement: a materialized view on ``otel.loop_decisions`` that throws
(``throwIf``), on the embedded store of a real service. The cycle's ``writing`` mark, scores and events are stored,
then its decisions are refused, cycle after cycle, until the view is dropped; its watermark is never reached. The
engine has scored those calls in memory by then: a cycle that read them again from the old watermark would score
them a second time (under another range's deduplication token, and taking each call for its own repeat). Each call
must have exactly one score per scope.
"""

from __future__ import annotations

import time

import httpx
from support.otlp_load import Request, audit_store
from support.otlp_senders import PROTOBUF, chat_spans, encode, new_conversation, trace_hex

from detector.service.process import running_service
from detector.settings.config import parse_config

SINK = "CREATE TABLE IF NOT EXISTS otel.test_refuse_sink (x UInt8) ENGINE = Null"
REFUSE_DECISIONS = """
CREATE MATERIALIZED VIEW IF NOT EXISTS otel.test_refuse_decisions TO otel.test_refuse_sink AS
SELECT throwIf(scope_id != '', 'decisions write refused') AS x FROM otel.loop_decisions
"""
ALLOW_DECISIONS = "DROP VIEW IF EXISTS otel.test_refuse_decisions"
FAILING_SECONDS = 2.0  # about 20 failed cycles at 0.1 s, the backoff included


def test_a_cycle_whose_writes_fail_part_way_scores_each_call_once(tmp_path):
    config = parse_config({"detector": {"interval_seconds": 0.1, "checkpoint_seconds": 0}})
    with running_service(config, tmp_path) as (service, eps):
        service.store.command(SINK)
        service.store.command(REFUSE_DECISIONS)
        failed_before = service.freshness.failures_total
        spans = chat_spans(30, new_conversation(), tool_every=3)
        request = Request(encode(spans), trace_hex(spans), len(spans),
                          sum(1 for s in spans if s.attributes.get("gen_ai.operation.name") != "execute_tool"))
        response = httpx.post(eps.otlp + "/v1/traces", content=request.body, headers={"Content-Type": PROTOBUF})
        assert response.status_code == 200
        deadline = time.monotonic() + 30
        while service.freshness.failures_total - failed_before < 3:  # the cycles scored the calls, then failed
            assert time.monotonic() < deadline, "the decisions write never failed"
            time.sleep(0.05)
        time.sleep(FAILING_SECONDS)
        service.store.command(ALLOW_DECISIONS)
        deadline = time.monotonic() + 30
        while service.freshness.failing_cycles or service.freshness.stale_seconds() > 1.0:
            assert time.monotonic() < deadline, "the cycles did not resume"
            time.sleep(0.05)
        audit = audit_store(service.store, [request])
    assert audit.exact, audit
    assert audit.scored_once, audit
