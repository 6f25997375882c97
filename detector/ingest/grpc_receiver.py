"""The embedded OTLP/gRPC receiver (default port 4317): the trace, logs and metrics ``Export`` services.

The other standard OTLP transport: ``opentelemetry-instrument`` with the ``opentelemetry-exporter-otlp``
package, and many SDK and collector setups, export gRPC to ``:4317`` unless told otherwise. Requests are
decoded and committed exactly as the OTLP/HTTP receiver does it (:mod:`detector.ingest.receiver`): the same
decoders, the same committers (one insert may hold rows of both transports), and the same guarantees: an ``OK``
is sent only once the request's rows are committed; spans the store would refuse are rejected alone; a batch is
in both tables or in neither; a retried request is acknowledged without storing it twice
(:mod:`detector.ingest.commit`).

Status codes, per the OTLP/gRPC specification:

- ``OK`` with ``partial_success`` (``rejected_spans`` / ``rejected_log_records`` and a message) when some
  items were invalid: the valid ones are stored, the client must not retry;
- ``INVALID_ARGUMENT`` for a request that cannot be decoded or exceeds ``max_body_bytes`` (not retryable);
- ``UNAUTHENTICATED`` when bearer tokens are configured and the call's ``authorization`` metadata is not
  ``Bearer <one of them>`` (the collector's ``bearertokenauth`` convention, as on OTLP/HTTP);
- ``UNAVAILABLE`` with ``RetryInfo`` when the store fails: nothing was acknowledged, retry after the delay;
- ``RESOURCE_EXHAUSTED`` with ``RetryInfo`` when the service is overloaded (:mod:`detector.ingest.admission`,
  shared with the HTTP receiver: the bytes of requests in flight and their decoded rows past
  ``ingest.max_inflight_bytes``, or the commit queue or the detector behind): the client retries after the delay
  instead of queueing in memory here. (The Python exporter retries it and waits RetryInfo's delay; the Go exporter
  retries it only when ``RetryInfo`` is there.)

``RetryInfo`` travels both in the standard ``grpc-status-details-bin`` trailer (a ``google.rpc.Status``, read
by Go and Java exporters) and in ``google.rpc.retryinfo-bin`` (read by the Python exporter). Compression:
gzip (and deflate) request bodies are decompressed by gRPC itself. Metrics are not stored: a valid metrics
request gets ``OK`` with every data point reported rejected, so SDKs that export every signal by default
neither fail nor retry.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import grpc
import pyarrow as pa
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from detector.ingest.admission import Admission, Refusal, Ticket
from detector.ingest.commit import Committer
from detector.ingest.counters import IngestMetrics
from detector.ingest.decoding import OTLPDecodeError, gc_paused
from detector.ingest.logs import METRICS_REFUSED, count_metric_points_pb, decode_logs_protobuf
from detector.ingest.logs_commit import LogsCommitter
from detector.ingest.otlp import decode_protobuf
from detector.ingest.receiver import DECODE_THREADS, RETRY_AFTER_SECONDS, authorized
from detector.ingest.requests import DecodedRequest, request_digest
from detector.ingest.store_errors import safe_error
from detector.settings.service_settings import IngestSettings
from detector.settings.vocabulary import COMMIT_RETRYABLE

__all__ = ["GrpcBindError", "LOGS_METHOD", "METRICS_METHOD", "OTLPGrpcReceiver",
           "TRACES_METHOD", "retry_trailers"]

log = logging.getLogger("loop_detector.ingest")

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
METRICS_METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"

# gRPC's own limit sits a little above max_body_bytes, so that our check (INVALID_ARGUMENT, precise message)
# answers an oversized request rather than gRPC's generic RESOURCE_EXHAUSTED.
_GRPC_LIMIT_MARGIN = 64 * 1024
GRPC_MEDIA = "application/grpc"  # the retry identity's media type (a gRPC retry resends the same message bytes)


def retry_trailers(code: grpc.StatusCode, message: str, seconds: int = RETRY_AFTER_SECONDS) -> tuple[tuple[str, bytes], ...]:
    """The trailing metadata that carries ``RetryInfo`` (both the standard status details and the key the
    Python exporter reads)."""
    info = RetryInfo(retry_delay=Duration(seconds=seconds))
    detail = AnyProto()
    detail.Pack(info)
    status = Status(code=code.value[0], message=message, details=[detail])
    return (("grpc-status-details-bin", status.SerializeToString()),
            ("google.rpc.retryinfo-bin", info.SerializeToString()))


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str, retry: bool = False,
                 retry_after: int = RETRY_AFTER_SECONDS) -> None:
        super().__init__(message)
        self.code, self.message, self.retry, self.retry_after = code, message, retry, retry_after

    @classmethod
    def overloaded(cls, refusal: Refusal) -> _Refused:
        return cls(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal.message, retry=True,
                   retry_after=refusal.retry_after_seconds)


class GrpcBindError(OSError):
    """The receiver's port could not be bound (in use, or not this host's address); grpcio does not say which."""


class OTLPGrpcReceiver:
    """A ``grpc.aio`` server whose three ``Export`` methods feed the given committers. Create, then ``await
    start(host, port)`` inside the event loop that runs the committers (the service's); ``port`` 0 binds a
    free one (:attr:`port` says which). ``admission``: the HTTP receiver's (``app.state.admission``), else one over
    ``settings``."""

    def __init__(self, traces: Committer, logs: LogsCommitter, settings: IngestSettings,
                 metrics: IngestMetrics | None = None, admission: Admission | None = None,
                 bearer_tokens: Sequence[str] = ()) -> None:
        self.traces = traces
        self.expected = [f"Bearer {token}".encode() for token in bearer_tokens]
        self.logs = logs
        self.settings = settings
        self.metrics = metrics if metrics is not None else traces.metrics
        self.admission = admission if admission is not None else Admission.from_settings(settings)
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._decoders: anyio.CapacityLimiter | None = None

    async def start(self, host: str, port: int) -> int:
        limit = self.settings.max_body_bytes + _GRPC_LIMIT_MARGIN
        # grpcio binds with SO_REUSEPORT by default: a second serve would share the port and take part of the
        # traffic, silently; without it, a port in use is an error at start like the HTTP listeners'
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                          ("grpc.max_send_message_length", 4 * 1024 * 1024),
                                          ("grpc.so_reuseport", 0)])
        handlers = {
            "Export": grpc.unary_unary_rpc_method_handler(self._export_traces),
        }
        server.add_generic_rpc_handlers((
            grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService", handlers),
            grpc.method_handlers_generic_handler("opentelemetry.proto.collector.logs.v1.LogsService",
                                                 {"Export": grpc.unary_unary_rpc_method_handler(self._export_logs)}),
            grpc.method_handlers_generic_handler("opentelemetry.proto.collector.metrics.v1.MetricsService",
                                                 {"Export": grpc.unary_unary_rpc_method_handler(self._export_metrics)}),
        ))
        tls = self.settings.tls
        try:
            if tls is None:
                bound = server.add_insecure_port(f"{host}:{port}")
            else:  # the same TLS (and mutual TLS) as the OTLP/HTTP listener
                key, cert = Path(tls.key_file).read_bytes(), Path(tls.cert_file).read_bytes()
                ca = Path(tls.client_ca_file).read_bytes() if tls.client_ca_file else None
                credentials = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                                          require_client_auth=ca is not None)
                bound = server.add_secure_port(f"{host}:{port}", credentials)
        except RuntimeError:  # grpcio raises this when the port is taken
            bound = 0
        if not bound:
            raise GrpcBindError(None, f"cannot listen on {host}:{port} (OTLP/gRPC): in use or not this host's address")
        await server.start()
        self._server, self.port = server, bound
        self._decoders = anyio.CapacityLimiter(DECODE_THREADS)
        return bound

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    async def stop(self, grace: float = 5.0) -> None:
        if self._server is not None:
            await self._server.stop(grace)

    # -- the three methods -------------------------------------------------------------------------------
    async def _export_traces(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        async def handle(ticket: Ticket) -> bytes:
            with self.traces.arriving():
                decoded = await self._decode(_decode_traces, request)
            self._decoded(ticket, decoded.rows)
            outcome = await self.traces.commit(decoded)
            if outcome.status == COMMIT_RETRYABLE:
                self.traces.refusals.refused("OTLP/gRPC request not acknowledged: %s; %d spans (client will retry)",
                                             outcome.retry_reason, decoded.accepted)
                raise _Refused(grpc.StatusCode.UNAVAILABLE, outcome.retry_reason or "store unavailable", retry=True)
            self.traces.refusals.acknowledged()
            if not outcome.duplicate:
                self.metrics.spans_accepted += outcome.accepted
                self.metrics.spans_rejected += outcome.rejected
                if outcome.accepted:
                    self.admission.committed()
            response = ExportTraceServiceResponse()
            if outcome.rejected:
                log.warning("OTLP/gRPC partial success: %s", outcome.error_message)
                response.partial_success.rejected_spans = outcome.rejected
                response.partial_success.error_message = outcome.error_message
            return response.SerializeToString()

        return await self._guarded(request, context, handle)

    async def _export_logs(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        async def handle(ticket: Ticket) -> bytes:
            result, rows = await self._decode(_decode_logs, request)
            self._decoded(ticket, rows)
            if result.accepted:
                await self._commit(self.logs, rows, result.accepted, "log records")
            self.metrics.logs_accepted += result.accepted
            self.metrics.logs_rejected += result.rejected
            response = ExportLogsServiceResponse()
            if result.rejected:
                response.partial_success.rejected_log_records = result.rejected
                response.partial_success.error_message = result.error_message
            return response.SerializeToString()

        return await self._guarded(request, context, handle)

    async def _export_metrics(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        async def handle(ticket: Ticket) -> bytes:
            points = await self._decode(lambda body, _settings: count_metric_points_pb(body), request)
            response = ExportMetricsServiceResponse()
            if points:
                response.partial_success.rejected_data_points = points
                response.partial_success.error_message = METRICS_REFUSED
            return response.SerializeToString()

        return await self._guarded(request, context, handle)

    # -- shared steps ----------------------------------------------------------------------------------------
    async def _guarded(self, request: bytes, context: grpc.aio.ServicerContext,
                       handle: Callable[[Ticket], Awaitable[bytes]]) -> bytes:
        size = len(request)
        try:
            if self.expected and not self._authenticated(context):
                raise _Refused(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token in the authorization "
                               "metadata: send authorization: Bearer <token>")
            if size > self.settings.max_body_bytes:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                               f"request exceeds max_body_bytes ({self.settings.max_body_bytes} bytes)")
            ticket = self.admission.admit(size)  # gRPC has read the message already: it holds its bytes
            if isinstance(ticket, Refusal):
                raise _Refused.overloaded(ticket)
            with ticket:
                reply = await handle(ticket)
        except _Refused as refused:
            self.metrics.grpc_requests_by_code[refused.code.name] += 1
            if refused.retry:
                context.set_trailing_metadata(retry_trailers(refused.code, refused.message, refused.retry_after))
            # the status is set, not raised (context.abort): an exception's traceback holds the request's frames in a
            # reference cycle, which only the garbage collector frees, and it is paused while requests are decoded
            # and frozen by the detection cycles (detector/detection/gc_policy.py): under overload, every refused
            # request's bytes stayed in memory (2 GB after 2,000 refusals of 600 KB)
            context.set_code(refused.code)
            context.set_details(refused.message)
            return b""
        self.metrics.grpc_requests_by_code["OK"] += 1
        return reply

    def _authenticated(self, context: grpc.aio.ServicerContext) -> bool:
        given = next((value for key, value in context.invocation_metadata() or () if key == "authorization"), "")
        raw = given if isinstance(given, bytes) else str(given).encode("latin-1", "replace")
        return authorized(raw, self.expected)

    @staticmethod
    def _decoded(ticket: Ticket, rows: pa.Table) -> None:
        """The decoded rows counted in the request's share (held until the commit), or the request refused."""
        refusal = ticket.charge(rows.nbytes)
        if refusal is not None:
            raise _Refused.overloaded(refusal)
        ticket.decoded()

    async def _decode(self, decoder: Callable[[bytes, IngestSettings], Any], request: bytes) -> Any:
        assert self._decoders is not None
        try:
            return await anyio.to_thread.run_sync(decoder, request, self.settings, limiter=self._decoders)
        except OTLPDecodeError as exc:
            log.info("OTLP/gRPC request rejected: %s", exc)
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        except Exception as exc:  # a body no decoder rule foresaw: still the sender's
            log.warning("OTLP/gRPC request rejected: undecodable body (%s)", type(exc).__name__)
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"body could not be decoded ({type(exc).__name__})") from None

    async def _commit(self, committer: LogsCommitter, rows: pa.Table, count: int, what: str) -> None:
        try:
            await committer.commit(rows)
        except Exception as exc:
            reason = safe_error(exc)
            self.traces.refusals.refused("OTLP/gRPC insert failed: %s; %d %s not acknowledged (client will retry)",
                                         reason, count, what)
            raise _Refused(grpc.StatusCode.UNAVAILABLE, f"store unavailable: insert failed: {reason}",
                           retry=True) from None


def _decode_traces(body: bytes, settings: IngestSettings) -> DecodedRequest:
    result = decode_protobuf(body, settings)
    with gc_paused():
        rows = result.spans.to_arrow()
    return DecodedRequest(rows, result.rejected, result.error_message, request_digest(GRPC_MEDIA, body))


def _decode_logs(body: bytes, settings: IngestSettings) -> tuple[Any, pa.Table]:
    result = decode_logs_protobuf(body, settings)
    with gc_paused():
        return result, result.logs.to_arrow()
