"""The embedded OTLP/HTTP receiver: ``POST /v1/traces`` and ``POST /v1/logs`` (default port 4318).

``/v1/logs`` follows the same rules as ``/v1/traces`` below, into ``otel.otel_logs``; ``/v1/metrics`` is
answered (metrics are not stored: every point is reported rejected, see :data:`detector.ingest.logs.METRICS_REFUSED`)
so that SDKs exporting every signal by default do not log export failures. The OTLP/gRPC receiver
(:mod:`detector.ingest.grpc_receiver`) commits through this app's committers.

Per the OTLP/HTTP specification:

- bodies are ``application/x-protobuf`` or ``application/json`` (parameters such as ``charset`` are
  ignored), optionally ``Content-Encoding: gzip`` (or ``deflate``, which the Python SDK offers); anything
  else is ``415``;
- ``200`` carries an ``ExportTraceServiceResponse`` in the request's encoding, with
  ``partial_success`` (``rejected_spans``, ``error_message``) when some spans were rejected;
- ``400`` for a body that cannot be decoded (corrupt or truncated gzip, bad protobuf, bad JSON), its
  body a ``google.rpc.Status`` in the request's encoding (JSON when the encoding is unknown);
- ``413`` when the body, compressed or decompressed, exceeds ``max_body_bytes`` (decompression stops
  at the limit, so a gzip bomb costs at most that much memory);
- ``503`` with ``Retry-After`` when the store fails: retryable, nothing of the request is
  acknowledged.

``200`` is sent only once the request's rows are committed to ``otel.otel_traces`` (the
materialized view into ``otel.genai_calls`` included). Decoding (into an Arrow table of the rows)
runs in a worker thread and inserts in another, so the event loop only moves bytes. Requests that
arrive while an insert is running are committed together in the next insert (group commit): one
larger insert is cheaper per row than several small ones (the materialized view has a fixed cost per
insert), and every request still waits for the insert that holds its own rows.

Attribute values are never logged (they may hold prompts): log lines carry counts, positions,
reasons and error codes only.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

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

from detector.ingest.logs import (
    LOGS_TABLE,
    METRICS_REFUSED,
    count_metric_points_json,
    count_metric_points_pb,
    decode_logs_json,
    decode_logs_protobuf,
)
from detector.ingest.otlp import TRACES_TABLE, DecodeResult, OTLPDecodeError, decode_json, decode_protobuf, gc_paused
from detector.settings.config import IngestSettings
from detector.storage.transport import Store

__all__ = [
    "CODE_INVALID_ARGUMENT", "CODE_UNAVAILABLE", "COMPRESSED", "DECODE_THREADS", "GroupCommitter", "IngestMetrics",
    "JSON", "MAX_GROUP_BYTES", "PROTOBUF", "RETRY_AFTER_SECONDS", "create_otlp_app", "decode_logs_body",
    "inflate_limited",
]

log = logging.getLogger("loop_detector.ingest")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
COMPRESSED = ("gzip", "deflate")

# google.rpc.Code values carried in the error bodies
CODE_INVALID_ARGUMENT = 3
CODE_UNAVAILABLE = 14

RETRY_AFTER_SECONDS = 5
# One group commit stops adding requests once its Arrow tables reach this size.
MAX_GROUP_BYTES = 128 * 1024 * 1024
# Requests decoded at once. Decoding holds the GIL, so more threads would not decode faster; one
# thread finishes the first request of a burst soonest, so the first insert starts soonest.
DECODE_THREADS = 1


@dataclass
class IngestMetrics:
    """Counters the receiver updates (read by ``/metrics`` and tests)."""

    spans_accepted: int = 0
    spans_rejected: int = 0
    requests_by_status: Counter[int] = field(default_factory=Counter)
    grpc_requests_by_code: Counter[str] = field(default_factory=Counter)  # OTLP/gRPC answers by status code
    logs_accepted: int = 0
    logs_rejected: int = 0
    inserts: int = 0  # store inserts (one per group commit)
    insert_seconds: float = 0.0  # wall time spent inside the store's insert


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


def _decode(body: bytes, encoding: str, media: str, settings: IngestSettings) -> tuple[DecodeResult, pa.Table]:
    """Worker-thread part of a request: decompress, decode, build the Arrow table for the insert."""
    if encoding in COMPRESSED:
        body = inflate_limited(body, settings.max_body_bytes, encoding)
    result = decode_protobuf(body, settings) if media == PROTOBUF else decode_json(body, settings)
    with gc_paused():
        return result, result.spans.to_arrow()


def decode_logs_body(body: bytes, encoding: str, media: str, settings: IngestSettings) -> tuple[Any, pa.Table]:
    """Worker-thread part of a ``/v1/logs`` request (the logs twin of ``_decode``)."""
    if encoding in COMPRESSED:
        body = inflate_limited(body, settings.max_body_bytes, encoding)
    result = decode_logs_protobuf(body, settings) if media == PROTOBUF else decode_logs_json(body, settings)
    with gc_paused():
        return result, result.logs.to_arrow()


def _count_metrics_body(body: bytes, encoding: str, media: str, settings: IngestSettings) -> int:
    if encoding in COMPRESSED:
        body = inflate_limited(body, settings.max_body_bytes, encoding)
    return count_metric_points_pb(body) if media == PROTOBUF else count_metric_points_json(body)


def _safe_error(exc: BaseException) -> str:
    """An exception as type and ClickHouse error code only: messages may quote row data."""
    match = re.search(r"Code: (\d+)", str(exc))
    return f"{type(exc).__name__}{f' (ClickHouse code {match.group(1)})' if match else ''}"


class GroupCommitter:
    """Commits Arrow tables of rows to the store one insert at a time, merging the tables of the
    requests that queued up while the previous insert ran."""

    def __init__(self, store: Store, metrics: IngestMetrics, table: str = TRACES_TABLE,
                 max_group_bytes: int = MAX_GROUP_BYTES) -> None:
        self.store = store
        self.metrics = metrics
        self.table = table
        self.max_group_bytes = max_group_bytes
        self._pending: list[tuple[pa.Table, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def commit(self, rows: pa.Table) -> None:
        """Return once ``rows`` are committed; raise what the store raised otherwise."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((rows, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._pending:
            group: list[tuple[pa.Table, asyncio.Future[None]]] = []
            size = 0
            while self._pending and (not group or size + self._pending[0][0].nbytes <= self.max_group_bytes):
                rows, future = self._pending.pop(0)
                group.append((rows, future))
                size += rows.nbytes
            try:
                await anyio.to_thread.run_sync(self._insert, [p for p, _ in group])
            except BaseException as exc:  # every request of the group gets the store's failure
                for _, future in group:
                    if not future.done():
                        future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("insert cancelled"))
                if not isinstance(exc, Exception):
                    raise
            else:
                self.metrics.inserts += 1
                for _, future in group:
                    if not future.done():
                        future.set_result(None)

    def _insert(self, tables: list[pa.Table]) -> None:
        started = time.perf_counter()
        try:
            self.store.insert_arrow(self.table, tables[0] if len(tables) == 1 else pa.concat_tables(tables))
        finally:
            self.metrics.insert_seconds += time.perf_counter() - started


