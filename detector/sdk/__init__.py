"""loop-detector's Python SDK: ask the enforcement API before each model or tool call, and apply the answer.

Depends on ``httpx`` only (never on the server: no chDB, no FastAPI). OpenTelemetry is optional and only
used by the span helpers (:func:`loop_context` sets baggage; :class:`LoopAttributesSpanProcessor` copies the
ids onto spans). ``openai`` is optional too: :func:`guard_openai` works with any object of that shape.

    from detector.sdk import LoopGuard, LoopBlockedError, guard_openai, loop_context

    guard = LoopGuard("http://127.0.0.1:8080")          # fail_open=True, timeout=0.5
    client = guard_openai(OpenAI(), guard)
    with loop_context(session_id="run-42", feature="support-bot"):
        try:
            client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        except LoopBlockedError as exc:
            print(exc.body["error"]["reason"])
"""

from __future__ import annotations

from typing import Any

from detector.sdk.client import DEFAULT_INSTRUCTION, AsyncLoopGuard, LoopGuard
from detector.sdk.context import LoopIds, current_ids, loop_context
from detector.sdk.fingerprint import pending_request, pending_tool, request_fingerprint
from detector.sdk.models import Decision, LoopBlockedError
from detector.sdk.openai_wrap import guard_async_openai, guard_openai, with_instruction

__all__ = [
    "DEFAULT_INSTRUCTION",
    "AsyncLoopGuard",
    "Decision",
    "LoopAttributesSpanProcessor",
    "LoopBlockedError",
    "LoopGuard",
    "LoopIds",
    "current_ids",
    "guard_async_openai",
    "guard_openai",
    "loop_context",
    "pending_request",
    "pending_tool",
    "request_fingerprint",
    "with_instruction",
]


def __getattr__(name: str) -> Any:  # the span processor imports opentelemetry-sdk: only when asked for
    if name == "LoopAttributesSpanProcessor":
        from detector.sdk.otel import LoopAttributesSpanProcessor

        return LoopAttributesSpanProcessor
    raise AttributeError(name)
