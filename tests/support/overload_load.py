"""Load past what the service stores, as OTLP exporters would send it: unique requests over OTLP/HTTP or OTLP/gRPC,
each retried with the same bytes after the delay a refusal names (``Retry-After``, ``RetryInfo``) until the export
deadline, every answer recorded; and the store-side audit of what was acknowledged.

Used by ``tests/ingest/test_overload.py`` and ``bench/probes/overload.py``::

    bodies = Bodies(spans=1000, sessions=2000)           # a few templates; each request patched to unique trace ids
    load = Load(bodies, "http", proc.otlp)               # or "grpc", "127.0.0.1:4317"
    load.closed(senders=4, seconds=20)                   # back to back: each sender waits for its answer
    load.open(requests_per_second=50, seconds=60)        # on a schedule, whatever the answers
    load.sent, load.answers                              # per request: first send, accepted attempt, acknowledgement
    audit(store, load.sent)                              # rows stored per request (by its trace ids)

A request's spans all carry a span id whose first 4 bytes are the request's number (``Bodies.MARK`` patched in the
serialized template), so the audit counts rows per request with one query; trace ids are the sessions' (one trace
per session, as an agent's run), so the detector's state does not grow with the number of requests.
"""

from __future__ import annotations

import json
import queue
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
import httpx
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2

__all__ = ["Bodies", "GRPC_STARTUP", "Load", "Sent", "audit", "grpc_target"]

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
GRPC_STARTUP = re.compile(r"OTLP/gRPC on (\S+) \(")
SERVICE_NAME = "overload-load"
EXPORT_DEADLINE_SECONDS = 10.0  # the OpenTelemetry exporters' default export timeout: retries stop past it
ANSWER_TIMEOUT_SECONDS = 30.0  # an answer later than this is a hang (recorded as "timeout")
_SENTENCE = ("read the failing test then search the repository for the helper it calls and patch the off by one "
             "error before running the suite again")
_WORDS = tuple(_SENTENCE.split(" "))


def grpc_target(lines: list[str]) -> str:
    """The OTLP/gRPC host:port from a ``serve`` child's startup line."""
    for line in lines:
        match = GRPC_STARTUP.search(line)
        if match:
            return match.group(1)
    raise LookupError("no OTLP/gRPC endpoint in serve's startup line")


def _kv(key: str, value: object) -> KeyValue:
    kv = KeyValue(key=key)
    if isinstance(value, int):
        kv.value.int_value = value
    else:
        kv.value.string_value = str(value)
    return kv


class Bodies:
    """Unique ``ExportTraceServiceRequest`` bodies of ``spans`` GenAI spans (two thirds chat, one third tool calls)
    over ``sessions`` sessions, made by patching the request's number into a few serialized templates."""

    MARK = b"\xa5OV\xa5"  # the first 4 bytes of every template span id, replaced by the request's number

    def __init__(self, spans: int = 1000, sessions: int = 2000, templates: int = 4, seed: int = 32) -> None:
        self.spans = spans
        rng = random.Random(seed)
        self.templates = [self._template(t, spans, sessions, rng) for t in range(templates)]
        self.llm_calls = spans - spans // 3
        self._lock = threading.Lock()
        self._next = 0

    @classmethod
    def _template(cls, t: int, spans: int, sessions: int, rng: random.Random) -> bytes:
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.resource.attributes.extend([_kv("service.name", SERVICE_NAME), _kv("loop_detector.virtual_key", "vk-a")])
        ss = rs.scope_spans.add()
        ss.scope.name = "opentelemetry.instrumentation.openai_v2"
        end = time.time_ns()
        for i in range(spans):
            session = (t * spans + i) % sessions
            span = ss.spans.add(trace_id=session.to_bytes(4, "big") + b"\x6f" * 12, span_id=cls.MARK + i.to_bytes(4, "big"))
            span.start_time_unix_nano, span.end_time_unix_nano = end - rng.randrange(50, 2000) * 1_000_000, end
            if i % 3 == 2:
                span.name, span.kind = "execute_tool read_file", trace_pb2.Span.SPAN_KIND_INTERNAL
                span.attributes.extend([_kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", "read_file"),
                                        _kv("gen_ai.tool.call.arguments", json.dumps({"path": f"f{i % 7}.py"})),
                                        _kv("gen_ai.conversation.id", f"ovl-{session}")])
            else:
                text = " ".join(rng.choice(_WORDS) for _ in range(30))
                span.name, span.kind = "chat gpt-4o", trace_pb2.Span.SPAN_KIND_CLIENT
                span.attributes.extend([
                    _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.request.model", "gpt-4o"),
                    _kv("gen_ai.usage.input_tokens", rng.randrange(200, 4000)),
                    _kv("gen_ai.usage.output_tokens", rng.randrange(10, 400)),
                    _kv("gen_ai.conversation.id", f"ovl-{session}"),
                    _kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": text}]}])),
                    _kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [
                        {"type": "text", "content": text[::-1]}], "finish_reason": "stop"}]))])
        body = req.SerializeToString()
        assert body.count(cls.MARK) == spans, "the mark must occur in span ids only"
        return body

    def take(self) -> tuple[int, bytes]:
        """The next request's number and body (thread-safe)."""
        with self._lock:
            number, self._next = self._next, self._next + 1
        return number, self.templates[number % len(self.templates)].replace(self.MARK, self.number_bytes(number))

    @staticmethod
    def number_bytes(number: int) -> bytes:
        return (number + 1).to_bytes(4, "big")  # never the mark itself (nor 0)

    @classmethod
    def number_hex(cls, number: int) -> str:
        """The request's number as it appears in its span ids' hex (characters 1-8)."""
        return cls.number_bytes(number).hex()


