"""Decode OTLP log export requests into ``otel.otel_logs`` rows (an Arrow table), and count metric points.

Both OTLP encodings are accepted, as for traces (:mod:`detector.ingest.otlp`): protobuf
``ExportLogsServiceRequest`` and OTLP/JSON. Each log record becomes one row written the way the contrib
ClickHouse exporter writes it (``exporter_logs.go``):

- ``Timestamp``: the record's ``time_unix_nano``, else its ``observed_time_unix_nano`` (the exporter's rule);
  a record with neither gets the time it was received (the exporter would write 1970-01-01);
- ``TraceId`` / ``SpanId`` as lowercase hex, ``''`` when absent or all zero (``TraceIDToHexOrEmptyString``);
- ``TraceFlags`` the low byte of ``flags``; ``SeverityText``, ``SeverityNumber``;
- ``ServiceName`` from the resource's ``service.name``; ``Body`` and every attribute as pdata's
  ``AsString()`` renders them (the same rendering as span attributes);
- ``EventName``: the record's ``event_name`` field, else its ``event.name`` attribute (how SDKs before the
  field existed named events).

Records are rejected one by one (the rest of the request is kept): a trace id that is not 16 bytes, a span id
that is not 8 bytes, a span id without a trace id, a timestamp further in the future than
``max_future_skew_seconds`` or older than ``max_age_days``. Attribute and body values are never logged.

GenAI content in logs (``gen_ai.client.inference.operation.details``, per-message events) is joined to its span
by trace and span id when the detection cycle normalizes the span (``clickhouse/genai_calls_normalized.sql.tmpl``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from detector.ingest.decoding import OTLPDecodeError, gc_paused
from detector.ingest.otlp import Rejections, SpanWindow
from detector.ingest.otlp_json import (
    as_array,
    as_int,
    as_object,
    as_str,
    attrs_json,
    decode_json_document,
    hex_bytes,
    member,
    value_str_json,
)
from detector.ingest.otlp_values import attrs_pb, value_str_pb
from detector.ingest.spans import MAX_DATETIME64_NS
from detector.settings.service_settings import IngestSettings

__all__ = [
    "LOGS_COLUMNS", "LOGS_SCHEMA", "LOGS_TABLE", "LogBatch", "LogDecodeResult", "METRICS_REFUSED",
    "count_metric_points_json",
    "count_metric_points_pb", "decode_logs_json", "decode_logs_protobuf", "event_name_of",
]

LOGS_TABLE = "otel.otel_logs"

# the columns the exporter inserts (logs_insert.sql, with the optional EventName), in that order
LOGS_COLUMNS = (
    "Timestamp", "TraceId", "SpanId", "TraceFlags", "SeverityText", "SeverityNumber", "ServiceName", "Body",
    "ResourceSchemaUrl", "ResourceAttributes", "ScopeSchemaUrl", "ScopeName", "ScopeVersion", "ScopeAttributes",
    "LogAttributes", "EventName",
)
_TIMESTAMP = pa.timestamp("ns", tz="UTC")
_ATTRIBUTES = pa.map_(pa.string(), pa.string())
LOGS_SCHEMA = pa.schema([
    ("Timestamp", _TIMESTAMP), ("TraceId", pa.string()), ("SpanId", pa.string()), ("TraceFlags", pa.uint8()),
    ("SeverityText", pa.string()), ("SeverityNumber", pa.uint8()), ("ServiceName", pa.string()),
    ("Body", pa.string()), ("ResourceSchemaUrl", pa.string()), ("ResourceAttributes", _ATTRIBUTES),
    ("ScopeSchemaUrl", pa.string()), ("ScopeName", pa.string()), ("ScopeVersion", pa.string()),
    ("ScopeAttributes", _ATTRIBUTES), ("LogAttributes", _ATTRIBUTES), ("EventName", pa.string()),
])
assert tuple(LOGS_SCHEMA.names) == LOGS_COLUMNS

_ZERO_TRACE_ID = bytes(16)
_ZERO_SPAN_ID = bytes(8)
EVENT_NAME_ATTRIBUTE = "event.name"


def event_name_of(event_name: str, attributes: Mapping[str, str]) -> str:
    """The record's event name: the OTLP field, else the older ``event.name`` attribute."""
    return event_name or attributes.get(EVENT_NAME_ATTRIBUTE, "")


