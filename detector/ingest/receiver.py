"""The embedded OTLP/HTTP receiver: ``POST /v1/traces`` and ``POST /v1/logs`` (default port 4318).

``/v1/logs`` follows the same rules as ``/v1/traces`` below, into ``otel.otel_logs``
(:mod:`detector.ingest.logs_commit`); ``/v1/metrics`` is answered (metrics are not stored: every point is reported
rejected, see :data:`detector.ingest.logs.METRICS_REFUSED`) so that SDKs exporting every signal by default do not
log export failures. The OTLP/gRPC receiver (:mod:`detector.ingest.grpc_receiver`) commits through this app's
committers.

Per the OTLP/HTTP specification:

- bodies are ``application/x-protobuf`` or ``application/json`` (parameters such as ``charset`` are
  ignored), optionally ``Content-Encoding: gzip`` (or ``deflate``, which the Python SDK offers); anything
  else is ``415``;
- ``200`` carries an ``ExportTraceServiceResponse`` in the request's encoding, with
  ``partial_success`` (``rejected_spans``, ``error_message``) when some spans were rejected;
- ``400`` for a body that cannot be decoded (corrupt or truncated gzip, bad protobuf, bad JSON), its
  body a ``google.rpc.Status`` in the request's encoding (JSON when the encoding is unknown);
- ``401`` (``google.rpc.Status`` code 16, UNAUTHENTICATED) when bearer tokens are configured and the request
  does not carry ``Authorization: Bearer <one of them>`` (the collector's ``bearertokenauth`` convention; compared
  in constant time, never echoed);
- ``413`` when the body, compressed or decompressed, exceeds ``max_body_bytes`` (decompression stops
  at the limit, so a gzip bomb costs at most that much memory);
- ``503`` with ``Retry-After`` when the store fails: retryable, nothing of the request is
  acknowledged. Never for the request's data: spans the store refuses are rejected one by one.
- ``503`` with ``Retry-After`` (``google.rpc.Status`` code 8, RESOURCE_EXHAUSTED) when the service is overloaded
  (:mod:`detector.ingest.admission`, shared with the gRPC receiver): refused before the body is read when
  ``Content-Length`` says it would not fit, else as soon as the bytes read (then the decoded rows) would not.

``200`` is sent only once the request's rows are committed to ``otel.otel_traces`` (the
staging view into ``otel.genai_spans`` included). Decoding (into an Arrow table of the rows)
runs in a worker thread; committing (group commit, isolation between senders, all or nothing,
idempotent retries) is :mod:`detector.ingest.commit`'s, so that every receiver shares one commit path.
This module only moves bytes and maps outcomes to HTTP.

Attribute values are never logged (they may hold prompts): log lines carry counts, positions,
reasons and error codes only.
"""

from __future__ import annotations

import hmac
import logging
import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
import orjson
import pyarrow as pa
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from detector.ingest.admission import Admission, Refusal, Ticket
from detector.ingest.commit import Committer
from detector.ingest.counters import IngestMetrics
from detector.ingest.decoding import OTLPDecodeError, gc_paused
from detector.ingest.group_commit import MAX_GROUP_BYTES
from detector.ingest.logs import (
    METRICS_REFUSED,
    count_metric_points_json,
    count_metric_points_pb,
    decode_logs_json,
    decode_logs_protobuf,
)
from detector.ingest.logs_commit import LogsCommitter
from detector.ingest.otlp import decode_json, decode_protobuf
from detector.ingest.requests import DecodedRequest, request_digest
from detector.ingest.store_errors import safe_error
from detector.settings.service_settings import IngestSettings
from detector.settings.vocabulary import COMMIT_RETRYABLE
from detector.storage.transport import Store

__all__ = [
    "CODE_INVALID_ARGUMENT", "CODE_RESOURCE_EXHAUSTED", "CODE_UNAUTHENTICATED", "CODE_UNAVAILABLE", "COMPRESSED", "DECODE_THREADS", "JSON",
    "MAX_GROUP_BYTES", "PROTOBUF", "RETRY_AFTER_SECONDS", "authorized", "create_otlp_app", "decode_logs_body",
    "decode_request", "inflate_limited",
]

log = logging.getLogger("loop_detector.ingest")

T = TypeVar("T")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
COMPRESSED = ("gzip", "deflate")

# google.rpc.Code values carried in the error bodies
CODE_INVALID_ARGUMENT = 3
CODE_RESOURCE_EXHAUSTED = 8
CODE_UNAVAILABLE = 14
CODE_UNAUTHENTICATED = 16

