"""Real agents' runs, labeled by careful review: the yardstick of detection quality.

The runs come from public repositories (SWE-agent on Java issues, mini-swe-agent on SWE-bench, tau-bench's airline
agent, OpenHands on SWE-bench); ``corpora/real-runs/README.md`` says how to rebuild them with ``extract.py`` (they are
not copied into this repository: two sources have no license). Each run is a list of steps in one format: a tool step (the model asked for
one tool, then it ran and its result came back) or a text step (the model replied; the user's answer arrives before
the next step). The labels (``labels.jsonl``) say whether a run loops, and where its first loop starts and ends.

Here a run becomes a :class:`~detector.evaluation.corpus_records.Scenario`, so that the same replay as the generated corpus
emits it as the GenAI spans a real instrumentation writes (a ``chat`` span per step with the conversation so far and
its output, an ``execute_tool`` span with the arguments and the result; content captured or not; one session and one
trace per run under an ``invoke_agent`` span) and reads the decision after every step, as the SDK would before the
next call. :func:`score_real_run` applies the reviewers' criterion: a loop is caught when the first action above
``allow`` comes at or after ``onset - 1`` and no later than ``end + 1``; an honest run is falsely flagged when any
action above ``allow`` happens at all.

The replay itself is :mod:`detector.evaluation.real_runs_eval`; the figures, overall and per source, and their tables
are :mod:`detector.evaluation.real_runs_report`.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from detector.core.escalation import ACTION_RANK
from detector.evaluation.corpus_records import Scenario, ToolSpec
from detector.evaluation.corpus_text import RunBuilder
from detector.settings.vocabulary import ACTION_BLOCK, ACTION_WARN

__all__ = [
    "CONTENT_MODES", "ContentMode", "LABELS_FILE", "PRESETS", "Preset", "RealRun", "RealRunScore", "RunLabel",
    "RunStep", "SOURCES", "SOURCE_LABELS", "Source", "Timing", "load_labels", "load_real_runs", "real_run_metrics",
    "scenario_id", "score_real_run", "to_scenario",
]

# The labels, and the README that says how to rebuild the runs, live in the repository (the runs do not).
LABELS_FILE = Path(__file__).resolve().parents[2] / "corpora" / "real-runs" / "labels.jsonl"

Label = Literal["loop", "honest"]

# The agents the runs come from (a run's ``source``, as extract.py writes it), in the order the tables show them.
Source = Literal["swe-agent", "mini-swe-agent", "tau-bench", "openhands"]
SOURCES: tuple[Source, ...] = ("swe-agent", "mini-swe-agent", "tau-bench", "openhands")
SOURCE_LABELS: dict[str, str] = {"swe-agent": "SWE-agent", "mini-swe-agent": "mini-swe-agent",
                                 "tau-bench": "tau-bench", "openhands": "OpenHands"}

Preset = Literal["default", "protect"]
PRESETS: tuple[Preset, ...] = ("default", "protect")
# on: content captured; off: not; fingerprints: not, with the app's fingerprints on the chat spans (the completion
# hook's; the tool spans without content, as an instrumentation with content off writes them)
ContentMode = Literal["on", "off", "fingerprints"]
CONTENT_MODES: tuple[ContentMode, ...] = ("on", "off", "fingerprints")


@dataclass(frozen=True, slots=True)
class RunStep:
    """One step of a real run, as ``extract.py`` writes it."""

    tool: str | None  # the tool the model asked for; None for a text reply
    args: dict[str, Any] | None
    result: str  # what the tool returned
    error: bool  # the result looks like an error (a marker of the extraction, not a status the agent saw)
    out_text: str  # the model's own text (its thought before a tool call, or its reply)
    user_text: str | None  # the user's answer to a text reply (arrives before the next step)


@dataclass(frozen=True, slots=True)
class RealRun:
    id: str
    source: str  # a Source, when extract.py wrote it (another name is a source of its own)
    model: str
    steps: tuple[RunStep, ...]


@dataclass(frozen=True, slots=True)
class RunLabel:
    id: str
    label: Label
    onset: int | None  # the first wasted step of the first loop stretch (loops)
    end: int | None  # its last step
    kind: str
    clear: bool  # False when a careful reviewer could reasonably disagree


@dataclass(frozen=True, slots=True)
class Timing:
    """How long things take in the replay (span time). Decisions must not depend on it: the timing tests and the
    eval's ``--timing`` option replay the same runs under several of these."""

    model_s: float = 1.5  # a model call
    tool_s: float = 0.3  # a tool run
    gap_s: float = 0.2  # idle time between the end of a step and the next model call


def load_real_runs(path: str | Path) -> list[RealRun]:
    """The runs ``extract.py`` wrote (JSON Lines)."""
    runs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            data = json.loads(line)
            steps = tuple(RunStep(tool=s.get("tool"), args=s.get("args"), result=s.get("result") or "",
                                  error=bool(s.get("error")), out_text=s.get("out_text") or "",
                                  user_text=s.get("user_text")) for s in data["steps"])
            runs.append(RealRun(id=data["id"], source=data.get("source", ""), model=data.get("model", ""), steps=steps))
    return runs


