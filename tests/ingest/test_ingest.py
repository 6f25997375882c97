"""The OTLP/HTTP receiver end to end: real SDK exporter -> receiver over HTTP -> chDB -> staging view -> calls.

Rows must look exactly like the OpenTelemetry Collector's ClickHouse exporter writes them; bad
requests must be refused with the OTLP status codes while the service keeps serving and the data
already stored stays intact.
"""

from __future__ import annotations

import base64
import concurrent.futures
import gzip
import time
import uuid
import zlib
from datetime import UTC, datetime

import httpx
import orjson
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, StatusCode
from opentelemetry.trace import Status as OtelStatus
from support.servers import serve_app

from detector.ingest.counters import IngestMetrics
from detector.ingest.decoding import OTLPDecodeError
from detector.ingest.otlp import decode_protobuf
from detector.ingest.otlp_values import go_float
from detector.ingest.receiver import create_otlp_app
from detector.settings.service_settings import IngestSettings
from detector.storage.normalization import normalize_staged
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore

MAX_BODY = 256 * 1024
SECOND = 1_000_000_000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ChdbStore(tmp_path_factory.mktemp("ingest-chdb"))
    apply_schema(s)
    yield s
    s.close()


@pytest.fixture(scope="module")
def metrics():
    return IngestMetrics()


@pytest.fixture(scope="module")
def base_url(store, metrics):
    app = create_otlp_app(store, IngestSettings(max_body_bytes=MAX_BODY), metrics)
    with serve_app(app) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as c:
        yield c


# -- helpers ----------------------------------------------------------------------------------------------


def utc_text(ns: int) -> str:
    """The DateTime64(9) text of a unix-nanosecond time, computed independently of the receiver."""
    return datetime.fromtimestamp(ns // SECOND, UTC).strftime("%Y-%m-%d %H:%M:%S") + f".{ns % SECOND:09d}"


def trace_rows(store, trace_hex: str) -> list[dict]:
    return store.rows("SELECT * FROM otel.otel_traces WHERE TraceId = {t:String} ORDER BY Timestamp, SpanId",
                      {"t": trace_hex})


def genai_rows(store, trace_hex: str) -> list[dict]:
    """The trace's calls, once the spans staged so far are normalized (as the next detection cycle does)."""
    normalize_staged(store)
    return store.rows("SELECT * FROM otel.genai_calls WHERE trace_id = {t:String} ORDER BY ts, span_id",
                      {"t": trace_hex})


def kv(key: str, value) -> KeyValue:
    out = KeyValue(key=key)
    if isinstance(value, AnyValue):
        out.value.CopyFrom(value)
    elif isinstance(value, bool):
        out.value.bool_value = value
    elif isinstance(value, int):
        out.value.int_value = value
    elif isinstance(value, float):
        out.value.double_value = value
    elif isinstance(value, bytes):
        out.value.bytes_value = value
    else:
        out.value.string_value = value
    return out


def make_span(trace_id: bytes, span_id: bytes, start: int, end: int, name: str = "chat gpt-4o",
              conversation: str = "conv-test", **fields) -> trace_pb2.Span:
    span = trace_pb2.Span(trace_id=trace_id, span_id=span_id, name=name, kind=trace_pb2.Span.SPAN_KIND_CLIENT,
                          start_time_unix_nano=start, end_time_unix_nano=end, **fields)
    span.attributes.extend([kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "gpt-4o"),
                            kv("gen_ai.conversation.id", conversation), kv("gen_ai.usage.input_tokens", 10),
                            kv("gen_ai.usage.output_tokens", 5)])
    return span


def request_of(spans: list[trace_pb2.Span], service: str = "pb-agent") -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(kv("service.name", service))
    ss = rs.scope_spans.add()
    ss.scope.name, ss.scope.version = "hand.built", "0.1"
    ss.spans.extend(spans)
    return req


def new_ids() -> tuple[bytes, str]:
    trace = uuid.uuid4().bytes
    return trace, trace.hex()


def post_pb(client: httpx.Client, req: ExportTraceServiceRequest, **headers) -> httpx.Response:
    return client.post("/v1/traces", content=req.SerializeToString(),
                       headers={"Content-Type": "application/x-protobuf", **headers})


@pytest.fixture(scope="module")
def reference_trace(client, store):
    """A trace stored before any bad request: it must survive every one of them unchanged."""
    trace, trace_hex = new_ids()
    now = time.time_ns()
    spans = [make_span(trace, uuid.uuid4().bytes[:8], now - (i + 2) * SECOND, now - (i + 1) * SECOND) for i in range(3)]
    response = post_pb(client, request_of(spans, service="reference-agent"))
    assert response.status_code == 200, response.content
    snapshot = trace_rows(store, trace_hex)
    assert len(snapshot) == 3
    return trace_hex, snapshot


