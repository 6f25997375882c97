"""Rule trips: each configured rule, evaluated on a scope, tripped or cleared, with its events.

No I/O. The trace rules (exact prompt repeat, per-trace caps, the failure loop breaker) and the key's velocity circuit
breaker are evaluated on every model call; the no_progress rule and the early warning on every step, in the session
and in the trace (``detector.core.progress``). Whether a rule trips is asked of ``detector.core.trip_conditions``
(as the pre-flight check asks it); this module keeps the scope's trips and their events. A trip is recorded on the
scope it concerns; its decision comes from ``detector.core.publishing``.
"""

from __future__ import annotations

from typing import Any

from detector.core.events import event_row
from detector.core.models import Call, Turn
from detector.core.progress import EVIDENCE_NAMES
from detector.core.rules import VelocityState, cap_reached
from detector.core.scope_state import RuleTrip, ScopeState
from detector.core.trip_conditions import failure_trip, no_progress_trip, repeat_trip, wasted_run
from detector.core.tuning import PlannedRule
from detector.settings.vocabulary import (
    ACTION_ALLOW,
    ACTION_WARN,
    DETECTOR_EXACT_PROMPT_REPEAT,
    DETECTOR_FAILURE_LOOP,
    DETECTOR_NO_PROGRESS,
    DETECTOR_TRACE_CAP,
    EVENT_PROGRESS,
    EVENT_RULE,
    EVENT_RULE_CLEAR,
    EVIDENCE_NONE,
    MODE_ENFORCE,
)

__all__ = ["early_warning", "evaluate_no_progress", "evaluate_trace_rule", "evaluate_velocity", "scope_event"]

_VELOCITY_HOLD_NS = 60 * 10**9  # a velocity block lasts while the window's rate stays high; each call extends it


def scope_event(st: ScopeState, call: Call, *, kind: str, detector: str, action: str, from_level: str,
                to_level: str, mode: str = MODE_ENFORCE, rule_name: str = "", consecutive: int = 0,
                message: str = "", evidence: str = EVIDENCE_NONE) -> dict[str, Any]:
    """An event row of ``st`` at ``call``, with the scope's current confidence and signals."""
    return event_row(
        ts_ns=call.ts_ns, kind=kind, scope=st.scope, scope_id=st.scope_id, session_id=st.session_id,
        trace_id=call.trace_id, span_id=call.span_id, virtual_key=call.virtual_key, feature=call.feature,
        detector=detector, rule_name=rule_name, action=action, mode=mode, from_level=from_level, to_level=to_level,
        confidence=st.confidence, signals=st.signals, dominant_signal=st.dominant, consecutive=consecutive,
        message=message, evidence=evidence,
    )


def set_trip(rule: PlannedRule, target: ScopeState, tripped: bool, call: Call, events: list[dict[str, Any]],
             detail: str = "", expires_ns: int = 0, evidence: str = "") -> None:
    """Record that ``rule`` is (still) tripped on ``target``, or clear it (unless it is sticky), with its events."""
    current = target.trips.get(rule.name)
    if not tripped and current is None:
        return  # the usual case: nothing tripped, nothing to clear
    if tripped and current is None:
        target.trips[rule.name] = RuleTrip(rule.name, rule.detector, rule.action, rule.mode, call.ts_ns, detail,
                                           expires_ns, evidence)
        events.append(scope_event(
            target, call, kind=EVENT_RULE, detector=rule.detector, action=rule.action, mode=rule.mode,
            rule_name=rule.name, from_level=target.level, to_level=target.level, message=detail,
            evidence=evidence or EVIDENCE_NONE))
    elif tripped and current is not None:
        current.expires_ns = expires_ns
        if evidence:
            current.evidence = evidence
    elif not tripped and current is not None and not rule.sticky:
        del target.trips[rule.name]
        events.append(scope_event(
            target, call, kind=EVENT_RULE_CLEAR, detector=rule.detector, action=ACTION_ALLOW, mode=rule.mode,
            rule_name=rule.name, from_level=target.level, to_level=target.level, message="condition cleared",
            evidence=current.evidence or EVIDENCE_NONE))


