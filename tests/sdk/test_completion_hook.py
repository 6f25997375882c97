"""The completion hook end to end: the real ``openai`` SDK, the official openai-v2 instrumentation in its default
mode (no content capture) and ``OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK=loop_detector`` as the only setting,
against the local stub model, exporting OTLP to a live service (``tests/support/hooked_agent.py``, a fresh
interpreter per run).

* Every chat span arrives with the ``loop_detector.fp.*`` fingerprints, equal to what the SDK computes from the
  same messages with its own reader of openai's messages (the guards' reader): hook and guard agree.
* No content: canary strings in the system prompt, the user's message and every tool result appear nowhere in what
  was exported (span attributes, events, resource, status) nor in the hook's, the SDK's or util-genai's logs.
* Without the variable, no fingerprints (the hook is what puts them there).
* The service uses them: with the default settings, the loop is warned about after the same call and with the same
  confidence and evidence (exact) as with content capture on; the healthy agent is allowed.
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

import httpx
import pytest
from loop_detector_sdk.evidence.fingerprints import ATTRIBUTES, call_evidence
from loop_detector_sdk.evidence.messages import from_openai_chat, reply_text
from support.enforcement import admin_headers, make_config

from detector.evaluation.simulate import wait_for_detector
from detector.service.process import running_service

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "support" / "hooked_agent.py"
sys.path.insert(0, str(ROOT / "examples"))
from openai_stub import HEALTHY_STEPS  # noqa: E402

HOOK_ENV = "OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK"

pytest.importorskip("opentelemetry.instrumentation.openai_v2")


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    """A live service with the default detection settings (the levels a new user gets), cycling fast."""
    with running_service(make_config(), tmp_path_factory.mktemp("completion_hook")) as (service, eps):
        yield service, eps


def run_agent(eps, stub_url: str, hook: bool, canary: str, tag: str, steps: int = 5, decisions: bool = False,
              content: bool = False, agents: list[dict[str, Any]] | None = None,
              tool_seconds: float = 0.0) -> tuple[dict[str, Any], str]:
    if agents is None:
        agents = [{"session": f"hook-loop-{tag}", "scenario": "loop", "steps": steps},
                  {"session": f"hook-healthy-{tag}", "scenario": "healthy", "steps": steps}]
    config = {"otlp": eps.otlp, "openai_base_url": stub_url + "/v1", "examples_dir": str(ROOT / "examples"),
              "canary": canary, "agents": agents, "tool_seconds": tool_seconds}
    if decisions:
        config["api"] = eps.api
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    if hook:
        env[HOOK_ENV] = "loop_detector"  # the whole set-up
    if content:  # content capture on, on the span (docs/instrumentations.md)
        env.update({"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
                    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"})
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
            assert attrs["loop_detector.fp.version"] == "3" and attrs["loop_detector.fp.input_ack"] in ("true", "false")
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


# The loop's first wasted call is its second model call (index 1): having read config.yaml, it asks to read it again.
# openai-v2 makes no tool spans (the agent runs its tools itself), so what a requested tool call brought back is known
# only from the next call's new input: with content or with the app's fingerprints alike, the 3rd repeat of the same
# outcome is known at the call after the 3rd wasted one, and the decision read after that call warns.
FIRST_WASTED = 1
FLAGGED_BY = FIRST_WASTED + 3


def first_flag(calls: list[dict[str, Any]]) -> int | None:
    return next((i for i, c in enumerate(calls) if c["decision"]["action"] != "allow"), None)


def verdicts(calls: list[dict[str, Any]]) -> list[tuple[str, float, str]]:
    return [(c["decision"]["action"], c["decision"]["confidence"], c["decision"]["evidence"]) for c in calls]


def test_with_content_off_the_hook_flags_the_loop_as_content_does_and_the_healthy_agent_is_allowed(svc, stub):
    """The default settings, content capture off, the one variable set: the decision each agent reads after each
    call (its span exported as the call ends, scored by the detector). The loop warns as soon as with content capture
    on (the same decision, confidence and evidence after every call: exact, from the app's fingerprints), by the call
    after its 3rd wasted one; the healthy agent is allowed throughout. Without the hook, the same loop rests on sizes
    alone (never exact evidence)."""
    service, eps = svc
    url, _ = stub
    hooked, _ = run_agent(eps, url, True, "CANARY-flag", uuid.uuid4().hex[:8], steps=7, decisions=True)
    content, _ = run_agent(eps, url, False, "CANARY-on", uuid.uuid4().hex[:8], steps=7, decisions=True, content=True)
    bare, _ = run_agent(eps, url, False, "CANARY-bare", uuid.uuid4().hex[:8], steps=7, decisions=True)
    loop, healthy = hooked["agents"]
    flagged = first_flag(loop["calls"])
    print(f"\ncontent off + hook: loop {verdicts(loop['calls'])}\ncontent on: loop {verdicts(content['agents'][0]['calls'])}"
          f"\ncontent off: loop {verdicts(bare['agents'][0]['calls'])}\nfirst flag after call index {flagged}")
    assert flagged is not None and flagged <= FLAGGED_BY, verdicts(loop["calls"])
    assert loop["calls"][flagged]["decision"]["action"] == "warn"
    assert verdicts(loop["calls"]) == verdicts(content["agents"][0]["calls"])  # as content on, call by call
    assert {v[2] for v in verdicts(loop["calls"])[flagged:]} == {"exact"}
    for run in (healthy, content["agents"][1], bare["agents"][1]):
        assert [c["decision"]["action"] for c in run["calls"]] == ["allow"] * len(run["calls"]), run["session"]
    assert "exact" not in {v[2] for v in verdicts(bare["agents"][0]["calls"])}  # no content, no fingerprints
    # where the evidence came from, per call: the session's detail says it
    for run, source in ((loop, "fingerprints"), (content["agents"][0], "content"), (bare["agents"][0], "sizes")):
        r = httpx.get(f"{eps.api}/admin/loop-detection/sessions/{run['session']}", headers=admin_headers(service))
        assert r.status_code == 200 and r.json()["evidence_sources"] == {source: len(run["calls"])}, r.text


BATCH_ITEMS = 20  # the honest procedure: one message after the other, every tool result the same size


def test_content_off_without_the_hook_the_loop_is_flagged_and_no_honest_agent_is_warned(svc, stub):
    """What a new user gets first (issue 31): the real ``openai`` client, openai-v2 in its default mode (no content),
    no completion hook, the default settings, tools that take a second. The spans carry token counts and finish
    reasons only, so a step is known by its sizes alone. The loop (the same call, the same result) is flagged; the
    healthy agent (another tool each step) and an agent applying one procedure to 20 items (the same tool, another
    message each time, results of the same size) are allowed after every call: equal sizes across steps whose
    arguments differ are no evidence."""
    service, eps = svc
    url, _ = stub
    tag = uuid.uuid4().hex[:8]
    agents = [{"session": f"bare-loop-{tag}", "scenario": "loop", "steps": 12},
              {"session": f"bare-healthy-{tag}", "scenario": "healthy", "steps": HEALTHY_STEPS + 1},
              {"session": f"bare-batch-{tag}", "scenario": "batch", "steps": BATCH_ITEMS + 1, "items": BATCH_ITEMS}]
    result, _ = run_agent(eps, url, False, "CANARY-bare", tag, decisions=True, agents=agents, tool_seconds=1.0)
    loop, healthy, batch = result["agents"]
    print(f"\nloop {verdicts(loop['calls'])}\nhealthy {verdicts(healthy['calls'])}\nbatch {verdicts(batch['calls'])}")
    assert len(healthy["calls"]) == HEALTHY_STEPS + 1 and len(batch["calls"]) == BATCH_ITEMS + 1  # ran to the end
    flagged = first_flag(loop["calls"])
    assert flagged is not None and flagged <= FLAGGED_BY, verdicts(loop["calls"])  # sizes: as soon as with content
    assert {v[2] for v in verdicts(loop["calls"])[flagged:]} == {"sizes"}
    for run in (healthy, batch):
        assert [c["decision"]["action"] for c in run["calls"]] == ["allow"] * len(run["calls"]), \
            (run["scenario"], verdicts(run["calls"]))
