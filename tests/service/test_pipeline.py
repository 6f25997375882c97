"""End to end: real OTLP from the OpenTelemetry SDK, the receiver, chDB, the scheduled detector, the API.

A looping agent (the same tool with the same arguments, over and over) must escalate; a healthy agent
doing varied work must stay ``allow``; and everything must survive a restart on the same data directory.
"""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from support.agents import run_agents

from detector.cli.demo import healthy_step, looping_step
from detector.core.escalation import LEVEL_RANK
from detector.evaluation.simulate import emit_step, otlp_tracer, start_run
from detector.service.process import running_service
from detector.settings.config import AppConfig

STEPS = 14


@pytest.mark.parametrize("capture_content", [True, False], ids=["content", "no-content"])
def test_looping_session_escalates_and_healthy_one_stays_allow(tmp_path, fast_config, capture_content):
    stuck, healthy = f"stuck-{uuid.uuid4().hex[:6]}", f"healthy-{uuid.uuid4().hex[:6]}"
    with running_service(fast_config, tmp_path) as (_, eps):
        timeline = run_agents(eps.otlp, eps.api, {stuck: looping_step, healthy: healthy_step}, STEPS,
                              capture_content=capture_content)
        unknown = httpx.get(f"{eps.api}/v1/decision", params={"session_id": "never-seen"}).json()

    levels = [LEVEL_RANK[d["level"]] for d in timeline[stuck]]
    assert max(levels) >= LEVEL_RANK["throttle"], levels
    # one level at a time, never skipping
    assert all(b - a <= 1 for a, b in zip(levels, levels[1:], strict=False)), levels
    assert timeline[stuck][-1]["action"] != "allow"
    assert timeline[stuck][-1]["dominant_signal"] != "none"
    assert all(d["action"] == "allow" for d in timeline[healthy]), timeline[healthy]
    assert unknown["action"] == "allow" and unknown["level"] == "none"


def test_state_and_levels_survive_restart(tmp_path, fast_config):
    stuck = f"stuck-{uuid.uuid4().hex[:6]}"
    with running_service(fast_config, tmp_path) as (service, eps):
        timeline = run_agents(eps.otlp, eps.api, {stuck: looping_step}, 8)
        before = timeline[stuck][-1]
        spans_before = service.store.rows("SELECT count() AS n FROM otel.otel_traces")[0]["n"]
        events_before = service.store.rows("SELECT count() AS n FROM otel.loop_events")[0]["n"]
    assert before["level"] != "none"

    with running_service(fast_config, tmp_path) as (service, eps):
        after = httpx.get(f"{eps.api}/v1/decision", params={"session_id": stuck}).json()
        assert after["level"] == before["level"]
        assert after["confidence"] == pytest.approx(before["confidence"])
        assert service.store.rows("SELECT count() AS n FROM otel.otel_traces")[0]["n"] == spans_before
        assert service.store.rows("SELECT count() AS n FROM otel.loop_events")[0]["n"] == events_before
        # the engine resumes from the persisted state: more looping keeps escalating from where it was
        timeline = run_agents(eps.otlp, eps.api, {stuck: lambda i: looping_step(i + 8)}, 4)
        assert LEVEL_RANK[timeline[stuck][-1]["level"]] >= LEVEL_RANK[before["level"]]
        rows = service.store.rows(
            "SELECT call_count FROM otel.loop_state FINAL WHERE scope = 'session' AND scope_id = {s:String}",
            {"s": stuck})
        assert rows[0]["call_count"] == 12


def test_each_commit_brings_a_cycle_without_waiting_for_the_interval(tmp_path):
    """The receiver nudges the detection cycle after each commit: with an interval of an hour, a looping agent's
    calls still turn into a decision (within 30 s here) once they are exported."""
    config = AppConfig()
    config.detector.interval_seconds = 3600
    config.detector.min_interval_seconds = 0
    stuck = f"stuck-{uuid.uuid4().hex[:6]}"
    with running_service(config, tmp_path) as (_, eps), otlp_tracer(eps.otlp) as (tracer, provider):
        span, ctx = start_run(tracer, agent_name=stuck, session_id=stuck, start_ns=time.time_ns())
        t, history = time.time_ns(), []
        for i in range(STEPS):
            t = emit_step(tracer, looping_step(i), session_id=stuck, start_ns=t, history=history, parent=ctx)
        provider.force_flush()
        deadline = time.monotonic() + 30
        while (decision := httpx.get(f"{eps.api}/v1/decision", params={"session_id": stuck}).json())["level"] == "none":
            assert time.monotonic() < deadline, "no cycle read the exported calls"
            time.sleep(0.05)
        span.end()
    assert decision["dominant_signal"] != "none"


def test_escalation_timeline_is_recorded(tmp_path, fast_config):
    stuck = f"stuck-{uuid.uuid4().hex[:6]}"
    with running_service(fast_config, tmp_path) as (service, eps):
        run_agents(eps.otlp, eps.api, {stuck: looping_step}, 12)
        events = service.store.rows(
            "SELECT from_level, to_level, confidence, dominant_signal, signals FROM otel.loop_events "
            "WHERE kind = 'escalation' AND scope = 'session' AND scope_id = {s:String} ORDER BY ts", {"s": stuck})
    assert [e["to_level"] for e in events][:2] == ["warn", "throttle"]
    assert events[0]["from_level"] == "none"
    assert set(events[0]["signals"]) == {
        "content_similarity", "tool_call_repetition", "response_stagnation", "error_cycling", "token_velocity",
        "context_growth", "cost_velocity"}


def test_openapi_docs_served(tmp_path, fast_config):
    with running_service(fast_config, tmp_path) as (_, eps):
        spec = httpx.get(f"{eps.api}/openapi.json").json()
        assert "/v1/decision" in spec["paths"]
        assert httpx.get(f"{eps.api}/docs").status_code == 200
