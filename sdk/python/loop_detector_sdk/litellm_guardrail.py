"""The LiteLLM proxy: a custom guardrail, so that every app behind the gateway is enforced with no change.

In the proxy's ``config.yaml``::

    guardrails:
      - guardrail_name: loop-detector
        litellm_params:
          guardrail: loop_detector_sdk.litellm_guardrail.LoopDetectorGuardrail
          mode: pre_call
          default_on: true
          api_base: http://127.0.0.1:8080        # or $LOOP_DETECTOR_URL
          # api_key: ...                          # or $LOOP_DETECTOR_API_KEY, else $LOOP_DETECTOR_API_TOKEN:
          #                                         the service's API token (a Bearer token)

Before each request (chat completions, the Responses API, Anthropic's ``/v1/messages``) the guardrail asks
loop-detector with the pending request's fingerprint, the same one the client-side guards send (model +
messages; Responses: + instructions and conversation state; Messages: + system), and the app's fingerprints of
the call (``pending.evidence``: request and new input, hashes only), and applies the answer:

* block: the request is refused with HTTP 429 and ``Retry-After``; the body is the spec's
  ``{"error": {"reason": "loop_detected", "session_id", "confidence", "dominant_signal",
  "enforcement_level": "hard_stop", ...}}``, with LiteLLM's OpenAI-style ``message`` / ``type`` / ``code``
  beside them in ``error`` so that OpenAI and Anthropic SDKs raise their rate-limit error with a message;
* throttle: the request waits the delay in the gateway; inject: the break instruction is added to the
  request's system prompt (``messages``, ``instructions`` or ``system``); warn / allow: it proceeds.

The scopes of a request, in order of preference (:func:`request_ids`):

* session: the ``x-loop-detector-session-id`` header; the W3C ``baggage`` entry ``loop_detector.session_id`` (what
  :func:`~loop_detector_sdk.loop_context` sets, propagated by an OTel-instrumented HTTP client); LiteLLM's own
  ``litellm_session_id`` (which LiteLLM fills from ``x-litellm-session-id`` and other session headers); the
  request's ``metadata.session_id``; else the ``traceparent``'s trace; else the virtual key (so exact repeats
  through one key are caught even from an app that sends nothing);
* trace: the ``traceparent`` header's trace id (an OTel-instrumented app propagates it);
* virtual key: the ``loop_detector.virtual_key`` baggage entry, else the LiteLLM key's alias, else its hash;
* feature: the ``x-loop-detector-feature`` header, the ``loop_detector.feature`` baggage entry, ``metadata.feature``.

The enforcement API unreachable: ``fail_open`` (default true) lets requests through. Needs ``litellm[proxy]``
(the ``litellm`` extra), in the proxy's environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.proxy._types import ProxyException
from litellm.types.guardrails import GuardrailEventHooks

from loop_detector_sdk.anthropic_wrap import messages_pending, with_system_instruction
from loop_detector_sdk.client import AsyncLoopGuard
from loop_detector_sdk.models import LoopBlockedError
from loop_detector_sdk.openai_wrap import chat_pending, join_text, responses_pending, with_instruction

SESSION_HEADER = "x-loop-detector-session-id"
FEATURE_HEADER = "x-loop-detector-feature"
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
RESPONSES_CALLS = frozenset({"responses", "aresponses"})
ANTHROPIC_CALLS = frozenset({"anthropic_messages", "aanthropic_messages"})
CHAT_CALLS = frozenset({"completion", "acompletion", "text_completion", "atext_completion"})


class LoopBlockedProxyError(ProxyException):  # type: ignore[misc]
    """What the proxy answers for a blocked request: 429, ``Retry-After``, the spec's body fields in
    ``error`` beside the OpenAI-style ones LiteLLM writes for every error."""

    def __init__(self, error: LoopBlockedError) -> None:
        retry = error.retry_after if error.retry_after is not None else 60
        super().__init__(message=str(error), type="loop_detected", param=None, code=429,
                         headers={"Retry-After": str(int(retry))}, openai_code="loop_detected")
        self.body = error.body

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), **(self.body.get("error") or {})}


def _headers(data: Mapping[str, Any]) -> dict[str, str]:
    request = data.get("proxy_server_request") or {}
    headers = request.get("headers") if isinstance(request, Mapping) else None
    return {str(k).lower(): str(v) for k, v in (headers or {}).items()}


def _metadata(data: Mapping[str, Any]) -> Mapping[str, Any]:
    for name in ("metadata", "litellm_metadata"):
        value = data.get(name)
        if isinstance(value, Mapping) and (value.get("session_id") or value.get("feature")):
            return value
    return {}


def baggage_entries(header: str) -> dict[str, str]:
    """The ``loop_detector.*`` entries of a W3C ``baggage`` header (``key=value;props, ...``, values URL-encoded)."""
    out: dict[str, str] = {}
    for member in header.split(","):
        key, sep, value = member.split(";", 1)[0].partition("=")
        key = key.strip()
        if sep and key.startswith("loop_detector.") and value.strip():
            out[key] = unquote(value.strip())
    return out


def request_ids(data: Mapping[str, Any], user_api_key_dict: Any = None) -> dict[str, str]:
    """The loop-detector scopes of a proxied request (see the module's docstring)."""
    headers = _headers(data)
    metadata = _metadata(data)
    baggage = baggage_entries(headers.get("baggage", ""))
    match = _TRACEPARENT.match(headers.get("traceparent", "").strip().lower())
    trace_id = match.group(1) if match and match.group(1) != "0" * 32 else None
    key = (baggage.get("loop_detector.virtual_key") or getattr(user_api_key_dict, "key_alias", None)
           or getattr(user_api_key_dict, "token", None))
    virtual_key = str(key) if key else None
    session = (headers.get(SESSION_HEADER) or baggage.get("loop_detector.session_id") or data.get("litellm_session_id")
               or metadata.get("session_id") or trace_id or (f"key:{virtual_key}" if virtual_key else None)
               or "litellm-proxy")
    feature = headers.get(FEATURE_HEADER) or baggage.get("loop_detector.feature") or metadata.get("feature")
    ids = {"session_id": str(session), "trace_id": trace_id, "virtual_key": virtual_key, "feature": feature}
    return {k: str(v) for k, v in ids.items() if v}


def request_pending(data: Mapping[str, Any], call_type: str) -> dict[str, Any]:
    kwargs = dict(data)
    if call_type in RESPONSES_CALLS:
        return responses_pending(kwargs)
    if call_type in ANTHROPIC_CALLS:
        return messages_pending(kwargs)
    return chat_pending(kwargs)


def with_request_instruction(data: dict[str, Any], call_type: str, instruction: str) -> dict[str, Any]:
    if call_type in RESPONSES_CALLS:
        data["instructions"] = join_text(data.get("instructions"), instruction)
    elif call_type in ANTHROPIC_CALLS:
        data["system"] = with_system_instruction(data.get("system"), instruction)
    elif "messages" in data:
        data["messages"] = with_instruction(data.get("messages"), instruction)
    return data


class LoopDetectorGuardrail(CustomGuardrail):  # type: ignore[misc]
    """A LiteLLM proxy ``pre_call`` guardrail asking loop-detector before each request."""

    def __init__(self, api_base: str | None = None, api_key: str | None = None, fail_open: bool = True,
                 timeout: float = 0.5, **kwargs: Any) -> None:
        self.endpoint = api_base or os.environ.get("LOOP_DETECTOR_URL", "http://127.0.0.1:8080")
        self.loop_api_key = api_key or os.environ.get("LOOP_DETECTOR_API_KEY") or None
        self.fail_open = fail_open
        self.check_timeout = timeout
        self._guard: AsyncLoopGuard | None = None
        kwargs.setdefault("supported_event_hooks", [GuardrailEventHooks.pre_call])
        super().__init__(**kwargs)

    @property
    def guard(self) -> AsyncLoopGuard:
        if self._guard is None:  # made inside the proxy's event loop, on first use
            self._guard = AsyncLoopGuard(self.endpoint, api_key=self.loop_api_key, timeout=self.check_timeout,
                                         fail_open=self.fail_open, use_otel_trace=False)
        return self._guard

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict[str, Any],
                                  call_type: str) -> dict[str, Any] | None:
        if call_type not in CHAT_CALLS | RESPONSES_CALLS | ANTHROPIC_CALLS:
            return data  # embeddings, images...: not a model turn of an agent
        if not self.should_run_guardrail(data=data, event_type=GuardrailEventHooks.pre_call):
            return data
        try:
            instruction = await self.guard.before_call(**request_ids(data, user_api_key_dict),
                                                       pending=request_pending(data, call_type))
        except LoopBlockedError as exc:
            raise LoopBlockedProxyError(exc) from None
        if instruction:
            data = with_request_instruction(data, call_type, instruction)
        return data
