"""What a replay's decisions are worth: every system's actions per run (loop-detector's, and the baselines' on the
same stored rows) scored against the labels: recall at warn and at block, false flags and false blocks, wasted calls
to the first warn and block (the first wasted call counting as 1), early alarms, per family, overall and per content
mode, and the targets each preset is held to."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from detector.core.escalation import ACTION_RANK
from detector.evaluation.baselines import all_baselines
from detector.evaluation.corpus import LEGIT_FAMILIES, LOOP_FAMILIES
from detector.settings.vocabulary import ACTION_ALLOW, ACTION_BLOCK, ACTION_WARN

__all__ = [
    "GroupMetrics", "LOOP_DETECTOR", "LOOP_DETECTOR_PROTECT", "PRESET_TARGETS", "RunScore", "System",
    "TARGET_FP_RATE", "TARGET_MEDIAN_DELAY_WARN", "TARGET_RECALL_WARN", "baseline_actions", "check_preset_targets",
    "check_targets", "evaluate_systems", "score_run",
]


LOOP_DETECTOR = "loop-detector"  # the default configuration (it never blocks)
LOOP_DETECTOR_PROTECT = "loop-detector (protect)"  # preset: protect

TARGET_RECALL_WARN = 0.95
TARGET_FP_RATE = 0.02
TARGET_MEDIAN_DELAY_WARN = 4

# The targets of detection that generalizes (issue 15), per corpus and content mode. Delays count the first wasted
# call as 1: "flagged by the 2nd wasted call" is a delay of 2.
PRESET_TARGETS: dict[str, dict[str, float]] = {
    "default": {"recall_warn": 0.98, "calls_to_warn_median": 2, "fp_rate_warn": 0.02},
    "protect": {"recall_block": 0.9, "fp_block": 0, "calls_to_block_median": 4},
}


def baseline_actions(steps: Sequence[Any], *, trace_cap: bool = False) -> dict[str, tuple[str, list[str]]]:
    """Per baseline (name -> (label, actions)): 'block' on the calls where it fires, else 'allow'.
    A baseline has one action; a firing counts both at warn and at block. ``trace_cap``: TokenPolice's call cap too
    (:func:`~detector.evaluation.baselines.all_baselines`)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for baseline in all_baselines(trace_cap=trace_cap):
        out[baseline.name] = (baseline.label, [ACTION_BLOCK if baseline.observe(s) else ACTION_ALLOW for s in steps])
    return out


# ============================================================================================ metrics


@dataclass
class RunScore:
    """One run under one system."""

    first_warn: int | None  # first call index with an action above allow (anywhere)
    first_block: int | None
    caught_warn: bool = False  # loop runs: an action above allow at or after onset
    caught_block: bool = False
    delay_warn: int | None = None
    delay_block: int | None = None
    early: bool = False  # loop runs: an alarm before onset

    @property
    def calls_to_warn(self) -> int | None:
        """Wasted calls up to the first warn, the first wasted call counting as 1 (delay + 1)."""
        return None if self.delay_warn is None else self.delay_warn + 1

    @property
    def calls_to_block(self) -> int | None:
        return None if self.delay_block is None else self.delay_block + 1


def score_run(actions: Sequence[str], label: str, onset: int | None) -> RunScore:
    ranks = [ACTION_RANK[a] for a in actions]
    warn_at = [i for i, r in enumerate(ranks) if r >= ACTION_RANK[ACTION_WARN]]
    block_at = [i for i, a in enumerate(actions) if a == ACTION_BLOCK]
    score = RunScore(first_warn=warn_at[0] if warn_at else None, first_block=block_at[0] if block_at else None)
    if label == "loop":
        assert onset is not None
        after_warn = [i for i in warn_at if i >= onset]
        after_block = [i for i in block_at if i >= onset]
        score.caught_warn, score.caught_block = bool(after_warn), bool(after_block)
        score.delay_warn = after_warn[0] - onset if after_warn else None
        score.delay_block = after_block[0] - onset if after_block else None
        score.early = any(i < onset for i in warn_at)
    return score


