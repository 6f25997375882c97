"""Published loop-detection rules, re-implemented as baselines for ``loop-detector eval``.

Each baseline is implemented from the *published behaviour* of a product or project (its documentation
or source), not from loop-detector's code, and is labeled as such in every table:

- :class:`~detector.evaluation.baselines.tokenpolice.ExactPromptRepeat`: TokenPolice's "exact prompt repeat" loop
  rule with its documented defaults (``shared/seeds/001``): the same prompt 3 times in a row, or a 2- or
  3-step prompt cycle twice, within the trace's last 20 calls;
- :class:`~detector.evaluation.baselines.tokenpolice.TraceCallCap`: TokenPolice's per-trace call cap, 25 model calls
  (the real runs only: the generated corpus stays below it by design);
- :class:`~detector.evaluation.baselines.tool_repeat.SameToolCallThrice` (OpenLIT-style): "three or more spans with
  the same tool name and arguments in a conversation";
- :class:`~detector.evaluation.baselines.openhands.StuckDetector`: the OpenHands ``StuckDetector`` conditions "four
  identical action/observation pairs in a row" and "three identical actions, each ending in an error";
- :class:`~detector.evaluation.baselines.gemini_cli.GeminiCliToolLoop`: Gemini CLI's "the same tool call 5 times in a
  row";
- :class:`~detector.evaluation.baselines.crewai.CrewAiRepeatedUsage`: CrewAI's refusal of "an immediate repeat of the
  same tool call".

They all read the same data, call by call: the :class:`StoredCall` records built from the rows the real
pipeline stored (``otel.genai_calls``, plus the exact output / tool-result hashes from
``otel.otel_traces``), i.e. exactly what the spans carried, with or without content capture. Each
baseline has one action: when it fires, it would notify or block (whichever it is configured for), so
the evaluation counts a firing both at "warn" and at "block".
"""

from __future__ import annotations

from detector.evaluation.baselines.crewai import CrewAiRepeatedUsage
from detector.evaluation.baselines.gemini_cli import GeminiCliToolLoop
from detector.evaluation.baselines.openhands import StuckDetector
from detector.evaluation.baselines.stored_call import Baseline, StoredCall, ToolRun
from detector.evaluation.baselines.tokenpolice import ExactPromptRepeat, TraceCallCap
from detector.evaluation.baselines.tool_repeat import SameToolCallThrice

__all__ = ["Baseline", "StoredCall", "ToolRun", "all_baselines"]


def all_baselines(*, trace_cap: bool = False) -> list[Baseline]:
    """A fresh instance of every baseline (state is per instance: one instance per evaluated run). ``trace_cap``:
    TokenPolice's 25-call cap too (the real runs; on the generated corpus, whose runs stay below it by design, it
    would be a rule that never fires, and the best baseline of every honest family)."""
    rules: list[Baseline] = [ExactPromptRepeat(), SameToolCallThrice(), StuckDetector(), GeminiCliToolLoop(),
                             CrewAiRepeatedUsage()]
    return [*rules, TraceCallCap()] if trace_cap else rules
