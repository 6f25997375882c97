"""The real runs' figures, for all the runs and per source, and their tables (``loop-detector eval --real-runs``).

The figures come from the action each system took after each step of each replayed scenario (a run in one content
mode: :func:`~detector.evaluation.real_runs.scenario_id`), by the reviewers' criterion
(:func:`~detector.evaluation.real_runs.score_real_run`): per group of runs (all of them, then each source: SWE-agent,
mini-swe-agent, tau-bench, OpenHands), per system and per content mode, recall at warn and at block, honest runs
flagged and blocked, the median of wasted steps to warn; on the clear labels, and on all of them.

The report is a JSON document (``--json``); the tables are rendered from it alone, so a saved report renders again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from detector.evaluation.real_runs import (
    SOURCE_LABELS,
    SOURCES,
    ContentMode,
    RealRun,
    RunLabel,
    real_run_metrics,
    scenario_id,
    score_real_run,
)

__all__ = ["ALL_RUNS", "RunGroup", "compact_actions", "mode_figures", "real_runs_report", "render_real_eval",
           "run_groups"]

ALL_RUNS = "all"  # the group of every run (the report's ``figures``; the sources are its ``by_source``)

# What a table shows of one system in one content mode (clear labels; all labels in parentheses where it says so).
HEADER = ("system", "content", "recall at warn", "honest flagged", "wasted steps to warn (median)", "recall at block",
          "honest blocked")


@dataclass(frozen=True, slots=True)
class RunGroup:
    """Runs reported together: all of them, or one source's."""

    name: str  # ALL_RUNS, or the runs' source
    label: str  # what the tables call it
    runs: tuple[RealRun, ...]


def run_groups(runs: Sequence[RealRun]) -> list[RunGroup]:
    """All the runs, then one group per source: the known sources in their order, then any other, by name."""
    present = {r.source for r in runs}
    sources = [s for s in SOURCES if s in present] + sorted(present - set(SOURCES))
    return [RunGroup(ALL_RUNS, "all sources", tuple(runs))] + [
        RunGroup(s, SOURCE_LABELS.get(s, s or "no source"), tuple(r for r in runs if r.source == s)) for s in sources]


def mode_figures(actions: Mapping[str, Sequence[str]], runs: Sequence[RealRun], labels: Mapping[str, RunLabel],
                 mode: ContentMode) -> dict[str, dict[str, Any]]:
    """One system's figures on ``runs`` in one content mode (``actions``: scenario id -> the action after each step):
    ``{"clear": ..., "all": ...}``, each :func:`~detector.evaluation.real_runs.real_run_metrics`."""
    scores = [score_real_run(actions[scenario_id(r.id, mode)], labels[r.id]) for r in runs]
    return {"clear": real_run_metrics(scores), "all": real_run_metrics(scores, clear_only=False)}


def _counts(group: RunGroup, labels: Mapping[str, RunLabel]) -> dict[str, Any]:
    chosen = [labels[r.id] for r in group.runs]
    return {"runs": len(chosen), "loops": sum(lb.label == "loop" for lb in chosen),
            "clear_loops": sum(lb.label == "loop" and lb.clear for lb in chosen),
            "honest": sum(lb.label == "honest" for lb in chosen),
            "clear_honest": sum(lb.label == "honest" and lb.clear for lb in chosen)}


def compact_actions(actions: Sequence[str]) -> str:
    """A run's actions in one string: ``.`` for allow, else the action's initial (``w``, ``t``, ``i``, ``b``)."""
    return "".join("." if a == "allow" else a[0] for a in actions)


def real_runs_report(runs: Sequence[RealRun], labels: Mapping[str, RunLabel],
                     actions: Mapping[str, Mapping[str, Sequence[str]]], system_labels: Mapping[str, str],
                     modes: Sequence[ContentMode]) -> dict[str, Any]:
    """The report of systems' actions on the labeled runs (``actions``: system -> scenario id -> the action after each
    step; every labeled run of ``runs`` in every mode of ``modes``): counts of runs and labels, ``figures`` (system ->
    mode -> clear / all, on all the runs), ``sources`` (each source's counts) and ``by_source`` (source -> the same as
    ``figures``), and the actions themselves (:func:`compact_actions`)."""
    runs = [r for r in runs if r.id in labels]
    groups = run_groups(runs)
    figures = {g.name: {system: {mode: mode_figures(by_run, g.runs, labels, mode) for mode in modes}
                        for system, by_run in actions.items()} for g in groups}
    return {**_counts(groups[0], labels), "modes": list(modes),
            "sources": [{"name": g.name, "label": g.label, **_counts(g, labels)} for g in groups[1:]],
            "systems": [{"name": name, "label": system_labels.get(name, name)} for name in actions],
            "figures": figures[ALL_RUNS], "by_source": {g.name: figures[g.name] for g in groups[1:]},
            "actions": {system: {sid: compact_actions(acts) for sid, acts in by_run.items()}
                        for system, by_run in actions.items()}}


# ============================================================================================ the tables


def render_real_eval(report: dict[str, Any], markdown: bool = False) -> str:
    """The tables: all the runs, then each source; per system and content mode, recall at warn and at block, honest
    runs flagged and blocked, median wasted steps to warn (clear labels; all labels in parentheses for recall and
    honest runs flagged). A group without clear loops (or honest runs) shows "-", not 0."""
    modes = report.get("modes", ["on", "off", "fingerprints"])
    sections = [("all sources", report, report["figures"])] + [
        (s["label"], s, report["by_source"][s["name"]]) for s in report.get("sources", [])]
    lines: list[str] = []
    for label, counts, figures in sections:
        about = (f"{counts['runs']} runs ({counts['clear_loops']} clear loops, {counts['clear_honest']} clear honest "
                 f"runs; all {counts['runs']} labels in parentheses)")
        lines += [f"**{label}**: {about}" if markdown else f"{label}: {about}", ""]
        rows = [_row(system["label"], mode, figures[system["name"]][mode])
                for system in report["systems"] for mode in modes]
        lines += _table(list(HEADER), rows, markdown) + [""]
    return "\n".join(lines).rstrip("\n")


def _row(system: str, mode: str, f: dict[str, dict[str, Any]]) -> list[str]:
    c, a = f["clear"], f["all"]
    flagged = f"{_pct(c['honest_flagged'])} {c['honest_flagged_n']}/{c['honest']}" if c["honest"] else "-"
    return [system, mode, f"{_rate(c['recall_warn'])} ({_rate(a['recall_warn'])})",
            f"{flagged} ({_pct(a['honest_flagged'])})", _num(c["wasted_to_warn_median"]), _rate(c["recall_block"]),
            f"{c['honest_blocked']}/{c['honest']}" if c["honest"] else "-"]


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        return (["| " + " | ".join(header) + " |", "|" + "|".join("---" if i < 2 else "---:" for i in range(len(header)))
                 + "|"] + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    return ["  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"
