"""What decisions and events say about the evidence behind them, the early warning's events, and the tool-call
repetition of a final text answer (issue 15's fixes), through the engine."""

from __future__ import annotations

from support.calls import T0, agent_llm, agent_tool, llm, tool_span
from support.engines import make_engine

from detector.settings.config import AppConfig


def stuck_run(n: int = 8) -> list:
    calls = []
    for i in range(n):
        at = i * 1.3
        calls.append(agent_llm(i, at=at, tokens=(500 + 160 * i, 40), tools=(("read_file", 9),)))
        calls.append(agent_tool(i, "read_file", at=at + 0.9, args=9, result=99))
    return calls


def test_the_early_warning_is_an_event_that_says_its_evidence_and_lifts_with_an_event():
    engine = make_engine(AppConfig())
    events = []
    for c in stuck_run() + [agent_tool(50, "read_file", at=20.0, args=10, result=100),
                            agent_llm(51, at=20.5, tokens=(3000, 40), text=5)]:
        events += engine.process([c], now_us=c.ts_ns // 1000).events
    raised = [e for e in events if e["kind"] == "progress" and e["action"] == "warn"]
    lifted = [e for e in events if e["kind"] == "progress" and e["action"] == "allow"]
    assert {e["scope"] for e in raised} == {"session", "trace"} and {e["evidence"] for e in raised} == {"exact"}
    assert all(e["detector"] == "no_progress" for e in raised + lifted)
    assert {e["scope"] for e in lifted} == {"session", "trace"}  # the new result lifted it
    escalations = [e for e in events if e["kind"] == "escalation"]
    assert escalations and all(e["evidence"] in ("exact", "fuzzy") for e in escalations if e["to_level"] != "none")


def test_decisions_carry_the_evidence_and_allow_says_none():
    engine = make_engine(AppConfig())
    out = engine.process(stuck_run())
    session = next(d for d in out.decisions if d.scope == "session")
    assert session.action != "allow" and session.evidence == "exact"
    calm = make_engine(AppConfig()).process([agent_llm(0, text=3, told=4)]).decisions
    assert all(d.evidence == "none" for d in calm)


def test_every_decision_that_leaves_allow_names_the_signal_it_rests_on():
    # call by call, as an agent reads its decision: the early warning can come from the tool results of a call
    # already scored (no score named a signal yet); it names what the run repeats
    calls = []
    for i in range(8):  # the same search reworded each time, the same nothing back
        calls.append(agent_llm(i, at=i * 1.3, tokens=(500 + 160 * i, 40), tools=(("search", 100 + i),), text=i + 1))
        calls.append(agent_tool(i, "search", at=i * 1.3 + 0.9, args=100 + i, args_sim=7, result=99, empty=True))
    engine = make_engine(AppConfig())
    flagged = []
    for c in calls:
        flagged += [d for d in engine.process([c], now_us=c.ts_ns // 1000).decisions if d.action != "allow"]
    assert flagged and all(d.dominant_signal != "none" for d in flagged)


def test_a_final_text_answer_after_a_run_of_tool_calls_repeats_no_tool_call():
    # three identical tool calls, then the answer: the tool spans attributed to the answer ran for the call before
    calls = []
    for i in range(4):
        calls.append(llm(i, tool_fp=4242))
        calls.append(tool_span(i, fp=4242))
    answer = llm(4)  # content captured, no tool call asked for: a final text answer
    engine = make_engine(AppConfig())
    engine.process(calls)
    out = engine.process([answer])
    rows = out.scores.rows()
    assert rows and all(r.signals.tool_call_repetition == 0.0 for r in rows)
    # without content, the finish reason says it, when the instrumentation reports tool calls as such
    bare = [llm(i, tool_fp=4242, ts=T0 + i * 10**9) for i in range(3)]
    engine = make_engine(AppConfig())
    engine.process(bare + [tool_span(2, fp=4242)])
    final = llm(3, ts=T0 + 4 * 10**9)
    assert final.finish_reasons == ("stop",)
    assert all(r.signals.tool_call_repetition == 0.0 for r in engine.process([final]).scores.rows())
