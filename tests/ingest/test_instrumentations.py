"""Real instrumentation libraries end to end: the ``openai`` SDK, instrumented in turn by each popular GenAI
instrumentation, calls a local OpenAI-compatible stub and exports OTLP to a running loop-detector.

For each instrumentation, with message content capture on and off: a looping tool-calling agent is flagged,
a healthy one is not, and the per-call keys (session, trace, model, provider), tokens, errors and tool-call
fingerprints in ``otel.genai_calls`` are right. Each agent runs in a fresh interpreter
(``tests/support/instrumented_agent.py``): instrumentors patch the ``openai`` module globally.

Libraries that cannot live beside the project's pinned OpenTelemetry (OpenLIT pulls contrib instrumentations
that pin an older opentelemetry-sdk) and old releases (OpenLLMetry's indexed ``gen_ai.prompt.N.*`` dialect)
run from a virtual environment the test creates once and caches (``LOOP_DETECTOR_TEST_VENVS``, default
``~/.cache/loop-detector/test-venvs``); if it cannot be created (no package index), that case is skipped.
``LOOP_DETECTOR_SKIP_VENV_TESTS=1`` skips them outright.

The second half checks the normalization alone, on hand-built spans in each dialect as the libraries'
sources write them (including the ones no installable library emits any more).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from detector.core.escalation import LEVEL_RANK
from detector.storage.normalization import normalize_staged
from detector.storage.transport import insert_rows

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
AGENT = ROOT / "tests" / "support" / "instrumented_agent.py"
sys.path.insert(0, str(EXAMPLES))

from openai_stub import LOOP_CALL  # noqa: E402
from support.detector_reads import detector_calls  # noqa: E402
from support.venvs import venv_python  # noqa: E402

from detector.evaluation.simulate import wait_for_detector as wait_for_watermark  # noqa: E402

LOOP_STEPS = 14
HEALTHY_STEPS = 14
MODEL = "gpt-4o-mini-2024-07-18"  # the stub answers with the dated model name, as OpenAI does

# Separate environments: (pip requirements) for libraries that cannot be installed into the project's venv.
VENVS: dict[str, list[str]] = {
    # openlit requires the contrib HTTP instrumentations, whose newest threading/urllib3 releases pin
    # opentelemetry-sdk 1.45.1; it also caps openai below 3
    "openlit": ["openlit==1.45.0", "openai>=2,<3"],
    # the last OpenLLMetry releases before the move to gen_ai.input.messages: indexed gen_ai.prompt.N.*
    # (it imports opentelemetry._events, which later opentelemetry-api releases dropped)
    "openllmetry-legacy": ["opentelemetry-instrumentation-openai==0.47.5", "openai>=1.60,<2",
                           "opentelemetry-api>=1.28,<1.38", "opentelemetry-sdk>=1.28,<1.38",
                           "opentelemetry-exporter-otlp-proto-http>=1.28,<1.38"],
}


@dataclass(frozen=True)
class Variant:
    instrumentation: str
    content: bool
    session_mode: str  # native | processor | invoke_agent
    venv: str | None = None  # a key of VENVS, else the project's own venv
    module: str | None = None  # importable in the project's venv when installed
    content_mode: str = "span"  # span | event_only | events (openai-v2: where the content goes)
    transport: str = "http"  # http | grpc
    attribute_count_limit: int = 4096  # the SDK's span attribute limit (its own default is 128)

    @property
    def id(self) -> str:
        name = self.venv or self.instrumentation
        mode = "" if self.content_mode == "span" else f"-{self.content_mode}"
        return (f"{name}-{'content' if self.content else 'no-content'}{mode}-{self.session_mode}"
                f"{'-grpc' if self.transport == 'grpc' else ''}"
                f"{'-limit' + str(self.attribute_count_limit) if self.attribute_count_limit != 4096 else ''}")


VARIANTS = [
    Variant("openai-v2", True, "invoke_agent", module="opentelemetry.instrumentation.openai_v2"),
    Variant("openai-v2", False, "processor", module="opentelemetry.instrumentation.openai_v2"),
    # content in logs, joined to the spans: the latest conventions' details record (openai-v2 event_only) over
    # gRPC, the 1.30 per-message events (OpenLLMetry without legacy attributes) over HTTP
    Variant("openai-v2", True, "invoke_agent", module="opentelemetry.instrumentation.openai_v2",
            content_mode="event_only", transport="grpc"),
    Variant("openllmetry", True, "native", module="opentelemetry.instrumentation.openai", content_mode="events"),
    # the standard baggage route: session.id in the baggage, copied onto every span by the baggage span processor
    Variant("openai-v2", False, "baggage", module="opentelemetry.instrumentation.openai_v2"),
    # the SDK's default limit of 128 attributes: long OpenInference spans lose session.id (and more); the session
    # comes from the run's other spans (the root, the tool spans)
    Variant("openinference", True, "native", module="openinference.instrumentation.openai", attribute_count_limit=128),
    Variant("openllmetry", True, "native", module="opentelemetry.instrumentation.openai"),
    Variant("openllmetry", False, "native", module="opentelemetry.instrumentation.openai"),
    Variant("openinference", True, "native", module="openinference.instrumentation.openai"),
    Variant("openinference", False, "native", module="openinference.instrumentation.openai"),
    Variant("openlit", True, "processor", venv="openlit"),
    Variant("openlit", False, "invoke_agent", venv="openlit"),
    Variant("openllmetry", True, "native", venv="openllmetry-legacy"),
    Variant("openllmetry", False, "processor", venv="openllmetry-legacy"),
]

# OpenLIT's price file (per 1k tokens); it looks the requested model up
PRICING = {"chat": {m: {"promptPrice": 0.00015, "completionPrice": 0.0006} for m in ("gpt-4o-mini", MODEL)}}


# -- environments -------------------------------------------------------------------------------------------


def interpreter_for(variant: Variant) -> str:
    if variant.venv is not None:
        return str(venv_python(variant.venv, VENVS[variant.venv]))
    assert variant.module is not None
    try:
        found = importlib.util.find_spec(variant.module) is not None
    except ModuleNotFoundError:
        found = False
    if not found or importlib.util.find_spec("openai") is None:
        pytest.skip(f"{variant.module} or openai is not installed (pip install -e '.[instrumentations]')")
    return sys.executable


# -- the service and the stub -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pricing_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("pricing") / "pricing.json"
    path.write_text(json.dumps(PRICING))
    return str(path)


def tool_fingerprint(store, name: str, arguments: dict[str, Any]) -> int:
    """The fingerprint the MV gives a tool call (name + argument values), computed by the same store."""
    args = json.dumps(arguments)
    return store.rows(
        "SELECT cityHash64({n:String}, arraySort(JSONExtractKeysAndValuesRaw({a:String})), '') AS fp",
        {"n": name, "a": args})[0]["fp"]


def run_agent_process(variant: Variant, python: str, eps, stub_url: str, agents: list[dict[str, Any]],
                      pricing: str) -> dict[str, Any]:
    config = {
        "instrumentation": variant.instrumentation, "content": variant.content, "session_mode": variant.session_mode,
        "otlp": eps.otlp, "otlp_grpc": eps.otlp_grpc, "content_mode": variant.content_mode,
        "transport": variant.transport, "attribute_count_limit": variant.attribute_count_limit,
        "openai_base_url": stub_url + "/v1", "examples_dir": str(EXAMPLES), "agents": agents,
        "pricing_json": pricing,
    }
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "TRACELOOP_", "OPENINFERENCE_", "OPENLIT_", "OPENAI_"))}
    env["OTEL_SDK_DISABLED"] = "false"
    proc = subprocess.run([python, str(AGENT), json.dumps(config)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=str(ROOT))
    assert proc.returncode == 0, f"agent failed ({variant.id}):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- end to end, one instrumentation at a time ----------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_instrumented_agents(variant: Variant, service, stub_url, pricing_file):
    svc, eps = service
    python = interpreter_for(variant)
    tag = uuid.uuid4().hex[:8]
    agents = [
        {"session": f"loop-{tag}", "scenario": "loop", "steps": LOOP_STEPS},
        {"session": f"healthy-{tag}", "scenario": "healthy", "steps": HEALTHY_STEPS},
        {"session": f"error-{tag}", "scenario": "error", "steps": 2},
    ]
    result = run_agent_process(variant, python, eps, stub_url, agents, pricing_file)
    wait_for_watermark(eps.api, time.time_ns() // 1000)
    runs = {r["scenario"]: r for r in result["agents"]}
    loop, healthy, error = runs["loop"], runs["healthy"], runs["error"]

    def decision(run: dict[str, Any]) -> dict[str, Any]:
        if variant.session_mode == "invoke_agent":
            # the session arrives on the run's root span, exported after its calls; the agent asks with its trace
            # id alone, and the detector knows the trace's session by now
            answer = httpx.get(f"{eps.api}/v1/decision", params={"trace_id": run["trace_id"]}).json()
            assert answer["session_id"] == run["session"], (variant.id, answer)
            return answer
        return httpx.get(f"{eps.api}/v1/decision", params={"session_id": run["session"]}).json()

    stuck, fine = decision(loop), decision(healthy)
    if variant.session_mode == "invoke_agent":
        # bound late, the run's calls count for its session, with their history: the session scope flags it too
        by_session = httpx.get(f"{eps.api}/v1/decision", params={"session_id": loop["session"]}).json()
        assert by_session["action"] != "allow", (variant.id, by_session)
        checked = httpx.post(f"{eps.api}/v1/check", json={"trace_id": loop["trace_id"]})
        assert checked.status_code in (200, 429) and checked.json().get("action", "block") != "allow", checked.text
    assert stuck["action"] != "allow", (variant.id, stuck)
    assert LEVEL_RANK[stuck["level"]] >= LEVEL_RANK["warn"], (variant.id, stuck)
    assert fine["action"] == "allow", (variant.id, fine)

    store = svc.store
    traces = [loop["trace_id"], healthy["trace_id"], error["trace_id"]]
    rows = detector_calls(store, traces)  # what the detector reads: content from logs joined in
    if variant.content_mode != "span":  # the spans carry no content: it all came from the logs
        spans = store.rows("""
            SELECT SpanAttributes['gen_ai.input.messages'] != '' OR SpanAttributes['gen_ai.output.messages'] != ''
                   OR hasAny(Events.Name, ['gen_ai.user.message', 'gen_ai.choice']) AS content
            FROM otel.otel_traces WHERE TraceId IN {t:Array(String)} AND SpanAttributes['gen_ai.operation.name'] = 'chat'
            """, {"t": traces})
        assert spans and not any(r["content"] for r in spans), variant.id
        assert any(r["has_content"] for r in rows if r["call_kind"] == "llm"), variant.id
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_trace.setdefault(row["trace_id"], []).append(row)

    expected_loop_fp = tool_fingerprint(store, *LOOP_CALL)
    for run in (loop, healthy, error):
        calls = by_trace.get(run["trace_id"], [])
        llm = [c for c in calls if c["call_kind"] == "llm"]
        agent = [c for c in calls if c["operation"] == "invoke_agent"]
        assert len(agent) == 1, (variant.id, run["scenario"], [c["operation"] for c in calls])
        # keys: session, trace, model, provider
        for c in llm:
            assert c["trace_id"] == run["trace_id"]
            # (past the attribute limit even the provider may be dropped)
            assert c["provider"] == "openai" or variant.attribute_count_limit < 4096, (variant.id, c["provider"])
            if variant.session_mode == "invoke_agent":
                assert c["session_source"] == "trace" and c["session_id"] == run["trace_id"]
            elif variant.attribute_count_limit < 4096:  # session.id may be among the attributes dropped
                assert c["session_id"] in (run["session"], run["trace_id"]), (variant.id, c["session_id"])
            else:
                assert c["session_id"] == run["session"], (variant.id, c["session_id"], c["session_source"])
        if variant.session_mode == "invoke_agent":
            assert agent[0]["session_id"] == run["session"]
            assert agent[0]["session_source"] == "gen_ai.conversation.id"

        if variant.attribute_count_limit < 4096:
            if run["scenario"] == "loop":  # the long run: its chat spans lost session.id to the limit...
                assert any(c["session_source"] == "trace" for c in llm), variant.id
                # ...and the detector took it from the run's other spans: asked by trace alone, it names the session
                answer = httpx.get(f"{eps.api}/v1/decision", params={"trace_id": run["trace_id"]}).json()
                assert answer["session_id"] == run["session"] and answer["action"] != "allow", (variant.id, answer)
            continue  # usage and content are among what the limit drops (docs/instrumentations.md)
        ok = [c for c in llm if not c["is_error"]]
        assert all(c["model"] == MODEL for c in ok), (variant.id, {c["model"] for c in ok})
        # tokens: exactly the usage the SDK received, call by call
        assert sorted([c["input_tokens"], c["output_tokens"]] for c in ok) == sorted(run["usage"]), variant.id
        # (failed calls: OpenLIT records no content for them)
        assert all(c["has_content"] == int(variant.content) for c in ok), (variant.id, [c["has_content"] for c in ok])
        if not variant.content:
            assert not any(c["has_content"] for c in llm), variant.id
        if variant.instrumentation == "openlit":
            assert all(c["cost_usd"] > 0 for c in ok), (variant.id, [c["cost_usd"] for c in ok])

    if variant.attribute_count_limit < 4096:
        return
    # errors: the stub's HTTP 500s, whichever way the library wrote the error type
    failed = [c for c in by_trace.get(error["trace_id"], []) if c["call_kind"] == "llm"]
    assert len(failed) == error["errors"] == 2, variant.id
    assert all(c["is_error"] == 1 and c["error_type"] == "InternalServerError" for c in failed), \
        (variant.id, [(c["is_error"], c["error_type"]) for c in failed])
    assert failed[0]["error_fp"] == failed[1]["error_fp"] != 0

    # tool calls: the loop's read_file("config.yaml") gives the same fingerprint in every dialect
    loop_llm = [c for c in by_trace[loop["trace_id"]] if c["call_kind"] == "llm"]
    loop_tools = [c for c in by_trace[loop["trace_id"]] if c["call_kind"] == "tool"]
    assert len(loop_llm) == LOOP_STEPS and len(loop_tools) == LOOP_STEPS, variant.id
    assert {c["tool_name"] for c in loop_tools} == {LOOP_CALL[0]}, variant.id
    if variant.content:
        assert all(c["tool_fp"] == expected_loop_fp for c in loop_tools), variant.id
    if variant.content or variant.instrumentation == "openlit":  # OpenLIT names the calls even without content
        assert all(list(c["out_tool_fps"]) == [expected_loop_fp] for c in loop_llm), \
            (variant.id, [c["out_tool_fps"] for c in loop_llm])
        assert all(list(c["out_tool_names"]) == [LOOP_CALL[0]] for c in loop_llm), variant.id
    else:
        assert all(list(c["out_tool_fps"]) == [] for c in loop_llm), variant.id
    if variant.content:
        # the new content of a step is the tool result: it feeds the input SimHash
        assert all(c["input_simhash"] != 0 for c in loop_llm[1:]), (variant.id, [c["input_simhash"] for c in loop_llm])
        assert len({c["turn_fp"] for c in loop_llm[1:]}) == 1, variant.id  # the same step again and again


# -- the normalization alone, on hand-built spans in each dialect ------------------------------------------------

LOOP_ARGS_VARIANTS = ['{"path": "config.yaml"}', '{"path":"config.yaml"}', {"path": "config.yaml"}]


@pytest.fixture(scope="module")
def mv_store(service):
    """The running service's store (chDB opens one data directory per process)."""
    return service[0].store


