"""Guard an ``anthropic`` client: every Messages API request is checked first.

    client = guard_anthropic(Anthropic(), guard, session_id="run-42")
    client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, system="...", messages=[...])
    with client.messages.stream(...) as stream: ...              # also stream=True

Before each request the wrapper sends the fingerprint of the model, the messages and the system prompt as
``pending`` (an exact repeat is refused before it is sent) and applies the decision: block raises
:class:`~loop_detector_sdk.LoopBlockedError`, throttle waits, inject adds the break instruction to ``system``
(a string, or a list of text blocks: appended by default, or prepended). ``with_raw_response`` /
``with_streaming_response`` are guarded too, ``with_options(...)`` returns a guarded client, and everything
else passes through. ``anthropic`` is not a dependency: any object of the same shape works; an
``AsyncAnthropic`` client takes an :class:`~loop_detector_sdk.AsyncLoopGuard`.
"""

from __future__ import annotations

from typing import Any

from loop_detector_sdk._guarded import Call, GuardedResource, ids_of
from loop_detector_sdk.client import AsyncLoopGuard, LoopGuard
from loop_detector_sdk.evidence.messages import from_anthropic
from loop_detector_sdk.evidence.pending import model_evidence
from loop_detector_sdk.fingerprint import request_fingerprint
from loop_detector_sdk.openai_wrap import Position, join_text


def messages_pending(kwargs: dict[str, Any]) -> dict[str, Any]:
    fp = request_fingerprint(kwargs.get("model"), kwargs.get("messages"), system=kwargs.get("system"))
    pending: dict[str, Any] = {"request_fingerprint": fp}
    evidence = model_evidence(kwargs.get("model"), from_anthropic, kwargs.get("messages"), kwargs.get("system"))
    if evidence:
        pending["evidence"] = evidence  # the app's fingerprints of the call: request and new input, no content
    return pending


def with_system_instruction(system: Any, instruction: str, position: Position = "append") -> Any:
    """``system`` (None, a string, or a list of content blocks) with ``instruction`` added; not modified."""
    if isinstance(system, list):
        block = {"type": "text", "text": instruction}
        return [*system, block] if position == "append" else [block, *system]
    return join_text(system, instruction, position)


class GuardedAnthropic:
    """The client, with ``messages`` guarded; every other attribute is the client's."""

    def __init__(self, client: Any, guard: LoopGuard | AsyncLoopGuard, ids: dict[str, str],
                 position: Position) -> None:
        self._client = client
        self._guard, self._ids, self._position = guard, ids, position

        def inject(kwargs: dict[str, Any], instruction: str) -> dict[str, Any]:
            return {**kwargs, "system": with_system_instruction(kwargs.get("system"), instruction, position)}

        calls = {"create": Call(messages_pending, inject), "parse": Call(messages_pending, inject),
                 "stream": Call(messages_pending, inject, manager=True)}
        self.messages = GuardedResource(client.messages, guard, ids, calls)

    @property
    def wrapped(self) -> Any:
        return self._client

    def with_options(self, *args: Any, **kwargs: Any) -> GuardedAnthropic:
        return GuardedAnthropic(self._client.with_options(*args, **kwargs), self._guard, self._ids, self._position)

    copy = with_options

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def guard_anthropic(client: Any, guard: LoopGuard | AsyncLoopGuard, *, session_id: str | None = None,
                    trace_id: str | None = None, virtual_key: str | None = None, feature: str | None = None,
                    position: Position = "append") -> GuardedAnthropic:
    """Wrap an ``anthropic.Anthropic`` (with a :class:`LoopGuard`) or ``anthropic.AsyncAnthropic`` (with an
    :class:`AsyncLoopGuard`) client. Ids left out come from :func:`~loop_detector_sdk.loop_context` at call time."""
    return GuardedAnthropic(client, guard, ids_of(session_id, trace_id, virtual_key, feature), position)
