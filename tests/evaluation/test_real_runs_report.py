"""The real runs' report (``detector/evaluation/real_runs_report.py``): the figures of every system per content mode,
for all the runs and per source, and their tables, from synthetic actions (no replay)."""

from __future__ import annotations

import json
import re

from detector.evaluation.real_runs import RealRun, RunLabel, scenario_id
from detector.evaluation.real_runs_report import real_runs_report, render_real_eval


def run(rid: str, source: str) -> RealRun:
    return RealRun(id=rid, source=source, model="m", steps=())


def loop(rid: str, onset: int, end: int, clear: bool = True) -> RunLabel:
    return RunLabel(id=rid, label="loop", onset=onset, end=end, kind="k", clear=clear)


def honest(rid: str, clear: bool = True) -> RunLabel:
    return RunLabel(id=rid, label="honest", onset=None, end=None, kind="", clear=clear)


# OpenHands first in the file: the tables still show the sources in their own order
RUNS = [run("oh-1", "openhands"), run("oh-2", "openhands"), run("swe-1", "swe-agent"), run("swe-2", "swe-agent"),
        run("swe-3", "swe-agent"), run("swe-4", "swe-agent"), run("tau-1", "tau-bench"), run("tau-2", "tau-bench")]
LABELS = {lb.id: lb for lb in [
    loop("oh-1", 2, 5), honest("oh-2"),
    loop("swe-1", 3, 6), loop("swe-2", 4, 8), loop("swe-3", 2, 4, clear=False), honest("swe-4"),
    loop("tau-1", 2, 3, clear=False), honest("tau-2"),
]}
_ = "allow"
# the action after each of 10 steps, per run, content on (off: nothing flagged)
ON = {
    "oh-1": [_] * 10,  # missed
    "oh-2": [_, _, "warn", _, _, _, _, _, _, _],  # an honest run flagged
    "swe-1": [_, _, _, _, "warn", "block", "block", _, _, _],  # warned at 4 (onset 3: 2 wasted steps), blocked at 5
    "swe-2": [_, _, _, _, _, _, _, "warn", _, _],  # warned at 7 (onset 4: 4 wasted steps), never blocked
    "swe-3": ["warn", _, _, _, _, _, _, _, _, _],  # warned too early (onset 2: at 1 at the earliest): a miss
    "swe-4": [_] * 10,
    "tau-1": [_, _, "warn", _, _, _, _, _, _, _],  # an unclear loop, caught
    "tau-2": [_] * 10,
}


def report():
    actions = {"x": {**{scenario_id(r, "on"): a for r, a in ON.items()},
                     **{scenario_id(r, "off"): [_] * 10 for r in ON}}}
    return real_runs_report(RUNS, LABELS, actions, {"x": "loop-detector (x)"}, ["on", "off"])


def test_figures_for_all_the_runs_and_per_source():
    r = report()
    assert (r["runs"], r["clear_loops"], r["clear_honest"], r["loops"]) == (8, 3, 3, 5)
    assert [(s["name"], s["label"], s["runs"], s["clear_loops"], s["clear_honest"]) for s in r["sources"]] == [
        ("swe-agent", "SWE-agent", 4, 2, 1), ("tau-bench", "tau-bench", 2, 0, 1), ("openhands", "OpenHands", 2, 1, 1)]
    everything = r["figures"]["x"]["on"]
    assert everything["clear"]["recall_warn"] == round(2 / 3, 3) and everything["all"]["recall_warn"] == 0.6
    assert (everything["clear"]["honest_flagged_n"], everything["clear"]["honest"]) == (1, 3)
    assert everything["clear"]["wasted_to_warn_median"] == 3  # 2 and 4
    assert everything["clear"]["recall_block"] == round(1 / 3, 3) and everything["clear"]["honest_blocked"] == 0
    swe = r["by_source"]["swe-agent"]["x"]["on"]
    assert (swe["clear"]["recall_warn"], swe["all"]["recall_warn"]) == (1.0, round(2 / 3, 3))
    assert (swe["clear"]["recall_block"], swe["clear"]["honest_flagged"]) == (0.5, 0.0)
    tau = r["by_source"]["tau-bench"]["x"]["on"]
    assert tau["clear"]["recall_warn"] is None and tau["all"]["recall_warn"] == 1.0  # no clear loop: no recall
    oh = r["by_source"]["openhands"]["x"]["on"]
    assert (oh["clear"]["recall_warn"], oh["clear"]["honest_flagged"], oh["clear"]["wasted_to_warn_median"]) == (
        0.0, 1.0, None)
    assert r["by_source"]["swe-agent"]["x"]["off"]["clear"]["recall_warn"] == 0.0
    assert r["actions"]["x"][scenario_id("swe-1", "on")] == "....wbb..."


