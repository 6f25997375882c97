"""The engine, pure: call sequences in, scores, events and decisions out (no store, no HTTP)."""

from __future__ import annotations

import dataclasses

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from support.calls import healthy, llm, looping
from support.engines import make_engine

from detector.core.engine import Engine
from detector.core.models import Call
from detector.core.publishing import round_unit
from detector.core.scope_state import ScopeState
from detector.detection.engine_config import engine_tuning
from detector.settings.config import AppConfig, parse_config
from detector.settings.loop_settings import Rule


def final_levels(engine: Engine) -> dict[tuple[str, str], str]:
    return {k: st.level for k, st in engine.states.items()}


def test_stuck_tool_loop_escalates_session_and_trace():
    engine = make_engine(AppConfig())
    out = engine.process(looping(12))
    assert engine.states[("session", "s1")].level in ("throttle", "inject", "hard_stop")
    assert engine.states[("trace", "t1")].level == engine.states[("session", "s1")].level
    kinds = [(e["scope"], e["to_level"]) for e in out.events if e["kind"] == "escalation"]
    assert ("session", "warn") in kinds and ("trace", "warn") in kinds
    assert out.calls_scored == 12
    assert len(out.scores) == 24  # one row per call per scope
    session_decision = next(d for d in out.decisions if d.scope == "session")
    assert session_decision.action != "allow"
    assert session_decision.dominant_signal != "none"


def test_healthy_run_stays_allow():
    engine = make_engine(AppConfig())
    out = engine.process(healthy(20))
    assert all(d.action == "allow" for d in out.decisions), [(d.scope, d.action) for d in out.decisions]
    assert not [e for e in out.events if e["kind"] == "escalation"]


def test_tool_spans_without_session_join_their_trace_session():
    engine = make_engine(AppConfig())
    engine.process(looping(3))
    assert ("session", "t1") not in engine.states  # the tool span's fallback session is never scored
    assert engine.states[("trace", "t1")].session_id == "s1"


def test_exact_repeat_rule_blocks_trace_in_enforce_and_not_in_dry_run():
    rules = [{"name": "stop-repeat", "detector": "exact_prompt_repeat", "action": "block", "mode": "enforce"},
             {"name": "watch-repeat", "detector": "exact_prompt_repeat", "action": "block", "mode": "dry_run"}]
    engine = make_engine(parse_config({"rules": rules}))
    out = engine.process([llm(i, request_fp=777) for i in range(3)])
    trace = next(d for d in out.decisions if d.scope == "trace")
    assert trace.action == "block" and trace.detector == "exact_prompt_repeat" and trace.rule_name == "stop-repeat"
    trips = [e for e in out.events if e["kind"] == "rule"]
    assert {(e["rule_name"], e["mode"]) for e in trips} == {("stop-repeat", "enforce"), ("watch-repeat", "dry_run")}

    dry = make_engine(parse_config({"rules": [rules[1]]}))
    out = dry.process([llm(i, request_fp=777) for i in range(3)])
    assert all(d.action == "allow" for d in out.decisions if d.scope == "trace")
    assert [e["mode"] for e in out.events if e["kind"] == "rule"] == ["dry_run"]


def test_two_step_cycle_notify_rule_records_but_never_changes_the_decision():
    engine = make_engine(AppConfig())  # the default notify-only rules
    out = engine.process([llm(i, request_fp=[1, 2][i % 2]) for i in range(4)])
    trips = [e for e in out.events if e["kind"] == "rule"]
    assert [(e["detector"], e["action"], e["message"]) for e in trips] == [
        ("exact_prompt_repeat", "notify", "cycle of 2 call(s) repeated 2 times")]
    assert out.decisions and all(d.action == "allow" for d in out.decisions)


def test_default_trace_call_cap_notifies_at_25_calls():
    engine = make_engine(AppConfig())
    out = engine.process(healthy(24))
    assert not [e for e in out.events if e["kind"] == "rule" and e["detector"] == "trace_cap"]
    out = engine.process([llm(24)])
    assert [e["rule_name"] for e in out.events if e["kind"] == "rule"] == ["Loop: Per-trace call cap"]


def test_cost_comes_from_price_table_when_span_has_none():
    engine = make_engine(parse_config({"prices": {"gpt-4o": {"input_per_million": 2.5, "output_per_million": 10.0}}}))
    call = dataclasses.replace(llm(0), model="gpt-4o-2024-08-06", input_tokens=1_000_000, output_tokens=100_000)
    engine.process([call])
    assert engine.states[("session", "s1")].cost_usd == 2.5 + 1.0


