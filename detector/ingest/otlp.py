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

import base64
import binascii
import gc
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from detector.ingest.spans import MAX_DATETIME64_NS, NS_PER_SECOND, SpanBatch
from detector.settings.config import IngestSettings

R = TypeVar("R")  # what a JSON body is built into (decode_json_document)

__all__ = [
    "DecodeResult", "MAX_REJECT_EXAMPLES", "MAX_RENDERED_ENTRIES", "MAX_RENDERED_KEY_BYTES", "OTLPDecodeError",
    "SPAN_KINDS", "STATUS_CODES", "TRACES_TABLE", "attrs_json", "attrs_pb", "decode_json", "decode_json_document",
    "decode_protobuf",
    "gc_paused", "go_float", "parse_protobuf", "rows_from_request", "value_str_json", "value_str_pb",
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

# encoding/json escapes these (HTML safety and JavaScript line terminators); orjson does not.
_GO_JSON_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


class OTLPDecodeError(ValueError):
    """The body is not a decodable ExportTraceServiceRequest (the whole request is rejected)."""


class _Unsupported(Exception):
    """A NaN or infinite double inside an array or kvlist: encoding/json refuses it, AsString gives ''."""


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


class _Rejections:
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


# -- value formatting (pdata AsString) --------------------------------------------------------------


def go_float(value: float) -> str:
    """A double as pdata's ``AsString`` (Go ``encoding/json``'s float64 encoding) writes it."""
    if value != value or value in (math.inf, -math.inf):
        return "json: unsupported value: " + ("NaN" if value != value else "+Inf" if value > 0 else "-Inf")
    text = repr(value)  # the shortest digits that round-trip, like strconv with precision -1
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        # Go's 'e' format: "1e-07", "1.5e+21" (repr spells them the same); then e-0X -> e-X.
        if len(text) >= 4 and text[-4] == "e" and text[-3] == "-" and text[-2] == "0":
            text = text[:-2] + text[-1]
        return text
    if "e" in text:  # repr switches to exponent form at 1e16 and below 1e-4; Go stays fixed here
        return format(Decimal(text), "f")
    return text[:-2] if text.endswith(".0") else text


def _go_json(raw: Any) -> str:
    """Compact JSON the way Go's ``json.Marshal`` writes an ``AsRaw()`` value."""
    return orjson.dumps(raw, option=orjson.OPT_SORT_KEYS).decode().translate(_GO_JSON_ESCAPES)


def _float_fragment(value: float) -> orjson.Fragment:
    if value != value or value in (math.inf, -math.inf):
        raise _Unsupported
    return orjson.Fragment(go_float(value))


def _raw_pb(v: Any) -> Any:
    """A protobuf AnyValue as pdata's ``AsRaw()`` (doubles pre-rendered, bytes as base64)."""
    which = v.WhichOneof("value")
    if which == "string_value":
        return v.string_value
    if which == "int_value":
        return v.int_value
    if which == "bool_value":
        return v.bool_value
    if which == "double_value":
        return _float_fragment(v.double_value)
    if which == "array_value":
        return [_raw_pb(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _raw_pb(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return None


def value_str_pb(v: Any) -> str:
    """A protobuf AnyValue as pdata's ``AsString()`` writes it."""
    which = v.WhichOneof("value")
    if which == "string_value":
        return v.string_value
    if which == "int_value":
        return str(v.int_value)
    if which == "bool_value":
        return "true" if v.bool_value else "false"
    if which == "double_value":
        return go_float(v.double_value)
    if which in ("array_value", "kvlist_value"):
        try:
            return _go_json(_raw_pb(v))
        except _Unsupported:
            return ""
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return ""


# Rendered non-string, non-int values (doubles, bools, small arrays such as finish_reasons ["stop"])
# keyed by their wire bytes: they repeat across spans, and serializing is cheaper than rendering.
_rendered: dict[bytes, str] = {}
MAX_RENDERED_KEY_BYTES = 256
MAX_RENDERED_ENTRIES = 4096


def _value_str_cached(v: Any) -> str:
    key = v.SerializeToString()
    text = _rendered.get(key)
    if text is None:
        text = value_str_pb(v)
        if len(key) <= MAX_RENDERED_KEY_BYTES:
            if len(_rendered) >= MAX_RENDERED_ENTRIES:
                _rendered.clear()
            _rendered[key] = text
    return text


def attrs_pb(kvs: Iterable[Any]) -> dict[str, str]:
    """Repeated KeyValue -> {key: AsString(value)}; the common string case costs one field read."""
    out: dict[str, str] = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = v.string_value or (str(i) if (i := v.int_value) else _value_str_cached(v))
    return out


# -- garbage collection -----------------------------------------------------------------------------
#
# Decoding allocates a few dicts per span; with the collector on, CPython's generational collections
# triggered by those allocations cost more than the decoding itself (``docs/benchmarks.md``, "Ingest"). The
# rows hold no reference cycles (plain dicts, lists and strings freed by refcount), so the
# collector is paused while a request is decoded and re-enabled when the last decoder finishes.

_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


# -- span validation ----------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class _Window:
    """The accepted start-time window, computed once per request."""

    now_ns: int
    min_start_ns: int
    max_start_ns: int

    @classmethod
    def of(cls, settings: IngestSettings, now_ns: int | None) -> _Window:
        now = time.time_ns() if now_ns is None else now_ns
        return cls(
            now_ns=now,
            min_start_ns=max(1, now - settings.max_age_days * 86_400 * NS_PER_SECOND),
            max_start_ns=now + settings.max_future_skew_seconds * NS_PER_SECOND,
        )


def _span_problem(trace_id: bytes, span_id: bytes, parent: bytes, start: int, end: int,
                  window: _Window) -> tuple[str, str]:
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
    window = _Window.of(settings or IngestSettings(), now_ns)
    min_start, max_start, max_end = window.min_start_ns, window.max_start_ns, MAX_DATETIME64_NS
    kinds, codes = SPAN_KINDS, STATUS_CODES
    zero_trace, zero_span = _ZERO_TRACE_ID, _ZERO_SPAN_ID
    value_str = _value_str_cached
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
    rejections: _Rejections | None = None
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
                        rejections = _Rejections()
                    reason, detail = _span_problem(trace_id, span_id, parent, start, end, window)
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


# -- OTLP/JSON --------------------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], camel: str, snake: str | None = None) -> Any:
    value = obj.get(camel)
    if value is None and snake is not None:
        value = obj.get(snake)
    return value


def _obj(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OTLPDecodeError(f"{path}: expected an object, got {_json_type(value)}")
    return value


def _arr(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise OTLPDecodeError(f"{path}: expected an array, got {_json_type(value)}")
    return value


def _str(value: Any, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise OTLPDecodeError(f"{path}: expected a string, got {_json_type(value)}")
    return value


def _int(value: Any, path: str) -> int:
    """An integer field: a JSON number or a decimal string (64-bit integers travel as strings)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise OTLPDecodeError(f"{path}: expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if number.is_integer():
            return int(number)
    raise OTLPDecodeError(f"{path}: expected an integer (number or decimal string), got {_json_type(value)}")


def _enum(value: Any, names: Mapping[str, int], path: str) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return _int(value, path)


def _double(value: Any, path: str) -> float:
    if isinstance(value, bool):
        raise OTLPDecodeError(f"{path}: expected a number, got a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value)
        if special is not None:
            return special
        try:
            return float(value)
        except ValueError:
            pass
    raise OTLPDecodeError(f"{path}: expected a number, got {_json_type(value)}")


def _bytes_b64(value: Any, path: str) -> bytes:
    text = _str(value, path)
    try:
        if "-" in text or "_" in text:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise OTLPDecodeError(f"{path}: invalid base64") from None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _json_value_kind(obj: Mapping[str, Any]) -> str | None:
    for key in ("stringValue", "intValue", "boolValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue"):
        if key in obj:
            return key
    for snake, key in (("string_value", "stringValue"), ("int_value", "intValue"), ("bool_value", "boolValue"),
                       ("double_value", "doubleValue"), ("array_value", "arrayValue"),
                       ("kvlist_value", "kvlistValue"), ("bytes_value", "bytesValue")):
        if snake in obj:
            return key
    return None


def _json_field(obj: Mapping[str, Any], kind: str) -> Any:
    if kind in obj:
        return obj[kind]
    return obj.get("_".join(_split_camel(kind)))


def _split_camel(name: str) -> list[str]:
    parts, current = [], ""
    for ch in name:
        if ch.isupper():
            parts.append(current)
            current = ch.lower()
        else:
            current += ch
    parts.append(current)
    return parts


def _raw_json(value: Any, path: str) -> Any:
    obj = _obj(value, path)
    kind = _json_value_kind(obj)
    if kind is None:
        return None
    item = _json_field(obj, kind)
    if kind == "stringValue":
        return _str(item, path + ".stringValue")
    if kind == "intValue":
        return _int(item, path + ".intValue")
    if kind == "boolValue":
        return _bool(item, path)
    if kind == "doubleValue":
        return _float_fragment(_double(item, path + ".doubleValue"))
    if kind == "arrayValue":
        values = _arr(_obj(item, path + ".arrayValue").get("values"), path + ".arrayValue.values")
        return [_raw_json(x, f"{path}.arrayValue.values[{i}]") for i, x in enumerate(values)]
    if kind == "kvlistValue":
        values = _arr(_obj(item, path + ".kvlistValue").get("values"), path + ".kvlistValue.values")
        out = {}
        for i, kv in enumerate(values):
            kv_path = f"{path}.kvlistValue.values[{i}]"
            kv = _obj(kv, kv_path)
            out[_str(kv.get("key"), kv_path + ".key")] = _raw_json(kv.get("value"), kv_path + ".value")
        return out
    return base64.b64encode(_bytes_b64(item, path + ".bytesValue")).decode()


def _bool(value: Any, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise OTLPDecodeError(f"{path}.boolValue: expected a boolean, got {_json_type(value)}")
    return value


def value_str_json(value: Any, path: str = "value") -> str:
    """An OTLP/JSON AnyValue object as pdata's ``AsString()`` writes it."""
    obj = _obj(value, path)
    kind = _json_value_kind(obj)
    if kind is None:
        return ""
    item = _json_field(obj, kind)
    if kind == "stringValue":
        return _str(item, path + ".stringValue")
    if kind == "intValue":
        return str(_int(item, path + ".intValue"))
    if kind == "boolValue":
        return "true" if _bool(item, path) else "false"
    if kind == "doubleValue":
        return go_float(_double(item, path + ".doubleValue"))
    if kind in ("arrayValue", "kvlistValue"):
        try:
            return _go_json(_raw_json(obj, path))
        except _Unsupported:
            return ""
    return base64.b64encode(_bytes_b64(item, path + ".bytesValue")).decode()


def attrs_json(value: Any, path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, kv in enumerate(_arr(value, path)):
        kv_path = f"{path}[{i}]"
        kv = _obj(kv, kv_path)
        out[_str(kv.get("key"), kv_path + ".key")] = value_str_json(kv.get("value"), kv_path + ".value")
    return out


def _hex_bytes(value: Any, path: str) -> bytes | None:
    """A hex id; ``None`` when it is not valid hex (the span is then rejected, not the request)."""
    text = _str(value, path)
    if not text:
        return b""
    if len(text) % 2 or not all(c in "0123456789abcdefABCDEF" for c in text):
        return None
    return bytes.fromhex(text)


def decode_json(body: bytes, settings: IngestSettings | None = None, now_ns: int | None = None) -> DecodeResult:
    """Decode an OTLP/JSON ExportTraceServiceRequest body; raises :class:`OTLPDecodeError`."""
    return decode_json_document(body, _rows_from_json, settings, now_ns)


def decode_json_document(body: bytes, build: Callable[[Mapping[str, Any], IngestSettings | None, int | None], R],
                         settings: IngestSettings | None, now_ns: int | None) -> R:
    """An OTLP/JSON body parsed and handed to ``build`` (traces or logs) with the GC paused; a body that is not a
    JSON object, or nests too deep, raises :class:`OTLPDecodeError`."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OTLPDecodeError(f"body is not valid JSON ({len(body)} bytes): {exc}") from None
    try:
        with gc_paused():
            return build(_obj(document, "$"), settings, now_ns)
    except RecursionError:
        raise OTLPDecodeError("AnyValue nesting too deep") from None


def _rows_from_json(document: Mapping[str, Any], settings: IngestSettings | None, now_ns: int | None) -> DecodeResult:
    window = _Window.of(settings or IngestSettings(), now_ns)
    batch = SpanBatch()
    rejections: _Rejections | None = None
    total = 0
    for ri, resource_spans in enumerate(_arr(_get(document, "resourceSpans", "resource_spans"), "resourceSpans")):
        rpath = f"resourceSpans[{ri}]"
        resource_spans = _obj(resource_spans, rpath)
        resource = _obj(resource_spans.get("resource"), rpath + ".resource")
        resource_index = batch.add_resource(attrs_json(resource.get("attributes"), rpath + ".resource.attributes"))
        scope_list = _arr(_get(resource_spans, "scopeSpans", "scope_spans"), rpath + ".scopeSpans")
        for si, scope_spans in enumerate(scope_list):
            spath = f"{rpath}.scopeSpans[{si}]"
            scope_spans = _obj(scope_spans, spath)
            scope = _obj(scope_spans.get("scope"), spath + ".scope")
            scope_index = batch.add_scope(_str(scope.get("name"), spath + ".scope.name"),
                                          _str(scope.get("version"), spath + ".scope.version"))
            spans = _arr(scope_spans.get("spans"), spath + ".spans")
            total += len(spans)
            for ki, span in enumerate(spans):
                path = f"{spath}.spans[{ki}]"
                span = _obj(span, path)
                trace_id = _hex_bytes(_get(span, "traceId", "trace_id"), path + ".traceId")
                span_id = _hex_bytes(_get(span, "spanId", "span_id"), path + ".spanId")
                parent = _hex_bytes(_get(span, "parentSpanId", "parent_span_id"), path + ".parentSpanId")
                start = _int(_get(span, "startTimeUnixNano", "start_time_unix_nano"), path + ".startTimeUnixNano")
                end = _int(_get(span, "endTimeUnixNano", "end_time_unix_nano"), path + ".endTimeUnixNano")
                where = path
                bad_hex = [name for name, raw in (("trace id", trace_id), ("span id", span_id),
                                                  ("parent span id", parent)) if raw is None]
                if bad_hex:
                    rejections = rejections or _Rejections()
                    rejections.add(where, f"invalid {bad_hex[0]}", "not hex")
                    continue
                assert trace_id is not None and span_id is not None and parent is not None
                if (len(trace_id) != 16 or trace_id == _ZERO_TRACE_ID or len(span_id) != 8
                        or span_id == _ZERO_SPAN_ID or start < window.min_start_ns or start > window.max_start_ns
                        or end < start or end > MAX_DATETIME64_NS or (parent and len(parent) != 8)):
                    rejections = rejections or _Rejections()
                    rejections.add(where, *_span_problem(trace_id, span_id, parent, start, end, window))
                    continue
                status = _obj(span.get("status"), path + ".status")
                fields = {
                    "trace_state": _str(_get(span, "traceState", "trace_state"), path + ".traceState"),
                    "name": _str(span.get("name"), path + ".name"),
                    "kind": SPAN_KINDS.get(_enum(span.get("kind"), _SPAN_KIND_NAMES, path + ".kind"), ""),
                    "attributes": attrs_json(span.get("attributes"), path + ".attributes"),
                    "status_code": STATUS_CODES.get(
                        _enum(status.get("code"), _STATUS_CODE_NAMES, path + ".status.code"), ""),
                    "status_message": _str(status.get("message"), path + ".status.message"),
                }
                events = [_obj(e, f"{path}.events[{i}]") for i, e in enumerate(_arr(span.get("events"), path + ".events"))]
                span_events = [
                    (max(0, _int(_get(e, "timeUnixNano", "time_unix_nano"), f"{path}.events[{i}].timeUnixNano")),
                     _str(e.get("name"), f"{path}.events[{i}].name"),
                     attrs_json(e.get("attributes"), f"{path}.events[{i}].attributes"))
                    for i, e in enumerate(events)
                ]
                links = [_obj(link, f"{path}.links[{i}]") for i, link in enumerate(_arr(span.get("links"), path + ".links"))]
                span_links = []
                for i, link in enumerate(links):
                    tid = _hex_bytes(_get(link, "traceId", "trace_id"), f"{path}.links[{i}].traceId")
                    sid = _hex_bytes(_get(link, "spanId", "span_id"), f"{path}.links[{i}].spanId")
                    span_links.append((
                        _hex_id(tid or b"", _ZERO_TRACE_ID), _hex_id(sid or b"", _ZERO_SPAN_ID),
                        _str(_get(link, "traceState", "trace_state"), f"{path}.links[{i}].traceState"),
                        attrs_json(link.get("attributes"), f"{path}.links[{i}].attributes")))
                batch.append(start_ns=start, end_ns=end, trace_id=trace_id.hex(), span_id=span_id.hex(),
                             parent_span_id=_hex_id(parent, _ZERO_SPAN_ID), resource=resource_index,
                             scope=scope_index, events=span_events, links=span_links, **fields)
    if rejections is None:
        return DecodeResult(batch)
    return DecodeResult(batch, rejections.count, rejections.message(total))
