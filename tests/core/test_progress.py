"""The progress memory (detector/core/progress.py): which steps are wasted, on what evidence, and when a run of them
is a loop. Each loop pattern beside the honest look-alike that must stay allow; first on hand-built steps (the
comparison itself), then through the engine, step by step, as an agent reads its decisions."""

from __future__ import annotations

import json

from support.agent_runs import agent_run, first_flag, step_actions

from detector.core.progress import (
    EXACT,
    FUZZY,
    MEMORY,
    NONE,
    RUN_TO_WARN,
    SIZES,
    STRUCTURE,
    ProgressMemory,
    match,
)
from detector.core.steps import STEP_FAILED_CALL, STEP_REPLY, STEP_TOOL, ProgressStep
from detector.settings.config import load_config

# ------------------------------------------------------------------------------------------ hand-built steps


def tool(name="read_file", act=1, obs=10, *, act_sim=0, obs_sim=0, chars=300, failure=0, wait=0, pending=False):
    step = ProgressStep(STEP_TOOL, (name,), act, act_sim, obs, obs_sim, chars if obs else 0, failure, wait_ns=wait)
    step.pending = pending
    return step


def reply(text=1, told=2, *, text_sim=0, told_chars=80):
    return ProgressStep(STEP_REPLY, (), text, text_sim, told, 0, told_chars if told else 0, 0)


def sized(name="read_file", added=120, out=40):
    return ProgressStep(STEP_TOOL, (name,), 0, 0, 0, 0, 0, 0, added, out)


def test_the_same_call_with_the_same_result_is_exact_and_with_another_result_progress():
    assert match(tool(act=1, obs=10), tool(act=1, obs=10)) == EXACT
    assert match(tool(act=1, obs=11), tool(act=1, obs=10)) == NONE  # a poll that moved, the next page


def test_the_same_call_with_nearly_the_same_result_is_fuzzy():
    # a file one line longer after the same edit, a status with a fresh timestamp: SimHashes within a few bits
    assert match(tool(act=1, obs=11, obs_sim=0b1011), tool(act=1, obs=10, obs_sim=0b1001)) == FUZZY
    assert match(tool(act=1, obs=11, obs_sim=0xFFFF), tool(act=1, obs=10, obs_sim=0x0001)) == NONE


def test_another_action_bringing_back_the_same_is_progress_out():
    # two different writes, each acknowledged with "File written.": the action itself was new
    assert match(tool(act=1, obs=10, act_sim=5), tool(act=2, obs=10, act_sim=6)) == NONE


def test_the_same_action_but_for_its_numbers_is_a_re_read_only_when_content_came_back():
    shifted = tool(act=1, obs=10, act_sim=5, chars=900)  # read_file(offset=120) after offset=100: the same lines
    assert match(shifted, tool(act=2, obs=10, act_sim=5, chars=900)) == FUZZY
    ack = tool(act=1, obs=10, act_sim=5, chars=12)  # wait(seconds=4) after wait(seconds=2): "waited <dur>"
    assert match(ack, tool(act=2, obs=10, act_sim=5, chars=12)) == NONE


def test_the_same_failure_is_exact_whatever_the_arguments_and_fuzzy_from_another_tool():
    # a prose paragraph sent as a shell command, reworded each time, the same bash error back
    assert match(tool(act=1, obs=10, failure=77), tool(act=2, obs=11, failure=77)) == EXACT
    assert match(tool("find_file", obs=0, failure=77), tool("search_dir", obs=0, failure=77)) == FUZZY  # nothing
    assert match(tool(act=1, obs=10, failure=77), tool(act=1, obs=12, failure=78)) == NONE  # another failure


def test_a_status_still_in_progress_asked_again_is_polling_neither_waste_nor_progress():
    memory = ProgressMemory()
    levels = [memory.observe(tool(act=1, obs=10, pending=True)) for _ in range(6)]
    assert levels == [NONE] * 6 and memory.run == 0 and memory.flag == NONE
    memory.observe(tool(act=2, obs=20))
    memory.observe(tool(act=2, obs=20))  # a wasted step, then polls: they do not end the run either
    memory.observe(tool(act=1, obs=10, pending=True))
    assert memory.run == 1


