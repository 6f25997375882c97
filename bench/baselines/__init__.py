"""Published loop-detection rules, re-implemented as baselines for ``loop-detector eval``.

Each baseline is implemented from the *published behaviour* of a product or project (its documentation
or source), not from loop-detector's code, and is labeled as such in every table:

- :class:`~bench.baselines.tokenpolice.ExactPromptRepeat`: TokenPolice's "exact prompt repeat" loop
  rule with its documented defaults (``shared/seeds/001``): the same prompt 3 times in a row, or a 2- or
  3-step prompt cycle twice, within the trace's last 20 calls;
- :class:`~bench.baselines.tool_repeat.SameToolCallThrice`: "three or more spans with the same tool name
  and arguments in a conversation";
- :class:`~bench.baselines.openhands.StuckDetector`: the OpenHands ``StuckDetector`` conditions "four
  identical action/observation pairs in a row" and "three identical actions, each ending in an error".

They all read the same data, call by call: the :class:`Step` records built from the rows the real
pipeline stored (``otel.genai_calls``, plus the exact output / tool-result hashes from
``otel.otel_traces``), i.e. exactly what the spans carried, with or without content capture. Each
baseline has one action: when it fires, it would notify or block (whichever it is configured for), so
the evaluation counts a firing both at "warn" and at "block".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One ``execute_tool`` span."""

    fp: int  # tool name + argument values (name only when arguments were not captured)
    is_error: bool = False
    error_fp: int = 0
    result_fp: int = 0  # exact hash of the captured result; 0 when the result was not captured


@dataclass(frozen=True, slots=True)
class Step:
    """One model call and the tools it ran, as stored."""

    trace_id: str
    session_id: str
    request_fp: int  # the whole input (structural when content is off)
    is_error: bool = False  # the model call itself failed
    error_fp: int = 0
    output_fp: int = 0  # exact hash of the captured output messages; 0 when not captured
    tools: tuple[ToolRun, ...] = ()


class Baseline(Protocol):
    name: str  # short id, used in JSON
    label: str  # what the table shows
    source: str  # where the published behaviour is described

    def observe(self, step: Step) -> bool:
        """Account one call (in order); True when the rule fires on it."""
        ...


def all_baselines() -> list[Baseline]:
    """A fresh instance of every baseline (state is per instance: one instance per evaluated run)."""
    from bench.baselines.openhands import StuckDetector
    from bench.baselines.tokenpolice import ExactPromptRepeat
    from bench.baselines.tool_repeat import SameToolCallThrice

    return [ExactPromptRepeat(), SameToolCallThrice(), StuckDetector()]


__all__ = ["Baseline", "Step", "ToolRun", "all_baselines"]
