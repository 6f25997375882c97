"""Fuzzing the OTLP receiver with hypothesis (issue 16, item 7): hostile but well-formed requests (ids of any length,
times anywhere in 64 bits, attribute values of every AnyValue kind, nested, events and links), mutated protobuf
bytes, and OTLP/JSON documents with values of the wrong type or out of range. Whatever arrives:

- the answer is 200 (maybe with a partial success), 400 or 413, never a 5xx;
- a 200 accounts for every span: accepted + rejected = the spans in the request, and exactly the accepted ones are
  stored, each once, in ``otel.otel_traces`` and (GenAI spans, once normalized) in ``otel.genai_calls``;
- the service keeps serving.

The decoder alone runs many examples (fast); the receiver over HTTP fewer (each one an insert). Derandomized, a
fixed number of examples: the same cases on every run (``LOOP_DETECTOR_FUZZ_SCALE`` multiplies them: the bench).
"""

from __future__ import annotations

import json
import os
import time
import uuid

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from support.otlp_senders import PROTOBUF, partial_success, post_body
from support.servers import serve_app

from detector.ingest.decoding import OTLPDecodeError
from detector.ingest.otlp import decode_json, decode_protobuf
from detector.ingest.receiver import create_otlp_app
from detector.settings.service_settings import IngestSettings
from detector.storage.normalization import normalize_staged
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore

# bench/reliability.py runs these with more examples (LOOP_DETECTOR_FUZZ_SCALE=20); CI with the counts below
SCALE = int(os.environ.get("LOOP_DETECTOR_FUZZ_SCALE", "1"))
EDGE_TIMES = [0, 1, 2**31, 2**62, 2**63 - 1, 2**63, 2**63 + 5, 2**64 - 1]
NOW = time.time_ns()  # fixed for the run: the strategies must draw the same values for the same choices
# Valid ids, never all zero (hypothesis starts from its simplest values: zeros, empty, the first choice)
TRACE_IDS = st.integers(1, 2**128 - 1).map(lambda i: i.to_bytes(16, "big"))
SPAN_IDS = st.integers(1, 2**64 - 1).map(lambda i: i.to_bytes(8, "big"))
FUZZ = settings(deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


@st.composite
def any_value(draw, depth: int = 0) -> AnyValue:
    v = AnyValue()
    kinds = ["string", "int", "bool", "double", "bytes", "empty"] + (["array", "kvlist"] if depth < 3 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "string":
        v.string_value = draw(st.text(max_size=40))
    elif kind == "int":
        v.int_value = draw(st.integers(-(2**63), 2**63 - 1))
    elif kind == "bool":
        v.bool_value = draw(st.booleans())
    elif kind == "double":
        v.double_value = draw(st.floats(allow_nan=True, allow_infinity=True))
    elif kind == "bytes":
        v.bytes_value = draw(st.binary(max_size=20))
    elif kind == "array":
        for item in draw(st.lists(any_value(depth + 1), max_size=3)):
            v.array_value.values.add().CopyFrom(item)
    elif kind == "kvlist":
        for key, item in draw(st.lists(st.tuples(st.text(max_size=8), any_value(depth + 1)), max_size=3)):
            kv = v.kvlist_value.values.add(key=key)
            kv.value.CopyFrom(item)
    return v


def times(now: int):
    """Start or end times: mostly plausible, often at a boundary of what 64 bits, DateTime64(9) or the accepted
    window allow (a fuzzer that rarely reaches the boundaries does not find what breaks there)."""
    near = st.integers(now - 40 * 86_400 * 10**9, now + 2 * 3600 * 10**9)
    around = st.sampled_from([2**63, 2**64]).flatmap(lambda edge: st.integers(edge - 64, min(edge + 64, 2**64 - 1)))
    return st.one_of(near, st.sampled_from(EDGE_TIMES), around, around, st.integers(0, 2**64 - 1))


@st.composite
def export_request(draw) -> ExportTraceServiceRequest:
    now = NOW
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 2))):
        rs = request.resource_spans.add()
        for key, value in draw(st.lists(st.tuples(st.sampled_from(["service.name", "loop_detector.virtual_key",
                                                                    "session.id", "x"]), any_value()), max_size=3)):
            rs.resource.attributes.add(key=key).value.CopyFrom(value)
        ss = rs.scope_spans.add()
        ss.scope.name = draw(st.text(max_size=10))
        for _ in range(draw(st.integers(0, 4))):
            start = draw(st.one_of(st.integers(now - 86_400 * 10**9, now), times(now)))
            span = ss.spans.add(
                trace_id=draw(st.one_of(TRACE_IDS, TRACE_IDS, st.binary(max_size=17))),
                span_id=draw(st.one_of(SPAN_IDS, SPAN_IDS, st.binary(max_size=9))),
                parent_span_id=draw(st.one_of(st.just(b""), SPAN_IDS, st.binary(max_size=9))),
                name=draw(st.text(max_size=20)), kind=draw(st.integers(0, 9)),
                start_time_unix_nano=start,
                end_time_unix_nano=draw(st.one_of(st.integers(start, min(start + 10**12, 2**64 - 1)),
                                                  st.integers(2**63 - 64, 2**63 + 64), times(now))),
            )
            span.status.code = draw(st.integers(0, 5))
            span.status.message = draw(st.text(max_size=20))
            op = draw(st.sampled_from(["chat", "execute_tool", "", "invoke_agent"]))
            if op:
                span.attributes.add(key="gen_ai.operation.name").value.string_value = op
            for key, value in draw(st.lists(st.tuples(st.sampled_from([
                    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.usage.input_tokens",
                    "gen_ai.tool.call.arguments", "gen_ai.response.finish_reasons", "error.type", "z"]),
                    any_value()), max_size=4)):
                span.attributes.add(key=key).value.CopyFrom(value)
            for _ in range(draw(st.integers(0, 2))):
                event = span.events.add(time_unix_nano=draw(times(now)), name=draw(st.text(max_size=10)))
                event.attributes.add(key="k").value.CopyFrom(draw(any_value()))
            if draw(st.booleans()):
                span.links.add(trace_id=draw(st.binary(max_size=17)), span_id=draw(st.binary(max_size=9)))
    return request