def test_replies_repeat_to_nothing_new_but_not_to_a_new_question():
    assert match(reply(text=1, told=2), reply(text=1, told=2)) == EXACT
    assert match(reply(text=1, told=3, told_chars=8), reply(text=1, told=2)) == FUZZY  # "go on": a nudge
    assert match(reply(text=1, told=3, told_chars=400), reply(text=1, told=2)) == NONE  # the same triage, new document
    assert match(reply(text=1, text_sim=0b1, told=2), reply(text=2, text_sim=0b111, told=2)) == FUZZY  # reworded


def test_content_off_the_same_amount_back_answered_alike_is_sizes_and_anything_less_structure():
    assert match(sized(added=120, out=40), sized(added=120, out=40)) == SIZES
    # the arguments unknown, answered at another length, if only by a token: the next item of a procedure
    assert match(sized(added=120, out=40), sized(added=120, out=41)) == STRUCTURE
    same_call = sized(added=120, out=40)
    same_call.act = 7  # the arguments known (not the result): the same call, answered about alike
    again = sized(added=120, out=42)
    again.act = 7
    assert match(again, same_call) == SIZES
    assert match(sized(added=120, out=40), sized(added=121, out=40)) == STRUCTURE  # pages of about the same size
    assert match(sized(added=120, out=40), sized(added=120, out=90)) == STRUCTURE  # "File written.", then new work
    assert match(sized("a"), sized("b")) == NONE


def test_a_failed_model_call_repeats_only_with_the_same_error():
    failed = ProgressStep(STEP_FAILED_CALL, (), 1, 0, 0, 0, 0, 55)
    assert match(failed, ProgressStep(STEP_FAILED_CALL, (), 1, 0, 0, 0, 0, 55)) == EXACT
    assert match(failed, ProgressStep(STEP_FAILED_CALL, (), 1, 0, 0, 0, 0, 56)) == NONE


def test_a_run_of_wasted_steps_warns_at_its_third_and_progress_ends_it():
    memory = ProgressMemory()
    levels = [memory.observe(tool(act=a, obs=a * 10)) for a in (1, 2, 1, 2, 1)]
    assert levels == [NONE, NONE, EXACT, EXACT, EXACT] and memory.run == 3 == RUN_TO_WARN
    assert memory.flag == EXACT and memory.wasted(EXACT) == 3
    memory.observe(tool(act=9, obs=90))
    assert memory.run == 0 and memory.flag == NONE


def test_structure_alone_is_never_a_wasted_step():
    memory = ProgressMemory()
    for _ in range(6):
        memory.observe(sized(added=120 + len(memory.steps), out=40))
    assert memory.run == 0 and memory.flag == NONE


def test_the_memory_is_bounded_and_an_old_step_done_again_is_not_a_repeat():
    memory = ProgressMemory()
    memory.observe(tool(act=1, obs=10))
    for k in range(MEMORY):
        memory.observe(tool(act=100 + k, obs=1000 + k))
    assert len(memory.steps) == MEMORY and memory.observe(tool(act=1, obs=10)) == NONE


def test_waits_that_grow_are_backoff_and_a_constant_wait_is_no_evidence():
    backoff = ProgressMemory()
    levels = [backoff.observe(tool(act=1, obs=10, wait=int(w * 10**9))) for w in (0.3, 1, 2, 4, 8)]
    assert levels[-2:] == [NONE, NONE] and backoff.flag == NONE
    jitter = ProgressMemory()  # a fraction of a second that happens to grow: no evidence
    assert [jitter.observe(tool(act=1, obs=10, wait=int(w * 10**9))) for w in (0.2, 0.3, 0.6, 1.1)][-1] == EXACT
    steady = ProgressMemory()
    for _ in range(5):
        steady.observe(tool(act=1, obs=10, wait=2 * 10**9))
    assert steady.flag == EXACT


def test_the_memory_round_trips_through_its_json():
    memory = ProgressMemory()
    for a in (1, 2, 1, 2):
        memory.observe(tool(act=a, obs=a, wait=a))
    again = ProgressMemory.from_json(json.loads(json.dumps(memory.to_json())))
    assert again.to_json() == memory.to_json()
    assert again.observe(tool(act=1, obs=1)) == memory.observe(tool(act=1, obs=1)) == EXACT


# ------------------------------------------------------------------------------------------ through the engine

LOOP = [{"args": 10 + k, "result": 100 + k} for k in range(3)] + [{"args": 42, "result": 420}] * 6
HEALTHY = [{"args": 10 + k, "result": 100 + k} for k in range(12)]