@dataclass
class Sent:
    number: int
    spans: int
    due: float  # when it was meant to be sent (unix seconds)
    first_at: float = 0.0  # its first send
    accepted_at: float = 0.0  # the send of the attempt answered 200
    acked_at: float = 0.0  # that 200's arrival
    answers: list[str] = field(default_factory=list)  # every answer: 200, 503, RESOURCE_EXHAUSTED, timeout, ...
    invalid: list[str] = field(default_factory=list)  # answers that are neither 200 nor a retryable refusal
    gave_up: bool = False  # still refused at the export deadline: the exporter drops it
    unsent: bool = False  # due while every sender was busy: dropped from the sender's queue, never sent


class Load:
    """Senders of :class:`Bodies` over ``transport`` to ``target`` (an OTLP/HTTP base URL or a gRPC host:port)."""

    def __init__(self, bodies: Bodies, transport: Literal["http", "grpc"], target: str,
                 deadline_seconds: float = EXPORT_DEADLINE_SECONDS) -> None:
        self.bodies = bodies
        self.transport = transport
        self.target = target
        self.deadline_seconds = deadline_seconds
        self.sent: list[Sent] = []
        self.answers: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    # -- one request, as an exporter sends it ----------------------------------------------------------------------
    def _attempt(self, client: Any, body: bytes) -> tuple[str, float | None]:
        """(answer, retry delay if it is a retryable refusal with one)."""
        if self.transport == "http":
            try:
                r = client.post(self.target + "/v1/traces", content=body,
                                headers={"Content-Type": "application/x-protobuf"})
            except httpx.TimeoutException:
                return "timeout", None
            except httpx.HTTPError as exc:
                return f"error {type(exc).__name__}", None
            after = r.headers.get("retry-after")
            return str(r.status_code), float(after) if r.status_code == 503 and after and after.isdigit() else None
        try:
            client(body, timeout=ANSWER_TIMEOUT_SECONDS)
            return "200", None
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return "timeout", None
            info = dict(error.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")
            delay = None
            if info is not None and code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                parsed = RetryInfo.FromString(info)
                delay = parsed.retry_delay.seconds + parsed.retry_delay.nanos / 1e9
            return code.name, delay

    def _export(self, client: Any, item: Sent, body: bytes) -> None:
        item.first_at = time.time()
        while True:
            started = time.time()
            answer, delay = self._attempt(client, body)
            item.answers.append(answer)
            with self._lock:
                self.answers[answer] += 1
            if answer == "200":
                item.accepted_at, item.acked_at = started, time.time()
                return
            if delay is None:  # neither a success nor a retryable refusal: the test fails on it
                item.invalid.append(answer)
                return
            if time.time() + delay - item.first_at > self.deadline_seconds or self._stop.is_set():
                item.gave_up = True
                return
            time.sleep(delay)

    def _client(self) -> Any:
        if self.transport == "http":
            return httpx.Client(timeout=ANSWER_TIMEOUT_SECONDS)
        channel = grpc.insecure_channel(self.target, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
        call = channel.unary_unary(TRACES_METHOD, request_serializer=None, response_deserializer=None)
        call.close = channel.close  # type: ignore[attr-defined]
        return call

    def _new(self, due: float) -> tuple[Sent, bytes]:
        number, body = self.bodies.take()
        item = Sent(number, self.bodies.spans, due)
        with self._lock:
            self.sent.append(item)
        return item, body

    # -- shapes of load --------------------------------------------------------------------------------------------
    def closed(self, senders: int, seconds: float) -> list[Sent]:
        """``senders`` threads, each exporting one new request after another for ``seconds``."""
        end = time.time() + seconds
        mine: list[Sent] = []

        def sender() -> None:
            client = self._client()
            try:
                while time.time() < end:
                    item, body = self._new(time.time())
                    mine.append(item)
                    self._export(client, item, body)
            finally:
                client.close()

        self._run([threading.Thread(target=sender) for _ in range(senders)])
        return mine

    def open(self, requests_per_second: float, seconds: float, workers: int = 128) -> list[Sent]:
        """New requests due at ``requests_per_second`` for ``seconds``, each exported by the first free of
        ``workers`` threads; one due while every thread is busy is dropped unsent (``Sent.unsent``), as a batch
        span processor drops spans while its exporter is still retrying: the offered rate holds whatever the
        answers."""
        due: queue.Queue[tuple[Sent, bytes] | None] = queue.Queue(maxsize=workers)
        mine: list[Sent] = []

        def worker() -> None:
            client = self._client()
            try:
                while (job := due.get()) is not None:
                    self._export(client, *job)
            finally:
                client.close()

        def schedule() -> None:
            start = time.time()
            for k in range(int(requests_per_second * seconds)):
                at = start + k / requests_per_second
                time.sleep(max(0.0, at - time.time()))
                job = self._new(at)
                mine.append(job[0])
                try:
                    due.put_nowait(job)
                except queue.Full:
                    job[0].unsent = True
            for _ in range(workers):
                due.put(None)

        self._run([threading.Thread(target=schedule), *(threading.Thread(target=worker) for _ in range(workers))])
        return mine

    def _run(self, threads: list[threading.Thread]) -> None:
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def audit(store: Any, sent: list[Sent]) -> dict[str, int]:
    """Rows stored per request, against what was acknowledged: ``acked_exact`` requests with every span stored
    exactly once, ``acked_wrong`` acknowledged requests stored otherwise, ``unacked_stored`` requests never
    acknowledged of which something was stored, ``scored`` calls of acknowledged requests the detector scored
    (session scope) and ``llm_calls`` their LLM calls."""
    stored = {r["r"]: (int(r["n"]), int(r["u"])) for r in store.rows(
        "SELECT substring(SpanId, 1, 8) AS r, count() AS n, uniqExact(TraceId, SpanId) AS u FROM otel.otel_traces "
        "WHERE ServiceName = {s:String} GROUP BY r", {"s": SERVICE_NAME})}
    scored = {r["r"]: int(r["n"]) for r in store.rows(
        "SELECT substring(span_id, 1, 8) AS r, count() AS n FROM otel.loop_scores "
        "WHERE scope = 'session' AND trace_id LIKE '%6f6f6f6f' GROUP BY r")}
    out = Counter[str]()
    for item in sent:
        key = Bodies.number_hex(item.number)
        rows, distinct = stored.get(key, (0, 0))
        if item.acked_at:
            out["acked_exact" if rows == distinct == item.spans else "acked_wrong"] += 1
            out["scored"] += scored.get(key, 0)
            out["llm_calls"] += item.spans - item.spans // 3
            out["stored_spans"] += rows
        elif rows:
            out["unacked_stored"] += 1
    return dict(out)
