"""LangChain v1 agents (``create_agent``, built on LangGraph): a middleware that asks loop-detector before
every model call and every tool call.

    from langchain.agents import create_agent
    from loop_detector_sdk import LoopGuard
    from loop_detector_sdk.langchain_middleware import LoopGuardMiddleware

    agent = create_agent(model, tools, middleware=[LoopGuardMiddleware(LoopGuard(url), session_id="run-42")])

* Before a model call: the fingerprint of the model name, the messages and the system prompt goes as
  ``pending`` (an exact repeat is refused before it is sent); block raises
  :class:`~loop_detector_sdk.LoopBlockedError` out of ``invoke`` / ``stream``, throttle waits, inject adds the
  break instruction to the system message (appended by default, or prepended).
* Before a tool call: the tool's name and the fingerprints of its arguments go as ``pending`` (the same call
  back to back is refused before it runs); block raises, throttle waits.

Every check also carries the app's fingerprints of the call (``pending.evidence``: what the agent just observed,
what it is about to send; hashes, never the text).

The session is, in order: ``session_id`` given here, the one of an enclosing
:func:`~loop_detector_sdk.loop_context`, the LangGraph ``thread_id`` of the run (``config={"configurable":
{"thread_id": ...}}``). Sync runs (``invoke``) need a :class:`~loop_detector_sdk.LoopGuard`; async runs
(``ainvoke``) use an :class:`~loop_detector_sdk.AsyncLoopGuard`, or a ``LoopGuard`` in a worker thread.

Needs ``langchain>=1`` (the ``langchain`` extra).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import BaseMessage, SystemMessage

from loop_detector_sdk._guarded import ids_of
from loop_detector_sdk.client import AsyncLoopGuard, LoopGuard
from loop_detector_sdk.context import current_ids
from loop_detector_sdk.evidence.messages import from_langchain
from loop_detector_sdk.evidence.pending import model_evidence
from loop_detector_sdk.fingerprint import pending_tool, request_fingerprint
from loop_detector_sdk.openai_wrap import Position, join_text

# What of a message is sent to the model (LangChain's own ``id`` and metadata are not: they differ between
# two otherwise identical requests).
_SENT_FIELDS = ("content", "name", "tool_call_id", "status")


def message_for_fingerprint(message: Any) -> Any:
    """The part of a LangChain message that the model sees, as plain data."""
    if not isinstance(message, BaseMessage):
        return message
    out: dict[str, Any] = {"role": message.type}
    for name in _SENT_FIELDS:
        value = getattr(message, name, None)
        if value not in (None, "", []):
            out[name] = value
    tool_calls = getattr(message, "tool_calls", None)
    if tool_calls:
        out["tool_calls"] = [{"id": c.get("id"), "name": c.get("name"), "args": c.get("args")} for c in tool_calls]
    return out


def model_name(model: Any) -> str | None:
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def model_pending(request: Any) -> dict[str, Any]:
    """The ``pending`` of a model call of a ``ModelRequest``."""
    system = request.system_message.content if request.system_message is not None else None
    model = model_name(request.model)
    fp = request_fingerprint(model, [message_for_fingerprint(m) for m in request.messages], system=system)
    pending: dict[str, Any] = {"request_fingerprint": fp}
    evidence = model_evidence(model, from_langchain, request.messages, system)
    if evidence:
        pending["evidence"] = evidence  # the app's fingerprints of the call: request and new input, no content
    return pending


def _thread_id() -> str | None:
    try:
        from langgraph.config import get_config

        thread = get_config().get("configurable", {}).get("thread_id")
    except (ImportError, RuntimeError, KeyError):  # outside a LangGraph run
        return None
    return str(thread) if thread else None


class LoopGuardMiddleware(AgentMiddleware):  # type: ignore[misc]
    """Checks before every model call (``wrap_model_call``) and every tool call (``wrap_tool_call``)."""

    def __init__(self, guard: LoopGuard | AsyncLoopGuard, *, session_id: str | None = None,
                 trace_id: str | None = None, virtual_key: str | None = None, feature: str | None = None,
                 position: Position = "append", tools: bool = True) -> None:
        super().__init__()
        self.guard = guard
        self.ids = ids_of(session_id, trace_id, virtual_key, feature)
        self.position = position
        self.check_tools = tools

    # -- helpers ------------------------------------------------------------------------------------------
    def _ids(self) -> dict[str, str]:
        if "session_id" in self.ids or current_ids().session_id:
            return self.ids
        thread = _thread_id()
        return {**self.ids, "session_id": thread} if thread else self.ids

    def _inject(self, request: Any, instruction: str | None) -> Any:
        if not instruction:
            return request
        current = request.system_message.content if request.system_message is not None else None
        if isinstance(current, list):
            part = {"type": "text", "text": instruction}
            content: Any = [*current, part] if self.position == "append" else [part, *current]
        else:
            content = join_text(current, instruction, self.position)
        return request.override(system_message=SystemMessage(content=content))

    def _sync_guard(self) -> LoopGuard:
        if not isinstance(self.guard, LoopGuard):
            raise TypeError("a sync run (invoke/stream) needs a LoopGuard; AsyncLoopGuard is for ainvoke/astream")
        return self.guard

    async def _abefore(self, pending: dict[str, Any]) -> str | None:
        if isinstance(self.guard, AsyncLoopGuard):
            return await self.guard.before_call(**self._ids(), pending=pending)
        ids = self._ids()  # read here: context variables do not follow into the worker thread's own reads
        return await asyncio.to_thread(self.guard.before_call, **ids, pending=pending)

    # -- model calls ----------------------------------------------------------------------------------------
    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        instruction = self._sync_guard().before_call(**self._ids(), pending=model_pending(request))
        return handler(self._inject(request, instruction))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        instruction = await self._abefore(model_pending(request))
        return await handler(self._inject(request, instruction))

    # -- tool calls -------------------------------------------------------------------------------------------
    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        if self.check_tools:
            call = request.tool_call
            self._sync_guard().before_call(**self._ids(), pending=pending_tool(call["name"], call.get("args")))
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        if self.check_tools:
            call = request.tool_call
            await self._abefore(pending_tool(call["name"], call.get("args")))
        return await handler(request)