@dataclass(slots=True)
class LogBatch:
    """Accepted log records as rows of ``otel.otel_logs`` columns."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def to_arrow(self) -> pa.Table:
        columns = list(zip(*self.rows, strict=True)) if self.rows else [[] for _ in LOGS_COLUMNS]
        arrays = []
        for (name, kind), values in zip(zip(LOGS_SCHEMA.names, LOGS_SCHEMA.types, strict=True), columns, strict=True):
            if name == "Timestamp":
                arrays.append(pa.array(list(values), pa.int64()).cast(_TIMESTAMP))
            elif kind == _ATTRIBUTES:
                arrays.append(pa.array([list(m.items()) for m in values], _ATTRIBUTES))
            else:
                arrays.append(pa.array(list(values), kind))
        return pa.Table.from_arrays(arrays, schema=LOGS_SCHEMA)

    def dicts(self) -> list[dict[str, Any]]:
        """The rows as dicts (tests)."""
        return [dict(zip(LOGS_COLUMNS, row, strict=True)) for row in self.rows]


@dataclass(slots=True)
class LogDecodeResult:
    logs: LogBatch = field(default_factory=LogBatch)
    rejected: int = 0
    error_message: str = ""

    @property
    def accepted(self) -> int:
        return len(self.logs)


def _record_problem(trace_id: bytes, span_id: bytes, ts: int, window: SpanWindow) -> tuple[str, str] | None:
    if trace_id and len(trace_id) != 16:
        return "invalid trace id", f"{len(trace_id)} bytes, want 16"
    if span_id and len(span_id) != 8:
        return "invalid span id", f"{len(span_id)} bytes, want 8"
    if span_id and span_id != _ZERO_SPAN_ID and (not trace_id or trace_id == _ZERO_TRACE_ID):
        return "span id without a trace id", ""
    if ts > window.max_start_ns:
        return "timestamp too far in the future", f"{(ts - window.now_ns) // 1_000_000_000} s ahead"
    if ts < window.min_start_ns:
        return "timestamp too old", f"{(window.now_ns - ts) // 86_400_000_000_000} days ago"
    return None


def _hex(raw: bytes, zero: bytes) -> str:
    return raw.hex() if raw and raw != zero else ""


def _message(rejections: Rejections, total: int) -> str:
    return rejections.message(total).replace(" spans ", " log records ", 1)


def decode_logs_protobuf(body: bytes, settings: IngestSettings | None = None,
                         now_ns: int | None = None) -> LogDecodeResult:
    """Decode a binary protobuf ExportLogsServiceRequest; raises :class:`OTLPDecodeError`."""
    try:
        request = ExportLogsServiceRequest.FromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise OTLPDecodeError(
            f"body is not a valid protobuf ExportLogsServiceRequest ({len(body)} bytes): {exc}") from None
    with gc_paused():
        return logs_from_request(request, settings, now_ns)


def logs_from_request(request: ExportLogsServiceRequest, settings: IngestSettings | None = None,
                      now_ns: int | None = None) -> LogDecodeResult:
    window = SpanWindow.of(settings or IngestSettings(), now_ns)
    batch = LogBatch()
    rejections: Rejections | None = None
    total = 0
    for ri, resource_logs in enumerate(request.resource_logs):
        resource = attrs_pb(resource_logs.resource.attributes)
        service = resource.get("service.name", "")
        for si, scope_logs in enumerate(resource_logs.scope_logs):
            scope = scope_logs.scope
            scope_attrs = attrs_pb(scope.attributes)
            total += len(scope_logs.log_records)
            for ki, record in enumerate(scope_logs.log_records):
                trace_id, span_id = record.trace_id, record.span_id
                ts = record.time_unix_nano or record.observed_time_unix_nano or window.now_ns
                problem = _record_problem(trace_id, span_id, ts, window)
                if problem is not None:
                    rejections = rejections or Rejections()
                    rejections.add(f"resource_logs[{ri}].scope_logs[{si}].log_records[{ki}]", *problem)
                    continue
                attributes = attrs_pb(record.attributes)
                batch.rows.append((
                    min(ts, MAX_DATETIME64_NS), _hex(trace_id, _ZERO_TRACE_ID), _hex(span_id, _ZERO_SPAN_ID),
                    record.flags & 0xFF, record.severity_text, min(max(record.severity_number, 0), 255), service,
                    value_str_pb(record.body), resource_logs.schema_url, resource, scope_logs.schema_url,
                    scope.name, scope.version, scope_attrs, attributes,
                    event_name_of(record.event_name, attributes),
                ))
    if rejections is None:
        return LogDecodeResult(batch)
    return LogDecodeResult(batch, rejections.count, _message(rejections, total))


def decode_logs_json(body: bytes, settings: IngestSettings | None = None, now_ns: int | None = None) -> LogDecodeResult:
    """Decode an OTLP/JSON ExportLogsServiceRequest; raises :class:`OTLPDecodeError`."""
    return decode_json_document(body, _logs_from_json, settings, now_ns)


def _logs_from_json(document: Mapping[str, Any], settings: IngestSettings | None, now_ns: int | None) -> LogDecodeResult:
    window = SpanWindow.of(settings or IngestSettings(), now_ns)
    batch = LogBatch()
    rejections: Rejections | None = None
    total = 0
    for ri, resource_logs in enumerate(as_array(member(document, "resourceLogs", "resource_logs"), "resourceLogs")):
        rpath = f"resourceLogs[{ri}]"
        resource_logs = as_object(resource_logs, rpath)
        resource_obj = as_object(resource_logs.get("resource"), rpath + ".resource")
        resource = attrs_json(resource_obj.get("attributes"), rpath + ".resource.attributes")
        service = resource.get("service.name", "")
        resource_url = as_str(member(resource_logs, "schemaUrl", "schema_url"), rpath + ".schemaUrl")
        for si, scope_logs in enumerate(as_array(member(resource_logs, "scopeLogs", "scope_logs"), rpath + ".scopeLogs")):
            spath = f"{rpath}.scopeLogs[{si}]"
            scope_logs = as_object(scope_logs, spath)
            scope = as_object(scope_logs.get("scope"), spath + ".scope")
            scope_attrs = attrs_json(scope.get("attributes"), spath + ".scope.attributes")
            scope_url = as_str(member(scope_logs, "schemaUrl", "schema_url"), spath + ".schemaUrl")
            records = as_array(member(scope_logs, "logRecords", "log_records"), spath + ".logRecords")
            total += len(records)
            for ki, record in enumerate(records):
                path = f"{spath}.logRecords[{ki}]"
                record = as_object(record, path)
                trace_id = hex_bytes(member(record, "traceId", "trace_id"), path + ".traceId")
                span_id = hex_bytes(member(record, "spanId", "span_id"), path + ".spanId")
                if trace_id is None or span_id is None:
                    rejections = rejections or Rejections()
                    rejections.add(path, f"invalid {'trace' if trace_id is None else 'span'} id", "not hex")
                    continue
                ts = (as_int(member(record, "timeUnixNano", "time_unix_nano"), path + ".timeUnixNano")
                      or as_int(member(record, "observedTimeUnixNano", "observed_time_unix_nano"),
                              path + ".observedTimeUnixNano") or window.now_ns)
                problem = _record_problem(trace_id, span_id, ts, window)
                if problem is not None:
                    rejections = rejections or Rejections()
                    rejections.add(path, *problem)
                    continue
                attributes = attrs_json(record.get("attributes"), path + ".attributes")
                body_value = record.get("body")
                batch.rows.append((
                    min(ts, MAX_DATETIME64_NS), _hex(trace_id, _ZERO_TRACE_ID), _hex(span_id, _ZERO_SPAN_ID),
                    as_int(record.get("flags"), path + ".flags") & 0xFF,
                    as_str(member(record, "severityText", "severity_text"), path + ".severityText"),
                    min(max(_severity(member(record, "severityNumber", "severity_number"), path), 0), 255), service,
                    value_str_json(body_value, path + ".body") if body_value is not None else "", resource_url,
                    resource, scope_url, as_str(scope.get("name"), spath + ".scope.name"),
                    as_str(scope.get("version"), spath + ".scope.version"), scope_attrs, attributes,
                    event_name_of(as_str(member(record, "eventName", "event_name"), path + ".eventName"), attributes),
                ))
    if rejections is None:
        return LogDecodeResult(batch)
    return LogDecodeResult(batch, rejections.count, _message(rejections, total))


def _severity(value: Any, path: str) -> int:
    if isinstance(value, str) and value.startswith("SEVERITY_NUMBER_"):
        names = ["UNSPECIFIED", "TRACE", "TRACE2", "TRACE3", "TRACE4", "DEBUG", "DEBUG2", "DEBUG3", "DEBUG4", "INFO",
                 "INFO2", "INFO3", "INFO4", "WARN", "WARN2", "WARN3", "WARN4", "ERROR", "ERROR2", "ERROR3", "ERROR4",
                 "FATAL", "FATAL2", "FATAL3", "FATAL4"]
        name = value.removeprefix("SEVERITY_NUMBER_")
        if name in names:
            return names.index(name)
    return as_int(value, path + ".severityNumber")


# -- metrics: not stored; counted so that the answer says how many points were refused ---------------------


def count_metric_points_pb(body: bytes) -> int:
    """Data points in a protobuf ExportMetricsServiceRequest; raises :class:`OTLPDecodeError`."""
    try:
        request = ExportMetricsServiceRequest.FromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise OTLPDecodeError(
            f"body is not a valid protobuf ExportMetricsServiceRequest ({len(body)} bytes): {exc}") from None
    points = 0
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                if kind is not None:
                    points += len(getattr(metric, kind).data_points)
    return points


def count_metric_points_json(body: bytes) -> int:
    """Data points in an OTLP/JSON ExportMetricsServiceRequest; raises :class:`OTLPDecodeError`."""
    try:
        document = as_object(orjson.loads(body), "$")
    except orjson.JSONDecodeError as exc:
        raise OTLPDecodeError(f"body is not valid JSON ({len(body)} bytes): {exc}") from None
    points = 0
    for ri, rm in enumerate(as_array(member(document, "resourceMetrics", "resource_metrics"), "resourceMetrics")):
        rm = as_object(rm, f"resourceMetrics[{ri}]")
        for si, sm in enumerate(as_array(member(rm, "scopeMetrics", "scope_metrics"), f"resourceMetrics[{ri}].scopeMetrics")):
            sm = as_object(sm, f"resourceMetrics[{ri}].scopeMetrics[{si}]")
            for mi, metric in enumerate(as_array(sm.get("metrics"), "metrics")):
                metric = as_object(metric, f"metrics[{mi}]")
                for kind in ("gauge", "sum", "histogram", "exponentialHistogram", "summary",
                             "exponential_histogram"):
                    if kind in metric:
                        points += len(as_array(member(as_object(metric[kind], kind), "dataPoints", "data_points"), "dataPoints"))
    return points

METRICS_REFUSED = ("loop-detector stores no metrics (it reads traces and logs): send metrics to a metrics backend, "
                   "or set OTEL_METRICS_EXPORTER=none")
