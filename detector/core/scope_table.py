"""The scopes the engine follows (sessions, traces, keys, features): finding them, binding a trace to the session
named late, forgetting the idle ones.

No I/O. A call's session is its own session attribute, else the one another span of its trace named (the root span,
often exported last), else its trace. When the session becomes known after some of the trace's calls were scored
under the trace id, the fallback session scope folds into the session's (:meth:`ScopeTable.bind_late_session`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from detector.core.models import Call
from detector.core.scope_state import ScopeState
from detector.settings.vocabulary import (
    SCOPE_FEATURE,
    SCOPE_KEY,
    SCOPE_SESSION,
    SCOPE_TRACE,
    SESSION_SOURCE_TRACE,
)

__all__ = ["ScopeTable"]


class ScopeTable:
    """Scope states by (scope, id), and which session each trace belongs to."""

    def __init__(self, history_depth: int, owns_unknown_traces: bool = True) -> None:
        self.states: dict[tuple[str, str], ScopeState] = {}
        self.trace_sessions: dict[str, str] = {}
        self.history_depth = history_depth
        # A shard of several reads every execute_tool span without a session attribute (it cannot tell whose it is);
        # it keeps only those of traces it already follows. A single detector keeps them all.
        self.owns_unknown_traces = owns_unknown_traces

    def clear(self) -> None:
        self.states.clear()
        self.trace_sessions.clear()

    def get(self, scope: str, scope_id: str, mark: int = 0, dirty: list[ScopeState] | None = None) -> ScopeState:
        """The scope's state, created when new; with ``dirty``, listed there once per batch (``mark``)."""
        key = (scope, scope_id)
        st = self.states.get(key)
        if st is None:
            st = ScopeState(scope=scope, scope_id=scope_id, history=deque(maxlen=self.history_depth))
            self.states[key] = st
        if dirty is not None and st.marked != mark:  # once per batch: a flag, not a set of 20,000 keys
            st.marked = mark
            dirty.append(st)
        return st

    def adopt(self, states: Iterable[ScopeState]) -> None:
        """Take states loaded from the store (restart, or a scope this process has not seen yet)."""
        for st in states:
            self.states.setdefault((st.scope, st.scope_id), st)

    def follows(self, call: Call) -> bool:
        """Whether this detector keeps a tool span: it has a session of its own, or its trace is followed."""
        return (self.owns_unknown_traces or call.session_source != SESSION_SOURCE_TRACE
                or call.trace_id in self.trace_sessions or (SCOPE_TRACE, call.trace_id) in self.states)

    def session_of(self, call: Call, trace: ScopeState) -> str:
        """The call's session: its own, or the one another span of its trace named (before this call or, bound
        late, after it; a trace state loaded from the store after a restart remembers it as its session_id)."""
        if call.session_source == SESSION_SOURCE_TRACE:
            return self.trace_sessions.get(call.trace_id) or trace.session_id or call.session_id
        return call.session_id

    def needed(self, calls: Sequence[Call]) -> set[tuple[str, str]]:
        """Scopes a batch touches that are not in memory (the job loads them before processing)."""
        wanted: set[tuple[str, str]] = set()
        states = self.states
        for c in calls:
            if c.session_source != SESSION_SOURCE_TRACE and c.session_id and c.trace_id not in self.trace_sessions:
                # a session that may become known late: both session scopes a late binding folds together
                for key in ((SCOPE_SESSION, c.session_id), (SCOPE_SESSION, c.trace_id)):
                    if key not in states:
                        wanted.add(key)
            if c.is_tool and not self.follows(c):
                continue
            key = (SCOPE_TRACE, c.trace_id)
            if key not in states:
                wanted.add(key)
            if c.is_llm or c.is_tool:
                key = (SCOPE_SESSION, c.session_id)
                if key not in states:
                    wanted.add(key)
                if c.is_llm and c.virtual_key and (SCOPE_KEY, c.virtual_key) not in states:
                    wanted.add((SCOPE_KEY, c.virtual_key))
        return wanted

    def bind_late_session(self, trace_id: str, session_id: str, mark: int, dirty: list[ScopeState]) -> bool:
        """The trace's session has just become known (its root span, exported last, or a late attribute): the calls
        it had already made, scored so far under the trace id as their session, count for that session from now on,
        with their history. The fallback session scope (keyed by the trace id) is folded into the session's:
        histories merged in span order (the newest ``history_depth`` kept), progress memories merged the same way,
        counters summed, the stronger of the two escalation states kept; the fallback's published decision is
        withdrawn (an ``allow`` for it). A trace already bound keeps its session (the first one named wins).
        Returns whether a fallback scope was folded."""
        fallback = self.states.pop((SCOPE_SESSION, trace_id), None)
        trace = self.states.get((SCOPE_TRACE, trace_id))
        if trace is not None and trace.session_id != session_id:
            trace.session_id = session_id
            # its decision is published again, naming the session (a trace-only check reads it)
            trace.from_level, trace.published = -1, None
            self.get(SCOPE_TRACE, trace_id, mark, dirty)
        if fallback is None or (fallback.calls == 0 and not fallback.progress.steps):
            return False
        target = self.states.get((SCOPE_SESSION, session_id))
        if target is None or (target.calls == 0 and not target.progress.steps):  # the usual case: the session's first
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
            merged.progress.absorb(fallback.progress)
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
        self.get(SCOPE_SESSION, session_id, mark, dirty)  # marks it dirty in this batch (once)
        return True

    def reset(self, scope: str, scope_id: str) -> ScopeState:
        """Fresh state for a scope (the admin reset): the scope still exists, its history is gone."""
        old = self.states.get((scope, scope_id))
        st = ScopeState(scope=scope, scope_id=scope_id, history=deque(maxlen=self.history_depth))
        if old is not None:
            st.session_id, st.virtual_key, st.feature = old.session_id, old.virtual_key, old.feature
            st.last_seen_us = old.last_seen_us
        self.states[(scope, scope_id)] = st
        return st

    def evict(self, now_us: int, session_timeout_minutes: int, max_sessions: int) -> list[ScopeState]:
        """Drop sessions idle past the timeout (with their traces), then the least recently active sessions beyond
        ``max_sessions``. Returns what was dropped."""
        cutoff = now_us - session_timeout_minutes * 60 * 10**6
        sessions = sorted((st for st in self.states.values() if st.scope == SCOPE_SESSION),
                          key=lambda s: s.last_seen_us)
        drop = [st for st in sessions if st.last_seen_us < cutoff]
        live = [st for st in sessions if st.last_seen_us >= cutoff]
        if len(live) > max_sessions:
            drop.extend(live[: len(live) - max_sessions])
        dropped_ids = {st.scope_id for st in drop}
        removed: list[ScopeState] = []
        for key, st in list(self.states.items()):
            if (st.scope == SCOPE_SESSION and st.scope_id in dropped_ids) or (
                st.scope == SCOPE_TRACE and (st.session_id in dropped_ids
                                             or (not st.session_id and st.last_seen_us < cutoff))
            ) or (st.scope in (SCOPE_KEY, SCOPE_FEATURE) and st.last_seen_us < cutoff):
                removed.append(self.states.pop(key))
        for trace_id in [t for t, s in self.trace_sessions.items() if s in dropped_ids]:
            del self.trace_sessions[trace_id]
        return removed
