"""A scope's decision, and which decisions changed in a batch (only those are written and handed to the API).

No I/O. A scope's decision is its escalation level's action, raised to ``warn`` by the early warning (a run of
wasted steps that makes a loop, ``detector.core.progress``), strengthened by any enforced blocking rule tripped on
it; the strongest wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import NamedTuple

from detector.core.decisions import REASON_LOOP, Decision, strongest
from detector.core.escalation import LEVEL_ACTION
from detector.core.progress import EVIDENCE_NAMES
from detector.core.scope_state import NO_TRIPS, ScopeState
from detector.core.steps import STEP_TOOL, ProgressStep
from detector.core.tuning import ScoringTuning
from detector.settings.vocabulary import (
    ACTION_ALLOW,
    ACTION_BLOCK,
    ACTION_INJECT,
    ACTION_THROTTLE,
    ACTION_WARN,
    DETECTOR_CONFIDENCE,
    DETECTOR_FAILURE_LOOP,
    DETECTOR_NO_PROGRESS,
    DETECTOR_NONE,
    EVIDENCE_NONE,
    MODE_ENFORCE,
    RULE_BLOCK,
)

__all__ = ["DecisionKey", "TripKey", "changed_decisions", "decision_for", "repeated_signal", "round_unit"]


class TripKey(NamedTuple):
    """A rule trip as the decision check compares it."""

    action: str
    mode: str
    detector: str
    rule: str
    expires_ns: int


class DecisionKey(NamedTuple):
    """What a published decision is compared by: a scope's decision is written again only when this changes."""

    action: str
    level: str
    confidence: float  # to 3 places
    dominant_signal: str
    detector: str
    rule_name: str
    instruction: str
    expires_at_us: int
    evidence: str


def round_unit(x: float, digits: int) -> float:
    """``round(x, digits)`` for ``x`` in [0, 1] and ``digits`` <= 6, without Python's decimal-string rounding
    (the decision check rounds every changed confidence).

    Exactly the same result: ``r = floor(x * 10**digits + 0.5)`` is the right integer unless ``x * 10**digits``
    lies within rounding error of a half (then ``round`` itself decides), and ``r / 10**digits`` is the double
    nearest to that decimal, as ``round`` returns (IEEE division of exact operands is correctly rounded).
    """
    scale = 1e6 if digits == 6 else 1e3 if digits == 3 else 10.0 ** digits
    y = x * scale
    floor_y = float(math.floor(y))
    off_half = y - floor_y - 0.5
    if not 0.0 <= x <= 1.0 or -1e-6 < off_half < 1e-6:
        return round(x, digits)
    return (floor_y + 1.0 if off_half > 0.0 else floor_y) / scale


def repeated_signal(step: ProgressStep) -> str:
    """The signal an early warning names when no score has named one yet (its run was found as tool results came
    back, after the call was scored): the kind of step the run repeats."""
    if step.failure:
        return "error_cycling"
    return "tool_call_repetition" if step.kind == STEP_TOOL else "content_similarity"


def decision_for(st: ScopeState, tuning: ScoringTuning, confidence: float = -1.0, now_us: int = -1) -> Decision:
    """The scope's decision. ``tuning``: its virtual key's; ``confidence``: ``round(st.confidence, 6)`` when the
    caller has it already; ``now_us``: when it is made (-1: unknown; a cycle passes its own time)."""
    action = LEVEL_ACTION[st.level]
    if confidence < 0.0:
        confidence = round_unit(st.confidence, 6)
    detector = DETECTOR_CONFIDENCE if action != ACTION_ALLOW else DETECTOR_NONE
    evidence = st.evidence if action != ACTION_ALLOW else EVIDENCE_NONE
    flag = st.progress.flag
    dominant = st.dominant
    if flag and action == ACTION_ALLOW and tuning.early_warning:
        # the early warning: a loop of wasted steps, whatever the score
        action, detector, evidence = ACTION_WARN, DETECTOR_NO_PROGRESS, EVIDENCE_NAMES[flag]
        if dominant == DETECTOR_NONE:
            dominant = repeated_signal(st.progress.steps[-1])
    base = Decision(
        scope=st.scope, scope_id=st.scope_id, session_id=st.session_id, action=action, level=st.level,
        confidence=confidence, dominant_signal=dominant, detector=detector,
        reason=REASON_LOOP if action == ACTION_BLOCK else "",
        delay_seconds=tuning.throttle_delay_seconds if action == ACTION_THROTTLE else 0.0,
        instruction=st.instruction if action == ACTION_INJECT else "", updated_us=now_us, evidence=evidence,
    )
    if not st.trips:
        return base
    candidates = [base]
    for trip in st.trips.values():
        # notify: log, event, webhook, metric, and the run continues untouched; dry run: the same, recording what a
        # block would have done. Only an enforced block changes the decision.
        if trip.action != RULE_BLOCK or trip.mode != MODE_ENFORCE:
            continue
        candidates.append(Decision(
            scope=st.scope, scope_id=st.scope_id, session_id=st.session_id, action=ACTION_BLOCK, level=st.level,
            confidence=confidence, dominant_signal=st.dominant, detector=trip.detector,
            reason=trip.detector, rule_name=trip.rule,
            expires_at_us=trip.expires_ns // 1000 if trip.expires_ns else 0, updated_us=now_us,
            evidence=trip.evidence or (st.evidence if trip.detector == DETECTOR_FAILURE_LOOP else EVIDENCE_NONE),
        ))
    best = strongest(candidates)
    assert best is not None
    return best


def changed_decisions(states: Iterable[ScopeState], tuning_for: Callable[[str], ScoringTuning],
                      now_us: int) -> list[Decision]:
    """Decisions that differ from what each scope last published (only those need writing), as of ``now_us``.
    ``tuning_for``: a virtual key's scoring tuning."""
    changed = []
    for st in states:
        if st.calls == 0 and not st.trips and st.published is None and not st.progress.flag:
            continue  # a trace seen only through quiet tool spans (maybe another shard's): nothing to decide
        # What decision_for reads, as the decision key rounds it: unchanged, so is the decision (most scopes of a
        # cycle), and it need not be built to find out.
        trips = st.trips
        level = st.escalation.level
        confidence = round_unit(st.ema, 6) if st.ema else 0.0  # as the decision carries it
        rounded = round_unit(confidence, 3) if confidence else 0.0
        dominant, instruction = st.dominant, st.instruction
        flag, evidence = st.progress.flag, st.evidence
        trip_keys = (tuple([TripKey(t.action, t.mode, t.detector, t.rule, t.expires_ns) for t in trips.values()])
                     if trips else NO_TRIPS)
        if (level == st.from_level and rounded == st.from_confidence and dominant == st.from_dominant
                and instruction == st.from_instruction and flag == st.from_flag and evidence == st.from_evidence
                and (trip_keys is st.from_trips or trip_keys == st.from_trips)):
            continue
        st.from_level, st.from_confidence, st.from_dominant = level, rounded, dominant
        st.from_instruction, st.from_trips, st.from_flag, st.from_evidence = instruction, trip_keys, flag, evidence
        d = decision_for(st, tuning_for(st.virtual_key), confidence, now_us)
        # rounded is round(d.confidence, 3): every decision of a scope carries round(ema, 6)
        key = DecisionKey(d.action, d.level, rounded, d.dominant_signal, d.detector, d.rule_name, d.instruction,
                          d.expires_at_us, d.evidence)
        if key != st.published:
            st.published = key
            changed.append(d)
    return changed
