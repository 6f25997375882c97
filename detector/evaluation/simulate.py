"""Simulated agents that emit real OpenTelemetry GenAI spans (demo, tests, evaluation corpus).

Spans follow the GenAI semantic conventions as the official instrumentations emit them: a ``chat``
client span per model call (usage, finish reasons, optionally the input/output messages when content
capture is on) and an ``execute_tool`` internal span per tool run. They go through the real
opentelemetry-sdk and OTLP/HTTP exporter, like any instrumented application's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from detector.ingest import semconv as sc

__all__ = ["SimulatedStep", "ToolCall", "emit_step", "otlp_tracer", "start_run", "wait_for_detector"]


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    error: str | None = None  # error.type when the tool fails
    error_message: str = ""


@dataclass
class SimulatedStep:
    """One agent step: a model call (which may ask for tools) and the tools it ran."""

    user_text: str = ""
    output_text: str = ""
    tools: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 500
    output_tokens: int = 60
    model: str = "gpt-4o-mini"
    error: str | None = None  # error.type when the model call itself fails
    duration_s: float = 0.4


@contextmanager
def otlp_tracer(endpoint: str, service_name: str = "demo-agent",
                resource_attributes: dict[str, str] | None = None) -> Iterator[tuple[Tracer, TracerProvider]]:
    """A tracer exporting with the real OTLP/HTTP exporter to ``endpoint`` (the base URL, e.g.
    ``http://127.0.0.1:4318``)."""
    resource = Resource.create({"service.name": service_name, **(resource_attributes or {})})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=10)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    try:
        yield provider.get_tracer("loop-detector.simulate"), provider
    finally:
        provider.shutdown()


def emit_step(tracer: Tracer, step: SimulatedStep, *, session_id: str | None, start_ns: int,
              capture_content: bool = True, virtual_key: str | None = None, feature: str | None = None,
              history: list[dict[str, Any]] | None = None, parent: otel_context.Context | None = None) -> int:
    """Emit the spans of one step starting at ``start_ns``; returns the time the step ended.

    ``history`` (the conversation so far, in the GenAI message format) grows as the step is added, like a
    real agent's context; the chat span's input messages are the whole history plus the new user text.
    """
    history = history if history is not None else []
    if step.user_text:
        history.append({"role": "user", "parts": [{"type": "text", "content": step.user_text}]})
    attrs: dict[str, Any] = {
        sc.GEN_AI_OPERATION_NAME: "chat",
        sc.GEN_AI_PROVIDER_NAME: "openai",
        sc.GEN_AI_REQUEST_MODEL: step.model,
        sc.GEN_AI_RESPONSE_MODEL: step.model,
        sc.GEN_AI_USAGE_INPUT_TOKENS: step.input_tokens,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: step.output_tokens,
        sc.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls" if step.tools else "stop"],
    }
    if session_id:
        attrs[sc.GEN_AI_CONVERSATION_ID] = session_id
    if virtual_key:
        attrs[sc.LOOP_VIRTUAL_KEY] = virtual_key
    if feature:
        attrs[sc.LOOP_FEATURE] = feature
    parts: list[dict[str, Any]] = []
    if step.output_text:
        parts.append({"type": "text", "content": step.output_text})
    for i, tool in enumerate(step.tools):
        parts.append({"type": "tool_call", "id": f"call_{i}", "name": tool.name, "arguments": tool.arguments})
    output = [{"role": "assistant", "parts": parts, "finish_reason": "tool_calls" if step.tools else "stop"}]
    if capture_content:
        attrs[sc.GEN_AI_INPUT_MESSAGES] = json.dumps(history)
        attrs[sc.GEN_AI_OUTPUT_MESSAGES] = json.dumps(output)
    end_ns = start_ns + int(step.duration_s * 1e9)
    span = tracer.start_span(f"chat {step.model}", context=parent, kind=SpanKind.CLIENT, attributes=attrs,
                             start_time=start_ns)
    if step.error:
        span.set_attribute(sc.ERROR_TYPE, step.error)
        span.set_status(Status(StatusCode.ERROR, step.error))
    span.end(end_time=end_ns)
    history.append({"role": "assistant", "parts": parts})

    t = end_ns
    for i, tool in enumerate(step.tools):
        tool_attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: "execute_tool",
            sc.GEN_AI_TOOL_NAME: tool.name,
            sc.GEN_AI_TOOL_CALL_ID: f"call_{i}",
        }
        if session_id:
            tool_attrs[sc.GEN_AI_CONVERSATION_ID] = session_id
        if capture_content:
            tool_attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = json.dumps(tool.arguments)
        tspan = tracer.start_span(f"execute_tool {tool.name}", context=parent, kind=SpanKind.INTERNAL,
                                  attributes=tool_attrs, start_time=t)
        if tool.error:
            tspan.set_attribute(sc.ERROR_TYPE, tool.error)
            tspan.set_status(Status(StatusCode.ERROR, tool.error_message or tool.error))
        t += 50_000_000
        tspan.end(end_time=t)
        result = f"error: {tool.error_message or tool.error}" if tool.error else f"ok: {tool.name} done"
        history.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": f"call_{i}",
                                                   "response": result}]})
    return t + 10_000_000


def start_run(tracer: Tracer, *, agent_name: str, session_id: str | None, start_ns: int,
              virtual_key: str | None = None) -> tuple[otel_trace.Span, otel_context.Context]:
    """Open the ``invoke_agent`` span of one agent run (one trace); pass the returned context as ``parent``
    to :func:`emit_step` and end the span when the run is over."""
    attrs: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.GEN_AI_AGENT_NAME: agent_name}
    if session_id:
        attrs[sc.GEN_AI_CONVERSATION_ID] = session_id
    if virtual_key:
        attrs[sc.LOOP_VIRTUAL_KEY] = virtual_key
    span = tracer.start_span(f"invoke_agent {agent_name}", kind=SpanKind.INTERNAL, attributes=attrs,
                             start_time=start_ns)
    return span, otel_trace.set_span_in_context(span)


def wait_for_detector(api: str, after_us: int, timeout: float = 30.0, client: httpx.Client | None = None) -> None:
    """Wait until the detector's watermark (``GET /healthz``) has passed ``after_us``: every call exported
    before then has been scored and its decision published."""
    get = client.get if client is not None else httpx.get
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if get(f"{api}/healthz").json()["watermark_us"] >= after_us:
            return
        time.sleep(0.05)
    raise TimeoutError(f"the detector did not catch up within {timeout:.0f} s")