RETRY_AFTER_SECONDS = 5
# Requests decoded at once. Decoding holds the GIL, so more threads would not decode faster; one
# thread finishes the first request of a burst soonest, so the first insert starts soonest.
DECODE_THREADS = 1


class _TooLarge(Exception):
    pass


class _BadBody(Exception):
    pass


def inflate_limited(data: bytes, limit: int, encoding: str = "gzip") -> bytes:
    """Decompress a ``gzip`` (every member) or ``deflate`` (zlib-wrapped or raw) body, refusing to
    produce more than ``limit`` bytes."""
    out: list[bytes] = []
    size = 0
    while True:
        if encoding == "gzip":
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        else:  # HTTP deflate is zlib-wrapped; some clients send raw deflate
            raw = len(data) < 2 or (data[0] & 0x0F) != 8 or ((data[0] << 8) | data[1]) % 31
            inflater = zlib.decompressobj(-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)
        try:
            chunk = inflater.decompress(data, limit - size + 1)
        except zlib.error as exc:
            raise _BadBody(f"{encoding} body is corrupt: {exc}") from None
        size += len(chunk)
        if size > limit:
            raise _TooLarge(f"decompressed body exceeds max_body_bytes ({limit} bytes)")
        out.append(chunk)
        if not inflater.eof:
            raise _BadBody(f"{encoding} body is truncated ({len(data)} compressed bytes, stream incomplete)")
        data = inflater.unused_data
        if not data or encoding != "gzip":
            if data:
                raise _BadBody(f"{encoding} body has {len(data)} bytes of trailing garbage")
            return b"".join(out)


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def decode_request(body: bytes, encoding: str, media: str, settings: IngestSettings) -> DecodedRequest:
    """Worker-thread part of a request: decompress, decode, build the Arrow table of the rows; the digest
    (the retry identity) is of the decompressed body."""
    if encoding in COMPRESSED:
        body = inflate_limited(body, settings.max_body_bytes, encoding)
    result = decode_protobuf(body, settings) if media == PROTOBUF else decode_json(body, settings)
    with gc_paused():
        rows = result.spans.to_arrow()
    return DecodedRequest(rows, result.rejected, result.error_message, request_digest(media, body))


def decode_logs_body(body: bytes, encoding: str, media: str, settings: IngestSettings) -> tuple[Any, pa.Table]:
    """Worker-thread part of a ``/v1/logs`` request (the logs twin of :func:`decode_request`)."""
    if encoding in COMPRESSED:
        body = inflate_limited(body, settings.max_body_bytes, encoding)
    result = decode_logs_protobuf(body, settings) if media == PROTOBUF else decode_logs_json(body, settings)
    with gc_paused():
        return result, result.logs.to_arrow()


def _count_metrics_body(body: bytes, encoding: str, media: str, settings: IngestSettings) -> int:
    if encoding in COMPRESSED:
        body = inflate_limited(body, settings.max_body_bytes, encoding)
    return count_metric_points_pb(body) if media == PROTOBUF else count_metric_points_json(body)


def authorized(given: bytes, expected: Sequence[bytes]) -> bool:
    """Whether an ``Authorization`` value is one of ``expected`` (every one compared, in constant time)."""
    ok = False
    for value in expected:
        ok |= hmac.compare_digest(given, value)
    return ok


