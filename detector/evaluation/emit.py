"""A scenario's calls as real GenAI spans: each model call and its tool runs, emitted with the OpenTelemetry SDK the
way an instrumented agent emits them (content only when the scenario captures it), at the scenario's own times."""

from __future__ import annotations

import json
from typing import Any

from loop_detector_sdk.evidence.fingerprints import genai_call_evidence
from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from detector.evaluation.corpus_records import CallSpec, Scenario
from detector.ingest import semconv as sc

__all__ = ["emit_call", "scenario_duration_ns"]


def emit_call(tracer: Tracer, call: CallSpec, *, session_id: str, start_ns: int, capture_content: bool,
              history: list[dict[str, Any]], parent: otel_context.Context | None = None,
              virtual_key: str | None = None, app_fingerprints: bool = False) -> int:
    """Emit one model call and its tool runs as GenAI spans starting at ``start_ns``; returns when the step
    ended. ``history`` is the conversation so far (GenAI message format); it grows like a real agent's:
    the user text, the assistant message, the tool results. ``call.restart`` starts a fresh conversation
    (a stateless request). Content (messages, tool arguments and results) only with ``capture_content``,
    as every instrumentation makes it opt-in; without it, ``app_fingerprints`` puts on each chat span the
    ``loop_detector.fp.*`` attributes the SDK's completion hook would set from the same messages."""
    if call.restart:
        history.clear()
    if call.user_text:
        history.append({"role": "user", "parts": [{"type": "text", "content": call.user_text}]})
    attrs: dict[str, Any] = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
        sc.GEN_AI_PROVIDER_NAME: "openai",
        sc.GEN_AI_REQUEST_MODEL: call.model,
        sc.GEN_AI_CONVERSATION_ID: session_id,
    }
    if virtual_key:
        attrs[sc.LOOP_VIRTUAL_KEY] = virtual_key
    if call.max_tokens:
        attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] = call.max_tokens
    parts: list[dict[str, Any]] = []
    if call.output_text:
        parts.append({"type": "text", "content": call.output_text})
    for i, tool in enumerate(call.tools):
        parts.append({"type": "tool_call", "id": f"call_{i}", "name": tool.name, "arguments": tool.arguments})
    finish = "tool_calls" if call.tools else "stop"
    if capture_content:
        attrs[sc.GEN_AI_INPUT_MESSAGES] = json.dumps(history)
    elif app_fingerprints:  # what the completion hook sets, from the same messages (none out of a failed call)
        outputs = [] if call.error else [{"role": "assistant", "parts": parts, "finish_reason": finish}]
        attrs.update(genai_call_evidence(call.model, history, outputs).span_attributes())
    if not call.error:  # a failed request has no response: no usage, no output
        attrs.update({
            sc.GEN_AI_RESPONSE_MODEL: call.model,
            sc.GEN_AI_USAGE_INPUT_TOKENS: call.input_tokens,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: call.output_tokens,
            sc.GEN_AI_RESPONSE_FINISH_REASONS: [finish],
        })
        if call.cost_usd is not None:
            attrs[sc.GEN_AI_USAGE_COST] = call.cost_usd
        if capture_content:
            attrs[sc.GEN_AI_OUTPUT_MESSAGES] = json.dumps([{"role": "assistant", "parts": parts,
                                                            "finish_reason": finish}])
    end_ns = start_ns + int(call.duration_s * 1e9)
    span = tracer.start_span(f"chat {call.model}", context=parent, kind=SpanKind.CLIENT, attributes=attrs,
                             start_time=start_ns)
    if call.error:
        span.set_attribute(sc.ERROR_TYPE, call.error)
        span.set_status(Status(StatusCode.ERROR, call.error_message or call.error))
    span.end(end_time=end_ns)
    if call.error:
        return end_ns
    if call.keep_output:
        history.append({"role": "assistant", "parts": parts})

    step_end = end_ns
    for i, tool in enumerate(call.tools):  # parallel tool calls run side by side
        tool_attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
            sc.GEN_AI_TOOL_NAME: tool.name,
            sc.GEN_AI_TOOL_CALL_ID: f"call_{i}",
            sc.GEN_AI_CONVERSATION_ID: session_id,
        }
        if capture_content:
            tool_attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = json.dumps(tool.arguments)
            if not tool.error:  # an empty result too: captured, it is what came back (the next call sees it so)
                tool_attrs[sc.GEN_AI_TOOL_CALL_RESULT] = tool.result
        t_end = end_ns + int(tool.duration_s * 1e9) + i * 1000
        tspan = tracer.start_span(f"execute_tool {tool.name}", context=parent, kind=SpanKind.INTERNAL,
                                  attributes=tool_attrs, start_time=end_ns + i * 1000)
        if tool.error:
            tspan.set_attribute(sc.ERROR_TYPE, tool.error)
            tspan.set_status(Status(StatusCode.ERROR, tool.error_message or tool.error))
        tspan.end(end_time=t_end)
        step_end = max(step_end, t_end)
        result = f"error: {tool.error_message or tool.error}" if tool.error else tool.result
        history.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": f"call_{i}",
                                                   "response": result}]})
    return step_end + 10_000_000


def scenario_duration_ns(scenario: Scenario) -> int:
    """How long the run lasts in span time (gaps, calls, tools)."""
    total = 0.0
    for call in scenario.calls:
        total += call.gap_s + call.duration_s + max((t.duration_s for t in call.tools), default=0.0) + 0.01
    return int(total * 1e9)
