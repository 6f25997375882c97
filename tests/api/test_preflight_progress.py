"""The pre-flight check's progress memory (``detector/enforcement/preflight.py``): the app's fingerprints in
``pending.evidence`` (the real SDK's, from the agent's own messages), a tool check naming what a tool will do and the
next model call's check telling what came back, observed by the core's progress model before the call goes out.

* A loop (the same tool call bringing back the same) is warned before the model call that follows its 3rd wasted
  step, and refused by a blocking ``no_progress`` rule (the protect preset's: 4 wasted, exact) before the next one.
* An honest agent (the same tool, something new back each time; a poll whose status moves) is allowed throughout.
* A failure whose numbers change (a retry-after, a line number) is the same failure.
* A model call whose check no tool check preceded completes no step (what was done is unknown).
"""

from __future__ import annotations

import json

import httpx
import pytest
from loop_detector_sdk.evidence.fingerprints import call_evidence, tool_run_evidence
from loop_detector_sdk.evidence.messages import Message, Part
from support.agent_runs import agent_run, step_actions
from support.enforcement import make_config, uid

from detector.core.steps import mix_fingerprints
from detector.detection.engine_config import planned_rule
from detector.enforcement.preflight import PendingAction, PendingWindows, completed_step
from detector.service.process import running_service
from detector.settings.config import AppConfig, parse_config


class Agent:
    """An agent's conversation, and the checks its guard sends: before each model call, before each tool run."""

    def __init__(self) -> None:
        self.messages = [Message("system", (Part("text", "You fix builds."),)),
                         Message("user", (Part("text", "Fix it."),))]

    def model_check(self) -> dict:
        return {"evidence": call_evidence("gpt-4o", self.messages).check_evidence()}

    def tool_check(self, name: str, args: dict) -> dict:
        text = json.dumps(args)
        self.messages.append(Message("assistant", (Part("tool_call", name=name, arguments=text),)))
        return {"tool_name": name, "evidence": tool_run_evidence(name, text)}

    def result(self, text: str) -> None:
        self.messages.append(Message("tool", (Part("tool_call_response", text),)))


def run(windows: PendingWindows, rules, results: list[str], args=lambda i: {"path": "config.yaml"}) -> list[str]:
    """The actions of the model calls' checks, one per step: a model call, its tool's check, the tool's result."""
    agent, session, actions = Agent(), uid("pre"), []
    for i, result in enumerate([*results, None]):
        decided = windows.evaluate(session_id=session, trace_id=None, rules=rules, now_us=i,
                                   evidence=agent.model_check()["evidence"])
        actions.append(max((d.action for d in decided), key=["allow", "warn", "block"].index, default="allow"))
        if result is None:
            break
        pending = agent.tool_check("read_file", args(i))
        windows.evaluate(session_id=session, trace_id=None, rules=rules, now_us=i, tool_name="read_file",
                         tool_evidence=int(pending["evidence"]["tool"]), evidence=pending["evidence"])
        agent.result(result)
    return actions


DEFAULT = [planned_rule(r) for r in AppConfig().rules]  # the rules as the engine plans them (and the service passes)
PROTECT = [planned_rule(r) for r in parse_config({"preset": "protect"}, "protect").rules]
NO_PROGRESS_BLOCK = [r for r in PROTECT if r.detector == "no_progress"]


def test_a_loop_is_warned_before_the_call_after_its_third_wasted_step():
    actions = run(PendingWindows(), DEFAULT, ["port: 8080"] * 6)
    # checks 0 (the task) and 1 (the first read) complete no wasted step; 2, 3, 4: the 1st, 2nd, 3rd wasted
    assert actions == ["allow", "allow", "allow", "allow", "warn", "warn", "warn"]


def test_a_blocking_no_progress_rule_refuses_the_call_after_the_fourth():
    actions = run(PendingWindows(), NO_PROGRESS_BLOCK, ["port: 8080"] * 6)
    assert actions == ["allow", "allow", "allow", "allow", "warn", "block", "block"]


def test_a_rule_of_fewer_wasted_steps_than_a_loop_trips_at_the_same_step_as_on_the_spans():
    """One evaluator (detector/core/trip_conditions.py): a no_progress rule of 2 wasted steps trips at the 2nd, on the
    pre-flight check as on the spans, though the early warning (3) has not been raised yet."""
    config = parse_config({"rules": [{"name": "np", "detector": "no_progress", "action": "block",
                                      "params": {"wasted_calls": 2, "min_evidence": "fuzzy"}}]})
    # checks 0 and 1 complete no wasted step; 2, 3: the 1st, 2nd wasted: the check after the 2nd is refused
    assert run(PendingWindows(), [planned_rule(r) for r in config.rules], ["port: 8080"] * 4) == [
        "allow", "allow", "allow", "block", "block"]
    # step 0 is the first read; steps 1, 2: the 1st, 2nd wasted: blocked after the 2nd
    assert step_actions(agent_run([{"args": 42, "result": 420}] * 4), config) == ["allow", "allow", "block", "block"]


def test_without_the_early_warning_only_the_rules_speak():
    agent_actions = []
    windows = PendingWindows()
    session = uid("quiet")
    agent = Agent()
    for i in range(7):
        decided = windows.evaluate(session_id=session, trace_id=None, rules=DEFAULT, now_us=i,
                                   evidence=agent.model_check()["evidence"], early_warning=False)
        agent_actions.append([d.action for d in decided])
        pending = agent.tool_check("read_file", {"path": "config.yaml"})
        windows.evaluate(session_id=session, trace_id=None, rules=DEFAULT, now_us=i, tool_name="read_file",
                         evidence=pending["evidence"], early_warning=False)
        agent.result("port: 8080")
    assert not any(agent_actions)


