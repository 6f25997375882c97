"""Progress evidence (detector/core/progress.py) through the engine: what a wasted call is, the evidence it rests on,
polling and backoff, cycles, restarts, the early warning and the no_progress rule, each beside the honest look-alike
that must stay allow."""

from __future__ import annotations

import json

import pytest
from support.calls import T0, agent_llm, agent_tool

from detector.core.decisions import DecisionBook
from detector.core.engine import Engine
from detector.core.models import Turn
from detector.core.progress import (
    EXACT,
    FUZZY,
    NONE,
    SIZES,
    STRUCTURE,
    Progress,
    Step,
    make_step,
    match,
)
from detector.core.scope_state import ScopeState
from detector.settings.config import AppConfig, load_config, parse_config

EMPTY = 0x5EED  # an empty search result, normalized


def run_tools(steps: list[dict], *, trace="t1", session="s1", t0=T0, content=True, interval=1.3,
              tool_time=0.1, start=0, think=0.8, task=555) -> list:
    """Calls of a tool-using run: LLM call k asks for step k's tool, which runs before LLM call k + 1; each step a
    dict of agent_tool's arguments (``name``, ``args``, ``result``, ...), ``at``: its LLM call's time, ``wait``: the
    tool's duration."""
    calls, tokens, at = [], 500, 0.0
    for k, st in enumerate(steps):
        st = dict(st)
        name = st.pop("name", "search_docs")
        at = st.pop("at", at + interval if k else 0.0)
        duration = st.pop("wait", tool_time)
        grow = st.pop("grow", 120)
        calls.append(agent_llm(start + k, trace=trace, session=session, t0=t0, at=at, tokens=(tokens, 40),
                               tools=((name, st.get("args", 1)),), content=content, duration=think,
                               told=task if k == 0 else 0))
        calls.append(agent_tool(start + k, name, trace=trace, t0=t0, at=at + think + 0.1, duration=duration,
                                content=content, **st))
        tokens += grow + 40
    final = steps and len(steps)
    calls.append(agent_llm(start + final, trace=trace, session=session, t0=t0, at=at + interval, tokens=(tokens, 40),
                           text=777, content=content))
    return calls


