"""Baseline: Gemini CLI's tool-call loop rule, "the same tool call 5 times in a row".

Gemini CLI (``packages/core/src/services/loopDetectionService.ts``) hashes each tool call's name and arguments and
reports a loop when the same hash comes ``TOOL_CALL_LOOP_THRESHOLD`` (5) times in a row. Here the identity is the
stored ``tool_fp`` (tool name + canonical argument values), call after call.
"""

from __future__ import annotations

from detector.evaluation.baselines.stored_call import StoredCall

__all__ = ["GeminiCliToolLoop"]


class GeminiCliToolLoop:
    name = "gemini_cli_same_call_x5"
    label = "Gemini CLI: the same tool call 5 times in a row"
    source = "google-gemini/gemini-cli loopDetectionService.ts, TOOL_CALL_LOOP_THRESHOLD = 5"

    def __init__(self, threshold: int = 5) -> None:
        self.threshold = threshold
        self._last = 0
        self._count = 0

    def observe(self, step: StoredCall) -> bool:
        fired = False
        for tool in step.tools:
            if tool.fp and tool.fp == self._last:
                self._count += 1
            else:
                self._last, self._count = tool.fp, 1 if tool.fp else 0
            fired = fired or self._count >= self.threshold
        return fired
