"""Decoded spans as the columns of ``otel.otel_traces``, handed to the store as one Arrow table.

Why columns, and why Arrow: chDB parses a GenAI span sent as JSONEachRow (1-2 KB of escaped JSON: the
messages are JSON inside a JSON string) several times slower than it reads the same span from an Arrow table,
and that parse alone bounded the insert rate (``docs/benchmarks.md``, "Ingest"). Building the table costs the
decoder about what ``orjson`` did, because
the decoder appends straight into these lists: no dict is built per span, the resource attributes are
converted once per resource (not once per span), and timestamps stay integers (Arrow ``timestamp[ns]``
is ClickHouse's ``DateTime64(9)``).

:meth:`SpanBatch.rows` gives the same spans as the row dicts the contrib exporter would write (for
tests and for reading a batch by eye); the insert path never builds them.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

__all__ = [
    "Event", "Link", "MAX_DATETIME64_NS", "NS_PER_SECOND", "SpanBatch", "TRACES_COLUMNS", "TRACES_SCHEMA",
    "format_timestamp",
]

NS_PER_SECOND = 1_000_000_000
# DateTime64(9) ends at 2262-04-11 23:47:16.854775807: later event timestamps are clamped to it.
MAX_DATETIME64_NS = 2**63 - 1

# otel.otel_traces, in table order (clickhouse/001_otel_traces.sql)
TRACES_COLUMNS = (
    "Timestamp", "TraceId", "SpanId", "ParentSpanId", "TraceState", "SpanName", "SpanKind", "ServiceName",
    "ResourceAttributes", "ScopeName", "ScopeVersion", "SpanAttributes", "Duration", "StatusCode",
    "StatusMessage", "Events.Timestamp", "Events.Name", "Events.Attributes", "Links.TraceId", "Links.SpanId",
    "Links.TraceState", "Links.Attributes",
)

_TIMESTAMP = pa.timestamp("ns", tz="UTC")
_ATTRIBUTES = pa.map_(pa.string(), pa.string())
TRACES_SCHEMA = pa.schema([
    ("Timestamp", _TIMESTAMP), ("TraceId", pa.string()), ("SpanId", pa.string()), ("ParentSpanId", pa.string()),
    ("TraceState", pa.string()), ("SpanName", pa.string()), ("SpanKind", pa.string()), ("ServiceName", pa.string()),
    ("ResourceAttributes", _ATTRIBUTES), ("ScopeName", pa.string()), ("ScopeVersion", pa.string()),
    ("SpanAttributes", _ATTRIBUTES), ("Duration", pa.uint64()), ("StatusCode", pa.string()),
    ("StatusMessage", pa.string()), ("Events.Timestamp", pa.list_(_TIMESTAMP)), ("Events.Name", pa.list_(pa.string())),
    ("Events.Attributes", pa.list_(_ATTRIBUTES)), ("Links.TraceId", pa.list_(pa.string())),
    ("Links.SpanId", pa.list_(pa.string())), ("Links.TraceState", pa.list_(pa.string())),
    ("Links.Attributes", pa.list_(_ATTRIBUTES)),
])
assert tuple(TRACES_SCHEMA.names) == TRACES_COLUMNS

Event = tuple[int, str, dict[str, str]]  # time (unix ns), name, attributes
Link = tuple[str, str, str, dict[str, str]]  # trace id, span id (hex, '' when absent), trace state, attributes


class SpanBatch:
    """Accepted spans, column by column. The decoders append to the lists directly (the hot path);
    every per-span list has one entry per span, in order."""

    __slots__ = (
        "start_ns", "trace_id", "span_id", "parent_span_id", "trace_state", "name", "kind", "resource", "scope",
        "attr_offsets", "attr_keys", "attr_values", "duration", "status_code", "status_message",
        "resources", "scopes", "events", "links",
    )

    def __init__(self) -> None:
        self.start_ns: list[int] = []
        self.trace_id: list[str] = []
        self.span_id: list[str] = []
        self.parent_span_id: list[str] = []
        self.trace_state: list[str] = []
        self.name: list[str] = []
        self.kind: list[str] = []
        self.resource: list[int] = []  # index into resources
        self.scope: list[int] = []  # index into scopes
        # span attributes, flattened: span i's are keys/values[attr_offsets[i]:attr_offsets[i + 1]]
        self.attr_offsets: list[int] = [0]
        self.attr_keys: list[str] = []
        self.attr_values: list[str] = []
        self.duration: list[int] = []
        self.status_code: list[str] = []
        self.status_message: list[str] = []
        self.resources: list[dict[str, str]] = []
        self.scopes: list[tuple[str, str]] = []  # (name, version)
        # sparse: most GenAI spans have neither events nor links
        self.events: dict[int, list[Event]] = {}
        self.links: dict[int, list[Link]] = {}

    def __len__(self) -> int:
        return len(self.start_ns)

    def add_resource(self, attributes: dict[str, str]) -> int:
        self.resources.append(attributes)
        return len(self.resources) - 1

    def add_scope(self, name: str, version: str) -> int:
        self.scopes.append((name, version))
        return len(self.scopes) - 1

    def append(self, *, start_ns: int, end_ns: int, trace_id: str, span_id: str, parent_span_id: str,
               trace_state: str, name: str, kind: str, resource: int, scope: int, attributes: dict[str, str],
               status_code: str, status_message: str, events: list[Event], links: list[Link]) -> None:
        """One span (the OTLP/JSON decoder's way in; the protobuf loop inlines the same appends)."""
        index = len(self.start_ns)
        self.start_ns.append(start_ns)
        self.trace_id.append(trace_id)
        self.span_id.append(span_id)
        self.parent_span_id.append(parent_span_id)
        self.trace_state.append(trace_state)
        self.name.append(name)
        self.kind.append(kind)
        self.resource.append(resource)
        self.scope.append(scope)
        self.attr_keys.extend(attributes)
        self.attr_values.extend(attributes.values())
        self.attr_offsets.append(len(self.attr_keys))
        self.duration.append(end_ns - start_ns)
        self.status_code.append(status_code)
        self.status_message.append(status_message)
        if events:
            self.events[index] = events
        if links:
            self.links[index] = links

    # -- Arrow -------------------------------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        """The batch as a table of ``otel.otel_traces``' columns (names and order), ready to insert."""
        n = len(self.start_ns)
        resource_index = pa.array(self.resource, pa.int32())
        scope_index = pa.array(self.scope, pa.int32())
        string = pa.string()
        columns = [
            pa.array(self.start_ns, pa.int64()).cast(_TIMESTAMP),
            pa.array(self.trace_id, string),
            pa.array(self.span_id, string),
            pa.array(self.parent_span_id, string),
            pa.array(self.trace_state, string),
            pa.array(self.name, string),
            pa.array(self.kind, string),
            pa.array([r.get("service.name", "") for r in self.resources], string).take(resource_index),
            _map_array(self.resources).take(resource_index),
            pa.array([s[0] for s in self.scopes], string).take(scope_index),
            pa.array([s[1] for s in self.scopes], string).take(scope_index),
            pa.MapArray.from_arrays(pa.array(self.attr_offsets, pa.int32()), pa.array(self.attr_keys, string),
                                    pa.array(self.attr_values, string)),
            pa.array(self.duration, pa.uint64()),
            pa.array(self.status_code, string),
            pa.array(self.status_message, string),
        ]
        events, links = self.events, self.links
        columns += [
            _list_array(n, events, lambda es: [min(e[0], MAX_DATETIME64_NS) for e in es], pa.int64(), _TIMESTAMP),
            _list_array(n, events, lambda es: [e[1] for e in es], string),
            _list_array(n, events, lambda es: [e[2] for e in es], None),
            _list_array(n, links, lambda ls: [link[0] for link in ls], string),
            _list_array(n, links, lambda ls: [link[1] for link in ls], string),
            _list_array(n, links, lambda ls: [link[2] for link in ls], string),
            _list_array(n, links, lambda ls: [link[3] for link in ls], None),
        ]
        return pa.Table.from_arrays(columns, schema=TRACES_SCHEMA)

    # -- rows ----------------------------------------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        """The spans as the row dicts the contrib exporter writes (timestamps as ``DateTime64(9)`` text)."""
        out = []
        for i in range(len(self.start_ns)):
            resource = self.resources[self.resource[i]]
            scope_name, scope_version = self.scopes[self.scope[i]]
            lo, hi = self.attr_offsets[i], self.attr_offsets[i + 1]
            events = self.events.get(i, [])
            links = self.links.get(i, [])
            out.append({
                "Timestamp": format_timestamp(self.start_ns[i]),
                "TraceId": self.trace_id[i],
                "SpanId": self.span_id[i],
                "ParentSpanId": self.parent_span_id[i],
                "TraceState": self.trace_state[i],
                "SpanName": self.name[i],
                "SpanKind": self.kind[i],
                "ServiceName": resource.get("service.name", ""),
                "ResourceAttributes": resource,
                "ScopeName": scope_name,
                "ScopeVersion": scope_version,
                "SpanAttributes": dict(zip(self.attr_keys[lo:hi], self.attr_values[lo:hi], strict=True)),
                "Duration": self.duration[i],
                "StatusCode": self.status_code[i],
                "StatusMessage": self.status_message[i],
                "Events.Timestamp": [format_timestamp(e[0]) for e in events],
                "Events.Name": [e[1] for e in events],
                "Events.Attributes": [e[2] for e in events],
                "Links.TraceId": [link[0] for link in links],
                "Links.SpanId": [link[1] for link in links],
                "Links.TraceState": [link[2] for link in links],
                "Links.Attributes": [link[3] for link in links],
            })
        return out


def _map_array(maps: list[dict[str, str]]) -> pa.MapArray:
    offsets, keys, values = [0], [], []
    for m in maps:
        keys.extend(m)
        values.extend(m.values())
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(values, pa.string()))