def decisions(calls, config: AppConfig | None = None, session="s1") -> list[str]:
    """The decision after every LLM call (session and trace, as an agent reads it), as action/detector/evidence."""
    engine = Engine(config or AppConfig())
    book = DecisionBook()
    out = []
    for c in calls:
        book.put(engine.process([c], now_us=c.ts_ns // 1000).decisions)
        if c.is_llm:
            d = book.lookup(session, c.trace_id, now_us=c.ts_ns // 1000)
            out.append(d.action if d.action == "allow" else f"{d.action}/{d.detector}/{d.evidence}")
    return out


def first_flag(actions: list[str]) -> int | None:
    return next((i for i, a in enumerate(actions) if a != "allow"), None)


# ------------------------------------------------------------------------------------------- the same call


def test_the_same_call_with_the_same_result_is_flagged_at_its_first_repeat_on_exact_evidence():
    steps = [{"args": 10 + k, "result": 900 + k} for k in range(3)] + [{"args": 42, "result": 4200}] * 6
    actions = decisions(run_tools(steps))
    # step k is seen by LLM call k + 1: the first repeat (call 4 asked again) is known at call 5
    assert first_flag(actions) == 5 and actions[5] == "warn/no_progress/exact"
    assert all(a.startswith("warn") or a.startswith("throttle") for a in actions[5:9])


def test_the_same_call_whose_result_changes_is_progress():  # a status poll that moves; pages
    steps = [{"args": 42, "result": 5000 + k} for k in range(8)]
    assert set(decisions(run_tools(steps))) == {"allow"}


def test_polling_with_a_real_wait_is_not_a_loop_but_the_same_call_at_once_is():
    # the same answer 6 times, the tool blocking 10 s per check (CI status): polling until it changes
    poll = [{"args": 7, "result": 100, "wait": 10.0}] * 6 + [{"args": 7, "result": 101}]
    assert set(decisions(run_tools(poll, interval=12.0))) == {"allow"}
    # the same call, the same answer, no wait: a loop
    stuck = [{"args": 7, "result": 100}] * 6
    assert first_flag(decisions(run_tools(stuck))) == 2


def test_a_wait_must_be_long_beside_the_model_s_own_time():
    # a 1.5 s tool beside 2 s of model time per call is not waiting for the world (1.7 s < 2 x 2 s)
    steps = [{"args": 7, "result": 100, "wait": 1.5}] * 5
    assert first_flag(decisions(run_tools(steps, interval=3.7, think=2.0))) == 2


# ----------------------------------------------------------------------------------- variation, no progress


def test_a_reworded_search_bringing_the_same_nothing_is_flagged_on_fuzzy_evidence():
    steps = [{"args": 100 + k, "result": EMPTY, "empty": True, "result_chars": 60} for k in range(8)]
    actions = decisions(run_tools(steps))
    # call 1 sees the first empty result; the 2nd and 3rd searches repeat it: fuzzy, by the 2nd wasted call
    assert first_flag(actions) == 3 and actions[3].endswith("/fuzzy")


def test_a_refined_search_that_finds_something_stays_allow():
    steps = [{"args": 100, "result": EMPTY, "empty": True}, {"args": 101, "result": EMPTY, "empty": True},
             {"args": 102, "result": 3100}, {"name": "read_article", "args": 9, "result": 3200}]
    assert set(decisions(run_tools(steps))) == {"allow"}


def test_another_write_acknowledged_the_same_way_is_progress_out_but_substance_brought_back_again_is_not():
    writes = [{"name": "write_file", "args": 300 + k, "result": 11, "result_chars": 13} for k in range(8)]
    assert set(decisions(run_tools(writes))) == {"allow"}  # "File written." after every new file
    rereads = [{"name": "search_kb", "args": 300 + k, "result": 12, "result_chars": 4000} for k in range(8)]
    assert first_flag(decisions(run_tools(rereads))) == 3  # the same documents for every rewording


def test_a_shifted_window_over_the_same_lines_is_the_same_action_reworded():
    # the offset moves (arguments equal but for a number: the same SimHash) and the lines come back alike
    steps = [{"name": "read_file", "args": 500 + k, "args_sim": 0x0F0F_0F0F, "result": 600 + k,
              "result_sim": 0x3C3C_3C3C ^ (k % 2), "result_chars": 30_000} for k in range(7)]
    assert decisions(run_tools(steps))[3].endswith("/fuzzy")
    # successive windows, each new: the lines differ
    pages = [{"name": "read_file", "args": 500 + k, "args_sim": 0x0F0F_0F0F, "result": 600 + k,
              "result_sim": (0x1234_5678 * (k + 3)) & 0xFFFF_FFFF, "result_chars": 30_000} for k in range(7)]
    assert set(decisions(run_tools(pages))) == {"allow"}


# ---------------------------------------------------------------------------------------------- errors


def test_the_same_error_with_a_fresh_request_id_is_exact_and_a_retry_that_succeeds_lifts_it():
    # the view normalizes the ids out of the status message: every failure has the same error fingerprint
    steps = [{"name": "create_invoice", "args": 5, "error": 502}] * 4 + [{"name": "create_invoice", "args": 5,
                                                                           "result": 77}]
    actions = decisions(run_tools(steps))
    assert actions[2] == "warn/no_progress/exact"  # the first retry's failure is the second of the same error
    assert actions[5] == "allow" or not actions[5].endswith("no_progress/exact")  # the success lifts the warning


def test_errors_retried_with_growing_backoff_then_success_stay_allow():
    steps = [{"name": "fetch", "args": 5, "error": 503, "at": 0.0},
             {"name": "fetch", "args": 5, "error": 503, "at": 4.0},
             {"name": "fetch", "args": 5, "error": 503, "at": 12.0},
             {"name": "fetch", "args": 5, "result": 66, "at": 30.0},
             {"name": "convert", "args": 6, "result": 67}]
    assert set(decisions(run_tools(steps))) == {"allow"}


# ---------------------------------------------------------------------------------------------- cycles


def test_an_a_b_cycle_is_flagged_at_its_first_return_and_an_alternation_with_progress_is_not():
    ab = [{"name": "list_dir", "args": 1, "result": 10}, {"name": "read_file", "args": 2, "result": 20}] * 4
    actions = decisions(run_tools(ab))
    assert first_flag(actions) == 3 and actions[3] == "warn/no_progress/exact"  # call 2 went back to A
    alternation = [{"name": "list_dir" if k % 2 == 0 else "read_file", "args": 100 + k, "result": 200 + k}
                   for k in range(8)]
    assert set(decisions(run_tools(alternation))) == {"allow"}


def test_a_cycle_of_five_steps_is_found():
    cycle = [{"name": f"tool{k}", "args": k + 1, "result": 10 * (k + 1)} for k in range(5)] * 2
    actions = decisions(run_tools(cycle))
    assert first_flag(actions) == 6


# ---------------------------------------------------------------------------------- restarts, in new traces


def restarted(runs: int, last_ok: bool) -> list:
    calls, at = [], 0.0
    for r in range(runs):
        ok = last_ok and r == runs - 1
        refund = {"name": "issue_refund", "args": 2, "result": 300} if ok else {"name": "issue_refund", "args": 2,
                                                                                 "error": 402}
        calls += run_tools([{"name": "lookup_order", "args": 1, "result": 100}, refund], trace=f"run{r}",
                           t0=T0 + int(at * 1e9), start=10 * r)
        at += 20.0
    return calls


def test_a_run_restarted_again_and_again_is_flagged_once_a_whole_run_repeated():
    actions = decisions(restarted(4, last_ok=False))
    # run 2 (calls 3-5) repeats run 1 step by step; the warning waits for the whole of it (the failure again)
    assert first_flag(actions) == 5 and actions[5].endswith("/exact")


def test_a_run_restarted_once_that_succeeds_is_never_flagged():
    assert set(decisions(restarted(2, last_ok=True))) == {"allow"}


# ------------------------------------------------------------------------------------ without content


def test_content_off_sizes_alone_warn_after_three_and_never_block():
    stuck = [{"name": "get_deploy_status", "grow": 174}] * 8
    actions = decisions(run_tools(stuck, content=False))
    assert first_flag(actions) == 4 and actions[4] == "warn/no_progress/sizes"
    protect = decisions(run_tools(stuck, content=False), load_config(None, "protect"))
    assert "block" not in " ".join(protect)


def test_content_off_pages_of_about_the_same_size_stay_allow():
    pages = [{"name": "scroll_page", "grow": 400 + (k * 7) % 23} for k in range(10)]  # within 25%, never equal
    actions = decisions(run_tools(pages, content=False))
    assert set(actions) == {"allow"}


def test_structure_alone_never_flags_even_when_the_old_signals_see_a_loop():
    # tools known by name only, every size close (not equal), the same reply size: the score stays below warn
    steps = [{"name": "read_file", "grow": 300 + 3 * k} for k in range(12)]
    engine = Engine(AppConfig())
    for c in run_tools(steps, content=False):
        engine.process([c], now_us=c.ts_ns // 1000)
    session = engine.states[("session", "s1")]
    assert session.level == "none" and session.progress.flag == NONE and session.ema < 0.3


# ------------------------------------------------------------------------------------------------ text


def talk(replies: list[int], told: list[tuple[int, int]]) -> list:
    calls, tokens = [], 300
    for i, (reply, (said, chars)) in enumerate(zip(replies, told, strict=True)):
        calls.append(agent_llm(i, at=i * 10.0, tokens=(tokens, 80), text=reply, told=said, told_chars=chars))
        tokens += 80 + 10
    return calls


def test_the_same_plan_restated_after_go_on_is_a_loop_and_the_next_step_of_a_runbook_is_not():
    nudges = [(501, 70)] + [(600 + i, 5) for i in range(6)]  # "go on", "continue": a few characters each
    assert first_flag(decisions(talk([900] * 7, nudges))) == 1
    assert set(decisions(talk([900 + i for i in range(7)], nudges))) == {"allow"}


def test_the_same_answer_to_each_new_document_is_not_a_loop():
    docs = [(700 + i, 900) for i in range(7)]  # a template over documents: the same short JSON for two of them
    assert set(decisions(talk([42] * 7, docs))) == {"allow"}


# ------------------------------------------------------------------------------------ blocking (protect)


def test_protect_blocks_a_loop_within_four_wasted_calls_and_the_block_lifts_with_progress():
    protect = load_config(None, "protect")
    steps = [{"args": 10 + k, "result": 900 + k} for k in range(2)] + [{"args": 42, "result": 4200}] * 5 + \
        [{"args": 43, "result": 4300}, {"args": 44, "result": 4400}]
    actions = decisions(run_tools(steps), protect)
    blocked = [i for i, a in enumerate(actions) if a.startswith("block")]
    assert blocked and blocked[0] == 6 and "no_progress" in actions[6]  # onset: call 3 asked again (wasted call 1)
    assert actions[-1] == "allow" or not actions[-1].startswith("block")


def test_protect_never_blocks_polling_or_a_recovered_flaky_api():
    protect = load_config(None, "protect")
    poll = [{"args": 7, "result": 100, "wait": 10.0}] * 8 + [{"args": 7, "result": 101}]
    assert not any(a.startswith("block") for a in decisions(run_tools(poll, interval=12.0), protect))
    flaky = [{"name": "fetch", "args": 5, "error": 503, "at": 0.0}, {"name": "fetch", "args": 5, "error": 503, "at": 4.0},
             {"name": "fetch", "args": 5, "error": 503, "at": 12.0}, {"name": "fetch", "args": 5, "result": 66, "at": 30.0}]
    assert not any(a.startswith("block") for a in decisions(run_tools(flaky), protect))


def test_a_failure_loop_block_ends_when_the_streak_does():
    config = parse_config({"rules": [{"name": "fail", "detector": "failure_loop", "action": "block",
                                      "params": {"same_error_repeats": 3}}],
                           "loop_detection": {"progress": {"early_warning": False}}})
    steps = [{"name": "run", "args": 5, "error": 77}] * 4 + [{"name": "run", "args": 5, "result": 1},
                                                             {"name": "other", "args": 6, "result": 2}]
    actions = decisions(run_tools(steps), config)
    assert actions[3].startswith("block/failure_loop")
    assert not actions[5].startswith("block")  # the call that succeeded is not held by the failures before it


def test_default_config_never_blocks_a_long_loop():
    steps = [{"args": 42, "result": 4200}] * 20
    assert not any(a.startswith("block") for a in decisions(run_tools(steps)))


def test_in_protect_the_score_reaches_hard_stop_for_a_loop_without_errors():
    engine = Engine(load_config(None, "protect"))
    for c in run_tools([{"args": 42, "result": 4200}] * 22):
        engine.process([c], now_us=c.ts_ns // 1000)
    assert engine.states[("session", "s1")].level == "hard_stop"


# --------------------------------------------------------------------------------------- the pieces


def test_match_levels_on_hand_built_steps():
    def step(**kw) -> Step:
        base = dict(kind=0, names=("t",), act=1, act_sims=(0,), obs=2, obs_sims=(0,), obs_chars=300, negative=False,
                    errors=0, ok=True, known=True, added=100, out_tokens=40, wait_ns=0, think_ns=0)
        base.update(kw)
        return Step(**base)

    assert match(step(), step()) == EXACT
    assert match(step(obs=3), step()) == NONE  # the same action, another result
    # another action, another result: progress (or an ack); the same substance back to another action: fuzzy
    assert match(step(act=5, obs=3, obs_sims=(0xFF,)), step(act=6, obs_sims=(0xFF00,))) == NONE
    assert match(step(act=5), step(act=6)) == FUZZY
    assert match(step(act=5, obs_chars=13), step(act=6, obs_chars=13)) == NONE  # "File written." again
    assert match(step(act=5, act_sims=(0xF0,), obs=3, obs_sims=(0xFF,)), step(act_sims=(0xF1,), obs_sims=(0xFE,))) \
        == FUZZY
    assert match(step(act=0, obs=0, known=False), step(act=0, obs=0, known=False)) == SIZES
    assert match(step(act=0, obs=0, added=104), step(act=0, obs=0)) == STRUCTURE
    assert match(step(names=("u",)), step()) == NONE
    assert match(step(errors=9, ok=False), step(errors=9, ok=False, act=8)) == EXACT  # the same error, tweaked args
    assert match(step(ok=False, errors=9), step()) == NONE  # a failure after a success: the outcome changed


def test_the_progress_window_round_trips_through_the_state_json():
    engine = Engine(AppConfig())
    calls = run_tools([{"args": 42, "result": 4200}] * 4)
    for c in calls[:-3]:
        engine.process([c], now_us=c.ts_ns // 1000)
    st = engine.states[("session", "s1")]
    row = st.to_row(1)
    back = ScopeState.from_row({**row, "state": json.dumps(json.loads(row["state"]))}, 5)
    assert back.progress.to_json() == st.progress.to_json() and back.evidence == st.evidence
    assert Progress.from_json(json.loads(json.dumps(st.progress.to_json()))).to_json() == st.progress.to_json()


def test_a_step_of_a_call_without_tools_and_its_reply():
    reply = make_step(Turn(agent_llm(1, text=5, told=6)), agent_llm(0, text=4))
    assert reply.kind == 1 and reply.act and reply.obs == 6
    empty = make_step(Turn(agent_llm(1, text=0, told=6, tokens=(500, 0))), None)
    assert empty.act  # an empty reply, with content captured: the same as another empty reply


@pytest.mark.parametrize("preset", ["default", "protect"])
def test_every_decision_says_what_it_rests_on(preset):
    actions = decisions(run_tools([{"args": 42, "result": 4200}] * 8), load_config(None, preset))
    flagged = [a for a in actions if a != "allow"]
    assert flagged and all(a.split("/")[2] in ("exact", "fuzzy") for a in flagged)
