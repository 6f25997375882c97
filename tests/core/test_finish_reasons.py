"""The finish reasons that say a model call asked for tools (``TOOL_CALL_FINISHES``,
``detector/settings/vocabulary.py``) read alike wherever the core reads them: which steps a call completes (``detector/core/engine.py``) and whether a call
is a final answer (``detector/core/scope_scoring.py``). Content capture off: no tool names, no output, only the finish
reason says what the model did, as the Vercel AI SDK's ``tool-calls`` does."""

from __future__ import annotations

import pytest

from detector.core.engine import call_steps
from detector.core.models import Call, Turn
from detector.core.scope_scoring import final_answer
from detector.core.steps import STEP_REPLY, STEP_TOOL
from detector.settings.vocabulary import TOOL_CALL_FINISHES

T0 = 1_780_000_000 * 10**9


def model_call(i: int, finish: str) -> Call:
    """A model call, content capture off: its finish reason, its sizes, nothing else."""
    return Call(ts_ns=T0 + i * 10**9, trace_id="t", span_id=f"s{i}", session_id="c", input_tokens=500 + 100 * i,
                output_tokens=20, finish_reasons=(finish,))


def test_the_vercel_ai_sdks_spelling_is_one_of_them():
    assert "tool-calls" in TOOL_CALL_FINISHES
    assert {"tool_calls", "tool_call", "function_call", "tool_use"} <= TOOL_CALL_FINISHES


@pytest.mark.parametrize("finish", sorted(TOOL_CALL_FINISHES))
def test_a_call_that_asked_for_tools_by_its_finish_reason(finish):
    asked, answered = model_call(0, finish), model_call(1, "stop")
    # it took no reply step; the next call completes the tool run it asked for; its own reply, not known (content
    # off), would carry that step's very sizes: one piece of evidence, counted once
    assert [s.kind for s in call_steps(asked, [], None)] == []
    assert [s.kind for s in call_steps(answered, [], asked)] == [STEP_TOOL]
    # it is no final answer; the "stop" after it is one (the instrumentation reports tool calls as such)
    assert not final_answer(asked, [])
    assert final_answer(answered, [Turn(asked, [], 0.0)])


def test_a_call_that_stopped_is_a_reply_and_asks_for_nothing():
    first, second = model_call(0, "stop"), model_call(1, "stop")
    assert [s.kind for s in call_steps(first, [], None)] == [STEP_REPLY]
    assert [s.kind for s in call_steps(second, [], first)] == [STEP_REPLY]  # no tool run to complete
    assert not final_answer(second, [Turn(first, [], 0.0)])  # no call said it asked for tools: nothing tells
