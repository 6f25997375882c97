"""OTLP/JSON read the way the collector's decoder reads it: lowerCamelCase keys (snake_case accepted), 64-bit
integers as strings or numbers, enums as integers or names, ids as hex, ``AnyValue`` objects; a value of the wrong
JSON type refuses the whole request with its path (``resourceSpans[0].scopeSpans[1].spans[2].startTimeUnixNano``).
Shared by the trace and the log decoders."""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import orjson

from detector.ingest.decoding import OTLPDecodeError, gc_paused
from detector.ingest.otlp_values import UnsupportedValue, float_fragment, go_float, go_json
from detector.settings.service_settings import IngestSettings

R = TypeVar("R")  # what a JSON body is built into (decode_json_document)

__all__ = [
    "as_array", "as_bool", "as_bytes", "as_double", "as_enum", "as_int", "as_object", "as_str", "attrs_json",
    "decode_json_document", "hex_bytes", "member", "value_str_json",
]


def member(obj: Mapping[str, Any], camel: str, snake: str | None = None) -> Any:
    value = obj.get(camel)
    if value is None and snake is not None:
        value = obj.get(snake)
    return value


def as_object(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OTLPDecodeError(f"{path}: expected an object, got {_json_type(value)}")
    return value


def as_array(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise OTLPDecodeError(f"{path}: expected an array, got {_json_type(value)}")
    return value


def as_str(value: Any, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise OTLPDecodeError(f"{path}: expected a string, got {_json_type(value)}")
    return value


def as_int(value: Any, path: str) -> int:
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


def as_enum(value: Any, names: Mapping[str, int], path: str) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return as_int(value, path)


def as_double(value: Any, path: str) -> float:
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


def as_bytes(value: Any, path: str) -> bytes:
    text = as_str(value, path)
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
    obj = as_object(value, path)
    kind = _json_value_kind(obj)
    if kind is None:
        return None
    item = _json_field(obj, kind)
    if kind == "stringValue":
        return as_str(item, path + ".stringValue")
    if kind == "intValue":
        return as_int(item, path + ".intValue")
    if kind == "boolValue":
        return as_bool(item, path)
    if kind == "doubleValue":
        return float_fragment(as_double(item, path + ".doubleValue"))
    if kind == "arrayValue":
        values = as_array(as_object(item, path + ".arrayValue").get("values"), path + ".arrayValue.values")
        return [_raw_json(x, f"{path}.arrayValue.values[{i}]") for i, x in enumerate(values)]
    if kind == "kvlistValue":
        values = as_array(as_object(item, path + ".kvlistValue").get("values"), path + ".kvlistValue.values")
        out = {}
        for i, kv in enumerate(values):
            kv_path = f"{path}.kvlistValue.values[{i}]"
            kv = as_object(kv, kv_path)
            out[as_str(kv.get("key"), kv_path + ".key")] = _raw_json(kv.get("value"), kv_path + ".value")
        return out
    return base64.b64encode(as_bytes(item, path + ".bytesValue")).decode()


def as_bool(value: Any, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise OTLPDecodeError(f"{path}.boolValue: expected a boolean, got {_json_type(value)}")
    return value


def value_str_json(value: Any, path: str = "value") -> str:
    """An OTLP/JSON AnyValue object as pdata's ``AsString()`` writes it."""
    obj = as_object(value, path)
    kind = _json_value_kind(obj)
    if kind is None:
        return ""
    item = _json_field(obj, kind)
    if kind == "stringValue":
        return as_str(item, path + ".stringValue")
    if kind == "intValue":
        return str(as_int(item, path + ".intValue"))
    if kind == "boolValue":
        return "true" if as_bool(item, path) else "false"
    if kind == "doubleValue":
        return go_float(as_double(item, path + ".doubleValue"))
    if kind in ("arrayValue", "kvlistValue"):
        try:
            return go_json(_raw_json(obj, path))
        except UnsupportedValue:
            return ""
    return base64.b64encode(as_bytes(item, path + ".bytesValue")).decode()


def attrs_json(value: Any, path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, kv in enumerate(as_array(value, path)):
        kv_path = f"{path}[{i}]"
        kv = as_object(kv, kv_path)
        out[as_str(kv.get("key"), kv_path + ".key")] = value_str_json(kv.get("value"), kv_path + ".value")
    return out


def hex_bytes(value: Any, path: str) -> bytes | None:
    """A hex id; ``None`` when it is not valid hex (the span is then rejected, not the request)."""
    text = as_str(value, path)
    if not text:
        return b""
    if len(text) % 2 or not all(c in "0123456789abcdefABCDEF" for c in text):
        return None
    return bytes.fromhex(text)


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
            return build(as_object(document, "$"), settings, now_ns)
    except RecursionError:
        raise OTLPDecodeError("AnyValue nesting too deep") from None
