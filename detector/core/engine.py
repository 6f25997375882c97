"""The detection engine: per-scope state, and one call at a time through every detector.

No I/O. The scheduled job (``detector.detection.job``) reads new calls from ClickHouse, hands them to
:meth:`Engine.process` in span-time order, and writes back what it returns. Because every call is
scored on its own against the state left by the previous one, results do not depend on how calls
were batched into detection cycles.

Per LLM call (a :class:`~detector.core.models.Turn`, with the trace's execute_tool spans since its previous
LLM call attributed to it):

* session and trace scope: seven signals -> weighted confidence -> EMA -> escalation state machine;
* trace scope: the rule detectors exact_prompt_repeat, trace_cap, failure_loop;
* key scope: the velocity circuit breaker.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from detector.core.budgets import BudgetTracker
from detector.core.decisions import REASON_LOOP, Decision, strongest
from detector.core.escalation import LEVEL_ACTION, LEVELS, break_instruction, counts_of, thresholds_of
from detector.core.events import event_row
from detector.core.models import Call, Turn
from detector.core.pricing import PriceBook
from detector.core.progress import (
    EVIDENCE_NAMES,
    EXACT,
    FUZZY,
    SIZES,
    STRUCTURE,
    Outcome,
    Step,
    make_step,
)
from detector.core.rules import VelocityState, cap_reached, failure_kind, find_repeat
from detector.core.scope_state import NO_TRIPS, RuleTrip, ScopeState
from detector.core.score_rows import ScoreColumns, score_dict
from detector.core.scoring import confidence_and_dominant, ema, weight_items
from detector.core.signal_values import NO_SIGNALS, SignalValues
from detector.core.turn_view import TurnView, turn_view
from detector.core.window import SignalWindow
from detector.settings.config import AppConfig, LoopDetectionConfig, Rule
from detector.settings.rule_params import PARAM_MODELS
from detector.settings.vocabulary import (
    ACTION_ALLOW,
    ACTION_BLOCK,
    ACTION_INJECT,
    ACTION_THROTTLE,
    ACTION_WARN,
    DETECTOR_CONFIDENCE,
    DETECTOR_EXACT_PROMPT_REPEAT,
    DETECTOR_FAILURE_LOOP,
    DETECTOR_NO_PROGRESS,
    DETECTOR_NONE,
    DETECTOR_TRACE_CAP,
    DETECTOR_VELOCITY,
    EVENT_ESCALATION,
    EVENT_PROGRESS,
    EVENT_RULE,
    EVENT_RULE_CLEAR,
    EVIDENCE_EXACT,
    EVIDENCE_FUZZY,
    EVIDENCE_NONE,
    EVIDENCE_RATE,
    EVIDENCE_STRUCTURE,
    LEVEL_INJECT,
    MODE_ENFORCE,
    RULE_BLOCK,
    SCOPE_FEATURE,
    SCOPE_KEY,
    SCOPE_SESSION,
    SCOPE_TRACE,
    SESSION_SOURCE_TRACE,
    SIGNAL_NAMES,
)

__all__ = ["CycleOutput", "DecisionKey", "Engine", "PlannedRule", "ScopeScore", "in_span_order", "round_unit",
           "span_order"]

_NO_ERRORS: Final[frozenset[int]] = frozenset()
_ZERO_NAMED: Final[dict[str, float]] = dict.fromkeys(SIGNAL_NAMES, 0.0)
# SIGNAL_NAMES as a compiled module's constant (the one imported from the uncompiled vocabulary is a dict lookup).
_SIGNAL_NAMES: Final[tuple[str, ...]] = SIGNAL_NAMES

_OUTPUT_MARKS = itertools.count(1)
_TOOL_FINISHES: Final = frozenset({"tool_calls", "tool_call", "function_call", "tool_use"})
_RATE_SIGNALS: Final = frozenset({"token_velocity", "cost_velocity"})
_ERROR: Final = 3  # indices in SignalValues (SIGNAL_NAMES order): compiled, an index is cheaper than a field name
_TOKEN_VELOCITY: Final = 4
_COST_VELOCITY: Final = 6
# The signal a floored score names when the signals themselves were quiet (a reworded search: no two calls alike,
# the same nothing back), by the kind of step that repeated.
_STEP_SIGNAL: Final = ("tool_call_repetition", "content_similarity", "error_cycling")


@dataclass(slots=True)
class CycleOutput:
    """What one batch of calls produced, for the job to write."""

    scores: ScoreColumns = field(default_factory=ScoreColumns)
    events: list[dict[str, Any]] = field(default_factory=list)
    dirty: list[ScopeState] = field(default_factory=list)  # every scope the batch touched, once each
    mark: int = field(default_factory=lambda: next(_OUTPUT_MARKS))  # tells this batch's scopes (ScopeState.marked)
    decisions: list[Decision] = field(default_factory=list)
    calls_scored: int = 0
    # late session binding: (trace id, session id) of every trace whose fallback session scope (keyed by the trace
    # id) was folded into its session's in this batch
    rebound: list[tuple[str, str]] = field(default_factory=list)

    @property
    def score_dicts(self) -> list[dict[str, Any]]:
        """The score rows as ``otel.loop_scores`` column dicts (``ts`` as a DateTime64 literal)."""
        return [score_dict(row) for row in self.scores.rows()]


class ScopeScore:
    """One turn scored in one scope: reusable by a scope whose window holds the very same turns (a session
    with a single trace), which then need not compute it again."""

    __slots__ = ("window", "values", "raw", "dominant", "named")

    def __init__(self, window: SignalWindow, values: SignalValues, raw: float, dominant: str,
                 named: dict[str, float]) -> None:
        self.window = window
        self.values = values
        self.raw = raw  # the weighted confidence before smoothing
        self.dominant = dominant
        self.named = named  # the values by signal name (what the scope state and its events keep)


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


@dataclass(slots=True)
class _Tuning:
    """A configuration's numbers as the per-call pipeline reads them, extracted once."""

    depth: int
    token_threshold: float
    cost_threshold: float
    alpha: float
    thresholds: tuple[float, ...]
    counts: tuple[int, ...]
    step_down_after: int
    weights: tuple[tuple[str, float], ...]
    progress: bool  # loop_detection.progress: evidence weighs on the score
    early_warning: bool
    poll_wait_ns: int
    exact_floor: float
    fuzzy_floor: float
    discount: float
    structure_cap: float  # below warn_confidence: structure alone never warns
    w_token_velocity: float
    w_cost_velocity: float

    @classmethod
    def of(cls, cfg: LoopDetectionConfig) -> _Tuning:
        pr = cfg.progress
        thresholds = thresholds_of(cfg)
        return cls(cfg.history_depth, cfg.token_velocity_threshold, cfg.cost_velocity_threshold, cfg.ema_alpha,
                   thresholds, counts_of(cfg), cfg.step_down_after, weight_items(cfg.weights), pr.enabled,
                   pr.enabled and pr.early_warning, int(pr.poll_wait_seconds * 1e9), pr.exact_floor, pr.fuzzy_floor,
                   pr.progress_discount, STRUCTURE_CAP_SHARE * thresholds[0], cfg.weights.token_velocity,
                   cfg.weights.cost_velocity)