def mutate(data: bytes, draw) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        if not out:
            break
        i = draw(st.integers(0, len(out) - 1))
        if op == "flip":
            out[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del out[i:]
        elif op == "insert":
            out[i:i] = draw(st.binary(min_size=1, max_size=6))
        else:
            del out[i]
    return bytes(out)


def span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


# -- the decoder alone ---------------------------------------------------------------------------------------------

@settings(FUZZ, max_examples=150 * SCALE)
@given(request=export_request())
def test_decoder_accounts_for_every_span(request):
    result = decode_protobuf(request.SerializeToString(), IngestSettings())
    assert result.accepted + result.rejected == span_count(request)
    result.spans.to_arrow()  # what the insert gets: always buildable


@settings(FUZZ, max_examples=150 * SCALE)
@given(data=st.data(), request=export_request())
def test_mutated_protobuf_is_decoded_or_refused(data, request):
    body = mutate(request.SerializeToString(), data.draw)
    try:
        result = decode_protobuf(body, IngestSettings())
    except OTLPDecodeError:
        return
    result.spans.to_arrow()


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                         st.text(max_size=12), st.sampled_from(["1e30", "-1", "NaN", "Infinity", "0x10", " 7 "]))
# integer fields at their boundaries, as numbers and as the decimal strings OTLP/JSON allows
json_times = st.one_of(
    st.sampled_from([1e30, -1, 0, 2**63 - 1, 2**63, 2**63 + 5, 2**64 - 1, 2**64 + 1, 1.5e19, 9.3e18]),
    st.sampled_from(["1e30", str(2**63 + 5), str(2**64 + 1), "-5", "18446744073709551615"]),
    st.integers(NOW - 10**12, NOW).map(str), json_scalars)
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                               max_size=3), max_leaves=10)


@st.composite
def json_request(draw) -> bytes:
    """An OTLP/JSON body: either a well-formed envelope whose numbers and ids are hostile (the span checks), or an
    envelope with values of any type anywhere (the decoder's type checks: a 400 for the whole request)."""
    typed = draw(st.booleans())

    def field(valid):
        return draw(st.one_of(valid, json_values)) if typed else draw(valid)

    spans = []
    for _ in range(draw(st.integers(1, 3))):
        span = {"traceId": field(st.one_of(TRACE_IDS.map(bytes.hex), st.text(max_size=34))),
                "spanId": field(st.one_of(SPAN_IDS.map(bytes.hex), st.text(max_size=18))),
                "startTimeUnixNano": field(st.one_of(st.integers(NOW - 86_400 * 10**9, NOW).map(str), json_times)),
                "endTimeUnixNano": field(st.one_of(st.integers(NOW - 10**9, NOW).map(str), json_times)),
                "name": field(st.text(max_size=10)),
                "attributes": field(st.just([{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}])),
                "kind": field(st.one_of(st.integers(0, 5), st.integers(-(2**70), 2**70))),
                "status": field(st.fixed_dictionaries({"code": st.one_of(st.integers(0, 2), st.integers(-(2**70), 2**70))})),
                "events": field(st.lists(st.fixed_dictionaries({"timeUnixNano": json_times, "name": st.text(max_size=5)}),
                                         max_size=2)),
                "links": field(st.lists(st.fixed_dictionaries({"traceId": st.text(max_size=34)}), max_size=1))}
        spans.append({k: v for k, v in span.items() if draw(st.integers(0, 9)) < 9})  # a field left out, now and then
    document = {"resourceSpans": [{"resource": {"attributes": field(st.just([]))},
                                   "scopeSpans": [{"scope": field(st.just({})), "spans": spans}]}]}
    return json.dumps(document).encode()  # (orjson refuses integers beyond 64 bits; senders need not)


