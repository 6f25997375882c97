"""Progress is a new outcome (detector/core/progress.py): changes judged by the check that follows them, overhead
that is not waste, an empty result that is an outcome, steps that neither extend nor end a run, waiting for the world.
Each rule beside the honest look-alike it leaves alone; first on hand-built steps, then through the engine, step by
step, as an agent reads its decisions."""

from __future__ import annotations

from support.agent_runs import agent_run, first_flag, step_actions

from detector.core.progress import EXACT, NONE, RUN_TO_WARN, SIZES_SUBSTANCE_TOKENS, ProgressMemory
from detector.core.steps import STEP_TOOL, ProgressStep
from detector.settings.config import load_config

PROTECT = load_config(None, "protect")


def tool(name="bash", act=1, obs=10, *, act_sim=0, obs_sim=0, chars=300, failure=0, ack=False, nothing=False,
         pending=False, wait=0):
    step = ProgressStep(STEP_TOOL, (name,), act, act_sim, obs, obs_sim, chars if obs else 0, failure, wait_ns=wait)
    step.ack, step.nothing, step.pending = ack, nothing, pending
    return step


def edit(k):
    """A change: another edit each time, only acknowledged ("The file app.py has been edited.")."""
    return tool("edit", act=100 + k, obs=900 + k, ack=True)


def observe(steps):
    memory = ProgressMemory()
    return memory, [memory.observe(s) for s in steps]


# ------------------------------------------------------------------------------------------ changes and checks


def test_changes_whose_check_brings_back_the_same_output_are_a_loop_at_the_second_round():
    check = tool(act=7, obs=70)  # `pytest tests/test_app.py`, the same failure byte for byte
    memory, levels = observe([check, edit(1), check, edit(2), check])
    # the edits wait for their check; the first repeat is one wasted step, the second round adds its edit too
    assert levels == [NONE, NONE, EXACT, NONE, EXACT]
    assert memory.run == 3 == RUN_TO_WARN and memory.flag == EXACT


def test_a_change_is_neutral_until_its_check():
    check = tool(act=7, obs=70)
    memory, _ = observe([check, edit(1), check])
    assert memory.run == 1
    for k in range(2, 6):  # edit after edit, no check yet: nothing is known about them
        memory.observe(edit(k))
        assert memory.run == 1 and memory.flag == NONE


def test_a_check_whose_output_moved_after_a_change_is_progress_even_by_its_numbers_only():
    check = tool(act=7, obs=70)
    memory, _ = observe([check, edit(1), check, edit(2)])
    assert memory.run == 1
    memory.observe(tool(act=7, obs=71, failure=0))  # "3 failed" became "2 failed": the change took effect
    assert memory.run == 0
    near = tool(act=7, obs=72, obs_sim=0b1001)  # nearly the same text, after a change: it moved
    memory, _ = observe([tool(act=7, obs=70, obs_sim=0b1011), edit(1), near])
    assert memory.run == 0


def test_one_round_of_changes_and_two_checks_is_not_a_loop():
    # an edit, then the tests and the build re-run with the same outputs: one round, two re-checks
    a, b = tool(act=7, obs=70), tool(act=8, obs=80)
    memory, _ = observe([a, b, edit(1), a, b])
    assert memory.run == 2 and memory.flag == NONE


def test_different_questions_with_the_same_empty_answer_are_neutral():
    # seven names checked against a directory, each answering []
    memory, levels = observe([tool("lookup", act=k, obs=5, nothing=True) for k in range(7)])
    assert levels == [NONE] * 7 and memory.run == 0
    # the same question asked again with the same empty answer is wasted; reworded (near arguments), nearly
    memory, _ = observe([tool("lookup", act=1, obs=5, nothing=True)] * 4)
    assert memory.flag == EXACT
    reworded = [tool("search", act=k, act_sim=0b1100 | (k & 1), obs=5, nothing=True) for k in range(4)]
    memory, _ = observe(reworded)
    assert memory.run == 3


def test_acknowledgements_of_different_writes_are_neither_waste_nor_a_loop():
    # "File created" after each write, True after each attachment
    memory, levels = observe([tool("write_file", act=k, obs=5, chars=12, ack=True) for k in range(10)])
    assert levels == [NONE] * 10 and memory.flag == NONE


def test_a_health_probe_between_real_work_is_not_a_loop():
    probe = tool("health", act=1, obs=11)  # the same stable payload every time
    steps = []
    for k in range(6):
        steps += [tool("fetch_report", act=10 + k, obs=100 + k), probe]
    memory, _ = observe(steps)
    assert memory.flag == NONE and memory.run <= 1


def test_an_idempotent_read_under_other_arguments_is_not_waste():
    doc = [tool("get_doc", act=1, obs=42, act_sim=0b0001), tool("get_doc", act=2, obs=42, act_sim=0b1110),
           tool("get_doc", act=3, obs=42, act_sim=0b0111)]  # id=7, id="7" with fields, slug="q3-report"
    memory, levels = observe(doc)
    assert levels == [NONE, NONE, NONE] and memory.run == 0


# ------------------------------------------------------------------------------------------ overhead is not waste


def test_a_fixed_workaround_around_new_content_is_progress_even_when_one_round_repeats_its_output():
    cycle = []
    outputs = [500, 501, 501, 502, 503]  # the run's output; the third round brings the second's again
    for k, out in enumerate(outputs):
        cycle += [tool("create", act=10 + k, obs=0, failure=66),  # "File already exists": the same failure
                  tool("bash", act=2, obs=20, ack=True),           # rm: the command completed, no output
                  tool("create", act=10 + k, obs=21, ack=True),    # "File created successfully"
                  tool("bash", act=3, obs=out)]                     # the script, run again
    memory = ProgressMemory()
    for step in cycle:
        memory.observe(step)
        assert memory.flag == NONE


