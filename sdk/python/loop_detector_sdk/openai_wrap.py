"""Guard an ``openai`` client: every chat completion and every Responses API request is checked first.

    client = guard_openai(OpenAI(), guard, session_id="run-42")
    client.chat.completions.create(model="gpt-4o-mini", messages=[...])        # also stream=True, .parse, .stream
    client.responses.create(model="gpt-4o-mini", input="...", instructions="...")  # also stream=True, .parse, .stream

Before each request the wrapper sends the request's fingerprint as ``pending`` (chat: model + messages;
Responses: model + input, with instructions, previous_response_id and conversation when given), so an
exact repeat is refused before it is sent, with the app's fingerprints of the call (``pending.evidence``: the
request, and what the agent just observed; hashes, no content), and applies the decision: block raises
:class:`~loop_detector_sdk.LoopBlockedError`, throttle waits, inject adds the break instruction to the
system message (chat: appended by default, or prepended; a system message is inserted when there is none)
or to ``instructions`` (Responses). A streaming request is checked once, before the stream opens.

``with_raw_response`` / ``with_streaming_response`` are guarded too, and ``with_options(...)`` returns a
guarded client. Everything else on the client passes through unchanged. ``openai`` is not a dependency: any
object of the same shape works. An ``AsyncOpenAI`` client takes an :class:`~loop_detector_sdk.AsyncLoopGuard`.
"""

from __future__ import annotations

from typing import Any, Literal

from loop_detector_sdk._guarded import Call, GuardedResource, ids_of
from loop_detector_sdk.client import AsyncLoopGuard, LoopGuard
from loop_detector_sdk.evidence.messages import from_openai_chat, from_responses_input
from loop_detector_sdk.evidence.pending import model_evidence
from loop_detector_sdk.fingerprint import request_fingerprint

Position = Literal["append", "prepend"]
SYSTEM_ROLES = ("system", "developer")


def with_instruction(messages: Any, instruction: str, position: Position = "append") -> list[Any]:
    """A copy of ``messages`` with ``instruction`` added to the first system (or developer) message, or a new
    system message first when there is none. The caller's list and dicts are not modified."""
    out = list(messages or [])
    for i, message in enumerate(out):
        if not isinstance(message, dict) or message.get("role") not in SYSTEM_ROLES:
            continue
        content = message.get("content")
        if isinstance(content, str) or content is None:
            text = content or ""
            joined = f"{text}\n\n{instruction}" if position == "append" else f"{instruction}\n\n{text}"
            out[i] = {**message, "content": joined.strip()}
        elif isinstance(content, list):
            part = {"type": "text", "text": instruction}
            out[i] = {**message, "content": [*content, part] if position == "append" else [part, *content]}
        else:
            continue
        return out
    return [{"role": "system", "content": instruction}, *out]


def join_text(existing: Any, instruction: str, position: Position = "append") -> str:
    """``instruction`` added to a system-prompt string (Responses ``instructions``, Anthropic ``system``)."""
    text = existing if isinstance(existing, str) else ""
    return (f"{text}\n\n{instruction}" if position == "append" else f"{instruction}\n\n{text}").strip()


def _with_evidence(pending: dict[str, Any], evidence: dict[str, Any] | None) -> dict[str, Any]:
    if evidence:
        pending["evidence"] = evidence
    return pending


def chat_pending(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Model + messages, and the app's fingerprints of the call (its request and new input; no content)."""
    model, messages = kwargs.get("model"), kwargs.get("messages")
    return _with_evidence({"request_fingerprint": request_fingerprint(model, messages)},
                          model_evidence(model, from_openai_chat, messages))


def responses_pending(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Model + input, and what else makes the request another one: the instructions, and the conversation
    state it continues (``previous_response_id``, ``conversation``): the same "continue" input on a
    conversation that moved on is not a repeat."""
    fp = request_fingerprint(kwargs.get("model"), kwargs.get("input"), instructions=kwargs.get("instructions"),
                             previous_response_id=kwargs.get("previous_response_id"),
                             conversation=kwargs.get("conversation"))
    return _with_evidence({"request_fingerprint": fp}, model_evidence(
        kwargs.get("model"), from_responses_input, kwargs.get("input"), kwargs.get("instructions")))


def _calls(position: Position) -> tuple[dict[str, Call], dict[str, Call]]:
    def chat_inject(kwargs: dict[str, Any], instruction: str) -> dict[str, Any]:
        return {**kwargs, "messages": with_instruction(kwargs.get("messages"), instruction, position)}

    def responses_inject(kwargs: dict[str, Any], instruction: str) -> dict[str, Any]:
        return {**kwargs, "instructions": join_text(kwargs.get("instructions"), instruction, position)}

    chat = {"create": Call(chat_pending, chat_inject), "parse": Call(chat_pending, chat_inject),
            "stream": Call(chat_pending, chat_inject, manager=True)}
    responses = {"create": Call(responses_pending, responses_inject), "parse": Call(responses_pending, responses_inject),
                 "stream": Call(responses_pending, responses_inject, manager=True)}
    return chat, responses


class _Chat:
    def __init__(self, inner: Any, completions: GuardedResource) -> None:
        self._inner = inner
        self.completions = completions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class GuardedClient:
    """The client, with chat completions and the Responses API guarded; every other attribute is the client's."""

    def __init__(self, client: Any, guard: LoopGuard | AsyncLoopGuard, ids: dict[str, str],
                 position: Position) -> None:
        self._client = client
        self._guard, self._ids, self._position = guard, ids, position
        chat_calls, responses_calls = _calls(position)
        self.chat = _Chat(client.chat, GuardedResource(client.chat.completions, guard, ids, chat_calls))
        if getattr(client, "responses", None) is not None:
            self.responses = GuardedResource(client.responses, guard, ids, responses_calls)

    @property
    def wrapped(self) -> Any:
        return self._client

    def with_options(self, *args: Any, **kwargs: Any) -> GuardedClient:
        """The client's ``with_options`` (a copy with other timeouts, retries...), guarded the same way."""
        return GuardedClient(self._client.with_options(*args, **kwargs), self._guard, self._ids, self._position)

    copy = with_options

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def guard_openai(client: Any, guard: LoopGuard | AsyncLoopGuard, *, session_id: str | None = None,
                 trace_id: str | None = None, virtual_key: str | None = None, feature: str | None = None,
                 position: Position = "append") -> GuardedClient:
    """Wrap an ``openai.OpenAI`` (with a :class:`LoopGuard`) or ``openai.AsyncOpenAI`` (with an
    :class:`AsyncLoopGuard`) client. Ids left out come from :func:`~loop_detector_sdk.loop_context` at call time."""
    return GuardedClient(client, guard, ids_of(session_id, trace_id, virtual_key, feature), position)


def guard_async_openai(client: Any, guard: AsyncLoopGuard, **kwargs: Any) -> GuardedClient:
    """The same as :func:`guard_openai`, spelled for ``AsyncOpenAI`` clients."""
    return guard_openai(client, guard, **kwargs)
