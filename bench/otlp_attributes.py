"""An OTLP ``KeyValue`` from a plain value, for the benches that build their spans as protobuf by hand."""

from __future__ import annotations

from opentelemetry.proto.common.v1.common_pb2 import KeyValue

__all__ = ["key_value"]


def key_value(key: str, value: object) -> KeyValue:
    """``value`` as the ``AnyValue`` of its type: bool, int, double, a list of strings, else a string."""
    kv = KeyValue(key=key)
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    elif isinstance(value, list):
        for item in value:
            kv.value.array_value.values.add(string_value=item)
    else:
        kv.value.string_value = str(value)
    return kv
