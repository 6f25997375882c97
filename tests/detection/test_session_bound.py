"""Tracked sessions stay within ``max_sessions`` between eviction runs (issue 16, item 4: bounded everything). A
burst of new sessions, in real spans through the receiver, with the periodic eviction an hour away: the cycle that
read them evicts at once, the least recently active first, so memory follows the config, not the sender's rate."""

from __future__ import annotations

import time

import httpx
from support.enforcement import make_config
from support.otlp_senders import chat_spans, encode, new_conversation, post_body

from detector.detection.job import OVER_CAPACITY
from detector.service.process import running_service

MAX_SESSIONS = 100


def test_a_burst_of_sessions_is_evicted_by_the_cycle_that_read_it(tmp_path):
    config = make_config(loop_detection={"max_sessions": MAX_SESSIONS, "eviction_interval_seconds": 3600})
    with running_service(config, tmp_path) as (service, eps):
        prefix = new_conversation()
        sessions = {i: {"gen_ai.conversation.id": f"{prefix}-{i}"} for i in range(3 * MAX_SESSIONS)}
        newest = f"{prefix}-{3 * MAX_SESSIONS - 1}"  # the spans' start times ascend with i
        with httpx.Client(base_url=eps.otlp, timeout=60) as client:  # one call per session
            assert post_body(client, encode(chat_spans(3 * MAX_SESSIONS, prefix, attributes=sessions))).status_code == 200
        sent = time.time()
        deadline = service.job.cycles + 300
        while service.job.watermark_us < sent * 1e6:
            assert service.job.cycles < deadline
            time.sleep(0.05)
        assert service.job.active_sessions() <= MAX_SESSIONS * OVER_CAPACITY
        assert service.job.evicted_total >= MAX_SESSIONS
        assert ("session", newest) in service.job.engine.states  # the most recent sessions are the ones kept
