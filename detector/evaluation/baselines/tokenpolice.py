"""Baseline (a): TokenPolice's "exact prompt repeat" loop rule, from its documentation (seeds/001).

Published behaviour: per trace, fingerprint each prompt (identical prompts, identical fingerprints) and
look for a repeating cycle among the trace's last ``window`` (default 20) model calls, of length
1..``max_cycle`` (default 3), repeated ``repeats`` times (default 3 for length 1, 2 for lengths 2 and 3):
"the rule fires when the same prompt goes out 3 times in a row inside one run, or a 2-step prompt cycle
repeats twice". Only model calls count; the prompt fingerprint is the stored ``request_fp``.
"""

from __future__ import annotations

from collections import defaultdict, deque

from detector.evaluation.baselines.stored_call import StoredCall

__all__ = ["ExactPromptRepeat"]


class ExactPromptRepeat:
    name = "tokenpolice_exact_repeat"
    label = "(a) TokenPolice exact prompt repeat"
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


def _primitive(pattern: list[int]) -> bool:
    """True when the pattern is not itself a repetition of a shorter one."""
    n = len(pattern)
    return not any(n % d == 0 and pattern == pattern[:d] * (n // d) for d in range(1, n))