@dataclass
class GroupMetrics:
    runs: int = 0
    loop_runs: int = 0
    legit_runs: int = 0
    caught_warn: int = 0
    caught_block: int = 0
    early: int = 0
    fp_warn: int = 0
    fp_block: int = 0
    delays_warn: list[int] = field(default_factory=list)
    delays_block: list[int] = field(default_factory=list)

    def add(self, label: str, s: RunScore) -> None:
        self.runs += 1
        if label == "loop":
            self.loop_runs += 1
            self.caught_warn += s.caught_warn
            self.caught_block += s.caught_block
            self.early += s.early
            if s.delay_warn is not None:
                self.delays_warn.append(s.delay_warn)
            if s.delay_block is not None:
                self.delays_block.append(s.delay_block)
        else:
            self.legit_runs += 1
            self.fp_warn += s.first_warn is not None
            self.fp_block += s.first_block is not None

    def as_dict(self) -> dict[str, Any]:
        def rate(n: int, d: int) -> float | None:
            return round(n / d, 4) if d else None

        def med(xs: list[int]) -> float | None:
            return float(statistics.median(xs)) if xs else None

        def p90(xs: list[int]) -> int | None:  # nearest rank
            return sorted(xs)[max(0, math.ceil(0.9 * len(xs)) - 1)] if xs else None

        to_warn = [d + 1 for d in self.delays_warn]  # wasted calls, the first counting as 1
        to_block = [d + 1 for d in self.delays_block]
        return {
            "runs": self.runs, "loop_runs": self.loop_runs, "legit_runs": self.legit_runs,
            "recall_warn": rate(self.caught_warn, self.loop_runs), "recall_block": rate(self.caught_block, self.loop_runs),
            "caught_warn": self.caught_warn, "caught_block": self.caught_block,
            "early_alarms": self.early,
            "fp_rate_warn": rate(self.fp_warn, self.legit_runs), "fp_rate_block": rate(self.fp_block, self.legit_runs),
            "fp_warn": self.fp_warn, "fp_block": self.fp_block,
            "delay_warn_median": med(self.delays_warn), "delay_warn_max": max(self.delays_warn, default=None),
            "delay_block_median": med(self.delays_block), "delay_block_max": max(self.delays_block, default=None),
            "calls_to_warn_median": med(to_warn), "calls_to_warn_p90": p90(to_warn),
            "calls_to_warn_max": max(to_warn, default=None),
            "calls_to_block_median": med(to_block), "calls_to_block_p90": p90(to_block),
            "calls_to_block_max": max(to_block, default=None),
        }


@dataclass
class System:
    name: str
    label: str
    kind: str  # 'loop-detector' | 'baseline'
    actions: dict[str, list[str]]  # scenario id -> action per call


def evaluate_systems(scenarios: Sequence[Any], systems: Sequence[System]) -> dict[str, Any]:
    """Metrics for every system, per family, over loop families, over legit families, per content mode
    (``by_content``: captured or not); and per run. ``scenarios``: built-in scenarios or recordings (anything with
    ``id``, ``family``, ``label``, ``onset``, ``capture_content`` and ``calls``)."""
    families = [f for f in (*LOOP_FAMILIES, *LEGIT_FAMILIES) if any(s.family == f for s in scenarios)]
    families += sorted({s.family for s in scenarios} - set(families))
    result: dict[str, Any] = {"systems": [{"name": s.name, "label": s.label, "kind": s.kind} for s in systems],
                              "families": {}, "overall": {}, "runs": []}
    per_family: dict[str, dict[str, GroupMetrics]] = {f: {} for f in families}
    overall: dict[str, GroupMetrics] = {}
    runs: dict[str, dict[str, Any]] = {
        s.id: {"id": s.id, "family": s.family, "label": s.label, "onset": s.onset, "calls": len(s.calls),
               "capture_content": s.capture_content, "systems": {}} for s in scenarios}
    for system in systems:
        all_group = overall.setdefault(system.name, GroupMetrics())
        for s in scenarios:
            score = score_run(system.actions[s.id], s.label, s.onset)
            per_family[s.family].setdefault(system.name, GroupMetrics()).add(s.label, score)
            all_group.add(s.label, score)
            runs[s.id]["systems"][system.name] = {
                "first_warn": score.first_warn, "first_block": score.first_block, "delay_warn": score.delay_warn,
                "delay_block": score.delay_block, "early": score.early}
    for f in families:
        result["families"][f] = {name: g.as_dict() for name, g in per_family[f].items()}
    result["overall"] = {name: g.as_dict() for name, g in overall.items()}
    result["by_content"] = {}
    for mode, on in (("on", True), ("off", False)):
        subset = [s for s in scenarios if bool(s.capture_content) == on]
        if not subset:
            continue
        result["by_content"][mode] = {}
        for system in systems:
            group = GroupMetrics()
            for s in subset:
                group.add(s.label, score_run(system.actions[s.id], s.label, s.onset))
            result["by_content"][mode][system.name] = group.as_dict()
    result["runs"] = list(runs.values())
    return result


