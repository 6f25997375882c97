"""Decode OTLP trace export requests into ``otel.otel_traces`` rows (a :class:`SpanBatch` of columns).

Both OTLP encodings are accepted: binary protobuf (``ExportTraceServiceRequest``) and OTLP/JSON
(lowerCamelCase keys, hex trace / span ids, enums as integers, 64-bit integers as strings or numbers,
``AnyValue`` objects). Each span becomes one row written exactly the way the OpenTelemetry Collector
contrib ClickHouse exporter writes it:

- ``Timestamp`` (span start) as a UTC ``DateTime64(9)``;
- ids as lowercase hex, an empty or all-zero parent id as ``''``;
- ``SpanKind`` ``Unspecified``/``Internal``/``Server``/``Client``/``Producer``/``Consumer`` and
  ``StatusCode`` ``Unset``/``Ok``/``Error`` (pdata's ``String()``; an unknown enum value gives ``''``);
- ``ServiceName`` from the resource attribute ``service.name``;
- attribute values as strings the way pdata's ``Value.AsString()`` renders them: strings as they are,
  ints in decimal, bools ``true``/``false``, doubles like Go's ``encoding/json`` (ES6 number to string:
  ``0.2``, ``1``, ``1e+21``, ``1e-7``), arrays and key/value lists as compact JSON (``encoding/json``:
  map keys sorted, ``<``/``>``/``&`` escaped), bytes as standard base64;
- ``Duration`` in nanoseconds (end - start), events and links as the parallel arrays of the
  ``Events.*`` / ``Links.*`` nested columns.

Spans that cannot be stored sensibly are rejected one by one (the rest of the request is kept): a
trace id that is not 16 bytes or is all zero, a span id that is not 8 bytes or is all zero, a parent
span id of the wrong length, a start time of 0, an end time before the start or past the end of
``DateTime64(9)`` (2262-04-11: the end is a ``DateTime64(9)`` in ``otel.genai_calls``; the normalization saturates
what a collector may store, but a span ending after the year 2262 is not one to score), a start further in the future than ``max_future_skew_seconds`` or older than
``max_age_days``. Every value the store would reject is caught here, before the insert, so that one
sender's bad span costs that span only (``detector/ingest/commit.py`` isolates what still gets through). The result carries the count
and a short message naming the reasons and the first offending positions (never attribute values:
they may hold prompts).

This is the receiver's hot path: the protobuf loop touches each attribute once (``string_value`` is
read first, the oneof is inspected only for the rare non-string values) and appends straight into the
batch's column lists (``detector/ingest/spans.py`` says why columns).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from detector.ingest.decoding import OTLPDecodeError, gc_paused
from detector.ingest.otlp_json import (
    as_array,
    as_enum,
    as_int,
    as_object,
    as_str,
    attrs_json,
    decode_json_document,
    hex_bytes,
    member,
)
from detector.ingest.otlp_values import attrs_pb, value_str_cached
from detector.ingest.spans import MAX_DATETIME64_NS, NS_PER_SECOND, SpanBatch
from detector.settings.service_settings import IngestSettings

__all__ = [
    "DecodeResult", "MAX_REJECT_EXAMPLES", "Rejections", "SPAN_KINDS", "STATUS_CODES", "SpanWindow", "TRACES_TABLE",
    "decode_json", "decode_protobuf", "parse_protobuf", "rows_from_request", "span_problem",
]

TRACES_TABLE = "otel.otel_traces"

SPAN_KINDS: dict[int, str] = {0: "Unspecified", 1: "Internal", 2: "Server", 3: "Client", 4: "Producer", 5: "Consumer"}
STATUS_CODES: dict[int, str] = {0: "Unset", 1: "Ok", 2: "Error"}
_SPAN_KIND_NAMES = {f"SPAN_KIND_{v.upper()}": k for k, v in SPAN_KINDS.items()}
_STATUS_CODE_NAMES = {f"STATUS_CODE_{v.upper()}": k for k, v in STATUS_CODES.items()}

_ZERO_TRACE_ID = bytes(16)
_ZERO_SPAN_ID = bytes(8)

# At most this many rejected spans are named one by one in the error message.
MAX_REJECT_EXAMPLES = 5


@dataclass(slots=True)
class DecodeResult:
    """The accepted spans, and what was rejected and why."""

    spans: SpanBatch = field(default_factory=SpanBatch)
    rejected: int = 0
    error_message: str = ""

    @property
    def accepted(self) -> int:
        return len(self.spans)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The accepted spans as row dicts (tests and debugging; the insert uses ``spans.to_arrow()``)."""
        return self.spans.rows()