def create_otlp_app(store: Store, settings: IngestSettings, metrics: IngestMetrics | None = None,
                    committer: Committer | None = None, bearer_tokens: Sequence[str] = (),
                    admission: Admission | None = None) -> Starlette:
    """The OTLP/HTTP receiver as an ASGI app: ``POST /v1/traces`` and ``GET /healthz``. Without a committer, one
    without a journal (no repair across a restart) is made over ``store``. With ``bearer_tokens``, a request must
    carry ``Authorization: Bearer <one of them>``. Without ``admission``, one over ``settings`` (without a
    detector-behind bound) is made; the gRPC receiver shares it (``app.state.admission``)."""
    admission = admission if admission is not None else Admission.from_settings(settings)
    expected = [f"Bearer {token}".encode() for token in bearer_tokens]
    metrics = committer.metrics if committer is not None else metrics if metrics is not None else IngestMetrics()
    committer = committer if committer is not None else Committer(store, metrics)
    decoders = anyio.CapacityLimiter(DECODE_THREADS)
    limit = settings.max_body_bytes

    def status_reply(http_status: int, media: str, code: int, message: str,
                     headers: dict[str, str] | None = None) -> Response:
        metrics.requests_by_status[http_status] += 1
        if media == PROTOBUF:
            body = Status(code=code, message=message).SerializeToString()
        else:
            media, body = JSON, orjson.dumps({"code": code, "message": message})
        return Response(body, http_status, headers=headers, media_type=media)

    def overloaded(media: str, refusal: Refusal) -> Response:
        return status_reply(503, media, CODE_RESOURCE_EXHAUSTED, refusal.message,
                            headers={"Retry-After": str(refusal.retry_after_seconds)})

    async def read_body(request: Request, ticket: Ticket) -> bytes | Refusal | None:
        """The body, counted in ``ticket`` as it is read (beyond what it declared); None past ``max_body_bytes``."""
        chunks, size, counted = [], 0, ticket.nbytes
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return None
            if size > counted:
                refusal = ticket.charge(size - counted)
                if refusal is not None:
                    return refusal
                counted = size
            chunks.append(chunk)
        return b"".join(chunks)

    def unauthenticated(request: Request, media: str) -> Response | None:
        if not expected or authorized(request.headers.get("authorization", "").encode("latin-1", "replace"),
                                      expected):
            return None
        message = ("missing authorization header: send Authorization: Bearer <token>"
                   if "authorization" not in request.headers else "invalid bearer token")
        return status_reply(401, media if media in (PROTOBUF, JSON) else JSON, CODE_UNAUTHENTICATED, message,
                            headers={"WWW-Authenticate": "Bearer"})

    async def checked_body(request: Request, ticket: list[Ticket]) -> tuple[str, str, bytes] | Response:
        """Authentication, Content-Type, Content-Encoding, size and admission checked: (media, encoding, body) or
        the 4xx / 503. The request's admission ticket is appended to ``ticket`` (the caller releases it)."""
        raw_type = request.headers.get("content-type")
        media = _media_type(raw_type)
        refused = unauthenticated(request, media)
        if refused is not None:
            return refused
        if media not in (PROTOBUF, JSON):
            return status_reply(415, JSON, CODE_INVALID_ARGUMENT,
                                f"unsupported Content-Type {raw_type!r}: send {PROTOBUF} or {JSON}")
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in COMPRESSED and encoding not in ("identity", ""):
            return status_reply(415, media, CODE_INVALID_ARGUMENT,
                                f"unsupported Content-Encoding {encoding!r}: send gzip, deflate or identity")
        declared = request.headers.get("content-length", "")
        too_large = f"request body exceeds max_body_bytes ({limit} bytes)"
        if declared.isdigit() and int(declared) > limit:
            return status_reply(413, media, CODE_INVALID_ARGUMENT, too_large)
        admitted = admission.admit(int(declared) if declared.isdigit() else 0)
        if isinstance(admitted, Refusal):  # refused before reading the body
            return overloaded(media, admitted)
        ticket.append(admitted)
        try:
            body = await read_body(request, admitted)
        except ClientDisconnect:  # nobody is left to answer; count it and move on
            metrics.requests_by_status[499] += 1
            return Response(status_code=400)
        if body is None:
            return status_reply(413, media, CODE_INVALID_ARGUMENT, too_large)
        if isinstance(body, Refusal):
            return overloaded(media, body)
        return media, encoding, body

    async def decoded(decoder: Callable[[bytes, str, str, IngestSettings], T], body: bytes, encoding: str,
                      media: str, what: str) -> T | Response:
        """``decoder`` run in the decoding thread: its result, or the 4xx that the body earned (never a 500)."""
        try:
            return await anyio.to_thread.run_sync(decoder, body, encoding, media, settings, limiter=decoders)
        except _TooLarge as exc:
            return status_reply(413, media, CODE_INVALID_ARGUMENT, str(exc))
        except (_BadBody, OTLPDecodeError) as exc:
            log.info("OTLP %s request rejected: %s", what, exc)
            return status_reply(400, media, CODE_INVALID_ARGUMENT, str(exc))
        except Exception as exc:  # a body no decoder rule foresaw: still the sender's
            log.warning("OTLP %s request rejected: undecodable body (%s)", what, type(exc).__name__)
            return status_reply(400, media, CODE_INVALID_ARGUMENT, f"body could not be decoded ({type(exc).__name__})")

    def partial_reply(media: str, response: Any, rejected_field: str, rejected: int, message: str) -> Response:
        """A 200 in the request's encoding, with ``partial_success`` when some items were rejected."""
        metrics.requests_by_status[200] += 1
        if media == PROTOBUF:
            if rejected:
                setattr(response.partial_success, rejected_field, rejected)
                response.partial_success.error_message = message
            return Response(response.SerializeToString(), 200, media_type=PROTOBUF)
        camel = "".join(w if i == 0 else w.title() for i, w in enumerate(rejected_field.split("_")))
        document = {"partialSuccess": {camel: str(rejected), "errorMessage": message}} if rejected else {}
        return Response(orjson.dumps(document), 200, media_type=JSON)

    async def export_traces(request: Request) -> Response:
        ticket: list[Ticket] = []
        try:
            return await traces_admitted(request, ticket)
        finally:
            for admitted in ticket:
                admitted.release()

    async def traces_admitted(request: Request, ticket: list[Ticket]) -> Response:
        with committer.arriving():
            checked = await checked_body(request, ticket)
            if isinstance(checked, Response):
                return checked
            media, encoding, body = checked
            request_rows = await decoded(decode_request, body, encoding, media, "traces")
            del body
        if isinstance(request_rows, Response):
            return request_rows
        refusal = ticket[0].charge(request_rows.rows.nbytes)  # the decoded rows, held until the commit
        if refusal is not None:
            return overloaded(media, refusal)
        ticket[0].decoded()
        outcome = await committer.commit(request_rows)
        if outcome.status == COMMIT_RETRYABLE:
            committer.refusals.refused("OTLP request not acknowledged: %s; %d spans (client will retry)",
                                       outcome.retry_reason, request_rows.accepted)
            return status_reply(503, media, CODE_UNAVAILABLE, outcome.retry_reason or "store unavailable",
                                headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        committer.refusals.acknowledged()
        if not outcome.duplicate:
            metrics.spans_accepted += outcome.accepted
            metrics.spans_rejected += outcome.rejected
            if outcome.accepted:
                admission.committed()
        if outcome.rejected:
            log.warning("OTLP partial success: %s", outcome.error_message)
        return partial_reply(media, ExportTraceServiceResponse(), "rejected_spans", outcome.rejected,
                             outcome.error_message)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    # -- /v1/logs and /v1/metrics: the same request rules as /v1/traces ------------------------------------
    logs_committer = LogsCommitter(store, metrics)

    async def export_logs(request: Request) -> Response:
        ticket: list[Ticket] = []
        try:
            return await logs_admitted(request, ticket)
        finally:
            for admitted in ticket:
                admitted.release()

    async def logs_admitted(request: Request, ticket: list[Ticket]) -> Response:
        checked = await checked_body(request, ticket)
        if isinstance(checked, Response):
            return checked
        media, encoding, body = checked
        logs = await decoded(decode_logs_body, body, encoding, media, "logs")
        if isinstance(logs, Response):
            return logs
        result, rows = logs
        refusal = ticket[0].charge(rows.nbytes)
        if refusal is not None:
            return overloaded(media, refusal)
        ticket[0].decoded()
        if result.accepted:
            try:
                await logs_committer.commit(rows)
            except Exception as exc:
                reason = safe_error(exc)
                committer.refusals.refused("OTLP logs insert failed: %s; %d records not acknowledged (client will "
                                           "retry)", reason, result.accepted)
                return status_reply(503, media, CODE_UNAVAILABLE, f"store unavailable: insert failed: {reason}",
                                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        metrics.logs_accepted += result.accepted
        metrics.logs_rejected += result.rejected
        return partial_reply(media, ExportLogsServiceResponse(), "rejected_log_records", result.rejected,
                             result.error_message)

    async def export_metrics(request: Request) -> Response:
        """Metrics are not stored: a valid request is answered with every point rejected (partial success, not
        retryable), so SDKs that export all signals by default neither fail nor retry."""
        ticket: list[Ticket] = []
        try:
            checked = await checked_body(request, ticket)
            if isinstance(checked, Response):
                return checked
            media, encoding, body = checked
            points = await decoded(_count_metrics_body, body, encoding, media, "metrics")
        finally:
            for admitted in ticket:
                admitted.release()
        if isinstance(points, Response):
            return points
        return partial_reply(media, ExportMetricsServiceResponse(), "rejected_data_points", points,
                             METRICS_REFUSED if points else "")

    app = Starlette(routes=[
        Route("/v1/traces", export_traces, methods=["POST"]),
        Route("/v1/logs", export_logs, methods=["POST"]),
        Route("/v1/metrics", export_metrics, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ])
    app.state.ingest_metrics = metrics
    app.state.committer = committer
    app.state.logs_committer = logs_committer  # the OTLP/gRPC receiver commits through the same committers
    app.state.admission = admission  # and is admitted by the same bounds
    return app
