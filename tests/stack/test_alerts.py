"""Operator outputs: alert webhooks, Prometheus metrics, structured logs without content."""

from __future__ import annotations

import io
import json
import logging
import uuid

import httpx
import pytest
from support.agents import run_agents
from support.servers import serve_app
from support.webhook_receiver import WebhookReceiver

from detector.cli.demo import looping_step
from detector.evaluation.simulate import SimulatedStep, ToolCall
from detector.service.log_output import JsonFormatter
from detector.service.process import running_service
from detector.settings.config import AppConfig, parse_config

SECRET = "s3cret-for-tests"  # a plain (pre-standard) secret: its UTF-8 bytes are the key

# The outbox itself (signatures, retries, Retry-After, dead letters, restarts) is tested in
# tests/service/test_webhooks.py; here, the webhooks of a real detection run, beside metrics and logs.


def canary_step(i: int) -> SimulatedStep:
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
    receiver = WebhookReceiver(secret=SECRET.encode(), script=[(503, {})])
    with serve_app(receiver.app) as base:
        config = parse_config({
            "webhooks": [{"url": f"{base}/hook", "secret": SECRET, "min_level": "warn"}],
            "webhook_delivery": {"initial_backoff_seconds": 0.05},
            "loop_detection": {"consecutive_counts": {"warn": 2, "throttle": 3, "inject": 4, "hardstop": 5},
                               "thresholds": {"warn_confidence": 0.2, "throttle_confidence": 0.3,
                                              "inject_confidence": 0.4, "hardstop_confidence": 0.5}},
            "detector": {"interval_seconds": 0.1, "checkpoint_seconds": 0},
        })
        session = f"canary-{uuid.uuid4().hex[:6]}"
        with running_service(config, tmp_path) as (service, eps):
            timeline = run_agents(eps.otlp, eps.api, {session: canary_step}, 12)
            assert timeline[session][-1]["level"] == "hard_stop"
            assert service.webhooks.flush()
            metrics = httpx.get(f"{eps.api}/metrics").text

    # webhooks: every escalation from warn up, signed, delivered once despite a failing first attempt
    received = [a.payload for a in receiver.accepted()]
    levels = [e["to_level"] for e in received if e["scope"] == "session"]
    assert levels == ["warn", "throttle", "inject", "hard_stop"]
    assert all(e["session_id"] == session for e in received)
    assert all(a.verified for a in receiver.all())
    assert len(receiver.all()) == len(received) + 1  # one failed attempt, retried under the same webhook-id
    assert receiver.all()[0].webhook_id in {a.webhook_id for a in receiver.accepted()}

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
    assert not [e for e in received if "CANARY" in json.dumps(e)]


def test_default_config_has_no_webhooks(tmp_path):
    assert AppConfig().webhooks == []