class Rejections:
    """Counts rejected spans by reason and remembers the first few positions for the message."""

    __slots__ = ("count", "reasons", "examples")

    def __init__(self) -> None:
        self.count = 0
        self.reasons: dict[str, int] = {}
        self.examples: list[str] = []

    def add(self, where: str, reason: str, detail: str = "") -> None:
        self.count += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if len(self.examples) < MAX_REJECT_EXAMPLES:
            self.examples.append(f"{where}: {reason}{f' ({detail})' if detail else ''}")

    def message(self, total: int) -> str:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in self.reasons.items())
        more = f" (and {self.count - len(self.examples)} more)" if self.count > len(self.examples) else ""
        return f"rejected {self.count} of {total} spans [{reasons}]; " + "; ".join(self.examples) + more


# -- span validation ----------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class SpanWindow:
    """The accepted start-time window, computed once per request."""

    now_ns: int
    min_start_ns: int
    max_start_ns: int

    @classmethod
    def of(cls, settings: IngestSettings, now_ns: int | None) -> SpanWindow:
        now = time.time_ns() if now_ns is None else now_ns
        return cls(
            now_ns=now,
            min_start_ns=max(1, now - settings.max_age_days * 86_400 * NS_PER_SECOND),
            max_start_ns=now + settings.max_future_skew_seconds * NS_PER_SECOND,
        )


def span_problem(trace_id: bytes, span_id: bytes, parent: bytes, start: int, end: int,
                 window: SpanWindow) -> tuple[str, str]:
    """Why a span is rejected: (reason, detail). Only called for spans that failed the fast check."""
    if len(trace_id) != 16:
        return ("invalid trace id", f"{len(trace_id)} bytes, want 16") if trace_id else ("missing trace id", "")
    if trace_id == _ZERO_TRACE_ID:
        return "invalid trace id", "all zero"
    if len(span_id) != 8:
        return ("invalid span id", f"{len(span_id)} bytes, want 8") if span_id else ("missing span id", "")
    if span_id == _ZERO_SPAN_ID:
        return "invalid span id", "all zero"
    if parent and len(parent) != 8:
        return "invalid parent span id", f"{len(parent)} bytes, want 8"
    if start == 0:
        return "missing start time", ""
    if end < start:
        return "end time before start time", f"by {start - end} ns"
    if end > MAX_DATETIME64_NS:
        return "end time out of range", "after 2262-04-11 23:47:16 UTC, the end of DateTime64(9)"
    if start > window.max_start_ns:
        return "start time too far in the future", f"{(start - window.now_ns) // NS_PER_SECOND} s ahead"
    if start < window.min_start_ns:
        return "start time too old", f"{(window.now_ns - start) // (86_400 * NS_PER_SECOND)} days ago"
    return "invalid span", ""


# -- protobuf ---------------------------------------------------------------------------------------


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    try:
        return ExportTraceServiceRequest.FromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise OTLPDecodeError(
            f"body is not a valid protobuf ExportTraceServiceRequest ({len(body)} bytes): {exc}"
        ) from None


def decode_protobuf(body: bytes, settings: IngestSettings | None = None, now_ns: int | None = None) -> DecodeResult:
    """Decode a binary protobuf ExportTraceServiceRequest body; raises :class:`OTLPDecodeError`."""
    with gc_paused():
        return rows_from_request(parse_protobuf(body), settings, now_ns)


