"""The OTLP/gRPC receiver, with the real OpenTelemetry gRPC exporters and with raw gRPC calls.

What is checked, per the OTLP/gRPC specification: an ``OK`` only once the rows are committed (they are
readable the moment the exporter returns), gzip, ``partial_success`` for invalid items (the valid ones
stored), ``INVALID_ARGUMENT`` for undecodable or oversized requests, ``UNAVAILABLE`` with ``RetryInfo``
when the store fails and ``RESOURCE_EXHAUSTED`` with ``RetryInfo`` under backpressure (both retried by the
real exporter once the cause is gone), metrics answered without being stored, and ``opentelemetry-instrument``
with ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` and nothing else against the service on the default port 4317.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
import threading
import time
import types
import uuid
from pathlib import Path

import grpc
import httpx
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support.serve_process import ServeProcess
from support.venvs import venv_python

from detector.cli.main import build_parser
from detector.ingest.grpc_receiver import LOGS_METHOD, METRICS_METHOD, TRACES_METHOD
from detector.service.process import running_service
from detector.settings.config import AppConfig

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from openai_stub import serve_stub  # noqa: E402

from detector.evaluation.simulate import wait_for_detector  # noqa: E402

DEFAULT_GRPC_PORT = 4317
# A new user's environment for `opentelemetry-instrument` (the versions the project's own venv pins). openai-v2
# 2.4b0 imports httpx, which openai 3.x no longer pulls in (it uses httpx2): without it opentelemetry-instrument
# skips the instrumentation silently (docs/instrumentations.md).
INSTRUMENT_VENV = ["opentelemetry-distro==0.66b2", "opentelemetry-exporter-otlp==1.45.2",
                   "opentelemetry-instrumentation-openai-v2==2.4b0", "opentelemetry-util-genai==1.1b0",
                   "openai>=2.8,<4", "httpx"]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """The service, on the default gRPC port 4317 when that is free (the zero-setting run below needs it), else
    on a free port."""
    config = AppConfig()
    config.detector.interval_seconds = 0.1
    config.detector.checkpoint_seconds = 0
    port = DEFAULT_GRPC_PORT if _port_free(DEFAULT_GRPC_PORT) else 0
    with running_service(config, tmp_path_factory.mktemp("grpc"), otlp_grpc_port=port) as (svc, eps):
        yield svc, eps


@pytest.fixture()
def channel(service):
    with grpc.insecure_channel(service[1].otlp_grpc) as ch:
        yield ch


def raw(channel: grpc.Channel, method: str):
    return channel.unary_unary(method, request_serializer=None, response_deserializer=None)


def span_request(trace_id: bytes, spans: list[dict]) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = "grpc-test"
    ss = rs.scope_spans.add()
    now = time.time_ns()
    for s in spans:
        span = ss.spans.add(trace_id=s.get("trace_id", trace_id), span_id=s.get("span_id", os.urandom(8)),
                            name="chat gpt-4o", start_time_unix_nano=now - 2_000_000, end_time_unix_nano=now)
        span.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
        span.attributes.add(key="gen_ai.conversation.id").value.string_value = s.get("session", "s")
    return req


def log_request(trace_id: bytes, span_id: bytes, n: int = 1) -> ExportLogsServiceRequest:
    req = ExportLogsServiceRequest()
    sl = req.resource_logs.add().scope_logs.add()
    for _ in range(n):
        rec = sl.log_records.add(time_unix_nano=time.time_ns(), trace_id=trace_id, span_id=span_id,
                                 event_name="gen_ai.user.message")
        rec.body.kvlist_value.values.add(key="content").value.string_value = "hello"
    return req


def count(store, sql: str, **params) -> int:
    return store.rows(sql, params)[0]["n"]


def retry_info_of(error: grpc.RpcError) -> tuple[RetryInfo, RetryInfo]:
    """RetryInfo from both trailers: the standard status details and the key the Python exporter reads."""
    trailers = dict(error.trailing_metadata())
    status = Status.FromString(trailers["grpc-status-details-bin"])
    assert status.code == error.code().value[0]
    standard = RetryInfo()
    assert status.details[0].Unpack(standard)
    return standard, RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])


# -- the real exporters ---------------------------------------------------------------------------------------


def test_real_exporters_gzip_spans_and_logs_are_committed_when_acknowledged(service):
    svc, eps = service
    session = f"grpc-{uuid.uuid4().hex[:8]}"
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "grpc-agent"}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=eps.otlp_grpc, insecure=True, compression=grpc.Compression.Gzip)))
    logger_provider = LoggerProvider(resource=Resource.create({"service.name": "grpc-agent"}))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(
        OTLPLogExporter(endpoint=eps.otlp_grpc, insecure=True, compression=grpc.Compression.Gzip)))
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("chat gpt-4o", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 12, "gen_ai.conversation.id": session}) as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
        span_id = format(span.get_span_context().span_id, "016x")
        logger_provider.get_logger("test").emit(event_name="gen_ai.client.inference.operation.details",
                                                attributes={"gen_ai.input.messages": json.dumps([{"role": "user"}])})
    # SimpleSpanProcessor exported synchronously: an OK means the rows are there already
    store = svc.store
    assert count(store, "SELECT count() AS n FROM otel.otel_traces WHERE TraceId = {t:String}", t=trace_id) == 1
    assert count(store, "SELECT count() AS n FROM otel.genai_spans WHERE trace_id = {t:String}", t=trace_id) == 1
    wait_for_detector(eps.api, time.time_ns() // 1000)  # a detection cycle made it a call
    (call,) = store.rows("SELECT session_id, input_tokens, service_name FROM otel.genai_calls "
                         "WHERE trace_id = {t:String}", {"t": trace_id})
    assert call == {"session_id": session, "input_tokens": 12, "service_name": "grpc-agent"}
    (record,) = store.rows("SELECT SpanId, EventName, ServiceName, LogAttributes['gen_ai.input.messages'] AS m "
                           "FROM otel.otel_logs WHERE TraceId = {t:String}", {"t": trace_id})
    assert record == {"SpanId": span_id, "EventName": "gen_ai.client.inference.operation.details",
                      "ServiceName": "grpc-agent", "m": '[{"role": "user"}]'}
    assert svc.ingest_metrics.grpc_requests_by_code["OK"] >= 2
    tracer_provider.shutdown()
    logger_provider.shutdown()


def test_partial_success_keeps_the_valid_spans_and_records(service, channel):
    svc, _ = service
    trace_id = os.urandom(16)
    request = span_request(trace_id, [{}, {"trace_id": bytes(16)}, {"span_id": b"\x01\x02"}])
    reply = ExportTraceServiceResponse.FromString(raw(channel, TRACES_METHOD)(request.SerializeToString()))
    assert reply.partial_success.rejected_spans == 2
    assert "invalid trace id: 1" in reply.partial_success.error_message
    assert "invalid span id: 1" in reply.partial_success.error_message
    assert count(svc.store, "SELECT count() AS n FROM otel.otel_traces WHERE TraceId = {t:String}",
                 t=trace_id.hex()) == 1

    logs = log_request(trace_id, os.urandom(8))
    logs.resource_logs[0].scope_logs[0].log_records.add(trace_id=b"\x01", time_unix_nano=time.time_ns())
    reply = ExportLogsServiceResponse.FromString(raw(channel, LOGS_METHOD)(logs.SerializeToString()))
    assert reply.partial_success.rejected_log_records == 1
    assert "rejected 1 of 2 log records" in reply.partial_success.error_message
    assert count(svc.store, "SELECT count() AS n FROM otel.otel_logs WHERE TraceId = {t:String}",
                 t=trace_id.hex()) == 1


@pytest.mark.parametrize("method", [TRACES_METHOD, LOGS_METHOD, METRICS_METHOD])
def test_undecodable_request_is_invalid_argument(channel, method):
    with pytest.raises(grpc.RpcError) as caught:
        raw(channel, method)(b"\xff\xff\xff\xff not protobuf")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid protobuf" in caught.value.details()


def test_oversized_request_is_invalid_argument(service, channel):
    limit = service[0].config.ingest.max_body_bytes
    request = span_request(os.urandom(16), [{}])
    request.resource_spans[0].resource.attributes.add(key="padding").value.string_value = "x" * (limit + 10)
    with pytest.raises(grpc.RpcError) as caught:
        raw(channel, TRACES_METHOD)(request.SerializeToString())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_body_bytes" in caught.value.details()


def test_store_failure_is_unavailable_with_retry_info_and_nothing_is_acknowledged(service, channel):
    svc, _ = service
    trace_id = os.urandom(16)
    body = log_request(trace_id, os.urandom(8)).SerializeToString()
    svc.store.command("RENAME TABLE otel.otel_logs TO otel.otel_logs_away")  # a real failure of the store
    try:
        with pytest.raises(grpc.RpcError) as caught:
            raw(channel, LOGS_METHOD)(body)
    finally:
        svc.store.command("RENAME TABLE otel.otel_logs_away TO otel.otel_logs")
    error = caught.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE and "store unavailable" in error.details()
    standard, python_key = retry_info_of(error)
    assert standard.retry_delay.seconds == python_key.retry_delay.seconds > 0
    assert count(svc.store, "SELECT count() AS n FROM otel.otel_logs WHERE TraceId = {t:String}",
                 t=trace_id.hex()) == 0
    raw(channel, LOGS_METHOD)(body)  # the store is back: the retry is stored
    assert count(svc.store, "SELECT count() AS n FROM otel.otel_logs WHERE TraceId = {t:String}",
                 t=trace_id.hex()) == 1


def test_backpressure_is_resource_exhausted_with_retry_info(service, channel):
    svc, _ = service
    admission = svc.grpc_receiver.admission
    first = span_request(os.urandom(16), [{} for _ in range(20)]).SerializeToString()
    second = span_request(os.urandom(16), [{} for _ in range(20)]).SerializeToString()
    saved = admission.max_inflight_bytes
    admission.max_inflight_bytes = len(first) + len(second) // 2
    store_lock = svc.store._lock  # a stalled store: the first request's insert waits for it
    store_lock.acquire()
    try:
        pending = raw(channel, TRACES_METHOD).future(first)
        deadline = time.monotonic() + 10
        while admission.inflight_bytes == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert admission.inflight_bytes >= len(first)  # the request and, once decoded, its rows
        with pytest.raises(grpc.RpcError) as caught:
            raw(channel, TRACES_METHOD)(second)
    finally:
        store_lock.release()
        admission.max_inflight_bytes = saved
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert retry_info_of(caught.value)[1].retry_delay.seconds > 0
    pending.result(timeout=30)  # the first one is committed once the store moves again
    raw(channel, TRACES_METHOD)(second)


def test_real_exporter_retries_after_unavailable(service):
    """The Python exporter honours RetryInfo: a failed store that comes back in time loses nothing."""
    svc, eps = service
    exporter = OTLPLogExporter(endpoint=eps.otlp_grpc, insecure=True, timeout=30)
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    marker = uuid.uuid4().hex
    svc.store.command("RENAME TABLE otel.otel_logs TO otel.otel_logs_away")
    restore = threading.Timer(1.0, lambda: svc.store.command("RENAME TABLE otel.otel_logs_away TO otel.otel_logs"))
    restore.start()
    try:
        provider.get_logger("test").emit(body=marker)  # blocks through the retry
    finally:
        restore.join()
    assert count(svc.store, "SELECT count() AS n FROM otel.otel_logs WHERE Body = {b:String}", b=marker) == 1
    provider.shutdown()


def test_metrics_are_answered_not_stored(channel):
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add(name="gen_ai.client.token.usage")
    metric.histogram.data_points.add(count=1)
    metric.histogram.data_points.add(count=2)
    reply = ExportMetricsServiceResponse.FromString(raw(channel, METRICS_METHOD)(request.SerializeToString()))
    assert reply.partial_success.rejected_data_points == 2
    assert "stores no metrics" in reply.partial_success.error_message


# -- a new user: opentelemetry-instrument, gRPC, nothing else set --------------------------------------------------


def test_defaults_are_the_standard_grpc_port():
    assert build_parser().parse_args(["serve"]).otlp_grpc_port == DEFAULT_GRPC_PORT
    exporter = OTLPSpanExporter()
    assert exporter._endpoint in ("localhost:4317", "http://localhost:4317"), exporter._endpoint


def test_serve_names_the_grpc_port_it_got_and_can_go_without(tmp_path):
    """Port 0 is a free port, as for the other listeners (the startup line says which); --no-otlp-grpc: none."""
    with ServeProcess(tmp_path / "a") as proc:
        line = next(line for line in proc.lines if "OTLP/gRPC on " in line)
        port = int(line.split("OTLP/gRPC on ", 1)[1].split(" ", 1)[0].rstrip(",").rsplit(":", 1)[1])
        assert port != 0
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            export = channel.unary_unary(TRACES_METHOD)
            assert ExportTraceServiceResponse.FromString(export(ExportTraceServiceRequest().SerializeToString(),
                                                                timeout=10)) == ExportTraceServiceResponse()
    with ServeProcess(tmp_path / "b", extra_args=("--no-otlp-grpc",)) as proc:
        assert any("OTLP/gRPC off" in line for line in proc.lines)


def test_opentelemetry_instrument_over_grpc_with_no_other_setting(service):
    svc, eps = service
    python = venv_python("opentelemetry-instrument", INSTRUMENT_VENV)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
    default_port = eps.otlp_grpc.endswith(f":{DEFAULT_GRPC_PORT}")
    if not default_port:  # 4317 was taken on this machine: the one setting a user would then need
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://{eps.otlp_grpc}"
    session = f"instrumented-{uuid.uuid4().hex[:8]}"
    with serve_stub() as stub:
        env["OPENAI_BASE_URL"] = stub + "/v1"  # the app's own setting, not an OpenTelemetry one
        proc = subprocess.run([str(python.parent / "opentelemetry-instrument"), str(python),
                               str(ROOT / "tests" / "support" / "plain_openai_agent.py"), session, "12"],
                              capture_output=True, text=True, timeout=300, env=env, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Failed to export" not in proc.stderr, proc.stderr[-3000:]
    trace_id = json.loads(proc.stdout.strip().splitlines()[-1])["trace_id"]
    wait_for_detector(eps.api, time.time_ns() // 1000)
    calls = svc.store.rows("SELECT operation, provider FROM otel.genai_calls WHERE trace_id = {t:String}",
                           {"t": trace_id})
    assert sorted(c["operation"] for c in calls).count("chat") == 12
    assert {c["provider"] for c in calls if c["operation"] == "chat"} == {"openai"}
    decision = httpx.get(f"{eps.api}/v1/decision", params={"session_id": session, "trace_id": trace_id}).json()
    assert decision["action"] != "allow", (decision, "default port" if default_port else "endpoint set")


REFUSALS = 40


def test_a_refused_request_leaves_no_reference_cycle_holding_its_bytes(service, channel):
    """A refusal is a status set, not an exception raised: an exception's traceback holds the request's frames in a
    reference cycle, which only the garbage collector frees, and under load it is paused (decoding) and frozen
    (detection cycles): every refused request's bytes stayed in memory (issue 32, overload: 2 GB after 2,000)."""
    svc, _ = service
    admission = svc.grpc_receiver.admission
    body = span_request(os.urandom(16), [{} for _ in range(200)]).SerializeToString()
    saved = admission.max_inflight_bytes
    admission.max_inflight_bytes = 1
    held = admission.admit(10)  # another request in flight, past the bound: every new one is refused
    gc.collect()
    gc.disable()
    try:
        for _ in range(REFUSALS):
            with pytest.raises(grpc.RpcError) as caught:
                raw(channel, TRACES_METHOD)(body)
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            del caught
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection would free is kept in gc.garbage, to be looked at
        gc.collect()
        handlers = [o for o in gc.garbage if isinstance(o, types.FrameType)
                    and o.f_code.co_name in ("_export_traces", "_guarded")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        held.release()
        admission.max_inflight_bytes = saved
    assert not handlers  # no handler frame (holding its request's bytes) waits for the collector