def span_row(attrs: dict[str, str], *, name: str = "chat gpt-4o-mini", status: str = "Unset", message: str = "",
             events: list[tuple[str, dict[str, str]]] = (), resource: dict[str, str] | None = None) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()) + ".000000000"
    return {"Timestamp": now, "TraceId": uuid.uuid4().hex, "SpanId": uuid.uuid4().hex[:16], "ParentSpanId": "",
            "TraceState": "", "SpanName": name, "SpanKind": "Client", "ServiceName": "dialects",
            "ResourceAttributes": {"service.name": "dialects", **(resource or {})}, "ScopeName": "test",
            "ScopeVersion": "1", "SpanAttributes": attrs, "Duration": 1_000_000, "StatusCode": status,
            "StatusMessage": message, "Events.Timestamp": [now for _ in events], "Events.Name": [e[0] for e in events],
            "Events.Attributes": [e[1] for e in events], "Links.TraceId": [], "Links.SpanId": [],
            "Links.TraceState": [], "Links.Attributes": []}


def calls_of(store, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Insert the spans; their genai_calls rows in the same order (None for a span the normalization skipped)."""
    insert_rows(store, "otel.otel_traces", rows)
    normalize_staged(store)
    found = {r["span_id"]: r for r in store.rows(
        "SELECT * FROM otel.genai_calls WHERE span_id IN {s:Array(String)}", {"s": [r["SpanId"] for r in rows]})}
    return [found.get(r["SpanId"]) for r in rows]


def semconv_messages(tool_result: str) -> tuple[str, str]:
    inputs = [{"role": "user", "parts": [{"type": "text", "content": "Fix the failing build."}]},
              {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "read_file",
                                               "arguments": {"path": "config.yaml"}}]},
              {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": tool_result}]}]
    outputs = [{"role": "assistant", "finish_reason": "tool_call", "parts": [
        {"type": "text", "content": "Let me read the config file again."},
        {"type": "tool_call", "id": "c2", "name": "read_file", "arguments": {"path": "config.yaml"}}]}]
    return json.dumps(inputs), json.dumps(outputs)


def dialect_spans(tool_result: str = "port: 8080 host: 0.0.0.0 nothing about the failing build here") -> dict[str, Any]:
    """The same chat call (a tool result in, read_file("config.yaml") asked for) in every dialect."""
    ins, outs = semconv_messages(tool_result)
    usage_new = {"gen_ai.usage.input_tokens": "120", "gen_ai.usage.output_tokens": "30"}
    return {
        "semconv (openai-v2, OpenLLMetry >= 0.5x, OpenLIT)": span_row({
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.model": MODEL, **usage_new, "gen_ai.response.finish_reasons": '["tool_calls"]',
            "gen_ai.input.messages": ins, "gen_ai.output.messages": outs, "gen_ai.conversation.id": "s-semconv"}),
        "OpenLLMetry indexed": span_row({
            "llm.request.type": "chat", "gen_ai.system": "OpenAI", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.model": MODEL, "gen_ai.usage.prompt_tokens": "120", "gen_ai.usage.completion_tokens": "30",
            "llm.usage.total_tokens": "150", "traceloop.association.properties.session_id": "s-ol",
            "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Fix the failing build.",
            "gen_ai.prompt.1.role": "assistant", "gen_ai.prompt.1.tool_calls.0.id": "c1",
            "gen_ai.prompt.1.tool_calls.0.name": "read_file",
            "gen_ai.prompt.1.tool_calls.0.arguments": '{"path": "config.yaml"}',
            "gen_ai.prompt.2.role": "tool", "gen_ai.prompt.2.content": tool_result,
            "gen_ai.prompt.2.tool_call_id": "c1",
            "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.content": "Let me read the config file again.",
            "gen_ai.completion.0.tool_calls.0.id": "c2", "gen_ai.completion.0.tool_calls.0.name": "read_file",
            "gen_ai.completion.0.tool_calls.0.arguments": '{\n  "path": "config.yaml"\n}'}, name="openai.chat"),
        "OpenInference": span_row({
            "openinference.span.kind": "LLM", "llm.system": "openai", "llm.model_name": MODEL,
            "llm.invocation_parameters": '{"model": "gpt-4o-mini"}', "llm.token_count.prompt": "120",
            "llm.token_count.completion": "30", "llm.token_count.total": "150", "session.id": "s-oi",
            "input.value": json.dumps({"model": "gpt-4o-mini", "messages": ["..."]}),
            "input.mime_type": "application/json", "output.value": '{"id": "chatcmpl-1"}',
            "output.mime_type": "application/json",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Fix the failing build.",
            "llm.input_messages.1.message.role": "assistant",
            "llm.input_messages.1.message.tool_calls.0.tool_call.function.name": "read_file",
            "llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments": '{"path": "config.yaml"}',
            "llm.input_messages.2.message.role": "tool", "llm.input_messages.2.message.content": tool_result,
            "llm.input_messages.2.message.tool_call_id": "c1",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Let me read the config file again.",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c2",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "read_file",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"path":"config.yaml"}',
            "llm.finish_reason": "tool_calls"}, name="ChatCompletion", status="Ok"),
        "span events (semconv <= 1.30)": span_row({
            "gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.model": MODEL, **usage_new, "gen_ai.conversation.id": "s-events"}, events=[
            ("gen_ai.user.message", {"gen_ai.event.content": json.dumps({"content": "Fix the failing build."})}),
            ("gen_ai.tool.message", {"gen_ai.event.content": json.dumps({"content": tool_result, "id": "c1"})}),
            ("gen_ai.choice", {"gen_ai.event.content": json.dumps({"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": "Let me read the config file again.",
                            "tool_calls": [{"id": "c2", "type": "function", "function": {
                                "name": "read_file", "arguments": '{"path": "config.yaml"}'}}]}})})]),
    }


def test_same_call_same_fingerprints_in_every_dialect(mv_store):
    spans = dialect_spans()
    calls = dict(zip(spans, calls_of(mv_store, list(spans.values())), strict=True))
    expected = tool_fingerprint(mv_store, *LOOP_CALL)
    for dialect, c in calls.items():
        assert c is not None, dialect
        assert c["operation"] == "chat" and c["call_kind"] == "llm", dialect
        assert c["provider"] == "openai" and c["model"] == MODEL, (dialect, c["provider"], c["model"])
        assert (c["input_tokens"], c["output_tokens"]) == (120, 30), dialect
        assert c["has_content"] == 1, dialect
        assert list(c["out_tool_names"]) == ["read_file"] and list(c["out_tool_fps"]) == [expected], dialect
        assert c["session_id"].startswith("s-"), (dialect, c["session_id"])
    # the new content of the call (the tool result, and the answer) is read alike in every dialect
    assert len({c["turn_fp"] for c in calls.values()}) == 1, {d: c["turn_fp"] for d, c in calls.items()}
    assert len({c["input_simhash"] for c in calls.values()}) == 1
    assert len({c["output_simhash"] for c in calls.values()}) == 1
    assert all(c["input_simhash"] != 0 for c in calls.values())


def test_tool_result_feeds_the_input_simhash(mv_store):
    key = "semconv (openai-v2, OpenLLMetry >= 0.5x, OpenLIT)"
    a, b = calls_of(mv_store, [dialect_spans("first result: the port is 8080 and the host is local")[key],
                               dialect_spans("a completely different listing of twelve source files")[key]])
    assert a["input_simhash"] != 0 and b["input_simhash"] != 0
    assert a["input_simhash"] != b["input_simhash"] and a["turn_fp"] != b["turn_fp"]


@pytest.mark.parametrize("arguments", LOOP_ARGS_VARIANTS, ids=["spaced", "compact", "object"])
def test_tool_spans_of_every_dialect_fingerprint_alike(mv_store, arguments):
    args_text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    spans = [
        span_row({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                  "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": args_text},
                 name="execute_tool read_file"),
        span_row({"openinference.span.kind": "TOOL", "tool.name": "read_file", "input.value": args_text,
                  "tool.parameters": '{"type": "object", "properties": {"path": {"type": "string"}}}'},
                 name="read_file"),
        span_row({"traceloop.span.kind": "tool", "traceloop.entity.name": "read_file",
                  "traceloop.entity.input": json.dumps({"args": [], "kwargs": json.loads(args_text)})},
                 name="read_file.tool"),
    ]
    expected = tool_fingerprint(mv_store, *LOOP_CALL)
    for c in calls_of(mv_store, spans):
        assert c["operation"] == "execute_tool" and c["tool_name"] == "read_file"
        assert c["tool_fp"] == expected


def test_argument_key_order_does_not_matter_but_values_do(mv_store):
    def chat(args: str) -> dict[str, Any]:
        return span_row({"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                         "gen_ai.tool.name": "grep", "gen_ai.tool.args": args})  # OpenLIT, no content

    a, b, c = calls_of(mv_store, [chat('{"pattern": "def main", "path": "src/"}'),
                                  chat('{"path": "src/", "pattern": "def main"}'),
                                  chat('{"path": "tests/", "pattern": "def main"}')])
    assert a["out_tool_fps"] == b["out_tool_fps"] != c["out_tool_fps"]
    assert a["has_content"] == 0


def test_openlit_several_tool_calls_on_one_span(mv_store):
    (c,) = calls_of(mv_store, [span_row({
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.usage.cost": "0.0042",
        "gen_ai.tool.name": "read_file, grep", "gen_ai.tool.args": '{"path": "config.yaml"}, {"pattern": "port"}',
        "gen_ai.tool.call.id": "c1, c2"})])
    assert list(c["out_tool_names"]) == ["read_file", "grep"]
    assert c["out_tool_fps"][0] == tool_fingerprint(mv_store, *LOOP_CALL)
    assert c["out_tool_fps"][1] == tool_fingerprint(mv_store, "grep", {"pattern": "port"})
    assert c["cost_usd"] == pytest.approx(0.0042)


def test_redacted_content_is_no_content(mv_store):
    (c,) = calls_of(mv_store, [span_row({
        "openinference.span.kind": "LLM", "llm.system": "openai", "llm.model_name": MODEL,
        "input.value": "__REDACTED__", "output.value": "__REDACTED__", "llm.token_count.prompt": "10",
        "llm.token_count.completion": "5"})])
    assert c["has_content"] == 0 and c["turn_fp"] == 0 and c["input_simhash"] == 0


def test_error_types_are_normalized(mv_store):
    rows = [
        span_row({"gen_ai.operation.name": "chat", "error.type": "<class 'openai.InternalServerError'>"},
                 status="Error", message="Error code: 500"),  # opentelemetry-util-genai 1.1b0
        span_row({"gen_ai.operation.name": "chat", "error.type": "InternalServerError"}, status="Error",
                 message="Error code: 500"),  # OpenLLMetry, OpenLIT
        span_row({"openinference.span.kind": "LLM"}, status="Error", message="Error code: 500", events=[
            ("exception", {"exception.type": "openai.InternalServerError", "exception.message": "boom"})]),
        span_row({"gen_ai.operation.name": "chat"}, status="STATUS_CODE_ERROR", message="Error code: 500"),
    ]
    calls = calls_of(mv_store, rows)
    assert [c["error_type"] for c in calls] == ["InternalServerError"] * 3 + ["_OTHER"]
    assert all(c["is_error"] == 1 for c in calls)
    assert calls[0]["error_fp"] == calls[1]["error_fp"] == calls[2]["error_fp"]


def test_non_genai_spans_are_skipped_and_deprecated_names_map(mv_store):
    http_span, old, content_event = calls_of(mv_store, [
        span_row({"http.method": "POST", "http.status_code": "200"}, name="POST"),
        span_row({"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o",
                  "gen_ai.usage.prompt_tokens": "7", "gen_ai.usage.completion_tokens": "3"}),
        # OpenLIT before the move to gen_ai.input.messages: gen_ai.content.* span events
        span_row({"gen_ai.operation.name": "chat", "gen_ai.system": "openai"}, events=[
            ("gen_ai.content.prompt", {"gen_ai.prompt": "user: Fix the build\ntool: port: 8080 and nothing else"}),
            ("gen_ai.content.completion", {"gen_ai.completion": "Let me read the config file again."})]),
    ])
    assert http_span is None
    assert (old["operation"], old["provider"], old["model"], old["input_tokens"], old["output_tokens"]) == \
        ("chat", "openai", "gpt-4o", 7, 3)
    assert old["has_content"] == 0 and old["request_fp"] != 0
    assert content_event["has_content"] == 1 and content_event["input_simhash"] != 0
    assert content_event["output_simhash"] != 0


# -- the examples stay runnable ------------------------------------------------------------------------------


def _example_steps(example: str, *args: str) -> list[list[str]]:
    needed = ["openai", "opentelemetry.instrumentation.openai_v2"] + (["langgraph"] if "langgraph" in example else [])
    for module in needed:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[instrumentations,examples]')")
    proc = subprocess.run([sys.executable, str(EXAMPLES / example), *args], capture_output=True, text=True,
                          timeout=300, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()]


def _first(steps: list[list[str]], action: str) -> int | None:
    return next((int(step[0]) for step in steps if action in step), None)


def test_the_openai_example_does_what_its_readme_shows():
    """examples/README.md shows the looping agent's first warn and first throttle: the example prints those very
    steps, and its healthy agent stays allow."""
    shown = [line.split() for line in (EXAMPLES / "README.md").read_text().split("A run looks like this")[1]
             .split("```")[1].splitlines() if line.strip()[:1].isdigit()]
    steps = _example_steps("openai_agent.py", "--steps", "14")
    assert len(steps) == 14 and _first(shown, "warn") is not None and _first(shown, "throttle") is not None
    assert (_first(steps, "warn"), _first(steps, "throttle")) == (_first(shown, "warn"), _first(shown, "throttle"))
    healthy = _example_steps("openai_agent.py", "--scenario", "healthy")
    assert len(healthy) >= 10 and all("allow" in step for step in healthy)


def test_the_langgraph_example_flags_its_looping_agent():
    steps = _example_steps("langgraph_agent.py", "--steps", "14")
    assert len(steps) >= 10 and _first(steps, "warn") is not None


def test_a_span_is_a_tool_call_when_any_dialect_says_so(mv_store):
    expected = tool_fingerprint(mv_store, *LOOP_CALL)
    args = json.dumps(LOOP_CALL[1])
    spans = [
        # pydantic-ai before its tool spans carried gen_ai.operation.name (instrumentation v1/v2 attribute names)
        span_row({"gen_ai.tool.name": "read_file", "gen_ai.tool.call.id": "c1", "tool_arguments": args},
                 name="running tool"),
        span_row({"ai.operationId": "ai.toolCall", "ai.toolCall.name": "read_file", "ai.toolCall.id": "c2",
                  "ai.toolCall.args": args}, name="ai.toolCall"),  # the Vercel AI SDK
        span_row({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                  "gcp.vertex.agent.tool_call_args": args, "gcp.vertex.agent.llm_request": "{}"},
                 name="execute_tool read_file"),  # Google ADK's legacy schema
        span_row({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file", "gen_ai.tool.call.arguments":
                  json.dumps({"input_str": args, "tags": ["seq:step:1"], "metadata": {"run": uuid.uuid4().hex}})},
                 name="execute_tool read_file"),  # OpenLLMetry's LangChain wrapper around the input
    ]
    calls = calls_of(mv_store, spans)
    assert all(c["operation"] == "execute_tool" and c["tool_name"] == "read_file" for c in calls)
    assert [c["tool_fp"] == expected for c in calls] == [True, True, True, True]


def test_spans_naming_a_session_give_a_row_and_adk_twins_none(mv_store):
    root, http_child, adk_twin = calls_of(mv_store, [
        span_row({"session.id": "s-root", "openinference.span.kind": "CHAIN"}, name="LangGraph"),
        {**span_row({"session.id": "s-http", "http.method": "GET"}, name="GET"), "ParentSpanId": "0123456789abcdef"},
        span_row({"gen_ai.operation.name": "generate_content", "gen_ai.system": "openai",
                  "gcp.vertex.agent.event_id": "e1", "gen_ai.usage.input_tokens": "10"}, name="generate_content m"),
    ])
    assert (root["call_kind"], root["operation"], root["session_id"]) == ("other", "", "s-root")
    assert http_child is None  # not a framework span, not a root: nothing to learn about the trace
    assert adk_twin is None
