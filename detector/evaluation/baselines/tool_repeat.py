"""Baseline, OpenLIT-style: "three or more spans with the same tool name and arguments in a conversation".

The simplest published loop heuristic over traces (observability products describe agent loop
detection this way): count ``execute_tool`` spans per conversation by tool name + arguments, anywhere in
the conversation (not only back to back), and flag the conversation once any of them reaches 3. The
identity is the stored ``tool_fp`` (tool name + canonical argument values; the name alone when the
instrumentation did not capture arguments, which is how such a rule sees those spans).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from detector.evaluation.baselines.stored_call import StoredCall

__all__ = ["SameToolCallThrice"]


class SameToolCallThrice:
    name = "same_tool_call_x3"
    label = "OpenLIT-style: the same tool + arguments >= 3 times"
    source = "common trace-analytics heuristic: >= 3 spans with the same tool name and arguments in a conversation"

    def __init__(self, threshold: int = 3) -> None:
        self.threshold = threshold
        self._counts: dict[str, Counter[int]] = defaultdict(Counter)

    def observe(self, step: StoredCall) -> bool:
        counts = self._counts[step.session_id]
        fired = False
        for tool in step.tools:
            if not tool.fp:
                continue
            counts[tool.fp] += 1
            fired = fired or counts[tool.fp] >= self.threshold
        return fired
