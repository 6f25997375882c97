"""A replay scored again offline (``detector/evaluation/offline.py``) gives the pipeline's own actions, step by step:
a few small runs in the real runs' format replayed through the real pipeline (both presets, the three content modes),
the default preset's data directory kept, its stored calls scored again in process under each preset.

This is the check behind ``tools/progress_ablation.py``'s "as shipped" row (the ablation scores a replay offline,
variant after variant): here on a bounded subset, on the full runs with its ``--check``."""

from __future__ import annotations

from detector.evaluation.offline import rescore, scenario_of, stored_calls
from detector.evaluation.real_runs import CONTENT_MODES, RealRun, RunLabel, RunStep, scenario_id
from detector.evaluation.real_runs_eval import loop_detector_system, run_real_eval
from detector.evaluation.real_runs_report import compact_actions
from detector.settings.config import AppConfig, parse_config


def tool(command: str, result: str, *, error: bool = False, tool_name: str = "bash") -> RunStep:
    return RunStep(tool=tool_name, args={"command": command}, result=result, error=error, out_text=f"Run {command}.",
                   user_text=None)


def reply(text: str, answer: str) -> RunStep:
    return RunStep(tool=None, args=None, result="", error=False, out_text=text, user_text=answer)


FAILURE = "Traceback (most recent call last):\n  File \"test.py\", line 3\nNameError: name 'parse' is not defined"
RUNS = [
    # the same failing command again and again: warned, and blocked under protect
    RealRun("swe-loop", "swe-agent", "m", (
        tool("ls", "setup.py src tests"), tool("cat src/a.py", "def a():\n    return 1"),
        tool("grep -n parse src", "src/b.py:3: def parse(x):"),
        *[tool("python test.py", FAILURE, error=True) for _ in range(7)], tool("cat src/b.py", "def parse(x): ..."))),
    # paging through a file: every step brings something new
    RealRun("oh-honest", "openhands", "m", tuple(
        tool(f"view /repo/big.py {i * 40}-{i * 40 + 39}", f"{i * 40}: line {i}\n" * 3, tool_name="str_replace_editor")
        for i in range(9))),
    # a conversation: tools, replies, the user's answers
    RealRun("tau-honest", "tau-bench", "m", (
        tool("get_user_details mia_01", '{"name": "Mia", "reservations": ["R1", "R2"]}', tool_name="get_user_details"),
        reply("Which reservation?", "R2 please"),
        tool("get_reservation_details R2", '{"flight": "HAT001", "cabin": "economy"}',
             tool_name="get_reservation_details"),
        reply("Upgrade to business for $300?", "Yes"),
        tool("update_reservation_flights R2 business", '{"ok": true}', tool_name="update_reservation_flights"),
        reply("Done.", "Thanks"))),
]
LABELS = {
    "swe-loop": RunLabel("swe-loop", "loop", onset=4, end=10, kind="same failure", clear=True),
    "oh-honest": RunLabel("oh-honest", "honest", onset=None, end=None, kind="", clear=True),
    "tau-honest": RunLabel("tau-honest", "honest", onset=None, end=None, kind="", clear=True),
}


def test_offline_scoring_of_a_replay_gives_the_pipelines_actions(tmp_path):
    report = run_real_eval(RUNS, LABELS, progress=False, keep_replay=tmp_path / "replay")
    calls = stored_calls(tmp_path / "replay")
    assert {scenario_of(c.session_id) for c in calls} == {scenario_id(r.id, m) for r in RUNS for m in CONTENT_MODES}
    for preset in ("default", "protect"):
        config = AppConfig() if preset == "default" else parse_config({"preset": preset}, preset)
        pipeline = report["actions"][loop_detector_system(preset)]
        offline = {sid: compact_actions(acts) for sid, acts in rescore(calls, config).items()}
        assert offline == pipeline, preset
    # what the comparison covers: a warn, a block under protect, honest runs left alone
    protect = report["actions"][loop_detector_system("protect")]
    assert "w" in report["actions"][loop_detector_system("default")][scenario_id("swe-loop", "on")]
    assert "b" in protect[scenario_id("swe-loop", "on")]
    assert set(protect[scenario_id("oh-honest", "on")] + protect[scenario_id("tau-honest", "on")]) == {"."}


def test_eval_keeps_a_replay_only_in_a_new_directory(tmp_path, capsys):
    from detector.cli.main import main

    runs = tmp_path / "runs.jsonl"
    runs.write_text('{"id": "swe-loop", "source": "swe-agent", "model": "m", "steps": []}\n')
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "swe-loop", "label": "honest", "clear": true}\n')
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "chdb").mkdir()
    assert main(["eval", "--real-runs", str(runs), "--labels", str(labels), "--keep-replay",
                 str(tmp_path / "used")]) == 2
    assert "not empty" in capsys.readouterr().err
