"""The completion hook end to end: the real ``openai`` SDK, the official openai-v2 instrumentation in its default
mode (no content capture) and ``OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK=loop_detector`` as the only setting,
against the local stub model, exporting OTLP to a live service (``tests/support/hooked_agent.py``, a fresh
interpreter per run).

* Every chat span arrives with the ``loop_detector.fp.*`` fingerprints, equal to what the SDK computes from the
  same messages with its own reader of openai's messages (the guards' reader): hook and guard agree.
* No content: canary strings in the system prompt, the user's message and every tool result appear nowhere in what
  was exported (span attributes, events, resource, status) nor in the hook's, the SDK's or util-genai's logs.
* Without the variable, no fingerprints (the hook is what puts them there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from loop_detector_sdk.evidence.fingerprints import ATTRIBUTES, call_evidence
from loop_detector_sdk.evidence.messages import from_openai_chat, reply_text

from detector.evaluation.simulate import wait_for_detector

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "support" / "hooked_agent.py"
HOOK_ENV = "OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK"

pytest.importorskip("opentelemetry.instrumentation.openai_v2")


def run_agent(eps, stub_url: str, hook: bool, canary: str, tag: str) -> tuple[dict[str, Any], str]:
    config = {"otlp": eps.otlp, "openai_base_url": stub_url + "/v1", "examples_dir": str(ROOT / "examples"),
              "canary": canary, "agents": [{"session": f"hook-loop-{tag}", "scenario": "loop", "steps": 5},
                                           {"session": f"hook-healthy-{tag}", "scenario": "healthy", "steps": 5}]}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    if hook:
        env[HOOK_ENV] = "loop_detector"  # the whole set-up
    proc = subprocess.run([sys.executable, str(AGENT), json.dumps(config)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def chat_spans(store, trace_ids: list[str]) -> list[dict[str, Any]]:
    return store.rows("SELECT TraceId AS trace, Timestamp AS ts, CAST(SpanAttributes, 'Map(String, String)') AS a "
                      "FROM otel.otel_traces WHERE TraceId IN {t:Array(String)} AND SpanName LIKE 'chat %' "
                      "ORDER BY Timestamp", {"t": trace_ids})


def expected_attributes(call: dict[str, Any]) -> dict[str, str]:
    """What the hook must have set, from the messages the agent sent and got, read by the guards' reader."""
    outputs = from_openai_chat([call["reply"]])
    evidence = call_evidence("gpt-4o-mini", from_openai_chat(call["messages"]), outputs, reply_text(outputs))
    return {k: json.dumps(v) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in evidence.span_attributes().items()}


def stored_attributes(attrs: dict[str, str]) -> dict[str, str]:
    out = {k: v for k, v in attrs.items() if k.startswith("loop_detector.fp.")}
    return {k: json.dumps(json.loads(v)) if v.startswith("[") else v for k, v in out.items()}


def test_the_hook_puts_the_fingerprints_on_every_chat_span_and_no_content(svc, stub):
    service, eps = svc
    url, _ = stub
    canary, tag = f"CANARY-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex[:8]
    result, logs = run_agent(eps, url, True, canary, tag)
    wait_for_detector(eps.api, time.time_ns() // 1000)
    runs = result["agents"]
    traces = [r["trace_id"] for r in runs]
    spans = chat_spans(service.store, traces)
    calls = [c for r in runs for c in r["calls"]]
    assert len(spans) == len(calls) >= 8
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_trace.setdefault(s["trace"], []).append(s)
    for run in runs:
        for span, call in zip(by_trace[run["trace_id"]], run["calls"], strict=True):
            attrs = span["a"]
            assert "gen_ai.input.messages" not in attrs and "gen_ai.output.messages" not in attrs  # content off
            assert stored_attributes(attrs) == expected_attributes(call), run["scenario"]
            assert set(stored_attributes(attrs)) >= {"loop_detector.fp.version", "loop_detector.fp.request",
                                                     "loop_detector.fp.input", "loop_detector.fp.tool_calls"}
            assert set(stored_attributes(attrs)) <= set(ATTRIBUTES)
    loop = by_trace[runs[0]["trace_id"]]
    # the looping agent's repeated observation and tool call give repeated fingerprints; the healthy one's do not
    assert len({s["a"]["loop_detector.fp.input"] for s in loop[1:]}) == 1
    assert len({s["a"]["loop_detector.fp.tool_calls"] for s in loop}) == 1
    healthy = by_trace[runs[1]["trace_id"]]
    assert len({s["a"]["loop_detector.fp.tool_calls"] for s in healthy}) == len(healthy)

    found = service.store.rows(
        "SELECT count() AS n FROM otel.otel_traces WHERE TraceId IN {t:Array(String)} AND position(concat("
        "toString(SpanAttributes), toString(ResourceAttributes), toString(Events.Attributes), StatusMessage, "
        "SpanName), {c:String}) > 0", {"t": traces, "c": canary})[0]["n"]
    assert found == 0
    assert service.store.rows("SELECT count() AS n FROM otel.otel_logs WHERE position(concat(Body, "
                              "toString(LogAttributes)), {c:String}) > 0", {"c": canary})[0]["n"] == 0
    assert canary not in logs
    rows = service.store.rows("SELECT count() AS n FROM otel.genai_calls WHERE trace_id IN {t:Array(String)} AND "
                              "call_kind = 'llm' AND has_content = 0", {"t": traces})
    assert rows[0]["n"] == len(calls)  # the view still sees calls without content


def test_without_the_variable_no_fingerprints(svc, stub):
    service, eps = svc
    url, _ = stub
    result, _ = run_agent(eps, url, False, "CANARY-none", uuid.uuid4().hex[:8])
    wait_for_detector(eps.api, time.time_ns() // 1000)
    spans = chat_spans(service.store, [r["trace_id"] for r in result["agents"]])
    assert spans and not any(k.startswith("loop_detector.fp.") for s in spans for k in s["a"])
