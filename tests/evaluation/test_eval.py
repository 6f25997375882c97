"""The detection-quality yardstick: the corpus generator, the metrics, the baselines, and a small replay
through the real pipeline (OTLP exporter -> receiver -> chDB -> scheduled detector -> GET /v1/decision)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from detector.cli.main import main
from detector.evaluation.baselines import StoredCall, ToolRun
from detector.evaluation.baselines.openhands import StuckDetector
from detector.evaluation.baselines.tokenpolice import ExactPromptRepeat, TraceCallCap
from detector.evaluation.baselines.tool_repeat import SameToolCallThrice
from detector.evaluation.corpus import (
    CONTENT_OFF_ONLY,
    FAMILIES,
    LEGIT_FAMILIES,
    LOOP_FAMILIES,
    generate_corpus,
    generate_scenario,
    read_corpus,
    write_corpus,
)
from detector.evaluation.corpus_records import MAX_CALLS_PER_TRACE
from detector.evaluation.evaluate import run_eval
from detector.evaluation.quality import System, baseline_actions, check_targets, evaluate_systems, score_run

# ------------------------------------------------------------------------------------------------ corpus


def test_same_seed_same_corpus_and_another_seed_another():
    a = [s.to_dict() for s in generate_corpus(seed=7, variants=2)]
    b = [s.to_dict() for s in generate_corpus(seed=7, variants=2)]
    c = [s.to_dict() for s in generate_corpus(seed=8, variants=2)]
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.dumps(a, sort_keys=True) != json.dumps(c, sort_keys=True)


def test_built_in_corpus_covers_the_families_labels_and_capture_modes():
    corpus = generate_corpus()
    assert len(corpus) >= 40
    assert {s.family for s in corpus} == set(FAMILIES)
    assert {s.family for s in corpus if s.label == "loop"} == set(LOOP_FAMILIES)
    assert {s.family for s in corpus if s.label == "legit"} == set(LEGIT_FAMILIES)
    for family in FAMILIES:  # content capture on and off in every family, off only where only that makes sense
        modes = {s.capture_content for s in corpus if s.family == family}
        assert modes == ({False} if family in CONTENT_OFF_ONLY else {True, False}), family
    loops = [s for s in corpus if s.label == "loop"]
    assert all(s.onset is not None and 0 < s.onset < len(s.calls) for s in loops)  # after a legitimate prefix
    assert all(s.onset is None for s in corpus if s.label == "legit")
    for s in corpus:  # below the default per-trace call cap, so the cap never decides
        for session in s.sessions:
            assert sum(1 for c in s.calls if c.session == session) <= MAX_CALLS_PER_TRACE
    assert len({s.id for s in corpus}) == len(corpus)
    # real span material: tool calls with results, errors, usage, parallel calls, several conversations
    calls = [c for s in corpus for c in s.calls]
    assert any(len(c.tools) > 1 for c in calls) and any(c.error for c in calls)
    assert any(t.error for c in calls for t in c.tools) and any(c.cost_usd for c in calls)
    assert any(len(s.sessions) > 1 for s in corpus)


def test_corpus_round_trips_through_json_files(tmp_path):
    corpus = generate_corpus(variants=1)
    write_corpus(corpus, tmp_path)
    assert json.loads((tmp_path / "index.json").read_text())["scenarios"][0]["id"] == corpus[0].id
    back = read_corpus(tmp_path)
    assert [s.to_dict() for s in back] == [s.to_dict() for s in sorted(corpus, key=lambda s: s.id)]


def test_invalid_scenario_files_are_rejected(tmp_path):
    bad = generate_scenario("exact_tool_repeat", 0).to_dict()
    bad["onset"] = None
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="onset"):
        read_corpus(tmp_path)


def test_cli_writes_the_corpus(tmp_path, capsys):
    assert main(["eval", "--write-corpus", str(tmp_path), "--variants", "1", "--families", "pagination"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "pagination-00.json"]
    assert main(["eval", "--families", "nonsense", "--quiet"]) == 2


# ----------------------------------------------------------------------------------------------- metrics


def test_score_run_on_hand_checked_cases():
    # a loop from call 3: warn at 5, block at 8 -> delays 2 and 5, nothing before onset
    s = score_run(["allow"] * 5 + ["warn", "throttle", "inject", "block"], "loop", 3)
    assert (s.caught_warn, s.caught_block, s.delay_warn, s.delay_block, s.early) == (True, True, 2, 5, False)
    # an alarm in the legitimate prefix is an early alarm; detection still counts from onset
    s = score_run(["warn", "allow", "allow", "allow", "warn"], "loop", 2)
    assert (s.early, s.caught_warn, s.delay_warn, s.first_warn) == (True, True, 2, 0)
    # an alarm only before onset does not catch the loop
    s = score_run(["warn", "allow", "allow", "allow"], "loop", 2)
    assert not s.caught_warn and s.delay_warn is None
    # a legit run: any action above allow is a false positive; block separately
    assert score_run(["allow", "throttle", "allow"], "legit", None).first_warn == 1
    assert score_run(["allow", "throttle", "allow"], "legit", None).first_block is None


def test_evaluate_systems_aggregates_per_family_and_overall():
    scenarios = [generate_scenario("exact_tool_repeat", v) for v in range(3)] + [
        generate_scenario("pagination", v) for v in range(2)]
    actions = {}
    for i, s in enumerate(scenarios):
        a = ["allow"] * len(s.calls)
        if s.label == "loop" and i < 2:  # two of three loops caught, delays 1 and 3; the first also blocked
            a[s.onset + (1 if i == 0 else 3)] = "warn"
            if i == 0:
                a[s.onset + 4] = "block"
        if s.id == "pagination-01":
            a[2] = "warn"  # one false positive out of two legit runs
        actions[s.id] = a
    m = evaluate_systems(scenarios, [System("x", "x", "loop-detector", actions)])
    fam = m["families"]["exact_tool_repeat"]["x"]
    assert fam["recall_warn"] == pytest.approx(2 / 3, abs=1e-4) and fam["recall_block"] == pytest.approx(1 / 3, abs=1e-4)
    assert (fam["delay_warn_median"], fam["delay_warn_max"], fam["delay_block_median"]) == (2.0, 3, 4.0)
    legit = m["families"]["pagination"]["x"]
    assert (legit["fp_rate_warn"], legit["fp_warn"], legit["fp_rate_block"]) == (0.5, 1, 0.0)
    overall = m["overall"]["x"]
    assert (overall["loop_runs"], overall["legit_runs"], overall["caught_warn"]) == (3, 2, 2)
    targets = {t["target"]: t["met"] for t in check_targets(m, "x")}
    assert targets == {"recall at warn >= 0.95": False, "false-positive rate <= 2%": False,
                       "median delay to warn <= 4 calls": True,
                       "at least as good as the best baseline on every family": True}


# --------------------------------------------------------------------------------------------- baselines


def step(request: int = 1, tools: tuple[ToolRun, ...] = (), trace: str = "t", session: str = "s", *,
         error: bool = False, output: int = 0) -> StoredCall:
    return StoredCall(trace_id=trace, session_id=session, request_fp=request, is_error=error, output_fp=output,
                tools=tools)


def fires(baseline, steps: list[StoredCall]) -> list[bool]:
    return [baseline.observe(s) for s in steps]


def test_tokenpolice_exact_prompt_repeat():
    assert fires(ExactPromptRepeat(), [step(1), step(1), step(1)]) == [False, False, True]
    assert fires(ExactPromptRepeat(), [step(1), step(2), step(1), step(2)]) == [False, False, False, True]
    assert fires(ExactPromptRepeat(), [step(1), step(2), step(3), step(1), step(2), step(3)])[-1] is True
    assert not any(fires(ExactPromptRepeat(), [step(1), step(2), step(1), step(3), step(1)]))
    assert not any(fires(ExactPromptRepeat(), [step(0), step(0), step(0)]))  # unknown prompts never match
    # per trace: the same prompt in three different runs is not a loop
    assert not any(fires(ExactPromptRepeat(), [step(1, trace=t) for t in "abc"]))


def test_tokenpolice_trace_call_cap():
    # trips on the call that reaches the ceiling (the 25th), per trace
    assert fires(TraceCallCap(), [step(i) for i in range(26)]) == [False] * 24 + [True, True]
    assert not any(fires(TraceCallCap(limit=3), [step(1, trace=t) for t in "abab"]))
    assert baseline_actions([step(1)] * 25, trace_cap=True)["tokenpolice_trace_cap"][1][-2:] == ["allow", "block"]
    assert "tokenpolice_trace_cap" not in baseline_actions([step(1)])  # not on the generated corpus


def test_same_tool_call_three_times_in_a_conversation():
    read = ToolRun(fp=10)
    other = ToolRun(fp=11)
    # anywhere in the conversation, not only back to back
    assert fires(SameToolCallThrice(), [step(tools=(read,)), step(tools=(other,)), step(tools=(read,)),
                                        step(tools=(other,)), step(tools=(read,))]) == [False] * 4 + [True]
    # per conversation
    assert not any(fires(SameToolCallThrice(), [step(tools=(read,), session=s) for s in "abc"]))


def test_openhands_stuck_detector():
    same = ToolRun(fp=10, result_fp=5)
    assert fires(StuckDetector(), [step(tools=(same,))] * 4) == [False, False, False, True]
    # a different observation breaks the four identical pairs
    assert not any(fires(StuckDetector(), [step(tools=(same,)), step(tools=(ToolRun(fp=10, result_fp=6),)),
                                           step(tools=(same,)), step(tools=(same,))]))
    # three identical actions, each ending in an error
    failing = ToolRun(fp=10, is_error=True, error_fp=7)
    assert fires(StuckDetector(), [step(tools=(failing,))] * 3) == [False, False, True]
    # a failed model call is not an agent action; messages without captured content never match
    assert not any(fires(StuckDetector(), [step(error=True)] * 5))
    assert not any(fires(StuckDetector(), [step(output=0)] * 5))
    assert fires(StuckDetector(), [step(output=42)] * 4)[-1] is True


# ------------------------------------------------------------------------------------ through the pipeline


def test_small_replay_through_the_real_pipeline():
    """A stuck tool loop (content on), the same without content (the app's fingerprints on the chat spans: the model
    asks for the call at a length that varies with its words, so sizes alone do not see it), and a pagination job,
    replayed concurrently through a running service; loop-detector and the baselines are scored on the same stored
    rows."""
    scenarios = [generate_scenario("exact_tool_repeat", 0),
                 dataclasses.replace(generate_scenario("exact_tool_repeat", 2), app_fingerprints=True),
                 generate_scenario("pagination", 0)]
    m = run_eval(scenarios, blocking_pass=False, progress=False)
    runs = {r["id"]: r["systems"] for r in m["runs"]}
    for loop in scenarios[:2]:
        ld = runs[loop.id]["loop-detector"]
        assert ld["delay_warn"] is not None and 0 <= ld["delay_warn"] <= 6, ld
        # issue 15: the early warning beside the score flags a repeat on exact evidence
        assert not ld["early"] and ld["first_detector"] in ("no_progress", "confidence")
        # (b) counts the third identical execute_tool span: the second repeat
        assert runs[loop.id]["same_tool_call_x3"]["delay_warn"] == 1
        assert runs[loop.id]["tokenpolice_exact_repeat"]["first_warn"] is None  # the context grows
    assert runs["pagination-00"]["loop-detector"]["first_warn"] is None
    assert m["overall"]["loop-detector"]["recall_warn"] == 1.0
    assert m["overall"]["loop-detector"]["fp_rate_warn"] == 0.0
    assert {s["name"] for s in m["systems"]} == {"loop-detector", "tokenpolice_exact_repeat", "same_tool_call_x3",
                                                  "openhands_stuck", "gemini_cli_same_call_x5", "crewai_repeated_usage"}
    assert m["replays"][0]["calls"] == sum(len(s.calls) for s in scenarios)


def test_baseline_actions_one_per_model_call():
    steps = [StoredCall(trace_id="t", session_id="s", request_fp=1, is_error=True, error_fp=3)] * 3  # the same request
    actions = baseline_actions(steps)
    assert actions["tokenpolice_exact_repeat"][1] == ["allow", "allow", "block"]  # fires: 'block' (its one action)
    assert actions["openhands_stuck"][1] == ["allow"] * 3  # model-call failures are not agent actions
    assert actions["same_tool_call_x3"][1] == ["allow"] * 3