def assert_still_serving(client: httpx.Client, store, reference_trace) -> None:
    """Health is fine, earlier data unchanged, and a fresh good request is committed."""
    assert client.get("/healthz").status_code == 200
    trace_hex, snapshot = reference_trace
    assert trace_rows(store, trace_hex) == snapshot
    assert len(genai_rows(store, trace_hex)) == 3
    trace, fresh_hex = new_ids()
    now = time.time_ns()
    response = post_pb(client, request_of([make_span(trace, b"\x01" * 8, now - SECOND, now)]))
    assert response.status_code == 200
    assert len(trace_rows(store, fresh_hex)) == 1


def status_of(response: httpx.Response) -> Status:
    """The google.rpc.Status body in the response's own encoding."""
    if response.headers["content-type"].startswith("application/x-protobuf"):
        return Status.FromString(response.content)
    assert response.headers["content-type"].startswith("application/json")
    doc = response.json()
    return Status(code=doc["code"], message=doc["message"])


# -- the real SDK exporter ---------------------------------------------------------------------------------


def record_genai_agent_run(conversation: str) -> tuple[list, dict[str, int]]:
    """An agent run through the real SDK: invoke_agent > chat (ok) + execute_tool (error) + a plain span."""
    memory = InMemorySpanExporter()
    resource = Resource.create({"service.name": "sdk-agent", "loop_detector.virtual_key": "vk-ingest",
                                "deployment.environment": "test"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test.genai.instrumentation", "1.2.3")
    t0 = time.time_ns() - 30 * SECOND
    times = {"agent": t0, "chat": t0 + SECOND, "chat_end": t0 + SECOND + 123_456_789,
             "tool": t0 + 2 * SECOND, "tool_end": t0 + 2 * SECOND + 5_000_001, "plain": t0 + 3 * SECOND}
    root = tracer.start_span("invoke_agent coder", kind=SpanKind.INTERNAL, start_time=times["agent"],
                             attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder",
                                         "gen_ai.conversation.id": conversation})
    ctx = otel_trace.set_span_in_context(root)
    chat = tracer.start_span("chat gpt-4o", context=ctx, kind=SpanKind.CLIENT, start_time=times["chat"], attributes={
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024-08-06",
        "gen_ai.conversation.id": conversation,
        "gen_ai.usage.input_tokens": 1234,
        "gen_ai.usage.output_tokens": 56,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 1024,
        "gen_ai.response.finish_reasons": ["tool_calls"],
        "gen_ai.input.messages": '[{"role":"user","parts":[{"type":"text","content":"fix the failing test"}]}]',
        "gen_ai.output.messages": '[{"role":"assistant","parts":[{"type":"tool_call","id":"call_1",'
                                  '"name":"read_file","arguments":{"path":"a.py"}}],"finish_reason":"tool_calls"}]',
    })
    chat.set_status(OtelStatus(StatusCode.OK))
    chat.end(end_time=times["chat_end"])
    tool = tracer.start_span("execute_tool read_file", context=ctx, kind=SpanKind.INTERNAL, start_time=times["tool"],
                             attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                                         "gen_ai.tool.call.id": "call_1", "gen_ai.conversation.id": conversation,
                                         "gen_ai.tool.call.arguments": '{"path": "a.py"}',
                                         "error.type": "FileNotFoundError"})
    tool.add_event("exception", {"exception.type": "FileNotFoundError", "exception.message": "no such file"},
                   timestamp=times["tool"] + 1000)
    tool.set_status(OtelStatus(StatusCode.ERROR, "no such file: a.py"))
    tool.end(end_time=times["tool_end"])
    plain = tracer.start_span("housekeeping", context=ctx, start_time=times["plain"],
                              links=[Link(chat.get_span_context(), {"link.reason": "follows"})],
                              attributes={"cache.hit": True, "retry.delays": [1, 2, 3], "ratio": 1.0})
    plain.end(end_time=times["plain"] + 10)
    root.end(end_time=times["plain"] + 20)
    provider.shutdown()
    return memory.get_finished_spans(), times


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip, Compression.Deflate],
                         ids=["identity", "gzip", "deflate"])