def test_the_same_call_and_result_warns_at_the_third_wasted_step_on_exact_evidence():
    actions = step_actions(agent_run(LOOP), detail=True)
    # step 3 asks for the call the first time; 4, 5, 6 repeat it: the third is a loop
    assert first_flag(actions) == 6 and actions[6] == "warn/no_progress/exact"


def test_an_honest_run_stays_allow():
    assert set(step_actions(agent_run(HEALTHY))) == {"allow"}


def test_one_re_read_and_one_retry_are_not_a_loop():
    steps = [{"args": 1, "result": 10}, {"args": 2, "result": 20}, {"args": 1, "result": 10},  # a re-read
             {"args": 3, "result": 30}, {"args": 4, "failed": True, "shape": 77, "result": 40},
             {"args": 4, "failed": True, "shape": 77, "result": 41}, {"args": 5, "result": 50}]  # a retry, then on
    assert set(step_actions(agent_run(steps))) == {"allow"}


def test_a_poll_whose_status_moves_is_progress_and_one_that_stays_in_progress_is_polling():
    moving = [{"name": "get_job", "args": 7, "result": 100 + k} for k in range(8)]
    assert set(step_actions(agent_run(moving))) == {"allow"}
    waiting = [{"name": "get_job", "args": 7, "result": 100, "pending": True}] * 7 + [{"name": "get_job", "args": 7,
                                                                                        "result": 101}]
    assert set(step_actions(agent_run(waiting))) == {"allow"}


def test_an_a_b_cycle_and_a_seven_step_cycle_are_loops():
    ab = [{"args": 1, "result": 10}, {"args": 2, "result": 20}] * 4
    assert first_flag(step_actions(agent_run(ab))) == 4
    cycle = [{"args": k + 1, "result": 10 * k + 5} for k in range(7)] * 2
    assert first_flag(step_actions(agent_run(cycle))) == 9  # steps 7, 8, 9 repeat 0, 1, 2


def test_the_same_failing_command_spelled_many_ways_is_a_loop():
    steps = [{"name": "bash", "args": 1, "result": 10}] + [
        {"name": "bash", "args": 100 + k, "failed": True, "shape": 77, "result": 500 + k} for k in range(6)]
    actions = step_actions(agent_run(steps), detail=True)
    assert first_flag(actions) == 4 and actions[4] == "warn/no_progress/exact"


def test_a_reply_restated_to_go_on_is_a_loop_and_answers_to_new_questions_are_not():
    restated = [{"reply": 5, "told": 60 + k, "told_chars": 8} for k in range(6)]
    assert first_flag(step_actions(agent_run(restated))) == 3
    template = [{"reply": 5, "told": 60 + k, "told_chars": 500} for k in range(6)]  # one triage per document
    assert set(step_actions(agent_run(template))) == {"allow"}


def test_content_off_sizes_warn_and_never_block():
    protect = load_config(None, "protect")
    actions = step_actions(agent_run(LOOP, content=False), protect, detail=True)
    assert "warn/no_progress/sizes" in actions and not any(a.startswith("block") for a in actions)


def test_protect_blocks_an_exact_loop_at_its_fourth_wasted_step_and_lifts_with_progress():
    steps = LOOP[:7] + [{"args": 42, "result": 420}] + [{"args": 50 + k, "result": 500 + k} for k in range(6)]
    actions = step_actions(agent_run(steps), load_config(None, "protect"), detail=True)
    assert actions[6].startswith("warn") and actions[7] == "block/no_progress/exact"  # wasted steps 4..7
    assert not any(a.startswith("block") for a in actions[8:])  # the first step that makes progress lifts it


def test_protect_never_blocks_an_honest_run_or_a_poll():
    protect = load_config(None, "protect")
    waiting = [{"name": "get_job", "args": 7, "result": 100, "pending": True}] * 8
    for steps in (HEALTHY, waiting):
        assert not any(a == "block" for a in step_actions(agent_run(steps), protect))


def test_a_loop_escalates_beyond_warn_and_steps_down_after_progress():
    steps = [{"args": 42, "result": 420}] * 20 + [{"args": 100 + k, "result": 1000 + k} for k in range(20)]
    actions = step_actions(agent_run(steps))
    assert actions[3] == "warn" and "throttle" in actions[:20] and "inject" in actions[:20]
    assert actions[-1] == "allow"  # one level down every five calls that make progress