STRUCTURE_CAP_SHARE: Final = 0.9  # structure-only calls keep their raw confidence below 0.9 x warn_confidence


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


def span_order(call: Call) -> tuple[int, str]:
    """The order calls are scored in: span start time, then span id (a total order, whatever the batching)."""
    return call.ts_ns, call.span_id


def in_span_order(calls: list[Call]) -> bool:
    """Whether ``calls`` are sorted by :func:`span_order` already (checked without building its keys)."""
    for i in range(1, len(calls)):
        a, b = calls[i - 1], calls[i]
        if a.ts_ns > b.ts_ns or (a.ts_ns == b.ts_ns and a.span_id > b.span_id):
            return False
    return True


@dataclass(slots=True)
class PlannedRule:
    """A configured rule as the per-call loop reads it, planned once per rule list: plain attributes, and its
    detector's parameters as plain values. (A rule is evaluated on every call; reading an attribute of a
    pydantic model costs more than most of the checks.)"""

    name: str
    detector: str
    action: str
    mode: str
    enabled: bool
    sticky: bool  # an enforced block stays tripped once tripped (velocity excepted: it clears itself)
    params: Any  # the validated parameter model (the velocity breaker reads it)
    window: int = 0  # exact_prompt_repeat
    repeats: tuple[int, ...] = ()
    unit: str = ""  # trace_cap
    threshold: float = 0.0
    same_tool_repeats: int = 0  # failure_loop
    same_error_repeats: int = 0
    wasted_calls: int = 0  # no_progress
    min_level: int = 0
    no_progress: bool = False

    @classmethod
    def of(cls, rule: Rule, params: Any) -> PlannedRule:
        # An enforced block stays once tripped for the rules whose condition only grows (a cap) or is about the
        # requests themselves (an exact repeat). The failure loop and no progress clear with the streak: a call
        # that succeeds is not held by the failures before it. The velocity breaker clears itself.
        planned = cls(rule.name, rule.detector, rule.action, rule.mode, rule.enabled,
                      rule.action == RULE_BLOCK and rule.mode == MODE_ENFORCE
                      and rule.detector in (DETECTOR_EXACT_PROMPT_REPEAT, DETECTOR_TRACE_CAP), params)
        if rule.detector == DETECTOR_EXACT_PROMPT_REPEAT:
            planned.window = params.window
            planned.repeats = params.repeat_counts()
        elif rule.detector == DETECTOR_TRACE_CAP:
            planned.unit = params.unit
            planned.threshold = params.limit()
        elif rule.detector == DETECTOR_FAILURE_LOOP:
            planned.same_tool_repeats = params.same_tool_repeats
            planned.same_error_repeats = params.same_error_repeats
        elif rule.detector == DETECTOR_NO_PROGRESS:
            planned.no_progress = True
            planned.wasted_calls = params.wasted_calls
            planned.min_level = EXACT if params.min_evidence == "exact" else FUZZY
        return planned


