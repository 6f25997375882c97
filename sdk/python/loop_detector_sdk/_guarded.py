"""The machinery the client wrappers share: a proxy of an SDK resource whose request methods are checked
first, and the stream managers whose check runs when they are entered.

A wrapper describes each guarded method by a :class:`Call`: how to fingerprint its keyword arguments and how
to put an ``inject`` instruction into them. Everything else on the resource passes through; the
``with_raw_response`` / ``with_streaming_response`` views of the ``openai`` and ``anthropic`` SDKs are
guarded the same way, so no spelling of a request skips the check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loop_detector_sdk.client import AsyncLoopGuard, LoopGuard

VIEWS = ("with_raw_response", "with_streaming_response")


@dataclass(frozen=True, slots=True)
class Call:
    """One guarded method: the ``pending`` of its keyword arguments, and the arguments with an instruction."""

    pending: Callable[[dict[str, Any]], dict[str, Any]]
    inject: Callable[[dict[str, Any], str], dict[str, Any]]
    manager: bool = False  # returns a stream manager (``with client.x.stream(...) as s``), checked on enter


def ids_of(session_id: str | None, trace_id: str | None, virtual_key: str | None,
           feature: str | None) -> dict[str, str]:
    return {k: v for k, v in (("session_id", session_id), ("trace_id", trace_id), ("virtual_key", virtual_key),
                              ("feature", feature)) if v}


class GuardedResource:
    """A resource (``client.chat.completions``, ``client.responses``, ``client.messages``...) with its
    request methods checked first; every other attribute is the resource's."""

    def __init__(self, inner: Any, guard: LoopGuard | AsyncLoopGuard, ids: Mapping[str, str],
                 calls: Mapping[str, Call], managers: bool = False) -> None:
        self._inner = inner
        self._guard = guard
        self._ids = dict(ids)
        self._calls = calls
        self._managers = managers  # every method returns a context manager (``with_streaming_response``)

    @property
    def wrapped(self) -> Any:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name in VIEWS:
            return GuardedResource(value, self._guard, self._ids, self._calls,
                                   managers=self._managers or name == "with_streaming_response")
        call = self._calls.get(name)
        if call is None or not callable(value):
            return value
        if self._managers and not call.manager:
            call = Call(call.pending, call.inject, manager=True)
        if isinstance(self._guard, AsyncLoopGuard):
            return _async_method(value, self._guard, self._ids, call)
        return _sync_method(value, self._guard, self._ids, call)


def _sync_method(method: Callable[..., Any], guard: LoopGuard, ids: dict[str, str], call: Call) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        instruction = guard.before_call(**ids, pending=call.pending(kwargs))
        if instruction:
            kwargs = call.inject(kwargs, instruction)
        return method(*args, **kwargs)

    return guarded


def _async_method(method: Callable[..., Any], guard: AsyncLoopGuard, ids: dict[str, str],
                  call: Call) -> Callable[..., Any]:
    if call.manager:  # ``client.x.stream(...)`` returns an async context manager, not a coroutine
        def manager(*args: Any, **kwargs: Any) -> AsyncGuardedManager:
            return AsyncGuardedManager(method, args, kwargs, guard, ids, call)

        return manager

    async def guarded(*args: Any, **kwargs: Any) -> Any:
        instruction = await guard.before_call(**ids, pending=call.pending(kwargs))
        if instruction:
            kwargs = call.inject(kwargs, instruction)
        return await method(*args, **kwargs)

    return guarded


class AsyncGuardedManager:
    """``async with client.x.stream(...)``: the check runs on enter, then the SDK's own manager is made
    (with the instruction, on inject) and entered."""

    def __init__(self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 guard: AsyncLoopGuard, ids: dict[str, str], call: Call) -> None:
        self._method, self._args, self._kwargs = method, args, kwargs
        self._guard, self._ids, self._call = guard, ids, call
        self._manager: Any = None

    async def __aenter__(self) -> Any:
        kwargs = self._kwargs
        instruction = await self._guard.before_call(**self._ids, pending=self._call.pending(kwargs))
        if instruction:
            kwargs = self._call.inject(kwargs, instruction)
        self._manager = self._method(*self._args, **kwargs)
        return await self._manager.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        if self._manager is not None:
            return await self._manager.__aexit__(*exc)
        return None
