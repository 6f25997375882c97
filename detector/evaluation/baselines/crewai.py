"""Baseline: CrewAI's repeated-usage check, "an immediate repeat of the same tool call".

CrewAI's ``ToolUsage`` refuses a tool call whose tool and input are those of the agent's previous tool call (it tells
the agent it already used that tool with that input). Here: a tool call with the same stored ``tool_fp`` (tool name
+ canonical argument values) as the one just before it.
"""

from __future__ import annotations

from detector.evaluation.baselines.stored_call import StoredCall

__all__ = ["CrewAiRepeatedUsage"]


class CrewAiRepeatedUsage:
    name = "crewai_repeated_usage"
    label = "CrewAI: an immediate repeat of the same tool call"
    source = "crewAIInc/crewAI tools/tool_usage.py, the repeated-usage check"

    def __init__(self) -> None:
        self._last = 0

    def observe(self, step: StoredCall) -> bool:
        fired = False
        for tool in step.tools:
            fired = fired or bool(tool.fp and tool.fp == self._last)
            self._last = tool.fp
        return fired
