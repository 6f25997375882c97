"""Baselines: TokenPolice's two loop rules, from its documentation (seeds/001, "Loop detection").

:class:`ExactPromptRepeat`, its "exact prompt repeat". Published behaviour: per trace, fingerprint each prompt (identical prompts, identical fingerprints) and
look for a repeating cycle among the trace's last ``window`` (default 20) model calls, of length
1..``max_cycle`` (default 3), repeated ``repeats`` times (default 3 for length 1, 2 for lengths 2 and 3):
"the rule fires when the same prompt goes out 3 times in a row inside one run, or a 2-step prompt cycle
repeats twice". Only model calls count; the prompt fingerprint is the stored ``request_fp``.

:class:`TraceCallCap`, its "per-trace hard cap" in calls, at the default every workspace is given ("Loop: Per-trace
call cap: a ceiling of 25 model calls in a single run"): it trips on the call that reaches the ceiling (the 25th; "the
call that crosses is allowed; we stop a later call on the same trace", the reading of loop-detector's own
``trace_cap``). Measured on the real runs; the generated corpus stays below the cap by design
(``corpus_records.MAX_CALLS_PER_TRACE``), so it is not among :func:`~detector.evaluation.baselines.all_baselines`'
rules there.
"""

from __future__ import annotations

from collections import defaultdict, deque

from detector.evaluation.baselines.stored_call import StoredCall

__all__ = ["ExactPromptRepeat", "TraceCallCap"]


class ExactPromptRepeat:
    name = "tokenpolice_exact_repeat"
    label = "TokenPolice: exact prompt repeat"
    source = "TokenPolice docs, /docs/rules/loop-detection (shared/seeds/001)"

    def __init__(self, window: int = 20, max_cycle: int = 3, repeats: dict[int, int] | None = None) -> None:
        self.window = window
        self.max_cycle = max_cycle
        self.repeats = repeats or {1: 3, 2: 2, 3: 2}
        self._prompts: dict[str, deque[int]] = defaultdict(lambda: deque(maxlen=self.window))

    def observe(self, step: StoredCall) -> bool:
        prompts = self._prompts[step.trace_id]
        prompts.append(step.request_fp)
        return self.cycle(list(prompts)) is not None

    def cycle(self, prompts: list[int]) -> tuple[int, int] | None:
        """(length, copies) of the shortest cycle repeated at the tail often enough, else None."""
        for length in range(1, self.max_cycle + 1):
            need = self.repeats.get(length, 2)
            if length * need > len(prompts):
                continue
            pattern = prompts[-length:]
            if 0 in pattern or not _primitive(pattern):
                continue  # an unknown prompt never matches; [a, a] is not a 2-cycle but a repeated prompt
            copies, end = 0, len(prompts)
            while end - length >= 0 and prompts[end - length:end] == pattern:
                copies += 1
                end -= length
            if copies >= need:
                return length, copies
        return None


class TraceCallCap:
    name = "tokenpolice_trace_cap"
    label = "TokenPolice: 25 model calls per trace"
    source = "TokenPolice docs, /docs/rules/loop-detection, per-trace hard cap (shared/seeds/001): 25 calls by default"

    def __init__(self, limit: int = 25) -> None:
        self.limit = limit
        self._calls: dict[str, int] = defaultdict(int)

    def observe(self, step: StoredCall) -> bool:
        self._calls[step.trace_id] += 1
        return self._calls[step.trace_id] >= self.limit


def _primitive(pattern: list[int]) -> bool:
    """True when the pattern is not itself a repetition of a shorter one."""
    n = len(pattern)
    return not any(n % d == 0 and pattern == pattern[:d] * (n // d) for d in range(1, n))
