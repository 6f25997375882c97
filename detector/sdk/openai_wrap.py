"""Guard an ``openai`` client: every ``chat.completions.create`` is checked first.

    client = guard_openai(OpenAI(), guard, session_id="run-42")
    client.chat.completions.create(model="gpt-4o-mini", messages=[...])

Before each call the wrapper sends the request's fingerprint (model + messages, see
:func:`~detector.sdk.fingerprint.request_fingerprint`) as ``pending``, so an exact repeat is refused before it
is sent, and applies the decision: block raises :class:`~detector.sdk.LoopBlockedError`, throttle waits,
inject adds the break instruction to the system message (appended by default, or prepended; a system
message is inserted when there is none). Everything else on the client passes through unchanged. The
``openai`` package is not a dependency: any object with the same ``chat.completions.create`` shape works.
"""

from __future__ import annotations

from typing import Any, Literal

from detector.sdk.client import AsyncLoopGuard, LoopGuard
from detector.sdk.fingerprint import request_fingerprint

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


class _Completions:
    def __init__(self, inner: Any, guard: LoopGuard | AsyncLoopGuard, ids: dict[str, Any], position: Position) -> None:
        self._inner = inner
        self._guard = guard
        self._ids = ids
        self._position = position

    def _prepare(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        fp = request_fingerprint(kwargs.get("model"), kwargs.get("messages"))
        return {**self._ids, "pending": {"request_fingerprint": fp}}

    def _inject(self, kwargs: dict[str, Any], instruction: str | None) -> dict[str, Any]:
        if instruction:
            kwargs = {**kwargs, "messages": with_instruction(kwargs.get("messages"), instruction, self._position)}
        return kwargs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _SyncCompletions(_Completions):
    def create(self, *args: Any, **kwargs: Any) -> Any:
        assert isinstance(self._guard, LoopGuard)
        instruction = self._guard.before_call(**self._prepare(kwargs))
        return self._inner.create(*args, **self._inject(kwargs, instruction))


class _AsyncCompletions(_Completions):
    async def create(self, *args: Any, **kwargs: Any) -> Any:
        assert isinstance(self._guard, AsyncLoopGuard)
        instruction = await self._guard.before_call(**self._prepare(kwargs))
        return await self._inner.create(*args, **self._inject(kwargs, instruction))


class _Chat:
    def __init__(self, inner: Any, completions: _Completions) -> None:
        self._inner = inner
        self.completions = completions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class GuardedClient:
    """The client, with ``chat.completions.create`` guarded; every other attribute is the client's."""

    def __init__(self, client: Any, completions: _Completions) -> None:
        self._client = client
        self.chat = _Chat(client.chat, completions)

    @property
    def wrapped(self) -> Any:
        return self._client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def guard_openai(client: Any, guard: LoopGuard | AsyncLoopGuard, *, session_id: str | None = None,
                 trace_id: str | None = None, virtual_key: str | None = None, feature: str | None = None,
                 position: Position = "append") -> GuardedClient:
    """Wrap an ``openai.OpenAI`` (with a :class:`LoopGuard`) or ``openai.AsyncOpenAI`` (with an
    :class:`AsyncLoopGuard`) client. Ids left out come from :func:`~detector.sdk.loop_context` at call time."""
    ids = {k: v for k, v in (("session_id", session_id), ("trace_id", trace_id), ("virtual_key", virtual_key),
                             ("feature", feature)) if v}
    inner = client.chat.completions
    completions: _Completions
    if isinstance(guard, AsyncLoopGuard):
        completions = _AsyncCompletions(inner, guard, ids, position)
    else:
        completions = _SyncCompletions(inner, guard, ids, position)
    return GuardedClient(client, completions)


def guard_async_openai(client: Any, guard: AsyncLoopGuard, **kwargs: Any) -> GuardedClient:
    """The same as :func:`guard_openai`, spelled for ``AsyncOpenAI`` clients."""
    return guard_openai(client, guard, **kwargs)