def _list_array(n: int, sparse: dict[int, list[Any]], items: Any, value_type: pa.DataType | None,
                 cast_to: pa.DataType | None = None) -> pa.ListArray:
    """A list column of ``n`` rows from {row: its entries} (rows not in ``sparse`` get an empty list);
    ``items`` picks the values out of one row's entries; ``value_type`` None means attribute maps."""
    offsets = [0] * (n + 1)
    flat: list[Any] = []
    if sparse:
        end = 0
        for i in range(n):
            entries = sparse.get(i)
            if entries:
                flat.extend(items(entries))
                end = len(flat)
            offsets[i + 1] = end
    values = _map_array(flat) if value_type is None else pa.array(flat, value_type)
    if cast_to is not None:
        values = values.cast(cast_to)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


# -- timestamps ----------------------------------------------------------------------------------------

_second_prefixes: dict[int, str] = {}


def format_timestamp(ns: int) -> str:
    """Unix nanoseconds -> ``YYYY-MM-DD HH:MM:SS.nnnnnnnnn`` (UTC), the DateTime64(9) text form."""
    if ns > MAX_DATETIME64_NS:
        ns = MAX_DATETIME64_NS
    seconds, fraction = divmod(ns, NS_PER_SECOND)
    prefix = _second_prefixes.get(seconds)
    if prefix is None:
        if len(_second_prefixes) >= 100_000:
            _second_prefixes.clear()
        t = time.gmtime(seconds)
        prefix = (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d} "
                  f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.")
        _second_prefixes[seconds] = prefix
    return f"{prefix}{fraction:09d}"
