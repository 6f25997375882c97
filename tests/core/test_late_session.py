"""Late session binding: a trace whose session becomes known after some of its calls were scored (the agent run's
root span, exported last; a late attribute) counts for that session from then on, with its history."""

from __future__ import annotations

from support.calls import T0, looping
from support.engines import make_engine

from detector.core.models import Call
from detector.settings.config import AppConfig
from detector.settings.vocabulary import SCOPE_SESSION, SCOPE_TRACE


def unbound(calls: list[Call]) -> list[Call]:
    """The calls as an instrumentation without a session writes them (openai-v2): the trace is their session."""
    for c in calls:
        c.session_id, c.session_source = c.trace_id, "trace"
    return calls


def root(trace: str, session: str, ts: int = T0 - 10**9) -> Call:
    return Call(ts_ns=ts, trace_id=trace, span_id=f"{trace}-root", session_id=session,
                session_source="gen_ai.conversation.id", operation="invoke_agent", call_kind="agent")


def test_root_exported_last_folds_the_run_into_its_session():
    engine = make_engine(AppConfig())
    run = unbound(looping(12))
    first = engine.process(run[:16])  # 8 turns scored while the session is unknown
    fallback = engine.states[(SCOPE_SESSION, "t1")]
    level, ema, calls = fallback.escalation.level, fallback.ema, fallback.calls
    assert calls == 8 and level > 0 and not first.rebound

    second = engine.process([root("t1", "conv-1")])
    assert second.rebound == [("t1", "conv-1")]
    assert (SCOPE_SESSION, "t1") not in engine.states
    session = engine.states[(SCOPE_SESSION, "conv-1")]
    assert (session.calls, session.escalation.level, session.ema) == (calls, level, ema)
    depth = engine.tuning.scoring.history_depth
    assert [t.call.span_id for t in session.history] == [c.span_id for c in run[:16:2]][-depth:]
    assert engine.states[(SCOPE_TRACE, "t1")].session_id == "conv-1"
    assert any(d.scope == SCOPE_SESSION and d.scope_id == "conv-1" and d.action != "allow" for d in second.decisions)

    third = engine.process(run[16:])  # the rest of the run: still no session on its spans
    assert session.calls == 12 and engine.states[(SCOPE_SESSION, "conv-1")] is session
    assert {(r.scope, r.scope_id) for r in third.scores.rows()} == {(SCOPE_SESSION, "conv-1"), (SCOPE_TRACE, "t1")}
    assert (SCOPE_SESSION, "t1") not in engine.states


def test_late_binding_scores_like_knowing_the_session_from_the_start():
    early, late = make_engine(AppConfig()), make_engine(AppConfig())
    early.process([root("t1", "conv-1"), *unbound(looping(10))])
    late.process(unbound(looping(10)))
    late.process([root("t1", "conv-1")])
    a, b = early.states[(SCOPE_SESSION, "conv-1")], late.states[(SCOPE_SESSION, "conv-1")]
    assert (a.calls, a.tokens, a.escalation.level, a.ema, a.dominant) == \
        (b.calls, b.tokens, b.escalation.level, b.ema, b.dominant)
    assert [t.call.span_id for t in a.history] == [t.call.span_id for t in b.history]


def test_a_run_joining_a_session_with_history_merges_in_span_order():
    config = AppConfig()
    engine = make_engine(config)
    before = looping(6, session="conv-1", trace="t0")  # an earlier run of the conversation, session on its spans
    engine.process(before)
    later = unbound(looping(6, trace="t1"))
    for c in later:
        c.ts_ns += 100 * 10**9
    engine.process(later)
    engine.process([root("t1", "conv-1", ts=later[0].ts_ns - 10**9)])
    session = engine.states[(SCOPE_SESSION, "conv-1")]
    assert session.calls == 12
    spans = [t.call.span_id for t in session.history]
    depth = config.loop_detection.history_depth
    assert spans == [c.span_id for c in (before + later) if c.is_llm][-depth:]  # span order, the newest kept
    assert session.window is None or session.window.depth == config.loop_detection.history_depth


def test_the_first_session_named_wins():
    engine = make_engine(AppConfig())
    engine.process([root("t1", "conv-1"), *unbound(looping(3))])
    out = engine.process([root("t1", "conv-2", ts=T0 + 60 * 10**9)])
    assert not out.rebound and engine.trace_sessions["t1"] == "conv-1"
    assert (SCOPE_SESSION, "conv-2") not in engine.states