def test_sdk_exporter_spans_stored_like_the_collector_exporter(base_url, store, metrics, compression):
    conversation = f"conv-{uuid.uuid4().hex[:8]}"
    spans, times = record_genai_agent_run(conversation)
    accepted_before = metrics.spans_accepted
    exporter = OTLPSpanExporter(endpoint=f"{base_url}/v1/traces", compression=compression, timeout=30)
    assert exporter.export(spans) == SpanExportResult.SUCCESS  # only after a 200, i.e. after the commit
    exporter.shutdown()
    assert metrics.spans_accepted - accepted_before == 4

    by_name = {s.name: s for s in spans}
    trace_hex = f"{spans[0].context.trace_id:032x}"
    rows = {r["SpanName"]: r for r in trace_rows(store, trace_hex)}  # committed before the 200
    assert set(rows) == {"invoke_agent coder", "chat gpt-4o", "execute_tool read_file", "housekeeping"}

    chat, tool, plain, root = (rows["chat gpt-4o"], rows["execute_tool read_file"], rows["housekeeping"],
                               rows["invoke_agent coder"])
    root_span_hex = f"{by_name['invoke_agent coder'].context.span_id:016x}"
    assert chat["TraceId"] == trace_hex and len(chat["TraceId"]) == 32
    assert chat["SpanId"] == f"{by_name['chat gpt-4o'].context.span_id:016x}"
    assert chat["ParentSpanId"] == root_span_hex and root["ParentSpanId"] == ""
    assert chat["Timestamp"] == utc_text(times["chat"])
    assert chat["Duration"] == 123_456_789 and tool["Duration"] == 5_000_001
    assert (chat["SpanKind"], tool["SpanKind"], root["SpanKind"]) == ("Client", "Internal", "Internal")
    assert (chat["StatusCode"], tool["StatusCode"], plain["StatusCode"]) == ("Ok", "Error", "Unset")
    assert tool["StatusMessage"] == "no such file: a.py" and chat["StatusMessage"] == ""
    assert chat["ServiceName"] == "sdk-agent"
    assert chat["ResourceAttributes"]["service.name"] == "sdk-agent"
    assert chat["ResourceAttributes"]["loop_detector.virtual_key"] == "vk-ingest"
    assert chat["ResourceAttributes"]["telemetry.sdk.language"] == "python"
    assert (chat["ScopeName"], chat["ScopeVersion"]) == ("test.genai.instrumentation", "1.2.3")
    # every attribute value is a string, rendered like pdata's AsString
    a = chat["SpanAttributes"]
    assert a["gen_ai.usage.input_tokens"] == "1234" and a["gen_ai.usage.output_tokens"] == "56"
    assert a["gen_ai.request.temperature"] == "0.2" and a["gen_ai.request.max_tokens"] == "1024"
    assert a["gen_ai.response.finish_reasons"] == '["tool_calls"]'
    assert a["gen_ai.conversation.id"] == conversation
    assert plain["SpanAttributes"] == {"cache.hit": "true", "retry.delays": "[1,2,3]", "ratio": "1"}
    assert all(isinstance(v, str) for r in rows.values() for v in r["SpanAttributes"].values())
    # events and links as the nested columns' parallel arrays
    assert tool["Events.Name"] == ["exception"]
    assert tool["Events.Timestamp"] == [utc_text(times["tool"] + 1000)]
    assert tool["Events.Attributes"] == [{"exception.type": "FileNotFoundError", "exception.message": "no such file"}]
    assert chat["Events.Name"] == [] and chat["Links.TraceId"] == []
    assert plain["Links.TraceId"] == [trace_hex]
    assert plain["Links.SpanId"] == [chat["SpanId"]]
    assert plain["Links.TraceState"] == [""]
    assert plain["Links.Attributes"] == [{"link.reason": "follows"}]

    # the GenAI spans became calls (staged on insert, normalized by the next cycle)
    calls = {c["operation"]: c for c in genai_rows(store, trace_hex)}
    assert set(calls) == {"invoke_agent", "chat", "execute_tool"}
    llm, tool_call = calls["chat"], calls["execute_tool"]
    assert llm["span_id"] == chat["SpanId"] and llm["parent_span_id"] == root_span_hex
    assert (llm["session_id"], llm["session_source"]) == (conversation, "gen_ai.conversation.id")
    assert tool_call["session_id"] == conversation
    assert llm["virtual_key"] == "vk-ingest" and llm["service_name"] == "sdk-agent"
    assert (llm["input_tokens"], llm["output_tokens"]) == (1234, 56)
    assert (llm["call_kind"], llm["model"], llm["provider"]) == ("llm", "gpt-4o-2024-08-06", "openai")
    assert llm["is_error"] == 0 and llm["error_type"] == ""
    assert llm["finish_reasons"] == ["tool_calls"]
    assert llm["out_tool_names"] == ["read_file"] and llm["has_content"] == 1
    assert (tool_call["is_error"], tool_call["error_type"]) == (1, "FileNotFoundError")
    assert (tool_call["call_kind"], tool_call["tool_name"]) == ("tool", "read_file")
    assert tool_call["tool_fp"] != 0 and llm["request_fp"] != 0


# -- OTLP/JSON ---------------------------------------------------------------------------------------------