def run_in_chunks(calls: list[Call], cuts: list[int], restart: bool) -> tuple[list, dict]:
    """Process ``calls`` split at ``cuts``; with ``restart``, every chunk starts from persisted state."""
    config = AppConfig()
    engine = make_engine(config)
    scores, decisions = [], {}
    bounds = [0, *sorted(set(cuts)), len(calls)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        if restart and a:
            rows = [orjson.loads(orjson.dumps(st.to_row(1))) for st in engine.states.values()]
            for r, st in zip(rows, engine.states.values(), strict=True):
                r["first_ns"], r["last_ns"] = st.first_ns, st.last_ns
            sessions = dict(engine.trace_sessions)
            engine = make_engine(config)
            engine.adopt(ScopeState.from_row(r, config.loop_detection.history_depth) for r in rows)
            engine.trace_sessions.update(sessions)
        out = engine.process(calls[a:b], now_us=0)
        scores.extend((s["scope"], s["span_id"], round(s["confidence"], 9), s["level"]) for s in out.score_dicts)
        decisions.update({(d.scope, d.scope_id): (d.action, d.level, d.detector) for d in out.decisions})
    return scores, decisions


MIXED = sorted(looping(15) + healthy(15, session="s2", trace="t2") + looping(6, session="s3", trace="t3"),
               key=lambda c: (c.ts_ns, c.span_id))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(MIXED)), max_size=8), st.booleans())
def test_any_split_into_cycles_gives_identical_results(cuts, restart):
    assert run_in_chunks(MIXED, cuts, restart) == run_in_chunks(MIXED, [], False)


def test_reset_gives_fresh_state_but_keeps_scope():
    engine = make_engine(AppConfig())
    engine.process(looping(12))
    st = engine.reset("session", "s1")
    assert st.level == "none" and st.calls == 0 and not st.history
    assert ("session", "s1") in engine.states


def test_eviction_expires_idle_and_caps_sessions():
    config = parse_config({"loop_detection": {"max_sessions": 100, "session_timeout_minutes": 1}})
    engine = make_engine(config)
    calls = [llm(0, session=f"s{i}", trace=f"t{i}") for i in range(150)]
    for i, c in enumerate(calls):
        engine.process([c], now_us=10**12 + i)
    removed = engine.evict(now_us=10**12 + 1000)
    assert sum(1 for s in removed if s.scope == "session") == 50
    remaining = sorted(int(k[1][1:]) for k in engine.states if k[0] == "session")
    assert remaining == list(range(50, 150))  # least recently active went first
    removed = engine.evict(now_us=10**12 + 2 * 60 * 10**6)
    assert not [k for k in engine.states if k[0] == "session"]


def test_reconfigure_clears_state():
    engine = make_engine(AppConfig())
    engine.process(looping(5))
    engine.reconfigure(engine_tuning(AppConfig(rules=[Rule(name="x", detector="trace_cap")])))
    assert not engine.states


@settings(max_examples=3000, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0), st.sampled_from([3, 6]))
def test_round_unit_is_round(x, digits):
    """The decision check's rounding gives exactly what round() gives (it only avoids round's cost)."""
    assert round_unit(x, digits) == round(x, digits)


def test_round_unit_at_halves_and_edges():
    for digits in (3, 6):
        for k in range(0, 10**digits + 1, 7):
            for x in (k / 10**digits, (k + 0.5) / 10**digits, (k + 0.4999999) / 10**digits,
                      (k + 0.5000001) / 10**digits):
                if x <= 1.0:
                    assert round_unit(x, digits) == round(x, digits), (x, digits)
    for x in (0.0, 1.0, 0.0005, 0.0015, 0.0025, 0.1235, 0.9995, 5e-324, 1 - 2**-53):
        assert round_unit(x, 3) == round(x, 3) and round_unit(x, 6) == round(x, 6)


def test_span_order_check_matches_sorting():
    from detector.core.engine import in_span_order, span_order

    calls = [Call(ts_ns=ts, trace_id="t", span_id=span, session_id="s")
             for ts, span in [(1, "b"), (1, "a"), (2, "a"), (0, "z"), (2, "a")]]
    for n in range(len(calls) + 1):
        for start in range(len(calls) - n + 1):
            part = calls[start:start + n]
            assert in_span_order(part) == (part == sorted(part, key=span_order))