def test_tables_per_source_text_and_markdown():
    r = report()
    text = render_real_eval(r)
    sections = [line for line in text.splitlines() if "clear loops" in line]
    assert [line.split(":")[0] for line in sections] == ["all sources", "SWE-agent", "tau-bench", "OpenHands"]
    assert sections[1] == "SWE-agent: 4 runs (2 clear loops, 1 clear honest runs; all 4 labels in parentheses)"
    tables = _tables(text)
    assert all([row[:2] for row in rows] == [["loop-detector (x)", "on"], ["loop-detector (x)", "off"]]
               for rows in tables.values())  # one system, two modes: the same rows in each section
    assert [cells[2:] for cells in tables["SWE-agent"]] == [
        ["1.00 (0.67)", "0% 0/1 (0%)", "3", "0.50", "0/1"], ["0.00 (0.00)", "0% 0/1 (0%)", "-", "0.00", "0/1"]]
    # no clear loop among tau-bench's runs: "-", not 0 (its unclear loop caught: 1.00 on all the labels)
    assert tables["tau-bench"][0][2:] == ["- (1.00)", "0% 0/1 (0%)", "-", "-", "0/1"]
    assert tables["OpenHands"][0][2:] == ["0.00 (0.00)", "100% 1/1 (100%)", "-", "0.00", "0/1"]
    assert tables["all sources"][0][2:] == ["0.67 (0.60)", "33% 1/3 (33%)", "3", "0.33", "0/3"]
    markdown = render_real_eval(r, markdown=True)
    assert markdown.count("| system | content | recall at warn |") == 4
    assert "**tau-bench**: 2 runs (0 clear loops, 1 clear honest runs; all 2 labels in parentheses)" in markdown
    assert "| loop-detector (x) | on | - (1.00) | 0% 0/1 (0%) | - | - | 0/1 |" in markdown
    # the report is a JSON document, and renders the same once saved
    assert render_real_eval(json.loads(json.dumps(r))) == text


def test_a_group_without_clear_honest_runs():
    runs = [run("a", "mini-swe-agent"), run("b", "mini-swe-agent")]
    labels = {"a": loop("a", 1, 2), "b": honest("b", clear=False)}
    actions = {"x": {scenario_id("a", "on"): [_, "warn", _], scenario_id("b", "on"): ["warn", _, _]}}
    r = real_runs_report(runs, labels, actions, {}, ["on"])
    assert r["systems"] == [{"name": "x", "label": "x"}]
    table = _tables(render_real_eval(r))["mini-swe-agent"]
    assert table[0][2:] == ["1.00 (1.00)", "- (100%)", "1", "0.00", "-"]


def _tables(text: str) -> dict[str, list[list[str]]]:
    """Section label -> its rows' cells (columns are separated by two spaces or more)."""
    out: dict[str, list[list[str]]] = {}
    section = ""
    for line in text.splitlines():
        if "clear loops" in line:
            section = line.split(":")[0]
            out[section] = []
        elif line and not line.startswith("system") and section:
            out[section].append(re.split(r"\s{2,}", line.strip()))
    return out
