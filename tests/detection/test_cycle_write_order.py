"""What the API serves comes as soon as it can: the decisions once the cycle's range is recorded, the watermark once
what the API reads is stored (not after the row only a restart reads).

The decisions (``/v1/check``) are put in the book right after the cycle's ``writing`` row, before its scores, events
and decisions are inserted: the same range gives the same decisions, whatever happens to those inserts (retried by
the next cycle, rerun after a restart). Refused for real (NOT_ENOUGH_SPACE on ``otel.loop_scores``), the cycle's
decision is served all the same, the watermark stays, and the retry stores each score once.

A cycle's last statement is its watermark row in ``otel.loop_meta``, which only a restart reads (``load``); the
decisions, scores and events are stored before it. The watermark in memory (``/healthz``, what a caller waiting for
its decisions polls) moves before that row, so the row's insert is not part of the decision lag. The store refuses
for real: once the cycle's scores are stored, ``min_free_disk_bytes_to_perform_insert`` on ``otel.loop_meta`` makes
ClickHouse refuse the watermark row (code 243, a full disk). The watermark shown has moved all the same; the row is
written by the next cycle, with the rest of the cycle's writes again (stored once), and nothing is scored twice.
"""

from __future__ import annotations

import time

import httpx
import pytest
from support.enforcement import make_config
from support.full_table import refuse_inserts
from support.otlp_senders import chat_spans, encode, new_conversation, post_body

from detector.service.process import running_service
from detector.storage.transport import StoreError

SPANS = 12
SCORES_OF = "SELECT count() AS n, uniqExact(scope, span_id) AS u FROM otel.loop_scores WHERE session_id = {c:String}"
META = "SELECT value FROM otel.loop_meta FINAL WHERE key = 'watermark:0/1'"


def test_the_decisions_are_served_before_the_scores_are_stored(tmp_path):
    # cycles only when this test runs one
    config = make_config(detector={"interval_seconds": 3600, "min_interval_seconds": 3600, "checkpoint_seconds": 0})
    with running_service(config, tmp_path) as (service, eps):
        job, store = service.job, service.store
        job.run_cycle()  # the first cycle the schedule started at once, done
        conversation = new_conversation()
        with httpx.Client(base_url=eps.otlp, timeout=30) as client:
            assert post_body(client, encode(chat_spans(SPANS, conversation, tool_every=4))).status_code == 200
        time.sleep(0.01)
        watermark = job.watermark_us
        refuse_inserts(store, "otel.loop_scores")
        with pytest.raises(StoreError, match="Code: 243"):
            job.run_cycle()
        served = job.book.get("session", conversation)
        assert served is not None  # served: the scores are not stored yet
        assert job.watermark_us == watermark
        assert store.rows(SCORES_OF, {"c": conversation})[0]["n"] == 0
        refuse_inserts(store, "otel.loop_scores", refused=False)  # space is back
        job.run_cycle()
        assert job.watermark_us > watermark
        scores = store.rows(SCORES_OF, {"c": conversation})[0]
        assert scores["n"] == scores["u"] > 0  # each stored once
        assert job.book.get("session", conversation) == served


def test_the_watermark_shown_moves_before_the_row_only_a_restart_reads(tmp_path):
    # cycles only when this test runs one
    config = make_config(detector={"interval_seconds": 3600, "min_interval_seconds": 3600, "checkpoint_seconds": 0})
    with running_service(config, tmp_path) as (service, eps):
        job, store = service.job, service.store
        job.run_cycle()  # the first cycle the schedule started at once, done
        conversation = new_conversation()
        spans = chat_spans(SPANS, conversation, tool_every=4)
        llm_calls = sum(1 for s in spans if s.attributes.get("gen_ai.operation.name") == "chat")
        with httpx.Client(base_url=eps.otlp, timeout=30) as client:
            assert post_body(client, encode(spans)).status_code == 200
        time.sleep(0.01)
        watermark = job.watermark_us
        insert_arrow = store.insert_arrow

        def refuse_meta_after_scores(table, data, settings=None):  # the real insert, then the real refusal
            insert_arrow(table, data, settings)
            if table == "otel.loop_scores":
                refuse_inserts(store, "otel.loop_meta")

        store.insert_arrow = refuse_meta_after_scores
        try:
            with pytest.raises(StoreError, match="Code: 243"):
                job.run_cycle()
        finally:
            store.insert_arrow = insert_arrow
        assert job.watermark_us > watermark  # shown: its decisions, scores and events are stored
        assert httpx.get(eps.api + "/healthz", timeout=10).json()["watermark_us"] == job.watermark_us
        scores = store.rows(SCORES_OF, {"c": conversation})[0]
        assert scores["n"] == scores["u"] > 0
        assert int(store.rows(META)[0]["value"]) < job.watermark_us  # the restart's row: not written yet
        refuse_inserts(store, "otel.loop_meta", refused=False)  # space is back
        shown = job.watermark_us
        job.run_cycle()
        assert int(store.rows(META)[0]["value"]) >= shown
        assert store.rows(SCORES_OF, {"c": conversation})[0] == scores  # stored once
        assert job.engine.states[("session", conversation)].calls == llm_calls  # through the engine once