def rows_from_request(request: ExportTraceServiceRequest, settings: IngestSettings | None = None,
                      now_ns: int | None = None) -> DecodeResult:
    """The spans of a parsed ExportTraceServiceRequest (the protobuf hot path)."""
    window = SpanWindow.of(settings or IngestSettings(), now_ns)
    min_start, max_start, max_end = window.min_start_ns, window.max_start_ns, MAX_DATETIME64_NS
    kinds, codes = SPAN_KINDS, STATUS_CODES
    zero_trace, zero_span = _ZERO_TRACE_ID, _ZERO_SPAN_ID
    value_str = value_str_cached
    batch = SpanBatch()
    # the batch's column lists, appended to directly (a method call per span would cost more)
    add_start, add_trace, add_span = batch.start_ns.append, batch.trace_id.append, batch.span_id.append
    add_parent, add_state, add_name = batch.parent_span_id.append, batch.trace_state.append, batch.name.append
    add_kind, add_resource, add_scope = batch.kind.append, batch.resource.append, batch.scope.append
    extend_keys, extend_values = batch.attr_keys.extend, batch.attr_values.extend
    add_offset = batch.attr_offsets.append
    add_duration, add_code = batch.duration.append, batch.status_code.append
    add_message = batch.status_message.append
    attr_keys = batch.attr_keys
    rejections: Rejections | None = None
    total = 0
    for ri, resource_spans in enumerate(request.resource_spans):
        resource = batch.add_resource(attrs_pb(resource_spans.resource.attributes))
        for si, scope_spans in enumerate(resource_spans.scope_spans):
            scope = batch.add_scope(scope_spans.scope.name, scope_spans.scope.version)
            spans = scope_spans.spans
            total += len(spans)
            for ki, span in enumerate(spans):
                trace_id = span.trace_id
                span_id = span.span_id
                parent = span.parent_span_id
                start = span.start_time_unix_nano
                end = span.end_time_unix_nano
                if (len(trace_id) != 16 or trace_id == zero_trace or len(span_id) != 8 or span_id == zero_span
                        or start < min_start or start > max_start or end < start or end > max_end
                        or (parent and len(parent) != 8)):
                    if rejections is None:
                        rejections = Rejections()
                    reason, detail = span_problem(trace_id, span_id, parent, start, end, window)
                    rejections.add(f"resource_spans[{ri}].scope_spans[{si}].spans[{ki}]", reason, detail)
                    continue
                attributes: dict[str, str] = {}  # a dict, so that a repeated key keeps its last value
                for kv in span.attributes:
                    v = kv.value
                    attributes[kv.key] = v.string_value or (str(i) if (i := v.int_value) else value_str(v))
                extend_keys(attributes)
                extend_values(attributes.values())
                add_offset(len(attr_keys))
                status = span.status
                events = span.events
                if events:
                    batch.events[len(batch.start_ns)] = [
                        (e.time_unix_nano, e.name, attrs_pb(e.attributes)) for e in events]
                links = span.links
                if links:
                    batch.links[len(batch.start_ns)] = [
                        (_hex_id(link.trace_id, zero_trace), _hex_id(link.span_id, zero_span), link.trace_state,
                         attrs_pb(link.attributes)) for link in links]
                add_start(start)
                add_trace(trace_id.hex())
                add_span(span_id.hex())
                add_parent(parent.hex() if parent and parent != zero_span else "")
                add_state(span.trace_state)
                add_name(span.name)
                add_kind(kinds.get(span.kind, ""))
                add_resource(resource)
                add_scope(scope)
                add_duration(end - start)
                add_code(codes.get(status.code, ""))
                add_message(status.message)
    if rejections is None:
        return DecodeResult(batch)
    return DecodeResult(batch, rejections.count, rejections.message(total))


def _hex_id(raw: bytes, zero: bytes) -> str:
    return raw.hex() if raw and raw != zero else ""


def decode_json(body: bytes, settings: IngestSettings | None = None, now_ns: int | None = None) -> DecodeResult:
    """Decode an OTLP/JSON ExportTraceServiceRequest body; raises :class:`OTLPDecodeError`."""
    return decode_json_document(body, _rows_from_json, settings, now_ns)


