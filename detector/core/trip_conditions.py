"""When a rule trips: one pure function per rule condition, asked by every path that trips rules.

No I/O, no pydantic: plain values in (a :class:`~detector.core.tuning.PlannedRule`, request fingerprints, streak
counts, a run of wasted steps), plain values out. Two paths keep state of their own and ask these functions the same
questions:

* the spans' path (:mod:`detector.core.trips`): a trace's or a session's state, built from its spans;
* the pre-flight check (:mod:`detector.enforcement.preflight`): a window built from the checks before each call.

So an exact prompt repeat, a failure loop or a no_progress rule trips on the same condition whichever path asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from detector.core.progress import EVIDENCE_NAMES, EXACT, FUZZY, ProgressMemory
from detector.core.rules import failure_kind, find_repeat
from detector.core.tuning import PlannedRule

__all__ = [
    "NoProgressTrip", "RepeatTrip", "WastedRun", "failure_trip", "no_progress_trip", "repeat_trip", "wasted_run",
]


@dataclass(frozen=True, slots=True)
class RepeatTrip:
    """An exact prompt repeat: a cycle of ``cycle_length`` requests, repeated ``copies`` times at the tail."""

    cycle_length: int
    copies: int


def repeat_trip(rule: PlannedRule, request_fps: Sequence[int]) -> RepeatTrip | None:
    """Whether an ``exact_prompt_repeat`` rule trips on these request fingerprints (oldest first; 0: unknown):
    :func:`detector.core.rules.find_repeat` with the rule's window and repeats per cycle length."""
    match = find_repeat(request_fps, rule.window, rule.repeats)
    return None if match is None else RepeatTrip(match[0], match[1])


def failure_trip(rule: PlannedRule, tool_streak: int, error_streak: int) -> str | None:
    """Which failure trips a ``failure_loop`` rule, given the back-to-back streaks of the same tool call and of the same
    error: ``'same_tool_error'``, ``'same_tool_call'`` (:func:`detector.core.rules.failure_kind`), or None."""
    return failure_kind(tool_streak, error_streak, rule.same_tool_repeats, rule.same_error_repeats)


@dataclass(frozen=True, slots=True)
class WastedRun:
    """A scope's current run of wasted steps, as the rules read it (:func:`wasted_run` of a progress memory)."""

    exact: int  # wasted steps in the run with exact evidence
    fuzzy: int  # with fuzzy evidence or better
    top: int  # the strongest evidence level in the run (detector.core.progress levels)
    flag: int  # the early warning's evidence level: the run's strongest once it makes a loop, else NONE

    def counted(self, min_level: int) -> int:
        """Wasted steps with at least ``min_level`` evidence (a no_progress rule's: ``EXACT`` or ``FUZZY``)."""
        return self.exact if min_level >= EXACT else self.fuzzy


def wasted_run(memory: ProgressMemory) -> WastedRun:
    """The run of wasted steps a progress memory holds now (its public surface: ``wasted``, ``top``, ``flag``)."""
    return WastedRun(memory.wasted(EXACT), memory.wasted(FUZZY), memory.top, memory.flag)


@dataclass(frozen=True, slots=True)
class NoProgressTrip:
    """A tripped ``no_progress`` rule: ``wasted`` steps in a row counted by it, the run's strongest ``evidence``."""

    wasted: int
    evidence: str  # the vocabulary's EVIDENCE_* word


def no_progress_trip(rule: PlannedRule, run: WastedRun) -> NoProgressTrip | None:
    """Whether a ``no_progress`` rule trips on a scope whose current run is ``run``: while the run holds
    ``wasted_calls`` wasted steps with at least the rule's evidence (structure, and sizes, never count); it clears
    with the first step that makes progress (the run is then empty)."""
    wasted = run.counted(rule.min_level)
    if wasted < rule.wasted_calls or wasted == 0:  # (an empty run never trips, whatever the rule says)
        return None
    return NoProgressTrip(wasted, EVIDENCE_NAMES[run.top])