@settings(FUZZ, max_examples=150 * SCALE)
@given(body=json_request())
def test_json_decoder_accounts_or_refuses(body):
    try:
        result = decode_json(body, IngestSettings())
    except OTLPDecodeError:
        return
    result.spans.to_arrow()


# -- the receiver, end to end --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def receiver(tmp_path_factory):
    store = ChdbStore(tmp_path_factory.mktemp("fuzz"))
    apply_schema(store)
    with serve_app(create_otlp_app(store, IngestSettings())) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield store, client
    store.close()


def stored_counts(store, request: ExportTraceServiceRequest) -> tuple[int, int]:
    keys = [(s.trace_id.hex(), s.span_id.hex()) for rs in request.resource_spans for ss in rs.scope_spans
            for s in ss.spans if len(s.trace_id) == 16 and len(s.span_id) == 8]
    if not keys:
        return 0, 0
    traces = sorted({t for t, _ in keys})
    t = store.rows("SELECT count() AS n FROM otel.otel_traces WHERE TraceId IN {t:Array(String)} "
                   "AND (TraceId, SpanId) IN {k:Array(Tuple(String, String))}", {"t": traces, "k": keys})[0]["n"]
    normalize_staged(store)  # as the next detection cycle: whatever was stored, normalizing it never fails
    g = store.rows("SELECT count() AS n FROM otel.genai_calls WHERE trace_id IN {t:Array(String)} "
                   "AND (trace_id, span_id) IN {k:Array(Tuple(String, String))}", {"t": traces, "k": keys})[0]["n"]
    return int(t), int(g)


def probe_request(ends: list[int]) -> ExportTraceServiceRequest:
    """The reliability probe's poison, as an explicit example beside the generated ones: GenAI spans with these end
    times (and a plausible start), in one request."""
    request = ExportTraceServiceRequest()
    ss = request.resource_spans.add().scope_spans.add()
    for i, end in enumerate(ends):
        span = ss.spans.add(trace_id=b"\x16" * 16, span_id=bytes([0x16, i + 1]) * 4, name="chat",
                            start_time_unix_nano=NOW - 10**9, end_time_unix_nano=end)
        span.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
    return request


@settings(FUZZ, max_examples=80 * SCALE)
@given(request=export_request())
@example(request=probe_request([NOW, 2**63 + 5, NOW]))
@example(request=probe_request([2**63, 2**63 - 1, 2**64 - 1]))
def test_receiver_never_5xx_and_stores_exactly_the_accepted(receiver, request):
    store, client = receiver
    fresh: dict[bytes, bytes] = {}  # valid-length trace ids made unique to this example (same within it)
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                if len(span.trace_id) == 16 and any(span.trace_id):
                    span.trace_id = fresh.setdefault(span.trace_id, uuid.uuid4().bytes)
    response = post_body(client, request.SerializeToString())
    assert response.status_code == 200, response.content[:300]
    rejected, _ = partial_success(response)
    accepted = span_count(request) - rejected
    genai = sum(1 for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
                if any(a.key == "gen_ai.operation.name" and a.value.string_value for a in s.attributes))
    traces, calls = stored_counts(store, request)
    assert traces == accepted  # (ids are fresh per example: nothing stored earlier shares them)
    assert calls <= traces and (rejected or calls == genai)


@settings(FUZZ, max_examples=30 * SCALE)
@given(data=st.data(), request=export_request(), json_body=json_request())
def test_receiver_refuses_garbage_without_5xx(receiver, data, request, json_body):
    _, client = receiver
    for body, media in ((mutate(request.SerializeToString(), data.draw), PROTOBUF), (json_body, "application/json")):
        response = post_body(client, body, media)
        assert response.status_code in (200, 400, 413), (response.status_code, response.content[:300])
    assert client.get("/healthz").status_code == 200