def test_the_same_action_failing_the_same_way_between_other_steps_is_still_a_check():
    # the same failing test command, a view of new content between: the check's outcome, not overhead
    failing = tool(act=7, obs=70, failure=77)
    memory, levels = observe([failing, edit(1), failing, edit(2), failing])
    assert levels[-1] == EXACT and memory.flag == EXACT


# ------------------------------------------------------------------------------------------ empty, neutral, waiting


def test_a_captured_empty_result_is_an_outcome():
    empty = tool(act=4, obs=1, chars=0, nothing=True)  # `grep -r Foo src/`, nothing printed, every time
    memory, levels = observe([empty] * 4)
    assert levels == [NONE, EXACT, EXACT, EXACT] and memory.flag == EXACT
    unknown = tool(act=4, obs=0, chars=0)  # not captured: no outcome known, no evidence
    memory, _ = observe([unknown] * 4)
    assert memory.flag == NONE


def test_a_note_between_the_same_failures_neither_extends_nor_ends_the_run():
    booking = tool("book_reservation", act=9, obs=0, failure=55)  # "payment declined", the same each time
    steps = []
    for k in range(5):
        steps += [booking, tool("think", act=200 + k, obs=1, chars=0, nothing=True)]
    memory = ProgressMemory()
    runs = []
    for s in steps:
        memory.observe(s)
        runs.append(memory.run)
    assert runs == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_waiting_for_the_world_is_never_waste():
    running = tool("get_job", act=1, obs=5, chars=7, pending=True)  # "running"
    memory, levels = observe([running] * 8)
    assert memory.run == 0 and memory.flag == NONE
    waits = [0.3, 2.4, 4.8, 9.6]  # the same 503, retried after growing waits
    memory, levels = observe([tool("fetch", act=1, obs=0, failure=503, wait=int(w * 1e9)) for w in waits])
    assert levels[-1] == NONE and memory.flag == NONE


# ------------------------------------------------------------------------------------------ through the engine


def test_an_outcome_loop_is_warned_at_its_second_round_and_blocked_by_protect():
    steps = [{"name": "pytest", "args": 7, "result": 70}]
    for k in range(8):
        steps += [{"name": "edit", "args": 100 + k, "result": 900 + k, "ack": True},
                  {"name": "pytest", "args": 7, "result": 70}]
    actions = step_actions(agent_run(steps), detail=True)
    assert first_flag(actions) == 4 and actions[4] == "warn/no_progress/exact"
    blocked = step_actions(agent_run(steps), PROTECT)
    assert "block" in blocked


def test_a_retry_that_succeeds_is_allow_at_that_step_and_growing_waits_are_no_failure_loop():
    from support.agent_runs import Timing

    retries = [{"name": "fetch", "args": 1, "error": 503}] * 4 + [{"name": "fetch", "args": 1, "result": 10}]
    steps = [{"name": "plan", "args": 0, "result": 5}] + retries + [{"name": "save", "args": 2, "result": 20}]
    backoff = Timing(gaps=(0.3, 0.3, 2.4, 4.8, 9.6, 19.2, 0.3))
    actions = step_actions(agent_run(steps, timing=backoff), PROTECT)
    assert "block" not in actions and actions[5] == "allow"


def test_sizes_alone_never_block():
    loop = [{"args": 10 + k, "result": 100 + k} for k in range(3)] + [{"args": 42, "result": 420}] * 10
    actions = step_actions(agent_run(loop, content=False), PROTECT)
    assert "block" not in actions


# ------------------------------------------------------------------------------------------ sizes alone


def sized(added, out=36, name="read_file"):
    return ProgressStep(STEP_TOOL, (name,), 0, 0, 0, 0, 0, 0, added, out)


def test_sizes_alone_flag_the_same_call_right_again_and_no_cycle():
    memory, levels = observe([sized(240)] * 5)  # the same call, the same amount back, asked for alike
    assert memory.flag != NONE
    # equal sizes a few steps back are what a procedure over items meets by coincidence: no evidence, its arguments
    # unknown (with content or fingerprints, a cycle is seen)
    memory, levels = observe([sized(120), sized(300, 40), sized(80, 20), sized(500, 50)] * 3)
    assert memory.flag == NONE and memory.run == 0


def test_sizes_alone_a_short_answer_is_no_evidence():
    # five files attached, "True" after each, each asked for at the same length: an acknowledgement has one size for
    # every item
    memory, levels = observe([sized(1, 19, "attach_file")] * 6)
    assert memory.flag == NONE and set(levels) == {NONE}
    memory, levels = observe([sized(SIZES_SUBSTANCE_TOKENS, 19, "read_file")] * 6)  # from this size up it is evidence
    assert memory.flag != NONE


def test_sizes_alone_never_flag_a_procedure_whose_equal_sizes_meet_at_ever_other_distances():
    # one procedure over twenty items, results of one size, replies in a narrow range: equal sizes by coincidence
    outs = [37, 35, 35, 38, 35, 36, 35, 38, 35, 35, 38, 36, 37, 35, 38, 35, 36, 37, 35, 38]
    adds = [22, 24, 22, 22, 25, 22, 24, 22, 25, 22, 22, 24, 22, 25, 22, 24, 22, 22, 25, 24]
    memory = ProgressMemory()
    for a, o in zip(adds, outs, strict=True):
        memory.observe(sized(a, o))
        assert memory.flag == NONE