def json_body(trace_hex: str, start: int, conversation: str) -> dict:
    link_trace = uuid.uuid4().hex
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-agent"}},
                                    {"key": "host.cores", "value": {"intValue": 2}}]},
        "scopeSpans": [{
            "scope": {"name": "hand.json", "version": "0.9"},
            "spans": [{
                "traceId": trace_hex.upper(), "spanId": "EEE19B7EC3C1B174", "parentSpanId": "eee19b7ec3c1b173",
                "traceState": "vendor=1", "name": "chat gpt-4o", "kind": 3,
                "startTimeUnixNano": str(start), "endTimeUnixNano": start + 2_500_000_000,
                "attributes": [
                    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                    {"key": "gen_ai.conversation.id", "value": {"stringValue": conversation}},
                    {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "321"}},
                    {"key": "gen_ai.usage.output_tokens", "value": {"intValue": 54}},
                    {"key": "gen_ai.request.temperature", "value": {"doubleValue": 1.0}},
                    {"key": "big", "value": {"doubleValue": 1e21}},
                    {"key": "tiny", "value": {"doubleValue": 1.5e-7}},
                    {"key": "large", "value": {"doubleValue": 1e16}},
                    {"key": "stream", "value": {"boolValue": False}},
                    {"key": "mixed", "value": {"arrayValue": {"values": [
                        {"stringValue": "a"}, {"intValue": "2"}, {"doubleValue": 2.5}, {"boolValue": True}, {}]}}},
                    {"key": "obj", "value": {"kvlistValue": {"values": [
                        {"key": "b", "value": {"intValue": 1}}, {"key": "a", "value": {"stringValue": "x<y"}}]}}},
                    {"key": "blob", "value": {"bytesValue": base64.b64encode(b"hello").decode()}},
                    {"key": "empty", "value": {}},
                ],
                "events": [{"timeUnixNano": str(start + 1), "name": "gen_ai.choice",
                            "attributes": [{"key": "index", "value": {"intValue": "0"}}]}],
                "links": [{"traceId": link_trace, "spanId": "0102030405060708", "traceState": "k=v", "attributes": []}],
                "status": {"code": 2, "message": "model overloaded"},
            }],
        }],
    }]}, link_trace


