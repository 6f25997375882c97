"""Real OpenTelemetry spans and the exact request bodies the real OTLP exporters send, for ingest tests.

Spans are recorded through the OpenTelemetry SDK (a ``TracerProvider`` into an in-memory exporter) and encoded
with the OTLP exporter's own encoder (``encode_spans``: the protobuf ``ExportTraceServiceRequest`` the
``OTLPSpanExporter`` posts), so a test can post the very bytes an instrumented app would send, resend them as
the exporter's retry would, and read every status code (the exporter itself hides 503s behind its retries).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import httpx
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

__all__ = ["PROTOBUF", "SECOND", "chat_spans", "encode", "new_conversation", "partial_success", "post_body", "trace_hex"]

PROTOBUF = "application/x-protobuf"
SECOND = 1_000_000_000


def chat_spans(count: int, conversation: str, *, service: str = "sender", virtual_key: str = "vk-test",
               end_times: dict[int, int] | None = None, attributes: dict[int, dict[str, str]] | None = None,
               tool_every: int = 0) -> list[ReadableSpan]:
    """``count`` GenAI chat spans (every ``tool_every``-th an execute_tool span) of one new trace, recorded
    through the real SDK. ``end_times`` / ``attributes`` override the end time / add attributes of span i."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                        "loop_detector.virtual_key": virtual_key}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests.otlp_senders", "1.0")
    now = time.time_ns()
    root = tracer.start_span("invoke_agent", start_time=now - (count + 2) * SECOND)
    ctx = otel_trace.set_span_in_context(root)
    for i in range(count):
        start = now - (count + 1 - i) * SECOND
        tool = tool_every and i % tool_every == tool_every - 1
        attrs = {"gen_ai.operation.name": "execute_tool" if tool else "chat", "gen_ai.conversation.id": conversation,
                 "gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 100 + i,
                 "gen_ai.usage.output_tokens": 10}
        if tool:
            attrs.update({"gen_ai.tool.name": "read_file", "gen_ai.tool.call.arguments": f'{{"path": "f{i}.py"}}'})
        attrs.update((attributes or {}).get(i, {}))
        span = tracer.start_span(f"{'execute_tool read_file' if tool else 'chat gpt-4o'}", context=ctx,
                                 kind=SpanKind.INTERNAL if tool else SpanKind.CLIENT, start_time=start,
                                 attributes=attrs)
        span.end(end_time=(end_times or {}).get(i, start + SECOND // 2))
    provider.shutdown()
    return [s for s in memory.get_finished_spans() if s.name != "invoke_agent"]


def encode(spans: Sequence[ReadableSpan]) -> bytes:
    """The protobuf body the OTLP/HTTP exporter posts for these spans."""
    return encode_spans(spans).SerializeToString()


def trace_hex(spans: Sequence[ReadableSpan]) -> str:
    return f"{spans[0].context.trace_id:032x}"


def post_body(client: httpx.Client, body: bytes, media: str = PROTOBUF, **headers: str) -> httpx.Response:
    return client.post("/v1/traces", content=body, headers={"Content-Type": media, **headers})


def partial_success(response: httpx.Response) -> tuple[int, str]:
    """(rejected spans, error message) of a 200 export response, in either encoding."""
    if response.headers["content-type"].startswith(PROTOBUF):
        partial = ExportTraceServiceResponse.FromString(response.content).partial_success
        return partial.rejected_spans, partial.error_message
    doc = response.json().get("partialSuccess", {})
    return int(doc.get("rejectedSpans", 0)), doc.get("errorMessage", "")


def new_conversation() -> str:
    return f"conv-{uuid.uuid4().hex[:10]}"