@pytest.mark.parametrize("results", [
    ["the parser is a recursive descent one over tokens", "the lexer is table driven and reads bytes",
     "settings come from a YAML file beside the binary", "plugins are found through entry points at start",
     "the scheduler runs cron expressions in local time", "metrics are Prometheus counters and histograms"],
    # (the same read, something new back each time)
    ['{"status": "running"}'] * 6,  # a poll whose answer says the work is in progress
], ids=["new-content", "polling"])
def test_progress_is_allowed(results):
    assert set(run(PendingWindows(), NO_PROGRESS_BLOCK + DEFAULT, results)) == {"allow"}


def test_the_same_failure_with_other_numbers_is_the_same_failure():
    results = [f"Error: rate limited, retry after {n} s (request {n * 31})" for n in (3, 7, 12, 20, 33, 41)]
    assert run(PendingWindows(), DEFAULT, results)[-1] == "warn"


def test_model_checks_alone_complete_no_step():
    windows, agent, session = PendingWindows(), Agent(), uid("model-only")
    for i in range(6):
        assert not windows.evaluate(session_id=session, trace_id=None, rules=NO_PROGRESS_BLOCK, now_us=i,
                                    evidence=agent.model_check()["evidence"])
        agent.messages.append(Message("assistant", (Part("tool_call", name="read_file", arguments="{}"),)))
        agent.result("port: 8080")


def test_through_the_api_the_protect_preset_refuses_the_looping_call(tmp_path):
    """A live service with the protect preset: the checks of a looping agent, content capture off, its guard's
    fingerprints only: warned, then refused (429) before the model call that would be its 5th wasted one."""
    config = make_config(preset="protect")
    with running_service(config, tmp_path) as (_, eps):
        agent, session, answers = Agent(), uid("api-loop"), []
        for _ in range(7):
            r = httpx.post(f"{eps.api}/v1/check", json={"session_id": session, "pending": agent.model_check()})
            answers.append((r.status_code, r.json()["action"] if r.status_code == 200 else r.json()["error"]["reason"]))
            pending = agent.tool_check("read_file", {"path": "config.yaml"})
            # (the tool's own check: the protect preset's failure loop may refuse the same call repeated; this test
            # is about the model call's check)
            httpx.post(f"{eps.api}/v1/check", json={"session_id": session, "pending": pending})
            agent.result("port: 8080")
    assert answers[:4] == [(200, "allow")] * 4 and answers[4] == (200, "warn"), answers
    assert (429, "no_progress") in answers[5:], answers


def test_a_step_of_several_tools_is_their_combined_action_as_the_spans_step_makes_it():
    came_back = {"input": "77", "input_simhash": "5", "input_chars": 40}
    one = completed_step([PendingAction("read_file", 11, 3)], came_back)
    assert (one.names, one.act, one.act_sim, one.obs) == (("read_file",), 11, 3, 77)
    both = completed_step([PendingAction("search", 22, 4), PendingAction("read_file", 11, 3)], came_back)
    swapped = completed_step([PendingAction("read_file", 11, 3), PendingAction("search", 22, 4)], came_back)
    assert both.names == swapped.names == ("read_file", "search") and both.act == swapped.act
    assert both.act == mix_fingerprints([11, 22]) and both.act_sim == 0  # as detector.core.steps combines them
    unknown = completed_step([PendingAction("search", 0, 4), PendingAction("read_file", 11, 3)], came_back)
    assert unknown.act == 0  # one tool's action unknown: the run's action is unknown


def test_a_step_reads_what_came_back_as_the_spans_step_does():
    """Version 3's ``input_ack`` and ``input_empty`` go onto the step as ``ack`` and ``nothing``; an acknowledgement
    whose snippet says "error" is no failure; a version 2 check (without input_ack) gives ack False."""
    came_back = {"input": "77", "input_chars": 12, "input_ack": True, "input_empty": False}
    acked = completed_step([PendingAction("write_file", 11, 3)], came_back)
    assert (acked.obs, acked.obs_chars, acked.ack, acked.nothing) == (77, 12, True, False)
    snippet = completed_step([PendingAction("edit", 12, 3)], {**came_back, "input_failed": True, "input_shape": "9"})
    assert (snippet.ack, snippet.failure) == (True, 0)
    empty = completed_step([PendingAction("write_file", 11, 3)], {"input": "11160318154034397263", "input_chars": 0,
                                                                   "input_empty": True, "input_shape": "5"})
    assert (empty.ack, empty.nothing, empty.failure) == (False, True, 0)
    failed = completed_step([PendingAction("bash", 13, 3)], {"input": "78", "input_failed": True, "input_shape": "5"})
    assert (failed.failure, failed.nothing, failed.ack) == (5, False, False)
    version_2 = completed_step([PendingAction("write_file", 11, 3)], {"input": "77", "input_chars": 12})
    assert (version_2.ack, version_2.nothing) == (False, False)


def test_the_sdks_evidence_of_an_acknowledgement_and_of_an_empty_result():
    """The evidence a guard sends after a tool's acknowledgement and after its empty result (the real SDK's)."""
    agent = Agent()
    agent.tool_check("write_file", {"path": "a.py"})
    agent.result("File written successfully.")
    acked = agent.model_check()["evidence"]
    assert acked["version"] == 3 and acked["input_ack"] is True and acked["input_empty"] is False
    agent.tool_check("touch", {"path": "b.py"})
    agent.result("")
    empty = agent.model_check()["evidence"]
    assert (empty["input"], empty["input_empty"], empty["input_chars"], empty["input_ack"]) == (
        "11160318154034397263", True, 0, False)