def evaluate_trace_rule(rule: PlannedRule, trace: ScopeState, call: Call, events: list[dict[str, Any]]) -> None:
    """An exact prompt repeat, a per-trace cap or the failure loop breaker, on the trace of a model call."""
    detail = ""
    if rule.detector == DETECTOR_EXACT_PROMPT_REPEAT:
        repeat = repeat_trip(rule, trace.request_fps)
        tripped = repeat is not None
        if repeat is not None and rule.name not in trace.trips:  # the message of a new trip (it trips call after call)
            detail = f"cycle of {repeat.cycle_length} call(s) repeated {repeat.copies} times"
    elif rule.detector == DETECTOR_TRACE_CAP:
        tripped = cap_reached(trace.calls, trace.cost_usd, trace.tokens, rule.unit, rule.threshold)
        if tripped and rule.name not in trace.trips:
            detail = f"{rule.unit} cap {rule.threshold:g} reached"
    elif rule.detector == DETECTOR_FAILURE_LOOP:
        kind = failure_trip(rule, trace.failure.tool_streak, trace.failure.error_streak)
        tripped = kind is not None
        detail = kind or ""
    else:
        return
    set_trip(rule, trace, tripped, call, events, detail)


def evaluate_velocity(rule: PlannedRule, key: ScopeState, turn: Turn, tpm_limit: float | None,
                      events: list[dict[str, Any]]) -> None:
    """The velocity circuit breaker on the key of a model call (``tpm_limit``: the key's own manual cap)."""
    params = rule.velocity
    if params is None:  # pragma: no cover - planned with its parameters
        return
    call = turn.call
    key.calls += 1
    key.tokens += turn.tokens
    key.last_ns = max(key.last_ns, turn.ts_ns)
    key.first_ns = key.first_ns or turn.ts_ns
    vstate = key.velocity.get(rule.name)
    if vstate is None:
        vstate = key.velocity[rule.name] = VelocityState()
    tripped = vstate.update(turn.ts_ns, turn.tokens, params, tpm_limit)
    detail = "tokens per minute over the key's limit" if tripped else ""
    set_trip(rule, key, tripped, call, events, detail, turn.ts_ns + _VELOCITY_HOLD_NS)


def evaluate_no_progress(rule: PlannedRule, st: ScopeState, call: Call, events: list[dict[str, Any]]) -> None:
    """The no_progress rule on one scope (trace or session): tripped while the scope's current run of wasted steps
    holds ``wasted_calls`` with at least the rule's evidence (:func:`~detector.core.trip_conditions.no_progress_trip`);
    it clears with the first step that makes progress."""
    trip = no_progress_trip(rule, wasted_run(st.progress))
    if trip is None:
        if rule.name in st.trips:
            set_trip(rule, st, False, call, events)
        return
    detail = f"{trip.wasted} calls in a row without progress ({trip.evidence} evidence)"
    set_trip(rule, st, True, call, events, detail, 0, trip.evidence)


def early_warning(st: ScopeState, call: Call, events: list[dict[str, Any]]) -> None:
    """The early warning's events (raised, lifted); its decision is made by ``detector.core.publishing``."""
    flag = st.progress.flag
    raised = st.from_flag_event
    if flag == raised:
        return
    st.from_flag_event = flag
    if flag and not raised:
        events.append(scope_event(
            st, call, kind=EVENT_PROGRESS, detector=DETECTOR_NO_PROGRESS, action=ACTION_WARN, from_level=st.level,
            to_level=st.level, message=f"repeating without progress ({EVIDENCE_NAMES[flag]} evidence)",
            evidence=EVIDENCE_NAMES[flag]))
    elif not flag:
        events.append(scope_event(
            st, call, kind=EVENT_PROGRESS, detector=DETECTOR_NO_PROGRESS, action=ACTION_ALLOW,
            from_level=st.level, to_level=st.level, message="progress resumed", evidence=EVIDENCE_NAMES[raised]))

