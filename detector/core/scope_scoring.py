"""One model call scored in one scope: the seven signals, the raw confidence after progress, the EMA, the level.

No I/O. The seven signals (``detector.core.window``) measure how the call repeats the scope's recent turns; the
progress memory (``detector.core.progress``) says whether the scope is in a loop. A call's raw confidence is:

- 0 outside a loop: after progress, or one or two wasted steps (a re-read, a retry);
- in a loop, what the repetition signals say, and at least the floor of the loop's latest evidence (exact; fuzzy,
  sizes as fuzzy).
  The rates (token and cost velocity) are left out: how fast a model answers is not evidence (they stay in the
  record, and the velocity circuit breaker reads rates on its own).

Then the EMA and the escalation state machine, as the spec has them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, Final

from detector.core.escalation import LEVEL_ACTION, LEVELS, break_instruction
from detector.core.models import Call, Turn
from detector.core.progress import EVIDENCE_NAMES, EXACT, RUN_TO_WARN, SIZES
from detector.core.scope_state import ScopeState
from detector.core.score_rows import ScoreColumns
from detector.core.scoring import confidence_and_dominant, ema
from detector.core.signal_values import NO_SIGNALS, SignalValues
from detector.core.trips import scope_event
from detector.core.tuning import ScoringTuning
from detector.core.turn_view import TurnView
from detector.core.window import SignalWindow
from detector.settings.vocabulary import (
    DETECTOR_CONFIDENCE,
    DETECTOR_NONE,
    EVENT_ESCALATION,
    EVIDENCE_NONE,
    LEVEL_INJECT,
    SIGNAL_NAMES,
    TOOL_CALL_FINISHES,
)

__all__ = ["ScopeScore", "final_answer", "loop_confidence", "score_turn"]

_ZERO_NAMED: Final[dict[str, float]] = dict.fromkeys(SIGNAL_NAMES, 0.0)
_SIGNAL_NAMES: Final[tuple[str, ...]] = SIGNAL_NAMES  # a compiled constant (an imported name is a dict lookup)
_TOOL_FINISHES: Final[frozenset[str]] = TOOL_CALL_FINISHES  # a compiled constant (an imported name is a dict lookup)
_TOKEN_VELOCITY: Final = 4  # indices in SignalValues (SIGNAL_NAMES order): compiled, cheaper than a field name
_COST_VELOCITY: Final = 6


class ScopeScore:
    """One turn scored in one scope: reusable by a scope whose window holds the very same turns (a session with a
    single trace), which then need not compute the signals again."""

    __slots__ = ("window", "values", "raw", "dominant", "named")

    def __init__(self, window: SignalWindow, values: SignalValues, raw: float, dominant: str,
                 named: dict[str, float]) -> None:
        self.window = window
        self.values = values
        self.raw = raw  # the weighted confidence of the seven signals
        self.dominant = dominant
        self.named = named  # the values by signal name (what the scope state and its events keep)


def final_answer(call: Call, history: Sequence[Turn]) -> bool:
    """Whether the call is a final answer that asked for no tool: known from its captured output, or from its finish
    reasons when the instrumentation reports tool calls as such (an earlier call of the trace finished with one; some,
    such as OpenInference's Responses API spans, say ``stop`` for every call)."""
    if call.out_tool_names:
        return False
    if call.output_fp:
        return True
    reasons = call.finish_reasons
    if not reasons:
        return False
    for reason in reasons:
        if reason in _TOOL_FINISHES:
            return False
    for turn in history:
        for reason in turn.call.finish_reasons:
            if reason in _TOOL_FINISHES:
                return True
    return False


def loop_confidence(raw: float, values: SignalValues, run: int, level: int, tuning: ScoringTuning) -> float:
    """The raw confidence after progress (see the module docstring): 0 outside a loop; in a loop, the repetition
    signals without the rates, at least the floor of the latest step's evidence (the signals discount a backoff they
    read in the waits; the floor does not move with timing)."""
    if run < RUN_TO_WARN:
        return 0.0  # progress, or a wasted step or two that do not make a loop
    repeated = raw - tuning.w_token_velocity * values[_TOKEN_VELOCITY] - tuning.w_cost_velocity * values[_COST_VELOCITY]
    floor = tuning.exact_floor if level == EXACT else tuning.fuzzy_floor  # sizes: as fuzzy
    return repeated if repeated > floor else floor


def score_turn(st: ScopeState, turn: Turn, view: TurnView, tuning: ScoringTuning, scores: ScoreColumns,
               events: list[dict[str, Any]], shared: ScopeScore | None = None, final: bool = False) -> ScopeScore:
    """Score one turn in one scope (the caller then adds it to the scope's history and window). ``shared`` is the
    previous scope's result: when this scope's window holds the same turns (a session with a single trace), the
    signals are equal and are reused rather than computed twice."""
    window = st.window
    if window is None or window.depth != tuning.history_depth:
        if st.history.maxlen != tuning.history_depth:
            st.history = deque(st.history, maxlen=tuning.history_depth)
        window = st.window = SignalWindow.of(st.history, tuning.history_depth)
    if shared is not None and window.scores_like(shared.window):
        scored = shared
    else:
        values, _ = window.score(view, tuning.token_velocity_threshold, tuning.cost_velocity_threshold)
        if final and values.tool_call_repetition:
            # a final text answer after a run of tool calls repeats no tool call: the tools attributed to it ran for
            # the call before
            values = values._replace(tool_call_repetition=0.0)
        if values == NO_SIGNALS:  # no evidence at all (most calls): one shared, never mutated, dict
            scored = ScopeScore(window, NO_SIGNALS, 0.0, DETECTOR_NONE, _ZERO_NAMED)
        else:
            raw, dominant = confidence_and_dominant(values, tuning.weights)
            named = {_SIGNAL_NAMES[i]: values[i] for i in range(len(values))}
            scored = ScopeScore(window, values, raw, dominant, named)
    raw = scored.raw
    dominant = scored.dominant
    evidence = EVIDENCE_NONE
    if tuning.progress:
        memory = st.progress
        raw = loop_confidence(raw, scored.values, memory.run, memory.last, tuning)
        if raw > 0.0 and dominant == DETECTOR_NONE:
            dominant = "tool_call_repetition" if turn.tools else "content_similarity"
        if memory.run and memory.last >= SIZES:
            evidence = EVIDENCE_NAMES[memory.last]
        st.evidence = _scope_evidence(st, evidence)
    st.ema = confidence = ema(st.ema, raw, tuning.alpha)
    if confidence > st.peak:
        st.peak = confidence
    st.dominant = dominant
    st.signals = scored.named
    escalation = st.escalation
    transition = escalation.advance(confidence, tuning.thresholds, tuning.counts, tuning.step_down_after)
    call = turn.call
    tokens = call.input_tokens + call.output_tokens
    st.calls += 1
    st.tokens += tokens
    st.cost_usd += turn.cost_usd
    st.first_ns = st.first_ns or call.ts_ns
    if call.ts_ns > st.last_ns:
        st.last_ns = call.ts_ns
    scores.append(call.ts_ns, st.scope, st.scope_id, st.session_id, call.trace_id, call.span_id, call.virtual_key,
                  call.feature, scored.values, raw, confidence, LEVELS[escalation.level], dominant, tokens,
                  turn.cost_usd, evidence)
    if transition is None:
        return scored
    if transition.to_level == LEVEL_INJECT and transition.up:
        st.instruction = break_instruction(tuning, st.dominant, turn.tool_names)
    events.append(scope_event(
        st, call, kind=EVENT_ESCALATION, detector=DETECTOR_CONFIDENCE, action=LEVEL_ACTION[transition.to_level],
        from_level=transition.from_level, to_level=transition.to_level, consecutive=transition.consecutive,
        evidence=st.evidence))
    return scored


def _scope_evidence(st: ScopeState, call_evidence: str) -> str:
    """What the scope's escalation rests on now: the strongest evidence of its current run of wasted steps, else its
    latest call's; an escalated scope whose loop broke keeps the evidence it escalated on until it steps down."""
    progress = st.progress
    if progress.run and progress.top >= SIZES:
        return EVIDENCE_NAMES[progress.top]
    if call_evidence != EVIDENCE_NONE:
        return call_evidence
    if st.escalation.level > 0:
        return st.evidence
    return EVIDENCE_NONE
