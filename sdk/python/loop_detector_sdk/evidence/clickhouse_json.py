"""JSON as ClickHouse's JSON functions read and re-serialize it (``JSONType``, ``JSONExtractRaw``,
``JSONExtractKeysAndValuesRaw``, and ``toString`` of the sorted key/value pairs), so that the app gives a tool's
arguments or an observation the same canonical text the service's SQL builds from the same JSON.

What ClickHouse does (measured on chDB 26.9, ``tests/sdk/test_sdk_evidence_clickhouse.py`` keeps it so):

* a document is valid when the whole text is one JSON value (whitespace around it, a leading byte order mark);
  NaN, infinities, a number beyond the doubles (``1e400``), a lone surrogate escape, a raw control character in a
  string, trailing commas or text make it invalid;
* re-serialized: no whitespace, object keys in their order (duplicates kept), strings with ``"``, ``\\``, ``\\b``,
  ``\\f``, ``\\n``, ``\\r``, ``\\t`` escaped, other control characters as ``\\u00XX`` (upper-case hex), U+2028 and
  U+2029 as ``\\u2028`` / ``\\u2029``, everything else raw UTF-8 (``\\/`` and ``\\u00e9`` become ``/`` and ``é``);
* integers that fit 64 bits (signed, or unsigned) as they are (``-0`` as ``0``); a longer integer as a JSON
  *string* of its digits; every other number as a double, written as ECMAScript writes it except that the
  exponent has no ``+`` (``1e21``, ``1.5e-7``) and negative zero stays ``-0``;
* ``toString(arraySort(JSONExtractKeysAndValuesRaw(x)))``: the pairs sorted (by key, then raw value, as bytes)
  and written ``[('key','raw'),...]``, with ``\\``, ``'``, NUL, ``\\b``, ``\\t``, ``\\n``, ``\\f``, ``\\r``
  escaped by a backslash.
"""

from __future__ import annotations

import json
from typing import Any

from loop_detector_sdk.evidence.numbers import js_number

__all__ = ["ENCODER", "Pairs", "document_raw", "number_text", "object_pairs", "pairs_text", "value_raw"]

Pairs = list[tuple[str, str]]

_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1


class _Invalid(ValueError):
    """Not a document ClickHouse's JSON functions accept."""


class _Object(list):  # type: ignore[type-arg]
    """An object's (key, value) pairs in their order, duplicates kept."""


class _BigInt(str):
    """An integer beyond 64 bits: ClickHouse writes it as a string of its digits."""


def _parse_int(text: str) -> int | _BigInt:
    value = int(text)
    return value if _I64_MIN <= value <= _U64_MAX else _BigInt(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Invalid("number out of range")
    return value


def _no_constant(name: str) -> Any:
    raise _Invalid(f"{name} is not JSON")


def _parse(text: str) -> Any:
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(text, object_pairs_hook=_Object, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise _Invalid(str(exc)) from None


_ESCAPES = {i: f"\\u{i:04X}" for i in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x5C: "\\\\",
                 0x2028: "\\u2028", 0x2029: "\\u2029"})


def _string(value: str) -> str:
    for ch in value:
        if "\ud800" <= ch <= "\udfff":
            raise _Invalid("lone surrogate")
    return '"' + value.translate(_ESCAPES) + '"'


def number_text(value: float) -> str:
    """A double as ClickHouse writes it in JSON: ECMAScript's layout, the exponent without ``+``, ``-0`` kept."""
    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    return js_number(value).replace("e+", "e")


def _write(value: Any, out: list[str]) -> None:
    t = type(value)
    if t is str:
        out.append(_string(value))
    elif t is _Object:
        out.append("{")
        for i, (key, item) in enumerate(value):
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif t is list:
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif t is _BigInt:
        out.append('"' + value + '"')
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif t is int:
        out.append(str(value))
    else:
        out.append(number_text(value))


def _raw(value: Any) -> str:
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def document_raw(text: str) -> str | None:
    """The text ClickHouse re-serializes a JSON document to (``JSONExtractRaw(text)``); None when it is not one."""
    try:
        return _raw(_parse(text))
    except (_Invalid, RecursionError):
        return None


def object_pairs(text: str) -> Pairs | None:
    """``arraySort(JSONExtractKeysAndValuesRaw(text))`` when ``text`` is a JSON object (``JSONType = 'Object'``),
    else None."""
    try:
        value = _parse(text)
        if type(value) is not _Object:
            return None
        pairs = [(key, _raw(item)) for key, item in value]
        for key, _ in pairs:
            _string(key)  # a lone surrogate in a key makes the document invalid too
    except (_Invalid, RecursionError):
        return None
    pairs.sort()  # code point order of str is byte order of UTF-8
    return pairs


_QUOTED = {0x5C: "\\\\", 0x27: "\\'", 0x00: "\\0", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}


def pairs_text(pairs: Pairs) -> str:
    """``toString`` of an ``Array(Tuple(String, String))``: ``[('key','value'),...]``."""
    return "[" + ",".join(f"('{k.translate(_QUOTED)}','{v.translate(_QUOTED)}')" for k, v in pairs) + "]"


_RAW_CACHE: dict[str, str] = {}
ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str)  # built once: the C encoder


def value_raw(value: Any) -> str:
    """The raw text of a Python value as an instrumentation serializes it (``json.dumps``) and ClickHouse
    re-serializes it: what ``JSONExtractRaw`` gives for a message field holding ``value``. A value JSON cannot
    write is written by ``str``. (Cached by the serialized text: a conversation sends its history again with
    every call.)"""
    try:
        text = ENCODER.encode(value)
    except (ValueError, TypeError, RecursionError):
        return ENCODER.encode(str(value))
    raw = _RAW_CACHE.get(text)
    if raw is None:
        parsed = document_raw(text)
        raw = parsed if parsed is not None else text
        if len(text) <= 16_384:
            if len(_RAW_CACHE) >= 2048:
                _RAW_CACHE.clear()
            _RAW_CACHE[text] = raw
    return raw
