"""The OpenAI Agents SDK (``openai-agents``): a check before every model call and every tool call of a run.

    from agents import Agent, Runner
    from loop_detector_sdk import AsyncLoopGuard
    from loop_detector_sdk.openai_agents_hooks import LoopGuardHooks, guard_run_config

    guard = AsyncLoopGuard("http://127.0.0.1:8080")
    result = await Runner.run(agent, "Fix the build.", run_config=guard_run_config(guard, session_id="run-42"),
                              hooks=LoopGuardHooks(guard, session_id="run-42"))

* Model calls: :func:`guard_run_config` sets the run's ``call_model_input_filter``, which the SDK calls with
  the input and instructions of every model call, just before it is made (for every agent of the run,
  handoffs included). The fingerprint of the agent's model, the input and the instructions goes as
  ``pending``; block raises :class:`LoopBlockedAgentsError` out of ``Runner.run``, throttle waits, inject adds
  the break instruction to the instructions. A filter the run config already had still runs, after the check.
* Tool calls: :class:`LoopGuardHooks` (``RunHooks``) checks the tool's name and the fingerprints of its
  arguments in ``on_tool_start``, before a function tool runs; block raises :class:`LoopBlockedAgentsError` out of
  ``Runner.run``.

Every check carries the app's fingerprints of the call (``pending.evidence``; hashes, never the text).

:class:`LoopBlockedAgentsError` is both a :class:`~loop_detector_sdk.LoopBlockedError` and the SDK's own
``AgentsException``: the runner lets it through as it is (any other exception raised while a tool runs becomes
a ``UserError``) and attaches the run's data to it (``run_data``).

Hooks cannot change the model input, hence the filter for model calls. Ids left out come from
:func:`~loop_detector_sdk.loop_context`. An :class:`~loop_detector_sdk.AsyncLoopGuard` is used as it is; a
:class:`~loop_detector_sdk.LoopGuard` runs in a worker thread. Needs ``openai-agents`` (the ``openai-agents``
extra).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import Any

from agents import RunConfig, RunHooks
from agents.exceptions import AgentsException
from agents.run_config import CallModelData, ModelInputData

from loop_detector_sdk._guarded import ids_of
from loop_detector_sdk.client import AsyncLoopGuard, LoopGuard
from loop_detector_sdk.evidence.messages import from_responses_input
from loop_detector_sdk.evidence.pending import model_evidence
from loop_detector_sdk.fingerprint import pending_tool, request_fingerprint
from loop_detector_sdk.models import LoopBlockedError
from loop_detector_sdk.openai_wrap import Position, join_text


class LoopBlockedAgentsError(LoopBlockedError, AgentsException):
    """A refused call, as an exception the Agents SDK's runner passes through unchanged."""


async def _before(guard: LoopGuard | AsyncLoopGuard, ids: dict[str, str], pending: dict[str, Any]) -> str | None:
    try:
        if isinstance(guard, AsyncLoopGuard):
            return await guard.before_call(**ids, pending=pending)
        return await asyncio.to_thread(guard.before_call, **ids, pending=pending)
    except LoopBlockedError as exc:
        raise LoopBlockedAgentsError(exc.decision) from None


def agent_model(agent: Any) -> str | None:
    """The model name an agent runs with (a name, or a ``Model`` object's ``model``), else the agent's name."""
    model = getattr(agent, "model", None)
    if isinstance(model, str) and model:
        return model
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else getattr(agent, "name", None)


class LoopGuardModelInputFilter:
    """A ``call_model_input_filter``: checks the model call about to be made, and applies the decision."""

    def __init__(self, guard: LoopGuard | AsyncLoopGuard, ids: dict[str, str], position: Position = "append",
                 then: Any = None) -> None:
        self.guard, self.ids, self.position, self.then = guard, ids, position, then

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        model_data = data.model_data
        model = agent_model(data.agent)
        fp = request_fingerprint(model, model_data.input, instructions=model_data.instructions)
        pending: dict[str, Any] = {"request_fingerprint": fp}
        evidence = model_evidence(model, from_responses_input, model_data.input, model_data.instructions)
        if evidence:
            pending["evidence"] = evidence  # the app's fingerprints of the call: request and new input, no content
        instruction = await _before(self.guard, self.ids, pending)
        if instruction:
            model_data = ModelInputData(input=model_data.input,
                                        instructions=join_text(model_data.instructions, instruction, self.position))
        if self.then is not None:
            result = self.then(dataclasses.replace(data, model_data=model_data))
            model_data = await result if inspect.isawaitable(result) else result
        return model_data


def guard_run_config(guard: LoopGuard | AsyncLoopGuard, run_config: RunConfig | None = None, *,
                     session_id: str | None = None, trace_id: str | None = None, virtual_key: str | None = None,
                     feature: str | None = None, position: Position = "append") -> RunConfig:
    """``run_config`` (or a new one) with every model call checked first (its ``call_model_input_filter``)."""
    base = run_config or RunConfig()
    flt = LoopGuardModelInputFilter(guard, ids_of(session_id, trace_id, virtual_key, feature), position,
                                    then=base.call_model_input_filter)
    return dataclasses.replace(base, call_model_input_filter=flt)


class LoopGuardHooks(RunHooks):  # type: ignore[misc]
    """Run hooks that check every function tool call before it runs (``on_tool_start``)."""

    def __init__(self, guard: LoopGuard | AsyncLoopGuard, *, session_id: str | None = None,
                 trace_id: str | None = None, virtual_key: str | None = None, feature: str | None = None) -> None:
        self.guard = guard
        self.ids = ids_of(session_id, trace_id, virtual_key, feature)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        name = getattr(context, "tool_name", None) or getattr(tool, "name", None) or type(tool).__name__
        arguments = getattr(context, "tool_arguments", None)
        await _before(self.guard, self.ids, pending_tool(str(name), arguments or None))
