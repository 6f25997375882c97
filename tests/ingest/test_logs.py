"""OTLP logs over HTTP (``POST /v1/logs``) with the real OTLP/HTTP log exporter, the decoding rules of
``otel.otel_logs`` rows (the contrib exporter's), and ``/v1/metrics`` answered without being stored."""

from __future__ import annotations

import gzip
import json
import os
import time
import uuid

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from detector.ingest.decoding import OTLPDecodeError
from detector.ingest.logs import decode_logs_json, decode_logs_protobuf
from detector.service.process import running_service
from detector.settings.config import AppConfig

NOW = time.time_ns()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with running_service(AppConfig(), tmp_path_factory.mktemp("logs")) as (svc, eps):
        yield svc, eps


def test_real_http_log_exporter_gzip(service):
    svc, eps = service
    provider = LoggerProvider(resource=Resource.create({"service.name": "logs-agent"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(
        endpoint=eps.otlp + "/v1/logs", compression=Compression.Gzip)))
    marker = uuid.uuid4().hex
    provider.get_logger("test", "1.2").emit(event_name="gen_ai.choice", body={"index": 0, "message": {"content": marker}},
                                            attributes={"gen_ai.provider.name": "openai", "n": 3})
    (row,) = svc.store.rows("SELECT ServiceName, EventName, Body, LogAttributes, ScopeName, ScopeVersion, TraceId "
                            "FROM otel.otel_logs WHERE position(Body, {m:String}) > 0", {"m": marker})
    assert row["ServiceName"] == "logs-agent" and row["EventName"] == "gen_ai.choice"
    assert json.loads(row["Body"]) == {"index": 0, "message": {"content": marker}}  # kvlist as JSON (AsString)
    assert row["LogAttributes"] == {"gen_ai.provider.name": "openai", "n": "3"}
    assert (row["ScopeName"], row["ScopeVersion"], row["TraceId"]) == ("test", "1.2", "")
    provider.shutdown()


def request_with(records: list[dict]) -> bytes:
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.add(key="service.name").value.string_value = "svc"
    sl = rl.scope_logs.add()
    for r in records:
        rec = sl.log_records.add(**{k: v for k, v in r.items() if k != "body"})
        if "body" in r:
            rec.body.string_value = r["body"]
    return req.SerializeToString()


def test_protobuf_rules():
    trace_id, span_id = os.urandom(16), os.urandom(8)
    result = decode_logs_protobuf(request_with([
        {"time_unix_nano": NOW, "trace_id": trace_id, "span_id": span_id, "body": "a", "flags": 0x101,
         "severity_number": 9, "severity_text": "INFO"},
        {"observed_time_unix_nano": NOW - 5, "body": "observed only"},  # the exporter's fallback
        {"body": "no time at all"},  # gets the time it was received
        {"time_unix_nano": NOW, "trace_id": b"\x01\x02", "body": "bad trace id"},
        {"time_unix_nano": NOW, "span_id": span_id, "body": "span without trace"},
        {"time_unix_nano": NOW + 10**13, "body": "future"},
    ]), now_ns=NOW)
    rows = result.logs.dicts()
    assert [r["Body"] for r in rows] == ["a", "observed only", "no time at all"]
    assert rows[0]["TraceId"] == trace_id.hex() and rows[0]["SpanId"] == span_id.hex()
    assert rows[0]["TraceFlags"] == 1 and rows[0]["SeverityNumber"] == 9 and rows[0]["ServiceName"] == "svc"
    assert rows[1]["Timestamp"] == NOW - 5 and rows[2]["Timestamp"] == NOW
    assert result.rejected == 3
    assert "invalid trace id: 1" in result.error_message and "span id without a trace id: 1" in result.error_message
    assert "timestamp too far in the future: 1" in result.error_message
    assert "rejected 3 of 6 log records" in result.error_message


def test_json_rules_and_event_name_attribute():
    trace_id = uuid.uuid4().hex
    body = {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]},
                              "scopeLogs": [{"scope": {"name": "s"}, "logRecords": [
                                  {"timeUnixNano": str(NOW), "traceId": trace_id, "spanId": "00f067aa0ba902b7",
                                   "severityNumber": "SEVERITY_NUMBER_WARN", "body": {"kvlistValue": {"values": [
                                       {"key": "content", "value": {"stringValue": "hi"}}]}},
                                   "attributes": [{"key": "event.name", "value": {"stringValue": "gen_ai.user.message"}}]},
                                  {"timeUnixNano": str(NOW), "traceId": "zz"}]}]}]}
    result = decode_logs_json(json.dumps(body).encode(), now_ns=NOW)
    (row,) = result.logs.dicts()
    assert row["EventName"] == "gen_ai.user.message"  # the older attribute when the field is absent
    assert row["SeverityNumber"] == 13 and row["Body"] == '{"content":"hi"}' and row["TraceId"] == trace_id
    assert result.rejected == 1 and "not hex" in result.error_message
    with pytest.raises(OTLPDecodeError):
        decode_logs_json(b'{"resourceLogs": 5}')


def test_http_logs_status_codes(service):
    svc, eps = service
    url = eps.otlp + "/v1/logs"
    pb = {"Content-Type": "application/x-protobuf"}
    assert httpx.post(url, content=b"\xff\xff garbage", headers=pb).status_code == 400
    assert httpx.post(url, content=b"{}", headers={"Content-Type": "text/plain"}).status_code == 415
    body = request_with([{"time_unix_nano": NOW, "body": "ok"}, {"time_unix_nano": NOW, "trace_id": b"\x01"}])
    r = httpx.post(url, content=gzip.compress(body), headers={**pb, "Content-Encoding": "gzip"})
    assert r.status_code == 200
    reply = ExportLogsServiceResponse.FromString(r.content)
    assert reply.partial_success.rejected_log_records == 1
    r = httpx.post(url, content=json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"timeUnixNano": str(NOW), "traceId": "01"}]}]}]}), headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["partialSuccess"]["rejectedLogRecords"] == "1"


def test_http_metrics_answered_not_stored(service):
    _, eps = service
    doc = {"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "gen_ai.client.token.usage", "histogram": {"dataPoints": [{"count": "1"}, {"count": "2"}]}}]}]}]}
    r = httpx.post(eps.otlp + "/v1/metrics", json=doc)
    assert r.status_code == 200
    assert r.json()["partialSuccess"]["rejectedDataPoints"] == "2"
    assert "stores no metrics" in r.json()["partialSuccess"]["errorMessage"]
