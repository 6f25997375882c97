"""Operator outputs: alert webhooks, Prometheus metrics, structured logs without content."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import logging
import threading
import time
import uuid

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from support.agents import run_agents
from support.servers import serve_app

from detector.cli.demo import looping_step
from detector.evaluation.simulate import Step, ToolCall
from detector.service.logs import JsonFormatter
from detector.service.process import running_service
from detector.service.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, WebhookDispatcher
from detector.settings.config import AppConfig, Webhook, parse_config

SECRET = "s3cret-for-tests"


class Receiver:
    """A real HTTP receiver that fails its first ``fail_first`` requests with 503, then accepts."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.attempts = 0
        self.received: list[dict] = []
        self.lock = threading.Lock()
        self.app = FastAPI()

        @self.app.post("/hook")
        async def hook(request: Request) -> Response:
            body = await request.body()
            with self.lock:
                self.attempts += 1
                if self.attempts <= self.fail_first:
                    return Response(status_code=503)
                expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                assert request.headers[SIGNATURE_HEADER] == expected
                assert request.headers[EVENT_ID_HEADER] == json.loads(body)["id"]
                self.received.append(json.loads(body))
            return Response(status_code=204)


def event(i: int = 0, to_level: str = "hard_stop") -> dict:
    return {"kind": "escalation", "ts": "2026-11-30 12:00:00.000000000", "scope": "session", "scope_id": f"s{i}",
            "session_id": f"s{i}", "trace_id": "t", "span_id": f"span{i}", "virtual_key": "k", "feature": "f",
            "from_level": "inject", "to_level": to_level, "confidence": 0.93, "detector": "confidence",
            "signals": {"tool_call_repetition": 1.0}, "dominant_signal": "tool_call_repetition", "action": "block"}


def test_webhook_retries_until_the_receiver_recovers_and_never_duplicates():
    receiver = Receiver(fail_first=3)
    with serve_app(receiver.app) as base:
        hook = Webhook(url=f"{base}/hook", secret=SECRET, min_level="inject")
        dispatcher = WebhookDispatcher([hook], dashboard_url="http://grafana:3000", backoff_seconds=0.05)
        try:
            assert dispatcher.submit([event(1), event(2)]) == 2
            assert dispatcher.submit([event(1)]) == 0  # the same event again: de-duplicated
            assert dispatcher.submit([event(3, to_level="warn")]) == 0  # below min_level
            dispatcher.flush()
        finally:
            dispatcher.close()
    assert [e["session_id"] for e in receiver.received] == ["s1", "s2"]
    assert receiver.attempts == 5  # three failures, then each event once
    assert dispatcher.stats.delivered == 2 and dispatcher.stats.failed_attempts == 3
    first = receiver.received[0]
    assert first["to_level"] == "hard_stop" and first["signals"] == {"tool_call_repetition": 1.0}
    assert first["dashboard_url"].endswith("var-session_id=s1")


def test_webhook_submit_never_blocks_detection():
    # nothing listens on this port: deliveries fail and retry in the background
    dispatcher = WebhookDispatcher([Webhook(url="http://127.0.0.1:9/hook", min_level="warn")],
                                   backoff_seconds=0.5)
    try:
        started = time.perf_counter()
        dispatcher.submit([event(i) for i in range(100)])
        elapsed = time.perf_counter() - started
    finally:
        dispatcher.close()
    assert elapsed < 1.0  # bounded by the in-memory queue, not by the unreachable receiver


def canary_step(i: int) -> Step:
    step = looping_step(i)
    step.user_text = "CANARY-7f3a91 secret prompt text"
    step.output_text = "CANARY-7f3a91 secret response text"
    step.tools = [ToolCall("read_file", {"path": "CANARY-7f3a91.yaml"})]
    return step


@pytest.fixture()
def captured_logs():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield stream
    root.removeHandler(handler)
    root.setLevel(old_level)


def test_webhooks_metrics_and_logs_end_to_end(tmp_path, captured_logs):
    receiver = Receiver(fail_first=1)
    with serve_app(receiver.app) as base:
        config = parse_config({
            "webhooks": [{"url": f"{base}/hook", "secret": SECRET, "min_level": "warn"}],
            "loop_detection": {"consecutive_counts": {"warn": 2, "throttle": 3, "inject": 4, "hardstop": 5},
                               "thresholds": {"warn_confidence": 0.2, "throttle_confidence": 0.3,
                                              "inject_confidence": 0.4, "hardstop_confidence": 0.5}},
            "detector": {"interval_seconds": 0.1, "checkpoint_seconds": 0},
        })
        session = f"canary-{uuid.uuid4().hex[:6]}"
        with running_service(config, tmp_path) as (service, eps):
            timeline = run_agents(eps.otlp, eps.api, {session: canary_step}, 12)
            assert timeline[session][-1]["level"] == "hard_stop"
            service.webhooks.flush()
            metrics = httpx.get(f"{eps.api}/metrics").text

    # webhooks: every escalation from warn up, signed, delivered once despite a failing first attempt
    levels = [e["to_level"] for e in receiver.received if e["scope"] == "session"]
    assert levels == ["warn", "throttle", "inject", "hard_stop"]
    assert all(e["session_id"] == session for e in receiver.received)

    # metrics
    assert 'loop_enforcement_total{level="hard_stop",virtual_key=""}' in metrics
    assert "loop_confidence_score_bucket" in metrics and 'le="0.1"' in metrics
    assert "loop_sessions_active" in metrics and "loop_sessions_evicted_total" in metrics
    assert 'loop_ingest_spans_total{result="accepted"}' in metrics
    assert "loop_detector_cycle_seconds_count" in metrics and "loop_detector_watermark_lag_seconds" in metrics

    # structured logs: transitions at INFO with all seven signals, a state dump at ERROR on hard stop
    records = [json.loads(line) for line in captured_logs.getvalue().splitlines() if line.startswith("{")]
    transitions = [r for r in records if r.get("event") == "enforcement_transition" and r["session_id"] == session]
    assert {r["to_level"] for r in transitions} >= {"warn", "throttle", "inject", "hard_stop"}
    assert len(transitions[0]["signals"]) == 7 and transitions[0]["level"] == "INFO"
    stops = [r for r in records if r.get("event") == "hard_stop" and r["session_id"] == session]
    assert stops and stops[0]["level"] == "ERROR"
    dump = stops[0]["state"]
    assert dump["recent_request_hashes"] and dump["recent_tool_fingerprints"] and dump["response_descriptors"]
    assert dump["escalation_timeline"] and dump["total_tokens"] > 0
    # and never any prompt or response content
    assert "CANARY-7f3a91" not in captured_logs.getvalue()
    assert not [e for e in receiver.received if "CANARY" in json.dumps(e)]


def test_default_config_has_no_webhooks(tmp_path):
    assert AppConfig().webhooks == []
