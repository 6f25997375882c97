"""Attribute values as the OpenTelemetry Collector's pdata renders them (``Value.AsString()``), which is how the
contrib ClickHouse exporter writes them into ``otel_traces``: strings as they are, ints in decimal, bools
``true``/``false``, doubles like Go's ``encoding/json``, arrays and key/value lists as compact JSON (map keys sorted,
``<``/``>``/``&`` escaped), bytes as standard base64. The Go formatting here serves both encodings; the protobuf
``AnyValue`` is read here too (the JSON one in :mod:`detector.ingest.otlp_json`)."""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import orjson

__all__ = [
    "MAX_RENDERED_ENTRIES", "MAX_RENDERED_KEY_BYTES", "UnsupportedValue", "attrs_pb", "float_fragment", "go_float",
    "go_json", "value_str_cached", "value_str_pb",
]

# encoding/json escapes these (HTML safety and JavaScript line terminators); orjson does not.
_GO_JSON_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


class UnsupportedValue(Exception):
    """A NaN or infinite double inside an array or kvlist: encoding/json refuses it, AsString gives ''."""


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


def go_json(raw: Any) -> str:
    """Compact JSON the way Go's ``json.Marshal`` writes an ``AsRaw()`` value."""
    return orjson.dumps(raw, option=orjson.OPT_SORT_KEYS).decode().translate(_GO_JSON_ESCAPES)


def float_fragment(value: float) -> orjson.Fragment:
    if value != value or value in (math.inf, -math.inf):
        raise UnsupportedValue
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
        return float_fragment(v.double_value)
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
            return go_json(_raw_pb(v))
        except UnsupportedValue:
            return ""
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return ""


# Rendered non-string, non-int values (doubles, bools, small arrays such as finish_reasons ["stop"])
# keyed by their wire bytes: they repeat across spans, and serializing is cheaper than rendering.
_rendered: dict[bytes, str] = {}
MAX_RENDERED_KEY_BYTES = 256
MAX_RENDERED_ENTRIES = 4096


def value_str_cached(v: Any) -> str:
    """:func:`value_str_pb`, remembered by the value's wire bytes (the trace decoder's hot path)."""
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
        out[kv.key] = v.string_value or (str(i) if (i := v.int_value) else value_str_cached(v))
    return out