def test_json_encoding(client, store, metrics, reference_trace):
    trace, trace_hex = new_ids()
    start = time.time_ns() - 10 * SECOND
    conversation = f"json-{uuid.uuid4().hex[:6]}"
    body, link_trace = json_body(trace_hex, start, conversation)
    response = client.post("/v1/traces", content=orjson.dumps(body),
                           headers={"Content-Type": "application/json; charset=utf-8"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "partialSuccess" not in response.json()

    [row] = trace_rows(store, trace_hex)
    assert (row["TraceId"], row["SpanId"], row["ParentSpanId"]) == (trace_hex, "eee19b7ec3c1b174", "eee19b7ec3c1b173")
    assert row["Timestamp"] == utc_text(start) and row["Duration"] == 2_500_000_000
    assert (row["SpanKind"], row["StatusCode"], row["StatusMessage"]) == ("Client", "Error", "model overloaded")
    assert (row["ServiceName"], row["ScopeName"], row["ScopeVersion"], row["TraceState"]) == (
        "json-agent", "hand.json", "0.9", "vendor=1")
    assert row["ResourceAttributes"] == {"service.name": "json-agent", "host.cores": "2"}
    assert row["SpanAttributes"] == {
        "gen_ai.operation.name": "chat", "gen_ai.conversation.id": conversation,
        "gen_ai.usage.input_tokens": "321", "gen_ai.usage.output_tokens": "54",
        "gen_ai.request.temperature": "1", "big": "1e+21", "tiny": "1.5e-7", "large": "10000000000000000",
        "stream": "false", "mixed": '["a",2,2.5,true,null]', "obj": '{"a":"x\\u003cy","b":1}',
        "blob": "aGVsbG8=", "empty": "",
    }
    assert row["Events.Timestamp"] == [utc_text(start + 1)] and row["Events.Name"] == ["gen_ai.choice"]
    assert row["Events.Attributes"] == [{"index": "0"}]
    assert (row["Links.TraceId"], row["Links.SpanId"], row["Links.TraceState"]) == (
        [link_trace], ["0102030405060708"], ["k=v"])
    [call] = genai_rows(store, trace_hex)
    assert (call["input_tokens"], call["output_tokens"], call["is_error"]) == (321, 54, 1)
    assert call["session_id"] == conversation and call["error_type"] == "_OTHER"

    assert_still_serving(client, store, reference_trace)


def test_json_partial_success_and_bad_json(client, store, metrics, reference_trace):
    trace, trace_hex = new_ids()
    now = time.time_ns()
    good = {"traceId": trace_hex, "spanId": "00000000000000aa", "name": "ok",
            "startTimeUnixNano": str(now - SECOND), "endTimeUnixNano": str(now)}
    bad_hex = {**good, "spanId": "zz00000000000000"}
    zero_trace = {**good, "traceId": "0" * 32, "spanId": "00000000000000bb"}
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [good, bad_hex, zero_trace]}]}]}
    response = client.post("/v1/traces", content=orjson.dumps(doc), headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 2
    assert "invalid span id" in partial["errorMessage"] and "invalid trace id" in partial["errorMessage"]
    assert "spans[1]" in partial["errorMessage"] and "spans[2]" in partial["errorMessage"]
    assert [r["SpanId"] for r in trace_rows(store, trace_hex)] == ["00000000000000aa"]

    for body, needle in ((b'{"resourceSpans": [', "not valid JSON"),
                         (b'{"resourceSpans": {"a": 1}}', "resourceSpans: expected an array"),
                         (orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
                             {**good, "startTimeUnixNano": "soon"}]}]}]}),
                          "resourceSpans[0].scopeSpans[0].spans[0].startTimeUnixNano")):
        response = client.post("/v1/traces", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 400
        status = status_of(response)
        assert status.code == 3 and needle in status.message, status.message
        assert_still_serving(client, store, reference_trace)


# -- gzip --------------------------------------------------------------------------------------------------


def test_gzip_protobuf_and_json(client, store, reference_trace):
    trace, trace_hex = new_ids()
    now = time.time_ns()
    req = request_of([make_span(trace, bytes([1, 2, 3, 4, 5, 6, 7, i + 1]), now - SECOND, now) for i in range(4)])
    response = client.post("/v1/traces", content=gzip.compress(req.SerializeToString()),
                           headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-protobuf"
    assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    assert len(trace_rows(store, trace_hex)) == 4

    trace2, trace2_hex = new_ids()
    body, _ = json_body(trace2_hex, now - SECOND, "gz-json")
    # two gzip members back to back are one valid gzip stream
    raw = orjson.dumps(body)
    response = client.post("/v1/traces", content=gzip.compress(raw[:50]) + gzip.compress(raw[50:]),
                           headers={"Content-Type": "application/json", "Content-Encoding": "GZIP"})
    assert response.status_code == 200, response.text
    assert len(trace_rows(store, trace2_hex)) == 1
    assert_still_serving(client, store, reference_trace)


# -- bad input ---------------------------------------------------------------------------------------------


def test_garbage_protobuf_is_400(client, store, metrics, reference_trace):
    before = metrics.requests_by_status[400]
    for garbage in (b"\xff\xff\xff\xff", b"this is not a protobuf message at all", b"\x0a\xff\xff\xff\x0f" + b"x" * 10):
        response = client.post("/v1/traces", content=garbage, headers={"Content-Type": "application/x-protobuf"})
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/x-protobuf"
        status = status_of(response)
        assert status.code == 3 and "not a valid protobuf ExportTraceServiceRequest" in status.message
        assert_still_serving(client, store, reference_trace)
    assert metrics.requests_by_status[400] - before == 3


def test_truncated_and_corrupt_gzip_is_400(client, store, reference_trace):
    trace, _ = new_ids()
    now = time.time_ns()
    packed = gzip.compress(request_of([make_span(trace, b"\x07" * 8, now - SECOND, now)]).SerializeToString())
    cases = ((packed[: len(packed) // 2], "truncated"), (packed[:-4], "truncated"),
             (packed[:10] + b"\x00garbage" + packed[18:], "corrupt"), (b"not gzip at all", "corrupt"),
             (packed + b"trailing junk", "corrupt"))
    for body, needle in cases:
        response = client.post("/v1/traces", content=body,
                               headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
        assert response.status_code == 400, (needle, response.content)
        status = status_of(response)
        assert needle in status.message and "gzip" in status.message, status.message
        assert_still_serving(client, store, reference_trace)
    assert trace_rows(store, trace.hex()) == []


def test_wrong_content_type_is_415(client, store, reference_trace):
    trace, trace_hex = new_ids()
    now = time.time_ns()
    body = request_of([make_span(trace, b"\x09" * 8, now - SECOND, now)]).SerializeToString()
    for headers in ({"Content-Type": "text/plain"}, {"Content-Type": "application/grpc"}, {},
                    {"Content-Type": "application/x-protobuf", "Content-Encoding": "br"}):
        response = client.post("/v1/traces", content=body, headers=headers)
        assert response.status_code == 415, headers
        assert response.headers["content-type"].startswith(("application/json", "application/x-protobuf"))
        assert "unsupported Content-" in status_of(response).message
        assert_still_serving(client, store, reference_trace)
    assert trace_rows(store, trace_hex) == []
    assert client.get("/v1/traces").status_code == 405


def test_oversized_body_is_413(client, store, reference_trace):
    trace, trace_hex = new_ids()
    now = time.time_ns()
    big = make_span(trace, b"\x0b" * 8, now - SECOND, now)
    big.attributes.append(kv("gen_ai.input.messages", "x" * (MAX_BODY + 10)))
    body = request_of([big]).SerializeToString()
    # declared length over the limit
    response = post_pb(client, request_of([big]))
    assert response.status_code == 413
    assert "max_body_bytes" in status_of(response).message
    assert_still_serving(client, store, reference_trace)

    # no Content-Length (chunked): the limit is enforced while reading
    def chunks():
        for i in range(0, len(body), 16 * 1024):
            yield body[i:i + 16 * 1024]

    response = client.post("/v1/traces", content=chunks(), headers={"Content-Type": "application/x-protobuf"})
    assert response.status_code == 413
    assert_still_serving(client, store, reference_trace)

    # a gzip bomb: tiny on the wire, far over the limit decompressed
    bomb = gzip.compress(body + b"\x00" * (8 * MAX_BODY))
    assert len(bomb) < MAX_BODY // 4
    for encoding, packed in (("gzip", bomb), ("deflate", zlib.compress(body * 4))):
        response = client.post("/v1/traces", content=packed,
                               headers={"Content-Type": "application/x-protobuf", "Content-Encoding": encoding})
        assert response.status_code == 413
        assert "decompressed body exceeds max_body_bytes" in status_of(response).message
        assert_still_serving(client, store, reference_trace)
    assert trace_rows(store, trace_hex) == []


def test_bad_spans_rejected_rest_accepted(client, store, metrics, reference_trace):
    trace, trace_hex = new_ids()
    now = time.time_ns()
    day = 86_400 * SECOND
    good = [make_span(trace, bytes([0xA0, 0, 0, 0, 0, 0, 0, i]), now - SECOND, now) for i in range(1, 3)]
    bad = [
        make_span(b"", b"\x0c" * 8, now - SECOND, now),                       # missing trace id
        make_span(bytes(16), b"\x0d" * 8, now - SECOND, now),                 # all-zero trace id
        make_span(trace[:8], b"\x0e" * 8, now - SECOND, now),                 # 8-byte trace id
        make_span(trace, b"", now - SECOND, now),                             # missing span id
        make_span(trace, bytes(8), now - SECOND, now),                        # all-zero span id
        make_span(trace, b"\x0f" * 8, 0, now),                                # start 0
        make_span(trace, b"\x10" * 8, now, now - SECOND),                     # end before start
        make_span(trace, b"\x11" * 8, now + 2 * 3600 * SECOND, now + 2 * 3600 * SECOND),  # far future
        make_span(trace, b"\x12" * 8, now - 60 * day, now - 60 * day + SECOND),          # too old
        make_span(trace, b"\x13" * 8, now - SECOND, now, parent_span_id=b"\x01\x02"),    # bad parent id
    ]
    rejected_before, accepted_before = metrics.spans_rejected, metrics.spans_accepted
    response = post_pb(client, request_of([bad[0], good[0], *bad[1:], good[1]]))
    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == len(bad)
    for reason in ("missing trace id", "invalid trace id", "missing span id", "invalid span id", "missing start time",
                   "end time before start time", "start time too far in the future", "start time too old",
                   "invalid parent span id"):
        assert reason in partial.error_message, reason
    assert "resource_spans[0].scope_spans[0].spans[0]: missing trace id" in partial.error_message
    assert metrics.spans_rejected - rejected_before == len(bad)
    assert metrics.spans_accepted - accepted_before == 2
    assert sorted(r["SpanId"] for r in trace_rows(store, trace_hex)) == sorted(s.span_id.hex() for s in good)
    assert len(genai_rows(store, trace_hex)) == 2
    assert_still_serving(client, store, reference_trace)

    # a request with nothing but bad spans is still a 200 with everything rejected
    response = post_pb(client, request_of(bad[:2]))
    assert response.status_code == 200
    assert ExportTraceServiceResponse.FromString(response.content).partial_success.rejected_spans == 2


def test_store_failure_is_503_and_retry_succeeds(client, store, metrics, reference_trace):
    trace, trace_hex = new_ids()
    now = time.time_ns()
    req = request_of([make_span(trace, b"\x21" * 8, now - SECOND, now)])
    store.command("RENAME TABLE otel.otel_traces TO otel.otel_traces_offline")
    try:
        response = post_pb(client, req)
        assert response.status_code == 503
        assert response.headers["retry-after"].isdigit()
        status = status_of(response)
        assert status.code == 14 and "store unavailable" in status.message
        json_response = client.post("/v1/traces", content=b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"'
                                    + trace_hex.encode() + b'","spanId":"2222222222222222","startTimeUnixNano":"'
                                    + str(now - SECOND).encode() + b'","endTimeUnixNano":"' + str(now).encode()
                                    + b'"}]}]}]}', headers={"Content-Type": "application/json"})
        assert json_response.status_code == 503 and status_of(json_response).code == 14
    finally:
        store.command("RENAME TABLE otel.otel_traces_offline TO otel.otel_traces")
    assert metrics.requests_by_status[503] >= 2
    assert trace_rows(store, trace_hex) == []
    response = post_pb(client, req)  # the exporter's retry
    assert response.status_code == 200
    assert len(trace_rows(store, trace_hex)) == 1 and len(genai_rows(store, trace_hex)) == 1
    assert_still_serving(client, store, reference_trace)


def test_concurrent_requests_all_committed(base_url, store, metrics):
    """Many requests at once (group commit): every 200 means that request's rows are stored."""
    now = time.time_ns()
    traces = [new_ids() for _ in range(12)]

    def send(item):
        trace, _ = item
        spans = [make_span(trace, bytes([0x30, i, 0, 0, 0, 0, 0, 1]), now - SECOND, now) for i in range(50)]
        with httpx.Client(base_url=base_url, timeout=30) as c:
            return post_pb(c, request_of(spans)).status_code

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        assert list(pool.map(send, traces)) == [200] * len(traces)
    for _, trace_hex in traces:
        assert len(trace_rows(store, trace_hex)) == 50


# -- value rendering (pdata AsString) ----------------------------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    (0.2, "0.2"), (1.0, "1"), (-0.0, "-0"), (100.0, "100"), (1e20, "100000000000000000000"), (1e21, "1e+21"),
    (1.5e-7, "1.5e-7"), (1e-6, "0.000001"), (1e-5, "0.00001"), (123456789.125, "123456789.125"),
    (5e-324, "5e-324"), (-2.5e-10, "-2.5e-10"), (1.7976931348623157e308, "1.7976931348623157e+308"),
    (float("nan"), "json: unsupported value: NaN"), (float("inf"), "json: unsupported value: +Inf"),
])
def test_double_rendering_matches_go(value, text):
    assert go_float(value) == text


def test_protobuf_value_rendering():
    now = time.time_ns()
    span = make_span(b"\x01" * 16, b"\x02" * 8, now - SECOND, now)
    arr = AnyValue()
    arr.array_value.values.add(string_value="a&b")
    arr.array_value.values.add(int_value=-3)
    arr.array_value.values.add(double_value=0.5)
    arr.array_value.values.add(bytes_value=b"\x00\xff")
    nested = arr.array_value.values.add()
    nested.kvlist_value.values.add(key="z").value.bool_value = False
    nested.kvlist_value.values.add(key="y").value.string_value = "\u2028"
    nan_array = AnyValue()
    nan_array.array_value.values.add(double_value=float("nan"))
    span.attributes.extend([kv("arr", arr), kv("nan_array", nan_array), kv("bytes", b"\x00\x01\xfe"),
                            kv("neg", -42), kv("zero", 0), kv("false", False), kv("empty_string", ""),
                            kv("unset", AnyValue())])
    result = decode_protobuf(request_of([span]).SerializeToString(), IngestSettings())
    attrs = result.rows[0]["SpanAttributes"]
    assert attrs["arr"] == '["a\\u0026b",-3,0.5,"AP8=",{"y":"\\u2028","z":false}]'
    assert attrs["nan_array"] == ""
    assert attrs["bytes"] == base64.b64encode(b"\x00\x01\xfe").decode()
    assert (attrs["neg"], attrs["zero"], attrs["false"], attrs["empty_string"], attrs["unset"]) == (
        "-42", "0", "false", "", "")
    with pytest.raises(OTLPDecodeError):
        decode_protobuf(b"\x0a\x05abc", IngestSettings())


def test_arrow_batch_stores_exactly_its_rows(store):
    """The receiver inserts spans as an Arrow table (detector/ingest/spans.py); what lands in otel_traces must be
    exactly the rows the decoder describes: several resources and scopes, events (a timestamp past
    DateTime64(9)'s end clamped), links, a repeated attribute key (the last value wins), non-string values."""
    now = time.time_ns()
    req = ExportTraceServiceRequest()
    for r in range(2):
        rs = req.resource_spans.add()
        rs.resource.attributes.extend([kv("service.name", f"svc-{r}"), kv("deployment.environment", "prod")])
        for sc in range(2):
            ss = rs.scope_spans.add()
            ss.scope.name, ss.scope.version = f"scope-{r}-{sc}", f"{sc}.0"
            for k in range(3):
                span = make_span(bytes([0xA0 + r]) * 16, bytes([r * 16 + sc * 4 + k + 1]) * 8, now - SECOND, now - k)
                span.attributes.extend([kv("dup", "first"), kv("dup", "last"), kv("ratio", 0.25), kv("flag", True)])
                if k == 1:
                    event = span.events.add(time_unix_nano=now - 10, name="exception")
                    event.attributes.extend([kv("exception.type", "ValueError"), kv("n", 3)])
                    span.events.add(time_unix_nano=2**64 - 1, name="far future")
                    link = span.links.add(trace_id=b"\x09" * 16, span_id=b"\x08" * 8, trace_state="k=v")
                    link.attributes.append(kv("link.reason", "retry"))
                    span.links.add(trace_id=b"\x07" * 16)
                ss.spans.append(span)
    result = decode_protobuf(req.SerializeToString(), IngestSettings())
    assert result.accepted == 12 and result.rejected == 0
    expected = sorted(result.rows, key=lambda row: row["SpanId"])
    assert expected[0]["SpanAttributes"]["dup"] == "last" and expected[0]["SpanAttributes"]["flag"] == "true"

    traces = ["a0" * 16, "a1" * 16]  # this test's traces, in the module's store
    store.insert_arrow("otel.otel_traces", result.spans.to_arrow())
    stored = store.rows("SELECT * FROM otel.otel_traces WHERE TraceId IN {t:Array(String)} ORDER BY SpanId",
                        {"t": traces})
    normalize_staged(store)
    calls = store.rows("SELECT count() AS n FROM otel.genai_calls WHERE trace_id IN {t:Array(String)}",
                       {"t": traces})[0]["n"]
    assert stored == expected
    assert calls == 12
    with_events = [row for row in stored if row["Events.Name"]]
    assert len(with_events) == 4
    assert with_events[0]["Events.Timestamp"] == [utc_text(now - 10), "2262-04-11 23:47:16.854775807"]
    assert with_events[0]["Events.Attributes"][0] == {"exception.type": "ValueError", "n": "3"}
    assert with_events[0]["Links.TraceId"] == ["09" * 16, "07" * 16]
    assert with_events[0]["Links.SpanId"] == ["08" * 8, ""]
    assert {row["ServiceName"] for row in stored} == {"svc-0", "svc-1"}
    assert {(row["ScopeName"], row["ScopeVersion"]) for row in stored} == {
        (f"scope-{r}-{sc}", f"{sc}.0") for r in range(2) for sc in range(2)}


EMPTY_FP = 11160318154034397263  # cityHash64(''): a captured empty observation


def test_a_captured_empty_tool_result_survives_export_and_ingest_as_an_outcome(base_url, store):
    """The evaluation's emitter (content capture on) sends a tool's empty result as an empty
    ``gen_ai.tool.call.result``; the OpenTelemetry SDK keeps it, the OTLP exporter sends it, the receiver stores it, and
    the normalization makes it an outcome (cityHash64(''), "nothing"), as the next model call's new input (the empty
    tool response) is; an acknowledgement comes through as one. With content capture off there is no result at all:
    unknown."""
    from detector.evaluation.corpus_records import CallSpec, ToolSpec
    from detector.evaluation.emit import emit_call

    provider = TracerProvider(resource=Resource.create({"service.name": "emitter"}))
    exporter = OTLPSpanExporter(endpoint=f"{base_url}/v1/traces", timeout=30)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("emit")
    traces = {}
    for capture in (True, False):
        root = tracer.start_span("invoke_agent", start_time=time.time_ns() - 60 * SECOND)
        parent, history, t = otel_trace.set_span_in_context(root), [], time.time_ns() - 50 * SECOND
        for call in (CallSpec(tools=[ToolSpec("touch", {"path": "a.py"}, "")]),
                     CallSpec(tools=[ToolSpec("write_file", {"path": "b.py"}, "File written successfully.")]),
                     CallSpec(output_text="Both files are there.")):
            t = emit_call(tracer, call, session_id=f"emit-{uuid.uuid4().hex[:8]}", start_ns=t, capture_content=capture,
                          history=history, parent=parent)
        root.end()
        traces[capture] = f"{root.get_span_context().trace_id:032x}"
    provider.shutdown()

    stored = {r["SpanName"]: r["SpanAttributes"] for r in trace_rows(store, traces[True])}
    assert stored["execute_tool touch"]["gen_ai.tool.call.result"] == ""  # kept empty, not dropped
    assert "gen_ai.tool.call.result" not in {k for r in trace_rows(store, traces[False])
                                             for k in r["SpanAttributes"]}
    columns = ("observation_fp", "observation_empty", "observation_chars", "observation_ack")
    on = [(r["operation"], r["tool_name"], *(r[c] for c in columns)) for r in genai_rows(store, traces[True])]
    ack = len("File written successfully.")
    assert on == [
        ("chat", "", 0, 0, 0, 0),  # the first call: no input message yet (the emitter's scenario has no task)
        ("execute_tool", "touch", EMPTY_FP, 1, 0, 0),
        ("chat", "", EMPTY_FP, 1, 0, 0),  # its new input: the empty tool response
        ("execute_tool", "write_file", on[3][2], 0, ack, 1),
        ("chat", "", on[3][2], 0, ack, 1),
    ]
    assert on[3][2] not in (0, EMPTY_FP)
    off = [(r["operation"], *(r[c] for c in columns)) for r in genai_rows(store, traces[False])]
    assert {row[1:] for row in off} == {(0, 0, 0, 0)}  # content off: nothing came back that is known
