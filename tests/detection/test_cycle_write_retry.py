"""A detection cycle whose writes fail (the disk full) waits and resumes with no gap and nothing scored twice.

The store refuses for real: ``min_free_disk_bytes_to_perform_insert`` on ``otel.loop_scores`` makes ClickHouse
answer every insert there with NOT_ENOUGH_SPACE (code 243), the very error of a full disk, for that table alone, at
a chosen moment: after the cycle's calls were normalized and scored in memory, before its scores are stored. Before
the fix, the next cycle read the same calls again from the unmoved watermark and the engine counted them twice.
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

SPANS = 24
SCORES_OF = ("SELECT countIf(scope = 'session') AS s, countIf(scope = 'trace') AS t, "
             "uniqExact(scope, span_id) AS u FROM otel.loop_scores WHERE session_id = {c:String}")


def test_a_cycle_that_cannot_write_its_scores_writes_them_later_once(tmp_path):
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
        refuse_inserts(store, "otel.loop_scores")
        with pytest.raises(StoreError, match="Code: 243"):
            job.run_cycle()
        with pytest.raises(StoreError, match="Code: 243"):  # still full: the cycle waits, the watermark stays
            job.run_cycle()
        assert job.watermark_us == watermark
        refuse_inserts(store, "otel.loop_scores", refused=False)  # space is back
        job.run_cycle()
        assert job.watermark_us > watermark
        scores = store.rows(SCORES_OF, {"c": conversation})[0]
        assert (scores["s"], scores["t"], scores["u"]) == (llm_calls, llm_calls, 2 * llm_calls)
        session = job.engine.states[("session", conversation)]
        assert session.calls == llm_calls  # each call went through the engine once, not once per attempt