def _rows_from_json(document: Mapping[str, Any], settings: IngestSettings | None, now_ns: int | None) -> DecodeResult:
    window = SpanWindow.of(settings or IngestSettings(), now_ns)
    batch = SpanBatch()
    rejections: Rejections | None = None
    total = 0
    for ri, resource_spans in enumerate(as_array(member(document, "resourceSpans", "resource_spans"), "resourceSpans")):
        rpath = f"resourceSpans[{ri}]"
        resource_spans = as_object(resource_spans, rpath)
        resource = as_object(resource_spans.get("resource"), rpath + ".resource")
        resource_index = batch.add_resource(attrs_json(resource.get("attributes"), rpath + ".resource.attributes"))
        scope_list = as_array(member(resource_spans, "scopeSpans", "scope_spans"), rpath + ".scopeSpans")
        for si, scope_spans in enumerate(scope_list):
            spath = f"{rpath}.scopeSpans[{si}]"
            scope_spans = as_object(scope_spans, spath)
            scope = as_object(scope_spans.get("scope"), spath + ".scope")
            scope_index = batch.add_scope(as_str(scope.get("name"), spath + ".scope.name"),
                                          as_str(scope.get("version"), spath + ".scope.version"))
            spans = as_array(scope_spans.get("spans"), spath + ".spans")
            total += len(spans)
            for ki, span in enumerate(spans):
                path = f"{spath}.spans[{ki}]"
                span = as_object(span, path)
                trace_id = hex_bytes(member(span, "traceId", "trace_id"), path + ".traceId")
                span_id = hex_bytes(member(span, "spanId", "span_id"), path + ".spanId")
                parent = hex_bytes(member(span, "parentSpanId", "parent_span_id"), path + ".parentSpanId")
                start = as_int(member(span, "startTimeUnixNano", "start_time_unix_nano"), path + ".startTimeUnixNano")
                end = as_int(member(span, "endTimeUnixNano", "end_time_unix_nano"), path + ".endTimeUnixNano")
                where = path
                bad_hex = [name for name, raw in (("trace id", trace_id), ("span id", span_id),
                                                  ("parent span id", parent)) if raw is None]
                if bad_hex:
                    rejections = rejections or Rejections()
                    rejections.add(where, f"invalid {bad_hex[0]}", "not hex")
                    continue
                assert trace_id is not None and span_id is not None and parent is not None
                if (len(trace_id) != 16 or trace_id == _ZERO_TRACE_ID or len(span_id) != 8
                        or span_id == _ZERO_SPAN_ID or start < window.min_start_ns or start > window.max_start_ns
                        or end < start or end > MAX_DATETIME64_NS or (parent and len(parent) != 8)):
                    rejections = rejections or Rejections()
                    rejections.add(where, *span_problem(trace_id, span_id, parent, start, end, window))
                    continue
                status = as_object(span.get("status"), path + ".status")
                fields = {
                    "trace_state": as_str(member(span, "traceState", "trace_state"), path + ".traceState"),
                    "name": as_str(span.get("name"), path + ".name"),
                    "kind": SPAN_KINDS.get(as_enum(span.get("kind"), _SPAN_KIND_NAMES, path + ".kind"), ""),
                    "attributes": attrs_json(span.get("attributes"), path + ".attributes"),
                    "status_code": STATUS_CODES.get(
                        as_enum(status.get("code"), _STATUS_CODE_NAMES, path + ".status.code"), ""),
                    "status_message": as_str(status.get("message"), path + ".status.message"),
                }
                events = [as_object(e, f"{path}.events[{i}]") for i, e in enumerate(as_array(span.get("events"), path + ".events"))]
                span_events = [
                    (max(0, as_int(member(e, "timeUnixNano", "time_unix_nano"), f"{path}.events[{i}].timeUnixNano")),
                     as_str(e.get("name"), f"{path}.events[{i}].name"),
                     attrs_json(e.get("attributes"), f"{path}.events[{i}].attributes"))
                    for i, e in enumerate(events)
                ]
                links = [as_object(link, f"{path}.links[{i}]") for i, link in enumerate(as_array(span.get("links"), path + ".links"))]
                span_links = []
                for i, link in enumerate(links):
                    tid = hex_bytes(member(link, "traceId", "trace_id"), f"{path}.links[{i}].traceId")
                    sid = hex_bytes(member(link, "spanId", "span_id"), f"{path}.links[{i}].spanId")
                    span_links.append((
                        _hex_id(tid or b"", _ZERO_TRACE_ID), _hex_id(sid or b"", _ZERO_SPAN_ID),
                        as_str(member(link, "traceState", "trace_state"), f"{path}.links[{i}].traceState"),
                        attrs_json(link.get("attributes"), f"{path}.links[{i}].attributes")))
                batch.append(start_ns=start, end_ns=end, trace_id=trace_id.hex(), span_id=span_id.hex(),
                             parent_span_id=_hex_id(parent, _ZERO_SPAN_ID), resource=resource_index,
                             scope=scope_index, events=span_events, links=span_links, **fields)
    if rejections is None:
        return DecodeResult(batch)
    return DecodeResult(batch, rejections.count, rejections.message(total))
