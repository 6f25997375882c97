"""The detection engine: every span of a batch, in span-time order, through every detector.

No I/O. The scheduled job (``detector.detection.job``) reads new calls from ClickHouse, hands them to
:meth:`Engine.process`, and writes back what it returns. Each span is processed on its own against the state the
previous one left, so results do not depend on how spans were batched into detection cycles. For one span:

1. **Keys** (:mod:`~detector.core.scope_table`): its trace, its session (a trace whose session is named late is
   bound to it now).
2. **A tool run** is attributed to its trace's next model call (the seven signals read it there); when it carries
   content or a failure, it is a step at once (3).
3. **Progress** (:mod:`~detector.core.steps`, :mod:`~detector.core.progress`): each step goes into the session's and
   the trace's memory; the early warning and the no_progress rule follow (:mod:`~detector.core.trips`).
4. **A model call** completes its own steps (3: its failure, the tools that ran without content, its reply), then is
   scored in its session and its trace: seven signals, raw confidence after progress, EMA, escalation
   (:mod:`~detector.core.scope_scoring`).
5. **Rules** (:mod:`~detector.core.trips`): the trace's exact prompt repeat, caps and failure loop; the key's velocity
   circuit breaker. **Budgets** (:mod:`~detector.core.budgets`): the call's cost.

At the end of the batch, the decisions that changed (:mod:`~detector.core.publishing`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from detector.core.budgets import BudgetTracker
from detector.core.decisions import Decision
from detector.core.escalation import LEVEL_RANK
from detector.core.models import Call, Turn
from detector.core.pricing import PriceBook
from detector.core.progress import FUZZY, backoff
from detector.core.publishing import changed_decisions, decision_for
from detector.core.scope_scoring import ScopeScore, final_answer, score_turn
from detector.core.scope_state import ScopeState
from detector.core.scope_table import ScopeTable
from detector.core.score_rows import ScoreColumns, score_dict
from detector.core.steps import (
    ProgressStep,
    answered_tool_step,
    failed_call_step,
    has_outcome,
    reply_step,
    tool_step,
)
from detector.core.trips import (
    early_warning,
    evaluate_no_progress,
    evaluate_trace_rule,
    evaluate_velocity,
)
from detector.core.tuning import EngineTuning, ScoringTuning
from detector.core.turn_view import turn_view
from detector.settings.vocabulary import (
    DETECTOR_FAILURE_LOOP,
    DETECTOR_NO_PROGRESS,
    DETECTOR_VELOCITY,
    LEVEL_THROTTLE,
    SCOPE_KEY,
    SCOPE_SESSION,
    SCOPE_TRACE,
    SESSION_SOURCE_TRACE,
    TOOL_CALL_FINISHES,
)

__all__ = ["CycleOutput", "Engine", "in_span_order", "span_order"]

_NO_ERRORS: Final[frozenset[int]] = frozenset()
_THROTTLE: Final = LEVEL_RANK[LEVEL_THROTTLE]
_TOOL_FINISHES: Final[frozenset[str]] = TOOL_CALL_FINISHES  # a compiled constant (an imported name is a dict lookup)
_OUTPUT_MARKS = itertools.count(1)


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


def call_steps(call: Call, tools: list[Call], previous: Call | None) -> list[ProgressStep]:
    """The steps a model call completes: its own failure; the tool runs since the session's previous call whose spans
    did not tell what came back (or, without tool spans, the tools that call asked for: by name, or only by its finish
    reason with content capture off): their results are in this call's new input; and its reply, when it asked for no tool. (Tool spans that told what came back made their steps
    as they arrived.)"""
    if call.is_error:
        return [failed_call_step(call)]
    steps = []
    open_tools = [t for t in tools if not has_outcome(t)]
    asked = previous is not None and (bool(previous.out_tool_names)
                                      or not _TOOL_FINISHES.isdisjoint(previous.finish_reasons))
    if open_tools or (not tools and asked):
        steps.append(answered_tool_step(open_tools, previous, call))
    if not call.out_tool_names and _TOOL_FINISHES.isdisjoint(call.finish_reasons):
        reply = reply_step(call, previous)
        # a reply not known (content off) beside a tool step of the same call has that step's sizes: one piece of
        # evidence, counted once (OpenInference on the Responses API says "stop" for a call that asked for a tool)
        if reply.known or not steps:
            steps.append(reply)
    return steps


def idle_wait(call: Call, previous: Call | None, tools: list[Call]) -> int:
    """How long the agent waited before ``call``, idle: from the end of the previous model call and of the tools that
    ran since (neither the model's nor a tool's own time), to the start of this call; 0 when unknown."""
    if previous is None or previous.end_ns <= 0:
        return 0
    ready = previous.end_ns
    for t in tools:
        if t.end_ns > ready:
            ready = t.end_ns
    return max(0, call.ts_ns - ready)


class Engine:
    """Scope states in memory plus the per-span pipeline. Not thread-safe: one job drives it."""

    def __init__(self, tuning: EngineTuning) -> None:
        self.tuning = tuning
        self.scopes = ScopeTable(tuning.scoring.history_depth, tuning.owns_unknown_traces)
        self.prices = PriceBook(tuning.prices)
        self.budgets = BudgetTracker(tuning.budgets)  # spend totals: kept across reconfigure (spent is spent)

    # -- configuration -------------------------------------------------------------------------
    def reconfigure(self, tuning: EngineTuning) -> None:
        """Apply a new configuration; as specified, scope state is cleared (circuit-breaker reset semantics)."""
        self.retune(tuning)
        self.scopes = ScopeTable(tuning.scoring.history_depth, tuning.owns_unknown_traces)

    def retune(self, tuning: EngineTuning) -> None:
        """Apply a configuration that changes budgets or prices only: every scope keeps its state."""
        self.tuning = tuning
        self.prices = PriceBook(tuning.prices)
        self.budgets.set_budgets(tuning.budgets)

    def tuning_for(self, virtual_key: str) -> ScoringTuning:
        return self.tuning.for_key(virtual_key)

    def cost(self, call: Call) -> float:
        """What the call cost under the current configuration."""
        return self.prices.cost(call)

    # -- scopes ----------------------------------------------------------------------------------
    @property
    def states(self) -> dict[tuple[str, str], ScopeState]:
        return self.scopes.states

    @property
    def trace_sessions(self) -> dict[str, str]:
        return self.scopes.trace_sessions

    def state(self, scope: str, scope_id: str, out: CycleOutput | None = None) -> ScopeState:
        if out is None:
            return self.scopes.get(scope, scope_id)
        return self.scopes.get(scope, scope_id, out.mark, out.dirty)

    def adopt(self, states: Iterable[ScopeState]) -> None:
        self.scopes.adopt(states)

    def needed_scopes(self, calls: Sequence[Call]) -> set[tuple[str, str]]:
        return self.scopes.needed(calls)

    def reset(self, scope: str, scope_id: str) -> ScopeState:
        return self.scopes.reset(scope, scope_id)

    def evict(self, now_us: int) -> list[ScopeState]:
        """Drop sessions idle past ``session_timeout_minutes`` (with their traces), then the least recently active
        sessions beyond ``max_sessions``. Returns what was dropped."""
        removed = self.scopes.evict(now_us, self.tuning.session_timeout_minutes, self.tuning.max_sessions)
        self.budgets.forget(SCOPE_SESSION, [st.scope_id for st in removed if st.scope == SCOPE_SESSION])
        return removed

    def decision_for(self, st: ScopeState, confidence: float = -1.0, now_us: int = -1) -> Decision:
        """The scope's decision (:func:`detector.core.publishing.decision_for`)."""
        return decision_for(st, self.tuning_for(st.virtual_key), confidence, now_us)

    # -- the pipeline ----------------------------------------------------------------------------
    def process(self, calls: Iterable[Call], now_us: int | None = None) -> CycleOutput:
        """Process a batch of spans in span-time order; returns rows, events and changed decisions."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        out = CycleOutput()
        ordered = list(calls)
        if not in_span_order(ordered):  # the job's query returns them in order already
            ordered.sort(key=span_order)
        for call in ordered:
            self.process_call(call, out, now_us)
        out.decisions = changed_decisions(out.dirty, self.tuning_for, now_us)
        return out

    def process_call(self, call: Call, out: CycleOutput, now_us: int) -> None:
        # 1. keys
        scopes = self.scopes
        if (call.session_source != SESSION_SOURCE_TRACE and call.session_id
                and call.trace_id not in scopes.trace_sessions):
            scopes.trace_sessions[call.trace_id] = call.session_id
            if scopes.bind_late_session(call.trace_id, call.session_id, out.mark, out.dirty):
                out.rebound.append((call.trace_id, call.session_id))
        if call.is_tool and not scopes.follows(call):
            return
        trace = self.state(SCOPE_TRACE, call.trace_id, out)
        trace.last_seen_us = now_us
        if not (call.is_llm or call.is_tool):
            return  # a root or graph span: it names the session of its trace (1), nothing else
        session_id = scopes.session_of(call, trace)
        session = self.state(SCOPE_SESSION, session_id, out)
        session.last_seen_us = now_us
        both = [session, trace]  # a list: compiled, iterating a tuple display goes through the iterator protocol
        tuning = self.tuning_for(call.virtual_key)

        # 2. a tool run
        if call.is_tool:
            trace.pending_tools.append(call)
            session.pending_tools.append(call)
            if tuning.progress and has_outcome(call):
                self._observe(tool_step(call, session.wait_ns), both, call, tuning, out)
            if not call.is_error and trace.failure.error_streak:
                # a retry that succeeded: the failure loop ends at this step, not at the next model call
                trace.failure.succeeded()
                for rule in self.tuning.rules:
                    if rule.enabled and rule.detector == DETECTOR_FAILURE_LOOP:
                        evaluate_trace_rule(rule, trace, call, out.events)
            return

        # 4. a model call: its steps, then its score in each scope
        for st in both:
            st.session_id = session_id
            st.virtual_key = call.virtual_key or st.virtual_key
            st.feature = call.feature or st.feature
        turn = Turn(call, trace.pending_tools, self.cost(call))
        trace.pending_tools = []
        previous = session.history[-1].call if session.history else None
        session.waits_before = (session.waits_before[1], session.wait_ns)
        session.wait_ns = idle_wait(call, previous, session.pending_tools)
        if max(session.escalation.level, trace.escalation.level) == _THROTTLE:
            # the SDK slept the throttle delay before this call: the detector's own delay, not the agent waiting
            session.wait_ns = max(0, session.wait_ns - int(tuning.throttle_delay_seconds * 1e9))
        if tuning.progress:
            for step in call_steps(call, session.pending_tools, previous):
                step.wait_ns = session.wait_ns
                self._observe(step, both, call, tuning, out, rules=False)
        session.pending_tools = []
        view = turn_view(turn)
        final = final_answer(call, trace.history)
        shared: ScopeScore | None = None
        for st in both:
            shared = score_turn(st, turn, view, tuning, out.scores, out.events, shared, final)
        for st in both:  # only now: the trace's window was compared with the session's as it was before this turn
            window = st.window
            assert window is not None  # score_turn made sure there is one (and, narrowed, push is a direct call)
            window.push(view)
            st.history.append(turn)

        # 5. rules and budgets
        trace.request_fps.append(call.request_fp)
        # the failure loop, result-aware: the same tool call counts only while it brings back the same (sizes alone,
        # content capture off, never block)
        tools, errors = view.tools, view.error_fps if view.is_error else _NO_ERRORS
        if tuning.progress and trace.progress.last < FUZZY:
            tools = _NO_ERRORS
        trace.failure.advance(tools, errors, waiting=backoff(*session.waits_before, session.wait_ns))
        for rule in self.tuning.rules:
            if not rule.enabled:
                continue
            if rule.detector == DETECTOR_NO_PROGRESS:
                for st in both:
                    evaluate_no_progress(rule, st, call, out.events)
            elif rule.detector == DETECTOR_VELOCITY:
                if call.virtual_key:
                    key = self.state(SCOPE_KEY, call.virtual_key, out)
                    key.virtual_key = call.virtual_key
                    key.last_seen_us = now_us
                    evaluate_velocity(rule, key, turn, self.tuning.key_tpm_limits.get(call.virtual_key), out.events)
            else:
                evaluate_trace_rule(rule, trace, call, out.events)
        if tuning.early_warning:
            for st in both:
                early_warning(st, call, out.events)
        out.events.extend(self.budgets.account(ts_ns=call.ts_ns, cost_usd=turn.cost_usd, session_id=session_id,
                                               virtual_key=call.virtual_key, feature=call.feature,
                                               trace_id=call.trace_id, span_id=call.span_id))
        out.calls_scored += 1

    def _observe(self, step: ProgressStep, scopes: list[ScopeState], call: Call, tuning: ScoringTuning,
                 out: CycleOutput, rules: bool = True) -> None:
        """3. One step into each scope's progress memory; at a tool step, the no_progress rule and the early warning
        follow at once (a model call evaluates them with its other rules)."""
        for i, st in enumerate(scopes):  # each memory judges its own copy (a step new to a trace may repeat its session)
            st.progress.observe(step.copy() if i else step)
        if not rules:
            return
        for rule in self.tuning.rules:
            if rule.enabled and rule.detector == DETECTOR_NO_PROGRESS:
                for st in scopes:
                    evaluate_no_progress(rule, st, call, out.events)
        if tuning.early_warning:
            for st in scopes:
                early_warning(st, call, out.events)
