"""``loop-detector eval``: replay a labeled corpus through the real pipeline and measure detection quality.

Two corpora: the generated one (:mod:`detector.evaluation.corpus`: every scenario becomes real GenAI spans, emitted
with the OpenTelemetry SDK and its OTLP/HTTP exporter) and the recorded one (:mod:`detector.evaluation.recorded`:
sessions as real frameworks' own instrumentation exported them, posted as OTLP/JSON with their timestamps moved to
now and every gap kept). Either goes into a service running in-process (receiver -> chDB -> the detection cycle's
normalization -> scheduled detector -> decision API), once per configuration: the defaults and ``preset: protect``. The runs are
replayed concurrently, one LLM call of every run per round: send, wait until the detector's watermark has passed
it (and one more cycle), then read every run's decision for its session and trace with ``GET /v1/decision``, as an
agent would before its next call. Span times are realistic, because the velocity signals and polling use span
time, not wall time.

The baselines of ``detector/evaluation/baselines`` then read the very rows the pipeline stored, call by call, so every
system is measured on the same data. Metrics, per family, overall and per content mode (captured or not):

- recall at warn (a loop run is caught when any action above ``allow`` happens at or after its onset) and
  at block (a ``block`` at or after onset);
- false flags (any action above ``allow`` in an honest run) and false blocks (any ``block``);
- wasted calls to the first warn and to the first block, the first wasted call counting as 1 (median, p90, max;
  ``delay_*`` keep the count from 0);
- early alarms: loop runs flagged during their legitimate prefix (before onset);
- issue 15's targets per preset and content mode (:data:`PRESET_TARGETS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from detector.evaluation.quality import (
    LOOP_DETECTOR,
    LOOP_DETECTOR_PROTECT,
    System,
    baseline_actions,
    check_preset_targets,
    check_targets,
    evaluate_systems,
)
from detector.evaluation.replay import ProgressBar, Replay, replay, replay_recorded
from detector.settings.config import AppConfig, parse_config
from detector.settings.vocabulary import ACTION_ALLOW, LEVEL_NONE

__all__ = ["run_eval", "schema_fingerprint"]


def run_eval(scenarios: Sequence[Any], config: AppConfig | None = None, *, config_label: str = LOOP_DETECTOR,
             blocking_pass: bool = True, progress: bool = True, stream: TextIO | None = None) -> dict[str, Any]:
    """Replay the corpus (once per configuration: ``config``, by default the defaults, and with ``blocking_pass``
    the protect preset), run the baselines on the stored rows, compute metrics. ``scenarios``: built-in scenarios
    (:class:`~detector.evaluation.corpus_records.Scenario`) or recordings (:class:`~detector.evaluation.recorded.Recording`)."""
    from detector.evaluation.recorded import Recording

    recorded = bool(scenarios) and isinstance(scenarios[0], Recording)
    configs: list[tuple[str, AppConfig]] = [(config_label, config or AppConfig())]
    if blocking_pass:
        configs.append((LOOP_DETECTOR_PROTECT, parse_config({"preset": "protect"}, "protect")))
    total = sum(len(s.calls) for s in scenarios)
    replays: list[Replay] = []
    for i, (name, cfg) in enumerate(configs):
        bar = ProgressBar(total, f"eval {i + 1}/{len(configs)} ({name})", stream=stream, enabled=progress)
        run = replay_recorded if recorded else replay
        replays.append(run(scenarios, cfg, config_name=name, progress=bar))
        bar.close()
    systems = [System(r.config_name, r.config_name, "loop-detector",
                      {sid: [d["action"] for d in ds] for sid, ds in r.decisions.items()}) for r in replays]
    per_baseline: dict[str, tuple[str, dict[str, list[str]]]] = {}
    for s in scenarios:
        for name, (label, actions) in baseline_actions(replays[0].steps[s.id]).items():
            per_baseline.setdefault(name, (label, {}))[1][s.id] = actions
    systems += [System(name, label, "baseline", actions) for name, (label, actions) in per_baseline.items()]
    metrics = evaluate_systems(scenarios, systems)
    metrics["targets"] = check_targets(metrics, config_label)
    metrics["target_system"] = config_label
    metrics["preset_targets"] = check_preset_targets(
        metrics, {"default": config_label, "protect": LOOP_DETECTOR_PROTECT})
    metrics["replays"] = [{"config": r.config_name, "seconds": round(r.seconds, 1), "calls": r.calls} for r in replays]
    _attach_detectors(metrics, replays)
    return metrics


def _attach_detectors(metrics: dict[str, Any], replays: Iterable[Replay]) -> None:
    """Which detector decided the first alarm of each run (confidence, a rule detector), for the report."""
    by_id = {r["id"]: r for r in metrics["runs"]}
    for rep in replays:
        for sid, decisions in rep.decisions.items():
            first = next((d for d in decisions if d["action"] != ACTION_ALLOW), None)
            info = by_id[sid]["systems"][rep.config_name]
            info["first_detector"] = (first["detector"] + (f":{first['rule_name']}" if first["rule_name"] else "")
                                      if first else None)
            info["first_evidence"] = first.get("evidence") if first else None
            info["levels"] = "".join(d["level"][0] if d["level"] != LEVEL_NONE else "." for d in decisions)
            info["actions"] = "".join(d["action"][0] if d["action"] != ACTION_ALLOW else "." for d in decisions)


def schema_fingerprint() -> str:
    """A short hash of the ClickHouse DDL the replay used (the materialized view computes the fingerprints the
    detector reads, so results depend on it)."""
    import hashlib

    from detector.storage.schema import sql_dir

    digest = hashlib.sha256()
    for path in sorted(sql_dir().glob("*.sql*")):  # the DDL and the normalization query (.sql.tmpl)
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]