def _final_answer(call: Call, history: Sequence[Turn]) -> bool:
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


def _weigh_progress(raw: float, values: SignalValues, step: Step, outcome: Outcome, flag: int, tuning: _Tuning) -> float:
    """The raw confidence after progress evidence (applied after the seven signals, which stay as specified):
    repeats that made progress and polling keep ``discount`` of it; calls that repeat without progress get at least
    the floor of their evidence; what a call whose only evidence is structure (no content, no matched error) adds
    beside the rates stays below warn."""
    if outcome.polling or outcome.progress:
        return raw * tuning.discount
    level = outcome.level
    if not outcome.confirmed and level >= FUZZY:
        return raw  # a restarted run's first steps again: not yet a repeat of the run
    if level == EXACT:
        return raw if raw > tuning.exact_floor else tuning.exact_floor
    if level == FUZZY:
        return raw if raw > tuning.fuzzy_floor else tuning.fuzzy_floor
    if (level <= STRUCTURE or (level == SIZES and flag < SIZES)) and not step.known and values[_ERROR] == 0.0:
        # structure stays below warn (sizes alone count once they have raised the warning, three in a row); the rates
        # (token and cost velocity) are evidence of their own, beside it
        rate = tuning.w_token_velocity * values[_TOKEN_VELOCITY] + tuning.w_cost_velocity * values[_COST_VELOCITY]
        if raw - rate > tuning.structure_cap:
            return tuning.structure_cap + rate
    return raw


def _call_evidence(level: int, step: Step, values: SignalValues, dominant: str) -> str:
    """What one call's score rests on: its progress evidence; below sizes, the content the signals compared (fuzzy),
    else the rates, else structure; none when nothing repeated."""
    if level >= SIZES:
        return EVIDENCE_NAMES[level]
    if values is NO_SIGNALS:  # (the engine's one record of no evidence at all)
        return EVIDENCE_NONE
    if step.known and (values[0] or values[1] or values[2]):  # content similarity, tool repetition, stagnation
        return EVIDENCE_FUZZY
    if dominant in _RATE_SIGNALS or values[_TOKEN_VELOCITY] or values[_COST_VELOCITY]:
        return EVIDENCE_RATE
    return EVIDENCE_STRUCTURE if level == STRUCTURE or values[_ERROR] == 0.0 else EVIDENCE_EXACT


def _scope_evidence(st: ScopeState, call_evidence: str) -> str:
    """What the scope's escalation rests on now: the strongest evidence of its current run of wasted calls (sizes
    and better), else its latest call's; an escalated scope whose loop broke keeps the evidence it escalated on until
    it steps down."""
    progress = st.progress
    if progress.streak and progress.top >= SIZES:
        return EVIDENCE_NAMES[progress.top]
    if call_evidence != EVIDENCE_NONE:
        return call_evidence
    if st.escalation.level > 0:
        return st.evidence
    return EVIDENCE_NONE