def load_labels(path: str | Path = LABELS_FILE) -> dict[str, RunLabel]:
    labels = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            d = json.loads(line)
            labels[d["id"]] = RunLabel(id=d["id"], label=d["label"], onset=d.get("onset"), end=d.get("end"),
                                       kind=d.get("kind", ""), clear=bool(d.get("clear", True)))
    return labels


def scenario_id(run_id: str, mode: ContentMode) -> str:
    """The replayed scenario of a run in one content mode (the session ids of the replay carry it)."""
    return f"{run_id}~{mode}"


def to_scenario(run: RealRun, label: RunLabel, *, capture_content: bool, timing: Timing = Timing(),
                tool_errors: bool = False, seed: int = 0, app_fingerprints: bool = False) -> Scenario:
    """The run as a replayable scenario: one model call per step, in the run's own words.

    ``tool_errors``: error-looking results are sent as failed ``execute_tool`` spans (status ``ERROR``, the result
    as the status message) rather than as plain results. A real instrumentation of these agents would see a command's
    text output, not a status, so the default is plain results. ``app_fingerprints`` (content off): the chat spans
    carry the app's fingerprints of the conversation, as the SDK's completion hook sets them.
    """
    b = RunBuilder(random.Random(f"{run.id}:{seed}"), task=f"Task of run {run.id}.")
    user_text: str | None = None
    for step in run.steps:
        tools = []
        if step.tool is not None:
            args = step.args if isinstance(step.args, dict) else {"input": step.args}
            if tool_errors and step.error:
                tools.append(ToolSpec(step.tool, args, "", error="tool_error", error_message=step.result,
                                      duration_s=timing.tool_s))
            else:
                tools.append(ToolSpec(step.tool, args, step.result, duration_s=timing.tool_s))
        spec = b.call(output_text=step.out_text, tools=tools, user_text=user_text, gap_s=timing.gap_s)
        spec.duration_s = timing.model_s
        user_text = step.user_text if step.tool is None and step.user_text else None
    onset = label.onset if label.label == "loop" else None
    return Scenario(id=run.id, family=run.source, label="loop" if label.label == "loop" else "legit", onset=onset,
                    capture_content=capture_content, description=label.kind, calls=b.calls,
                    agent_name=run.source or "agent", app_fingerprints=app_fingerprints and not capture_content)


@dataclass(frozen=True, slots=True)
class RealRunScore:
    """One run under one system, by the reviewers' criterion."""

    label: Label
    clear: bool
    first_flag: int | None  # the first step after which the action was above allow
    first_block: int | None
    caught_flag: bool  # loops: the first flag within [onset - 1, end + 1]
    caught_block: bool
    wasted_to_flag: int | None  # loops caught: wasted steps up to the flag, the first wasted step counting as 1
    wasted_to_block: int | None


def score_real_run(actions: Sequence[str], label: RunLabel) -> RealRunScore:
    """``actions``: the action read after each step."""
    warn_rank = ACTION_RANK[ACTION_WARN]
    first_flag = next((i for i, a in enumerate(actions) if ACTION_RANK[a] >= warn_rank), None)
    first_block = next((i for i, a in enumerate(actions) if a == ACTION_BLOCK), None)
    caught_flag = caught_block = False
    to_flag = to_block = None
    if label.label == "loop":
        assert label.onset is not None and label.end is not None
        lo, hi = label.onset - 1, label.end + 1
        caught_flag = first_flag is not None and lo <= first_flag <= hi
        caught_block = first_block is not None and lo <= first_block <= hi
        to_flag = max(1, first_flag - label.onset + 1) if caught_flag and first_flag is not None else None
        to_block = max(1, first_block - label.onset + 1) if caught_block and first_block is not None else None
    return RealRunScore(label.label, label.clear, first_flag, first_block, caught_flag, caught_block, to_flag,
                        to_block)


def real_run_metrics(scores: Iterable[RealRunScore], clear_only: bool = True) -> dict[str, Any]:
    """Recall at warn and at block, honest runs flagged and blocked, median wasted steps to warn and to block."""
    chosen = [s for s in scores if s.clear or not clear_only]
    loops = [s for s in chosen if s.label == "loop"]
    honest = [s for s in chosen if s.label == "honest"]
    to_flag = [s.wasted_to_flag for s in loops if s.wasted_to_flag is not None]
    to_block = [s.wasted_to_block for s in loops if s.wasted_to_block is not None]

    def share(n: int, d: int) -> float | None:
        return round(n / d, 3) if d else None

    caught_warn, caught_block = sum(s.caught_flag for s in loops), sum(s.caught_block for s in loops)
    return {
        "loops": len(loops), "honest": len(honest), "caught_warn": caught_warn, "caught_block": caught_block,
        "recall_warn": share(caught_warn, len(loops)), "recall_block": share(caught_block, len(loops)),
        "honest_flagged": share(sum(s.first_flag is not None for s in honest), len(honest)),
        "honest_flagged_n": sum(s.first_flag is not None for s in honest),
        "honest_blocked": sum(s.first_block is not None for s in honest),
        "wasted_to_warn_median": statistics.median(to_flag) if to_flag else None,
        "wasted_to_block_median": statistics.median(to_block) if to_block else None,
    }
