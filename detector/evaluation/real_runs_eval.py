"""``loop-detector eval --real-runs``: the labeled real runs replayed through the real pipeline, once per preset, in
each content mode, and the peers' rules on the rows the first replay stored; the report is
:func:`~detector.evaluation.real_runs_report.real_runs_report` (all the runs, and per source)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from detector.evaluation.real_runs import (
    CONTENT_MODES,
    PRESETS,
    ContentMode,
    Preset,
    RealRun,
    RunLabel,
    Timing,
    scenario_id,
    to_scenario,
)
from detector.evaluation.real_runs_report import real_runs_report

__all__ = ["loop_detector_system", "run_real_eval"]


def loop_detector_system(preset: Preset) -> str:
    """The name (and label) of loop-detector under ``preset`` in the report."""
    return f"loop-detector ({preset})"


def run_real_eval(runs: Sequence[RealRun], labels: Mapping[str, RunLabel], *, presets: Sequence[Preset] = PRESETS,
                  timing: Timing = Timing(), tool_errors: bool = False, progress: bool = True,
                  modes: Sequence[ContentMode] = CONTENT_MODES, keep_replay: Path | None = None) -> dict[str, Any]:
    """Replay every labeled run in each content mode (``modes``: captured, not, not with the app's fingerprints), once
    per preset, through the real pipeline (one service per preset; the decision read after every step), and the peers'
    rules (TokenPolice's call cap among them) on the rows the first replay stored.

    ``keep_replay``: the data directory of the first preset's replay is kept there (a new directory; the stored calls
    are the same whatever the preset: ``tools/progress_ablation.py`` scores them again offline).
    Returns the report (:func:`~detector.evaluation.real_runs_report.real_runs_report`)."""
    from detector.evaluation.quality import baseline_actions
    from detector.evaluation.replay import ProgressBar, replay
    from detector.settings.config import AppConfig, parse_config

    runs = [r for r in runs if r.id in labels]
    scenarios = []
    for mode in modes:
        for run in runs:
            sc = to_scenario(run, labels[run.id], capture_content=mode == "on", timing=timing, tool_errors=tool_errors,
                             app_fingerprints=mode == "fingerprints")
            sc.id = scenario_id(run.id, mode)
            scenarios.append(sc)
    total = sum(len(s.calls) for s in scenarios)
    actions: dict[str, dict[str, list[str]]] = {}  # system -> scenario id -> actions (loop-detector's first)
    peers: dict[str, dict[str, list[str]]] = {}
    system_labels: dict[str, str] = {}
    for i, preset in enumerate(presets):
        config = AppConfig() if preset == "default" else parse_config({"preset": preset}, preset)
        name = loop_detector_system(preset)
        bar = ProgressBar(total, f"real runs {i + 1}/{len(presets)} ({preset})", enabled=progress)
        rep = replay(scenarios, config, config_name=name, progress=bar,
                     data_dir=str(keep_replay) if keep_replay is not None and i == 0 else None)
        bar.close()
        system_labels[name] = name
        actions[name] = {sid: [d["action"] for d in ds] for sid, ds in rep.decisions.items()}
        if i == 0:
            for sc in scenarios:
                for base, (label, acts) in baseline_actions(rep.steps[sc.id], trace_cap=True).items():
                    system_labels[base] = label
                    peers.setdefault(base, {})[sc.id] = acts
    report = real_runs_report(runs, labels, {**actions, **peers}, system_labels, modes)
    report["presets"] = list(presets)
    return report