def create_otlp_app(store: Store, settings: IngestSettings, metrics: IngestMetrics | None = None) -> Starlette:
    """The OTLP/HTTP receiver as an ASGI app: ``POST /v1/traces`` and ``GET /healthz``."""
    metrics = metrics if metrics is not None else IngestMetrics()
    committer = GroupCommitter(store, metrics)
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

    def export_reply(media: str, result: DecodeResult) -> Response:
        metrics.requests_by_status[200] += 1
        if media == PROTOBUF:
            response = ExportTraceServiceResponse()
            if result.rejected:
                response.partial_success.rejected_spans = result.rejected
                response.partial_success.error_message = result.error_message
            return Response(response.SerializeToString(), 200, media_type=PROTOBUF)
        document: dict[str, Any] = {}
        if result.rejected:
            document["partialSuccess"] = {"rejectedSpans": str(result.rejected), "errorMessage": result.error_message}
        return Response(orjson.dumps(document), 200, media_type=JSON)

    async def read_body(request: Request) -> bytes | None:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def export_traces(request: Request) -> Response:
        raw_type = request.headers.get("content-type")
        media = _media_type(raw_type)
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
        try:
            body = await read_body(request)
        except ClientDisconnect:  # nobody is left to answer; count it and move on
            metrics.requests_by_status[499] += 1
            return Response(status_code=400)
        if body is None:
            return status_reply(413, media, CODE_INVALID_ARGUMENT, too_large)
        try:
            result, rows = await anyio.to_thread.run_sync(
                _decode, body, encoding, media, settings, limiter=decoders)
        except _TooLarge as exc:
            return status_reply(413, media, CODE_INVALID_ARGUMENT, str(exc))
        except (_BadBody, OTLPDecodeError) as exc:
            log.info("OTLP request rejected: %s", exc)
            return status_reply(400, media, CODE_INVALID_ARGUMENT, str(exc))
        del body
        if result.accepted:
            try:
                await committer.commit(rows)
            except Exception as exc:
                reason = _safe_error(exc)
                log.error("OTLP insert failed: %s; %d spans not acknowledged (client will retry)",
                          reason, result.accepted)
                return status_reply(503, media, CODE_UNAVAILABLE, f"store unavailable: insert failed: {reason}",
                                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        metrics.spans_accepted += result.accepted
        metrics.spans_rejected += result.rejected
        if result.rejected:
            log.warning("OTLP partial success: %s", result.error_message)
        return export_reply(media, result)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    # -- /v1/logs and /v1/metrics: the same request rules as /v1/traces ------------------------------------
    logs_committer = GroupCommitter(store, metrics, table=LOGS_TABLE)

    async def checked_body(request: Request) -> tuple[str, str, bytes] | Response:
        """Content-Type, Content-Encoding and size checked, as for traces: (media, encoding, body) or the 4xx."""
        raw_type = request.headers.get("content-type")
        media = _media_type(raw_type)
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
        try:
            body = await read_body(request)
        except ClientDisconnect:
            metrics.requests_by_status[499] += 1
            return Response(status_code=400)
        if body is None:
            return status_reply(413, media, CODE_INVALID_ARGUMENT, too_large)
        return media, encoding, body

    def partial_reply(media: str, response: Any, rejected_field: str, rejected: int, message: str) -> Response:
        metrics.requests_by_status[200] += 1
        if media == PROTOBUF:
            if rejected:
                setattr(response.partial_success, rejected_field, rejected)
                response.partial_success.error_message = message
            return Response(response.SerializeToString(), 200, media_type=PROTOBUF)
        camel = "".join(w if i == 0 else w.title() for i, w in enumerate(rejected_field.split("_")))
        document = {"partialSuccess": {camel: str(rejected), "errorMessage": message}} if rejected else {}
        return Response(orjson.dumps(document), 200, media_type=JSON)

    async def export_logs(request: Request) -> Response:
        checked = await checked_body(request)
        if isinstance(checked, Response):
            return checked
        media, encoding, body = checked
        try:
            result, rows = await anyio.to_thread.run_sync(
                decode_logs_body, body, encoding, media, settings, limiter=decoders)
        except _TooLarge as exc:
            return status_reply(413, media, CODE_INVALID_ARGUMENT, str(exc))
        except (_BadBody, OTLPDecodeError) as exc:
            log.info("OTLP logs request rejected: %s", exc)
            return status_reply(400, media, CODE_INVALID_ARGUMENT, str(exc))
        if result.accepted:
            try:
                await logs_committer.commit(rows)
            except Exception as exc:
                reason = _safe_error(exc)
                log.error("OTLP logs insert failed: %s; %d records not acknowledged (client will retry)",
                          reason, result.accepted)
                return status_reply(503, media, CODE_UNAVAILABLE, f"store unavailable: insert failed: {reason}",
                                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        metrics.logs_accepted += result.accepted
        metrics.logs_rejected += result.rejected
        return partial_reply(media, ExportLogsServiceResponse(), "rejected_log_records", result.rejected,
                             result.error_message)

    async def export_metrics(request: Request) -> Response:
        """Metrics are not stored: a valid request is answered with every point rejected (partial success, not
        retryable), so SDKs that export all signals by default neither fail nor retry."""
        checked = await checked_body(request)
        if isinstance(checked, Response):
            return checked
        media, encoding, body = checked
        try:
            points = await anyio.to_thread.run_sync(_count_metrics_body, body, encoding, media, settings,
                                                    limiter=decoders)
        except _TooLarge as exc:
            return status_reply(413, media, CODE_INVALID_ARGUMENT, str(exc))
        except (_BadBody, OTLPDecodeError) as exc:
            return status_reply(400, media, CODE_INVALID_ARGUMENT, str(exc))
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
    return app
