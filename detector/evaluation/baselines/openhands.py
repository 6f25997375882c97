"""Baseline: OpenHands' ``StuckDetector`` (openhands/controller/stuck.py), its first two conditions.

Published behaviour: the agent is stuck when

1. the last **four** action/observation pairs are identical (same action, same observation), or
2. the last **three** actions are identical and each of them ended in an error observation.

(StuckDetector has further conditions, a monologue of 3 identical messages, an A/B pattern over 6
steps and repeated context condensation; this baseline keeps the two above, as the issue defines it.)

Mapping spans to OpenHands events, per trace: a model call that ran tools is one action (the set of tool
fingerprints: name + argument values) whose observation is the tools' outcome (the exact result hash when
captured, else only success / the error fingerprint); a model call without tools is a message action
(its exact output hash; unknown without content capture, and unknown never equals anything). A failed
model call is not an agent action in OpenHands (the LLM layer retries it), so it is skipped.
"""

from __future__ import annotations

from collections import defaultdict, deque
from itertools import count

from detector.evaluation.baselines.stored_call import StoredCall

__all__ = ["StuckDetector"]

_unique = count(1)


class StuckDetector:
    name = "openhands_stuck"
    label = "OpenHands StuckDetector (4 pairs / 3 errors)"
    source = "OpenHands openhands/controller/stuck.py: StuckDetector scenarios 1 and 2"

    def __init__(self) -> None:
        self._history: dict[str, deque[tuple[object, object, bool]]] = defaultdict(lambda: deque(maxlen=4))

    def observe(self, step: StoredCall) -> bool:
        if step.is_error:
            return False
        if step.tools:
            action: object = ("tools", tuple(sorted(t.fp for t in step.tools)))
            observation: object = tuple(
                ("error", t.error_fp) if t.is_error else ("ok", t.result_fp) for t in step.tools)
            errored = any(t.is_error for t in step.tools)
        else:
            action = ("message", step.output_fp or -next(_unique))
            observation = ("none",)
            errored = False
        history = self._history[step.trace_id]
        history.append((action, observation, errored))
        last = list(history)
        if len(last) == 4 and all(a == last[0][0] and o == last[0][1] for a, o, _ in last):
            return True
        last3 = last[-3:]
        return len(last3) == 3 and all(a == last3[0][0] and err for a, _, err in last3)