class Engine:
    """Scope states in memory plus the per-call pipeline. Not thread-safe: one job drives it."""

    def __init__(self, config: AppConfig) -> None:
        self.config = config
        # A shard of several reads every execute_tool span without a session attribute (it cannot tell whose
        # it is); it keeps only those of traces it already follows. A single detector keeps them all.
        self.owns_unknown_traces = config.detector.shard_count == 1
        self.states: dict[tuple[str, str], ScopeState] = {}
        self.trace_sessions: dict[str, str] = {}
        self._key_cfg: dict[str, LoopDetectionConfig] = {}
        self._key_tuning: dict[str, tuple[LoopDetectionConfig, _Tuning]] = {}
        self._params: dict[str, Any] = {}
        self._plan: list[PlannedRule] = []
        self._plan_for: list[Rule] | None = None
        self.prices = PriceBook(config)
        self.budgets = BudgetTracker(config.budgets)  # spend totals: kept across reconfigure (spent is spent)

    # -- configuration -------------------------------------------------------------------------
    def reconfigure(self, config: AppConfig) -> None:
        """Apply a new config; as specified, session state is cleared (circuit-breaker reset semantics)."""
        self.config = config
        self.owns_unknown_traces = config.detector.shard_count == 1
        self._key_cfg.clear()
        self._key_tuning.clear()
        self._params.clear()
        self._plan_for = None
        self.states.clear()
        self.trace_sessions.clear()
        self.budgets.set_budgets(config.budgets)

    def cfg_for(self, virtual_key: str) -> LoopDetectionConfig:
        cfg = self._key_cfg.get(virtual_key)
        if cfg is None:
            cfg = self.config.for_key(virtual_key)
            self._key_cfg[virtual_key] = cfg
        return cfg

    def cost(self, call: Call) -> float:
        """What the call cost under the current configuration (the job may swap the config object:
        :meth:`detector.detection.job.DetectorJob.update_budgets`)."""
        if self.prices.config is not self.config:
            self.prices = PriceBook(self.config)
        return self.prices.cost(call)

    def _tuning_for(self, virtual_key: str) -> tuple[LoopDetectionConfig, _Tuning]:
        found = self._key_tuning.get(virtual_key)
        if found is None or found[0] is not self.cfg_for(virtual_key):
            cfg = self.cfg_for(virtual_key)
            found = self._key_tuning[virtual_key] = (cfg, _Tuning.of(cfg))
        return found

    # -- state -----------------------------------------------------------------------------------
    def state(self, scope: str, scope_id: str, out: CycleOutput | None = None) -> ScopeState:
        key = (scope, scope_id)
        st = self.states.get(key)
        if st is None:
            depth = self.config.loop_detection.history_depth
            st = ScopeState(scope=scope, scope_id=scope_id, history=deque(maxlen=depth))
            self.states[key] = st
        if out is not None and st.marked != out.mark:  # once per batch: a flag, not a set of 20,000 keys
            st.marked = out.mark
            out.dirty.append(st)
        return st

    def adopt(self, states: Iterable[ScopeState]) -> None:
        """Take states loaded from the store (restart, or a scope this process has not seen yet)."""
        for st in states:
            self.states.setdefault((st.scope, st.scope_id), st)

    def needed_scopes(self, calls: Sequence[Call]) -> set[tuple[str, str]]:
        """Scopes a batch touches that are not in memory (the job loads them before processing)."""
        wanted: set[tuple[str, str]] = set()
        states = self.states
        for c in calls:
            if c.session_source != SESSION_SOURCE_TRACE and c.session_id and c.trace_id not in self.trace_sessions:
                # a session that may become known late: both session scopes a late binding folds together
                for key in ((SCOPE_SESSION, c.session_id), (SCOPE_SESSION, c.trace_id)):
                    if key not in states:
                        wanted.add(key)
            if c.is_tool and not self._follows(c):
                continue
            key = (SCOPE_TRACE, c.trace_id)
            if key not in states:
                wanted.add(key)
            if c.is_llm:
                key = (SCOPE_SESSION, c.session_id)
                if key not in states:
                    wanted.add(key)
                if c.virtual_key and (SCOPE_KEY, c.virtual_key) not in states:
                    wanted.add((SCOPE_KEY, c.virtual_key))
        return wanted

    # -- the pipeline ----------------------------------------------------------------------------
    def process(self, calls: Iterable[Call], now_us: int | None = None) -> CycleOutput:
        """Score a batch of calls, in span-time order; returns rows, events and changed decisions."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        out = CycleOutput()
        ordered = list(calls)
        if not in_span_order(ordered):  # the job's query returns them in order already
            ordered.sort(key=span_order)
        for call in ordered:
            self.process_call(call, out, now_us)
        out.decisions = self._changed_decisions(out.dirty, now_us)
        return out

    def _changed_decisions(self, states: Iterable[ScopeState], now_us: int) -> list[Decision]:
        """Decisions that differ from what each scope last published (only those need writing), as of
        ``now_us``."""
        changed = []
        for st in states:
            if st.calls == 0 and not st.trips and st.published is None:
                continue  # a trace seen only through tool spans (maybe another shard's): nothing to decide
            # What decision_for reads, as the decision key rounds it: unchanged, so is the decision (most
            # scopes of a cycle), and it need not be built to find out.
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
            d = self.decision_for(st, confidence, now_us)
            # rounded is round(d.confidence, 3): every decision of a scope carries round(ema, 6)
            key = DecisionKey(d.action, d.level, rounded, d.dominant_signal, d.detector, d.rule_name, d.instruction,
                              d.expires_at_us, d.evidence)
            if key != st.published:
                st.published = key
                changed.append(d)
        return changed

    def process_call(self, call: Call, out: CycleOutput, now_us: int) -> None:
        if (call.session_source != SESSION_SOURCE_TRACE and call.session_id
                and call.trace_id not in self.trace_sessions):
            self.trace_sessions[call.trace_id] = call.session_id
            self._bind_late_session(call.trace_id, call.session_id, out)
        if call.is_tool and not self._follows(call):
            return
        trace = self.state(SCOPE_TRACE, call.trace_id, out)
        trace.last_seen_us = now_us
        if call.is_tool:
            trace.pending_tools.append(call)
            return
        if not call.is_llm:
            return

        session_id = call.session_id
        if call.session_source == SESSION_SOURCE_TRACE:
            # the session another span of the trace named (before this call or, bound late, after it); a trace
            # state loaded from the store after a restart remembers it as its session_id
            session_id = self.trace_sessions.get(call.trace_id) or trace.session_id or call.session_id
        turn = Turn(call, trace.pending_tools, self.cost(call))
        trace.pending_tools = []
        view = turn_view(turn)
        cfg, tuning = self._tuning_for(call.virtual_key)
        session = self.state(SCOPE_SESSION, session_id, out)
        history = trace.history
        previous = history[-1].call if history else None
        step = make_step(turn, previous) if tuning.progress else None
        final = _final_answer(call, history)

        shared = None
        scopes = [session, trace]  # a list: compiled, iterating a tuple display goes through the iterator protocol
        outcome: Outcome | None = None
        for st in scopes:
            st.session_id = session_id
            st.virtual_key = call.virtual_key or st.virtual_key
            st.feature = call.feature or st.feature
            st.last_seen_us = now_us
            # the trace of a single-trace session holds the session's very steps: it takes the session's outcome
            if step is not None and (outcome is None or not st.progress.follow(session.progress, step, outcome)):
                outcome = st.progress.observe(step, tuning.poll_wait_ns)
            shared = self._score(st, turn, view, cfg, tuning, out, shared, step, outcome, final)
        # only now: the trace's window was compared with the session's as it was before this turn
        for st in scopes:
            window = st.window
            assert window is not None  # _score made sure there is one (and, narrowed, push is a direct call)
            window.push(view)
            st.history.append(turn)

        trace.request_fps.append(call.request_fp)
        # the failure loop, result- and backoff-aware: the same tool call counts only while it brings back the same
        # (known or, content capture off, the same amount), and a retry after a real wait is not part of a streak
        tools, errors = view.tools, view.error_fps if view.is_error else _NO_ERRORS
        if outcome is not None and step is not None:
            if outcome.polling:
                tools, errors = _NO_ERRORS, _NO_ERRORS
            elif outcome.period != 1 or not (outcome.level >= FUZZY or (outcome.level == SIZES and step.known)):
                tools = _NO_ERRORS  # sizes alone (no content at all) never block
        trace.failure.advance(tools, errors)
        for rule in self._rule_plan():
            if rule.enabled:
                if rule.no_progress:
                    for st in scopes:
                        self._evaluate_no_progress(rule, st, turn, out)
                else:
                    self._evaluate_rule(rule, trace, turn, out)
        if tuning.early_warning:
            for st in scopes:
                self._early_warning(st, turn, out)
        out.events.extend(self.budgets.account(ts_ns=call.ts_ns, cost_usd=turn.cost_usd, session_id=session_id,
                                               virtual_key=call.virtual_key, feature=call.feature,
                                               trace_id=call.trace_id, span_id=call.span_id))
        out.calls_scored += 1

    def _bind_late_session(self, trace_id: str, session_id: str, out: CycleOutput) -> None:
        """The trace's session has just become known (its root span, exported last, or a late attribute): the
        calls it had already made, scored so far under the trace id as their session, count for that session
        from now on, with their history. The fallback session scope (keyed by the trace id) is folded into the
        session's: histories merged in span order (the newest ``history_depth`` kept), counters summed, the
        stronger of the two escalation states kept; the fallback's published decision is withdrawn (an
        ``allow`` for it). A trace already bound keeps its session (the first one named wins)."""
        fallback = self.states.pop((SCOPE_SESSION, trace_id), None)
        trace = self.states.get((SCOPE_TRACE, trace_id))
        if trace is not None and trace.session_id != session_id:
            trace.session_id = session_id
            # its decision is published again, naming the session (a trace-only check reads it)
            trace.from_level, trace.published = -1, None
            self.state(SCOPE_TRACE, trace_id, out)
        if fallback is None or fallback.calls == 0:
            return
        target = self.states.get((SCOPE_SESSION, session_id))
        if target is None or target.calls == 0:  # the usual case: the run is the session's first
            fallback.scope_id = session_id
            merged = fallback
            if target is not None:
                merged.virtual_key = merged.virtual_key or target.virtual_key
                merged.feature = merged.feature or target.feature
            self.states[(SCOPE_SESSION, session_id)] = merged
        else:
            merged = target
            turns = sorted([*target.history, *fallback.history], key=lambda t: (t.call.ts_ns, t.call.span_id))
            merged.history = deque(turns[-target.history.maxlen:] if target.history.maxlen else turns,
                                   maxlen=target.history.maxlen)
            merged.window = None  # rebuilt from the merged history by the next score
            merged.calls += fallback.calls
            merged.tokens += fallback.tokens
            merged.cost_usd += fallback.cost_usd
            merged.first_ns = min(x for x in (target.first_ns, fallback.first_ns) if x) if (
                target.first_ns or fallback.first_ns) else 0
            merged.last_ns = max(target.last_ns, fallback.last_ns)
            merged.last_seen_us = max(target.last_seen_us, fallback.last_seen_us)
            merged.peak = max(target.peak, fallback.peak)
            if (fallback.escalation.level, fallback.ema or 0.0) > (target.escalation.level, target.ema or 0.0):
                merged.escalation, merged.ema = fallback.escalation, fallback.ema
                merged.dominant, merged.signals = fallback.dominant, fallback.signals
                merged.instruction = fallback.instruction
            for name, trip in fallback.trips.items():
                merged.trips.setdefault(name, trip)
        merged.session_id = session_id
        merged.published = None  # its decision is published again at the end of the batch
        merged.from_level = -1
        self.state(SCOPE_SESSION, session_id, out)  # marks it dirty in this batch (once)
        out.rebound.append((trace_id, session_id))  # the job withdraws the fallback scope's decision and state

    def _follows(self, call: Call) -> bool:
        """Whether this detector keeps a tool span: it has a session of its own, or its trace is followed."""
        return (self.owns_unknown_traces or call.session_source != SESSION_SOURCE_TRACE or call.trace_id in self.trace_sessions
                or (SCOPE_TRACE, call.trace_id) in self.states)

    def _score(self, st: ScopeState, turn: Turn, view: TurnView, cfg: LoopDetectionConfig, tuning: _Tuning,
               out: CycleOutput, shared: ScopeScore | None = None, step: Step | None = None,
               outcome: Outcome | None = None, final: bool = False) -> ScopeScore:
        """Score one turn in one scope (the caller then adds it to the scope's history and window). ``shared``
        is the previous scope's result: when this scope's window holds the same turns (a session with a single
        trace), the signals, the raw confidence and the dominant signal are equal, and are reused rather than
        computed twice."""
        window = st.window
        if window is None or window.depth != tuning.depth:
            if st.history.maxlen != tuning.depth:
                st.history = deque(st.history, maxlen=tuning.depth)
            window = st.window = SignalWindow.of(st.history, tuning.depth)
        if shared is not None and window.scores_like(shared.window):
            scored = shared
        else:
            values, _ = window.score(view, tuning.token_threshold, tuning.cost_threshold)
            if final and values.tool_call_repetition:
                # a final text answer after a run of tool calls repeats no tool call: the tools attributed to it ran
                # for the call before
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
        if outcome is not None and step is not None:
            raw = _weigh_progress(raw, scored.values, step, outcome, st.progress.flag, tuning)
            if raw > scored.raw and dominant == DETECTOR_NONE:
                dominant = _STEP_SIGNAL[step.kind]
            evidence = _call_evidence(outcome.level, step, scored.values, dominant)
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
        out.scores.append(call.ts_ns, st.scope, st.scope_id, st.session_id, call.trace_id, call.span_id,
                          call.virtual_key, call.feature, scored.values, raw, confidence, LEVELS[escalation.level],
                          dominant, tokens, turn.cost_usd, evidence)
        if transition is None:
            return scored
        if transition.to_level == LEVEL_INJECT and transition.up:
            st.instruction = break_instruction(cfg, st.dominant, turn.tool_names)
        out.events.append(self._event(
            st, turn, kind=EVENT_ESCALATION, detector=DETECTOR_CONFIDENCE, action=LEVEL_ACTION[transition.to_level],
            from_level=transition.from_level, to_level=transition.to_level, consecutive=transition.consecutive,
            evidence=st.evidence,
        ))
        return scored

    def _rule_plan(self) -> list[PlannedRule]:
        """The configured rules, planned once per rule list."""
        rules = self.config.rules
        if self._plan_for is not rules:
            self._plan = [PlannedRule.of(rule, self._rule_params(rule)) for rule in rules]
            self._plan_for = rules
        return self._plan

    def _rule_params(self, rule: Rule) -> Any:
        """The rule's parameter model, validated once per configuration (not per call)."""
        params = self._params.get(rule.name)
        if params is None:
            params = self._params[rule.name] = PARAM_MODELS[rule.detector](**rule.params)
        return params

    def _evaluate_rule(self, rule: PlannedRule, trace: ScopeState, turn: Turn, out: CycleOutput) -> None:
        target = trace
        detail = ""
        expires_ns = 0
        if rule.detector == DETECTOR_EXACT_PROMPT_REPEAT:
            match = find_repeat(trace.request_fps, rule.window, rule.repeats)
            tripped = match is not None
            if match and rule.name not in trace.trips:  # the message of a new trip (a loop trips call after call)
                detail = f"cycle of {match[0]} call(s) repeated {match[1]} times"
        elif rule.detector == DETECTOR_TRACE_CAP:
            tripped = cap_reached(trace.calls, trace.cost_usd, trace.tokens, rule.unit, rule.threshold)
            if tripped and rule.name not in trace.trips:
                detail = f"{rule.unit} cap {rule.threshold:g} reached"
        elif rule.detector == DETECTOR_FAILURE_LOOP:
            failure = trace.failure
            kind = failure_kind(failure.tool_streak, failure.error_streak, rule.same_tool_repeats,
                                rule.same_error_repeats)
            tripped = kind is not None
            detail = kind or ""
        elif rule.detector == DETECTOR_VELOCITY:
            if not turn.call.virtual_key:
                return
            target = self.state(SCOPE_KEY, turn.call.virtual_key, out)
            target.virtual_key = turn.call.virtual_key
            target.last_seen_us = trace.last_seen_us
            target.calls += 1
            target.tokens += turn.tokens
            target.last_ns = max(target.last_ns, turn.ts_ns)
            target.first_ns = target.first_ns or turn.ts_ns
            vstate = target.velocity.setdefault(rule.name, VelocityState())
            override = self.config.virtual_keys.get(turn.call.virtual_key)
            tripped = vstate.update(turn.ts_ns, turn.tokens, rule.params,
                                    override.tpm_limit if override else None)
            expires_ns = turn.ts_ns + 60 * 10**9
            if tripped:
                detail = "tokens per minute over the key's limit"
        else:  # pragma: no cover - config validation forbids it
            return

        self._set_trip(rule, target, tripped, turn, out, detail, expires_ns)

    def _set_trip(self, rule: PlannedRule, target: ScopeState, tripped: bool, turn: Turn, out: CycleOutput,
                  detail: str = "", expires_ns: int = 0, evidence: str = "") -> None:
        """Record that ``rule`` is (still) tripped on ``target``, or clear it (unless it is sticky), with its events.
        The target is marked dirty already: a trace or session by process_call, a key by state()."""
        current = target.trips.get(rule.name)
        if not tripped and current is None:
            return  # the usual case: nothing tripped, nothing to clear
        if tripped and current is None:
            target.trips[rule.name] = RuleTrip(rule.name, rule.detector, rule.action, rule.mode, turn.ts_ns, detail,
                                               expires_ns, evidence)
            out.events.append(self._event(
                target, turn, kind=EVENT_RULE, detector=rule.detector, action=rule.action, mode=rule.mode,
                rule_name=rule.name, from_level=target.level, to_level=target.level, message=detail,
                evidence=evidence or EVIDENCE_NONE,
            ))
        elif tripped and current is not None:
            current.expires_ns = expires_ns
            if evidence:
                current.evidence = evidence
        elif not tripped and current is not None and not rule.sticky:
            del target.trips[rule.name]
            out.events.append(self._event(
                target, turn, kind=EVENT_RULE_CLEAR, detector=rule.detector, action=ACTION_ALLOW, mode=rule.mode,
                rule_name=rule.name, from_level=target.level, to_level=target.level, message="condition cleared",
                evidence=current.evidence or EVIDENCE_NONE,
            ))

    def _evaluate_no_progress(self, rule: PlannedRule, st: ScopeState, turn: Turn, out: CycleOutput) -> None:
        """The no_progress rule on one scope (trace or session): tripped while the scope's current run of wasted
        calls holds ``wasted_calls`` with at least the rule's evidence; it clears with the first call that makes
        progress."""
        progress = st.progress
        wasted = progress.wasted(rule.min_level)
        tripped = wasted >= rule.wasted_calls
        if not tripped and rule.name not in st.trips:
            return
        evidence = EVIDENCE_NAMES[progress.top] if tripped else ""
        detail = f"{wasted} calls in a row without progress ({evidence} evidence)" if tripped else ""
        self._set_trip(rule, st, tripped, turn, out, detail, 0, evidence)

    def _early_warning(self, st: ScopeState, turn: Turn, out: CycleOutput) -> None:
        """The early warning's events (raised, lifted); its decision is made by :meth:`decision_for`."""
        flag = st.progress.flag
        raised = st.from_flag_event
        if flag == raised:
            return
        st.from_flag_event = flag
        if flag and not raised:
            out.events.append(self._event(
                st, turn, kind=EVENT_PROGRESS, detector=DETECTOR_NO_PROGRESS, action=ACTION_WARN, from_level=st.level,
                to_level=st.level, message=f"repeating without progress ({EVIDENCE_NAMES[flag]} evidence)",
                evidence=EVIDENCE_NAMES[flag]))
        elif not flag:
            out.events.append(self._event(
                st, turn, kind=EVENT_PROGRESS, detector=DETECTOR_NO_PROGRESS, action=ACTION_ALLOW,
                from_level=st.level, to_level=st.level, message="progress resumed",
                evidence=EVIDENCE_NAMES[raised]))

    def _event(self, st: ScopeState, turn: Turn, *, kind: str, detector: str, action: str, from_level: str,
               to_level: str, mode: str = MODE_ENFORCE, rule_name: str = "", consecutive: int = 0,
               message: str = "", evidence: str = EVIDENCE_NONE) -> dict[str, Any]:
        call = turn.call
        return event_row(
            ts_ns=call.ts_ns, kind=kind, scope=st.scope, scope_id=st.scope_id, session_id=st.session_id,
            trace_id=call.trace_id, span_id=call.span_id, virtual_key=call.virtual_key, feature=call.feature,
            detector=detector, rule_name=rule_name, action=action, mode=mode, from_level=from_level,
            to_level=to_level, confidence=st.confidence, signals=st.signals, dominant_signal=st.dominant,
            consecutive=consecutive, message=message, evidence=evidence,
        )

    # -- decisions -------------------------------------------------------------------------------
    def decision_for(self, st: ScopeState, confidence: float = -1.0, now_us: int = -1) -> Decision:
        """The scope's decision: its escalation level, strengthened by any enforced blocking rule tripped on it.
        ``confidence``: ``round(st.confidence, 6)`` when the caller has it already; ``now_us``: when it is made
        (-1: the clock; a cycle passes its own time)."""
        action = LEVEL_ACTION[st.level]
        if confidence < 0.0:
            confidence = round_unit(st.confidence, 6)
        detector = DETECTOR_CONFIDENCE if action != ACTION_ALLOW else DETECTOR_NONE
        evidence = st.evidence if action != ACTION_ALLOW else EVIDENCE_NONE
        flag = st.progress.flag
        if flag and action == ACTION_ALLOW and self._tuning_for(st.virtual_key)[1].early_warning:
            # the early warning: repeating without progress on exact (fuzzy, sizes) evidence, whatever the EMA
            action, detector, evidence = ACTION_WARN, DETECTOR_NO_PROGRESS, EVIDENCE_NAMES[flag]
        base = Decision(
            scope=st.scope, scope_id=st.scope_id, session_id=st.session_id, action=action, level=st.level,
            confidence=confidence, dominant_signal=st.dominant, detector=detector,
            reason=REASON_LOOP if action == ACTION_BLOCK else "",
            delay_seconds=float(self.cfg_for(st.virtual_key).throttle_delay_seconds) if action == ACTION_THROTTLE else 0.0,
            instruction=st.instruction if action == ACTION_INJECT else "", updated_us=now_us, evidence=evidence,
        )
        if not st.trips:
            return base
        candidates = [base]
        for trip in st.trips.values():
            # notify: log, event, webhook, metric, and the run continues untouched; dry run: the same,
            # recording what a block would have done. Only an enforced block changes the decision.
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

    # -- lifecycle -------------------------------------------------------------------------------
    def reset(self, scope: str, scope_id: str) -> ScopeState:
        """Fresh state for a scope (the admin reset): the scope still exists, its history is gone."""
        old = self.states.get((scope, scope_id))
        depth = self.config.loop_detection.history_depth
        st = ScopeState(scope=scope, scope_id=scope_id, history=deque(maxlen=depth))
        if old is not None:
            st.session_id, st.virtual_key, st.feature = old.session_id, old.virtual_key, old.feature
            st.last_seen_us = old.last_seen_us
        self.states[(scope, scope_id)] = st
        return st

    def evict(self, now_us: int) -> list[ScopeState]:
        """Drop sessions idle past ``session_timeout_minutes`` (with their traces), then the least recently
        active sessions beyond ``max_sessions``. Returns what was dropped."""
        cfg = self.config.loop_detection
        cutoff = now_us - cfg.session_timeout_minutes * 60 * 10**6
        sessions = sorted((st for st in self.states.values() if st.scope == SCOPE_SESSION), key=lambda s: s.last_seen_us)
        drop = [st for st in sessions if st.last_seen_us < cutoff]
        live = [st for st in sessions if st.last_seen_us >= cutoff]
        if len(live) > cfg.max_sessions:
            drop.extend(live[: len(live) - cfg.max_sessions])
        dropped_ids = {st.scope_id for st in drop}
        removed: list[ScopeState] = []
        for key, st in list(self.states.items()):
            if (st.scope == SCOPE_SESSION and st.scope_id in dropped_ids) or (
                st.scope == SCOPE_TRACE and (st.session_id in dropped_ids or (not st.session_id and st.last_seen_us < cutoff))
            ) or (st.scope in (SCOPE_KEY, SCOPE_FEATURE) and st.last_seen_us < cutoff):
                removed.append(self.states.pop(key))
        for trace_id in [t for t, s in self.trace_sessions.items() if s in dropped_ids]:
            del self.trace_sessions[trace_id]
        self.budgets.forget(SCOPE_SESSION, dropped_ids)
        return removed