def check_targets(metrics: dict[str, Any], system: str = LOOP_DETECTOR) -> list[dict[str, Any]]:
    """The issue's targets for ``system``: recall at warn, FP rate, median delay, and per family at least as
    good as the best baseline (loop families: warn recall; legit families: FP rate at warn)."""
    overall = metrics["overall"][system]
    checks = [
        {"target": f"recall at warn >= {TARGET_RECALL_WARN}", "value": overall["recall_warn"],
         "met": (overall["recall_warn"] or 0) >= TARGET_RECALL_WARN},
        {"target": f"false-positive rate <= {TARGET_FP_RATE:.0%}", "value": overall["fp_rate_warn"],
         "met": (overall["fp_rate_warn"] or 0) <= TARGET_FP_RATE},
        {"target": f"median delay to warn <= {TARGET_MEDIAN_DELAY_WARN} calls", "value": overall["delay_warn_median"],
         "met": overall["delay_warn_median"] is not None and overall["delay_warn_median"] <= TARGET_MEDIAN_DELAY_WARN},
    ]
    baselines = [s["name"] for s in metrics["systems"] if s["kind"] == "baseline"]
    behind = []
    for family, by_system in metrics["families"].items():
        mine = by_system[system]
        if mine["loop_runs"]:
            best = max((by_system[b]["recall_warn"] or 0) for b in baselines) if baselines else 0
            if (mine["recall_warn"] or 0) < best:
                behind.append(f"{family} (recall {mine['recall_warn']:.2f} < {best:.2f})")
        if mine["legit_runs"]:
            best = min((by_system[b]["fp_rate_warn"] or 0) for b in baselines) if baselines else 1
            if (mine["fp_rate_warn"] or 0) > best:
                behind.append(f"{family} (FP {mine['fp_rate_warn']:.2f} > {best:.2f})")
    checks.append({"target": "at least as good as the best baseline on every family", "value": behind or "all",
                   "met": not behind})
    return checks


def check_preset_targets(metrics: dict[str, Any], systems: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The targets of issue 15 (``PRESET_TARGETS``) for each content mode: the default configuration's recall at warn,
    median wasted calls to warn and false flags; protect's recall at block, false blocks and median wasted calls to
    block. ``systems``: preset -> system name (default: the two loop-detector passes)."""
    systems = systems or {"default": LOOP_DETECTOR, "protect": LOOP_DETECTOR_PROTECT}
    checks = []
    for mode, by_system in metrics.get("by_content", {}).items():
        for preset, targets in PRESET_TARGETS.items():
            m = by_system.get(systems.get(preset, ""))
            if m is None:
                continue
            for key, target in targets.items():
                value = m.get(key)
                if key.startswith("recall"):
                    met, text = value is not None and value >= target, f"{key.replace('_', ' ')} >= {target:g}"
                elif key == "fp_block":
                    met, text = (value or 0) <= target, "false blocks = 0"
                elif key.startswith("fp_rate"):
                    met, text = value is not None and value <= target, f"false flags <= {target:.0%}"
                else:
                    met = value is not None and value <= target
                    text = f"median wasted calls to {key.split('_')[2]} <= {target:g}"
                checks.append({"preset": preset, "content": mode, "target": text, "value": value, "met": met})
    return checks
