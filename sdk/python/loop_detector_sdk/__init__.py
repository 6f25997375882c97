"""loop-detector's Python SDK: ask the enforcement API before each model or tool call, and apply the answer.

Depends on ``httpx`` only (never on the server: no chDB, no FastAPI). Everything else is optional and
imported only when used: OpenTelemetry by the span helpers (:func:`loop_context` sets baggage;
:class:`LoopAttributesSpanProcessor` copies the ids onto spans), and each framework by its guard:

* ``openai`` (chat completions and the Responses API): :func:`guard_openai` (works with any object of that shape);
* ``anthropic`` (Messages): :func:`guard_anthropic`;
* LangChain v1 / LangGraph agents: :class:`LoopGuardMiddleware` (``loop_detector_sdk.langchain_middleware``);
* the OpenAI Agents SDK: :func:`guard_run_config` and :class:`LoopGuardHooks` (``loop_detector_sdk.openai_agents_hooks``);
* the LiteLLM proxy: :class:`LoopDetectorGuardrail` (``loop_detector_sdk.litellm_guardrail``).

With content capture off, the app's fingerprints of each call (hashes, never text: :mod:`loop_detector_sdk.evidence`)
reach loop-detector through every guard's check, and through the spans of instrumentations built on
``opentelemetry-util-genai``: ``OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK=loop_detector`` loads
:mod:`loop_detector_sdk.completion_hook`.

    from loop_detector_sdk import LoopGuard, LoopBlockedError, guard_openai, loop_context

    guard = LoopGuard("http://127.0.0.1:8080")          # fail_open=True, timeout=0.5
    client = guard_openai(OpenAI(), guard)
    with loop_context(session_id="run-42", feature="support-bot"):
        try:
            client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        except LoopBlockedError as exc:
            print(exc.body["error"]["reason"])
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from loop_detector_sdk.anthropic_wrap import guard_anthropic
from loop_detector_sdk.client import DEFAULT_INSTRUCTION, AsyncLoopGuard, LoopGuard
from loop_detector_sdk.context import LoopIds, current_ids, loop_context
from loop_detector_sdk.fingerprint import canonical_json, pending_request, pending_tool, request_fingerprint
from loop_detector_sdk.models import Decision, LoopBlockedError
from loop_detector_sdk.openai_wrap import guard_async_openai, guard_openai, with_instruction

__version__ = "0.1.0"

# name -> the module that has it; imported on first use, because each needs an optional library
LAZY = {
    "LoopAttributesSpanProcessor": "otel",
    "LoopGuardMiddleware": "langchain_middleware",
    "LoopGuardHooks": "openai_agents_hooks",
    "LoopBlockedAgentsError": "openai_agents_hooks",
    "guard_run_config": "openai_agents_hooks",
    "LoopDetectorGuardrail": "litellm_guardrail",
}

__all__ = [
    "DEFAULT_INSTRUCTION",
    "AsyncLoopGuard",
    "Decision",
    "LoopAttributesSpanProcessor",
    "LoopBlockedAgentsError",
    "LoopBlockedError",
    "LoopDetectorGuardrail",
    "LoopGuard",
    "LoopGuardHooks",
    "LoopGuardMiddleware",
    "LoopIds",
    "canonical_json",
    "current_ids",
    "guard_anthropic",
    "guard_async_openai",
    "guard_openai",
    "guard_run_config",
    "loop_context",
    "pending_request",
    "pending_tool",
    "request_fingerprint",
    "with_instruction",
]


def __getattr__(name: str) -> Any:
    module = LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(import_module(f"loop_detector_sdk.{module}"), name)
