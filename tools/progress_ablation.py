"""What each rule of the progress model earns: detection quality on the real runs with and without it, for all the runs
and per source, in the three content modes, under both presets (the ablation table of docs/detection-quality.md).

    .venv/bin/python tools/progress_ablation.py --real-runs real-runs.jsonl --data /tmp/ablation

Replay once, score many times. ``--data DIR`` is a replay's data directory: when DIR does not exist, the labeled runs
are replayed once into it through the real pipeline, in each content mode (``loop-detector eval --real-runs FILE
--keep-replay DIR --json REPORT`` makes one too, with the pipeline's own figures of both presets in REPORT). The calls
it stored are then scored again by the engine in process (``detector.evaluation.offline``), once per variant and
preset: what the pipeline's detector does with those rows, in seconds. So the "as shipped" table is the pipeline's
own figures (``loop-detector eval --real-runs`` on the same runs), and ``--check REPORT`` verifies it step by step
against an eval's JSON report (the replay this tool makes is checked against its own, ``DIR/eval.json``).

A variant (``VARIANTS``, one line each) is a name and what it changes: ``Patch``es of the core's Python modules (a
constant, a function, the tuple of progress rules: ``constant``, ``without_rule``), and/or a change of the stored
calls (``calls_without``: a flag of the rows cleared). The core runs uncompiled here, so that patches take effect; a
patch whose attribute the core no longer has makes its variant "not applicable", said, not silently "as shipped".
``--generated DIR2`` adds the generated corpus (replayed into DIR2 when it does not exist).
Developer tool: not part of the package.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

os.environ["LOOP_DETECTOR_PURE_PYTHON"] = "1"  # variants patch the Python source of the core
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detector.core.models import Call  # noqa: E402
from detector.evaluation.offline import rescore, scenario_of, stored_calls  # noqa: E402
from detector.evaluation.quality import score_run  # noqa: E402
from detector.evaluation.real_runs import (  # noqa: E402
    CONTENT_MODES,
    LABELS_FILE,
    PRESETS,
    ContentMode,
    Preset,
    RealRun,
    RunLabel,
    load_labels,
    load_real_runs,
    scenario_id,
)
from detector.evaluation.real_runs_eval import loop_detector_system, run_real_eval  # noqa: E402
from detector.evaluation.real_runs_report import compact_actions, mode_figures, run_groups  # noqa: E402
from detector.settings.config import AppConfig, parse_config  # noqa: E402

PROGRESS = "detector.core.progress"
Actions = dict[str, list[str]]  # scenario id -> the action after each step
CallsChange = Callable[[list[Call]], list[Call]]


class NotApplicable(Exception):
    """The core has no longer what a variant changes."""


@dataclass(frozen=True)
class Patch:
    """An attribute of a core module replaced: by ``value``, or by ``derive(the shipped value)``. Every other module of
    the package that imported the same object under the same name (``from ... import RUN_TO_WARN``) gets it too."""

    name: str
    value: Any = None
    derive: Callable[[Any], Any] | None = None
    module: str = PROGRESS


@dataclass(frozen=True)
class Variant:
    name: str
    patches: tuple[Patch, ...] = ()
    calls: CallsChange | None = None  # a change of the stored calls


def constant(name: str, value: Any, module: str = PROGRESS) -> Patch:
    """A constant or a function of ``module`` replaced."""
    return Patch(name, value=value, module=module)


def without_rule(rule: str) -> Patch:
    """The progress rule named ``rule`` taken out of ``RULES``."""
    def drop(rules: tuple[Any, ...]) -> tuple[Any, ...]:
        if rule not in {r.__name__ for r in rules}:
            raise NotApplicable(f"{PROGRESS}.RULES has no {rule}")
        return tuple(r for r in rules if r.__name__ != rule)
    return Patch("RULES", derive=drop)


def calls_without(flag: str) -> CallsChange:
    """A boolean flag of the stored calls cleared (a failure's wording, a status in progress)."""
    def change(calls: list[Call]) -> list[Call]:
        if not any(f.name == flag for f in dataclasses.fields(Call)):
            raise NotApplicable(f"a stored call has no {flag}")
        return [dataclasses.replace(c, **{flag: False}) if getattr(c, flag) else c for c in calls]
    return change


VARIANTS: tuple[Variant, ...] = (
    Variant("as shipped"),
    Variant("memory of 5 steps", (constant("MEMORY", 5),)),
    Variant("memory of 16 steps", (constant("MEMORY", 16),)),
    Variant("memory of 32 steps", (constant("MEMORY", 32),)),
    Variant("a loop is 2 wasted steps in a row", (constant("RUN_TO_WARN", 2),)),
    Variant("a loop is 4 wasted steps in a row", (constant("RUN_TO_WARN", 4),)),
    Variant("without same_failure (any arguments)", (without_rule("same_failure"),)),
    Variant("without the failure wording (status errors only)", calls=calls_without("observation_failed")),
    Variant("without same_call_near_result", (without_rule("same_call_near_result"),)),
    Variant("without shifted_call_same_content", (without_rule("shifted_call_same_content"),)),
    Variant("without same_reply", (without_rule("same_reply"),)),
    Variant("without same_sizes (content off)", (without_rule("same_sizes"),)),
    Variant("without reworded_nothing", (without_rule("reworded_nothing"),)),
    Variant("without changes judged by their check (an acknowledgement is progress)",
            calls=calls_without("observation_ack")),
    Variant("without the overhead of a cycle (its fixed steps are wasted)",
            (constant("_overhead", lambda step, steps, prior: False),)),
    Variant("without empty results (an empty result is not captured)", calls=calls_without("observation_empty")),
    Variant("without backoff (growing waits)", (constant("backing_off", lambda steps: False),)),
    Variant("without a status in progress (polling)", calls=calls_without("observation_pending")),
)


@contextmanager
def applied(patches: Sequence[Patch]) -> Iterator[list[str]]:
    """The patches in force (yields what was replaced: ``module.name``), undone on leaving."""
    saved: list[tuple[ModuleType, str, Any]] = []
    try:
        for patch in patches:
            module = importlib.import_module(patch.module)
            if not hasattr(module, patch.name):
                raise NotApplicable(f"{patch.module} has no {patch.name}")
            shipped = getattr(module, patch.name)
            new = patch.derive(shipped) if patch.derive is not None else patch.value
            bound = [m for name, m in sorted(sys.modules.items()) if name.startswith("detector.") and m is not module
                     and getattr(m, patch.name, None) is shipped]
            for m in (module, *bound):
                saved.append((m, patch.name, shipped))
                setattr(m, patch.name, new)
        yield [f"{m.__name__}.{name}" for m, name, _ in saved]
    finally:
        for m, name, old in reversed(saved):
            setattr(m, name, old)


def preset_config(preset: Preset) -> AppConfig:
    return AppConfig() if preset == "default" else parse_config({"preset": preset}, preset)


def score(variant: Variant, calls: list[Call], presets: Sequence[Preset]) -> tuple[dict[Preset, Actions], list[str]]:
    """Every scenario's actions under each preset with the variant in force, and what it replaced."""
    with applied(variant.patches) as replaced:
        changed = variant.calls(calls) if variant.calls is not None else calls
        return {preset: rescore(changed, preset_config(preset)) for preset in presets}, replaced


# ============================================================================================ the tables


@dataclass(frozen=True)
class RealRunsData:
    runs: list[RealRun]
    labels: dict[str, RunLabel]
    modes: list[ContentMode]


@dataclass(frozen=True)
class Generated:
    scenarios: dict[str, Any]  # scenario id -> the generated scenario
    calls: list[Call]


def real_cell(actions: Actions, runs: Sequence[RealRun], data: RealRunsData, preset: Preset, mode: ContentMode) -> str:
    """default: recall at warn / honest runs flagged / median wasted steps to warn; protect: recall at block / honest
    runs blocked (clear labels). "-" where the group has no clear loop."""
    m = mode_figures(actions, runs, data.labels, mode)["clear"]
    recall = "-" if m["recall_warn"] is None else f"{m['recall_warn']:.2f}"
    if preset == "protect":
        block = "-" if m["recall_block"] is None else f"{m['recall_block']:.2f}"
        return f"{block} / {m['honest_blocked']} of {m['honest']}"
    wasted = "-" if m["wasted_to_warn_median"] is None else f"{m['wasted_to_warn_median']:g}"
    return f"{recall} / {m['honest_flagged_n']} of {m['honest']} / {wasted}"


def generated_cell(actions: Actions, generated: Generated, preset: Preset, mode: ContentMode) -> str:
    """The generated corpus's runs of that content mode: recall at warn / false flags (default), recall at block /
    false blocks (protect)."""
    chosen = [s for s in generated.scenarios.values()
              if (s.capture_content, s.app_fingerprints) == (mode == "on", mode == "fingerprints")]
    if not chosen:
        return "-"
    scores = [(s.label, score_run(actions[s.id], s.label, s.onset)) for s in chosen]
    loops = [x for label, x in scores if label == "loop"]
    legit = [x for label, x in scores if label != "loop"]
    caught = sum(x.caught_block if preset == "protect" else x.caught_warn for x in loops)
    false = sum((x.first_block if preset == "protect" else x.first_warn) is not None for x in legit)
    return f"{caught / len(loops):.2f} / {false} of {len(legit)}" if loops else f"- / {false} of {len(legit)}"


def table(real: dict[Preset, Actions], gen: dict[Preset, Actions] | None, data: RealRunsData,
          generated: Generated | None, shipped: list[list[str]] | None) -> list[list[str]]:
    """One variant's rows: preset x content mode; a cell per group of runs (all, then each source)."""
    groups = run_groups(data.runs)
    rows = []
    for preset, actions in real.items():
        for mode in data.modes:
            row = [preset, mode] + [real_cell(actions, g.runs, data, preset, mode) for g in groups]
            if generated is not None and gen is not None:
                row.append(generated_cell(gen[preset], generated, preset, mode))
            rows.append(row)
    if shipped is not None:  # what differs from "as shipped" in bold
        rows = [[c if i < 2 or c == s else f"**{c}**" for i, (c, s) in enumerate(zip(r, sr, strict=True))]
                for r, sr in zip(rows, shipped, strict=True)]
    return rows


def print_table(variant: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"### {variant}\n")
    print("| " + " | ".join(header) + " |")
    print("|---|---|" + "---:|" * (len(header) - 2))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


# ============================================================================================ the data


def load_data(args: argparse.Namespace) -> tuple[RealRunsData, list[Call]]:
    labels = load_labels(args.labels)
    runs = [r for r in load_real_runs(args.real_runs) if r.id in labels]
    modes = [m for m in CONTENT_MODES if m in args.content.split(",")]
    data_dir = Path(args.data)
    if not data_dir.exists():
        report = run_real_eval(runs, labels, presets=("default",), modes=modes, keep_replay=data_dir)
        (data_dir / "eval.json").write_text(json.dumps(report) + "\n")
    calls = stored_calls(data_dir)
    stored = {scenario_of(c.session_id) for c in calls}
    missing = [scenario_id(r.id, m) for r in runs for m in modes if scenario_id(r.id, m) not in stored]
    if missing:
        raise SystemExit(f"{data_dir} holds no replay of {len(missing)} scenarios ({', '.join(missing[:3])}, ...): "
                         "replay them (a new --data), or choose the content modes it has (--content)")
    return RealRunsData(runs, labels, modes), calls


def load_generated(path: str) -> Generated:
    from detector.evaluation.corpus import generate_corpus
    from detector.evaluation.replay import replay

    scenarios = generate_corpus()
    if not Path(path).exists():
        replay(scenarios, AppConfig(), data_dir=path)
    calls = stored_calls(path)
    if {scenario_of(c.session_id) for c in calls} != {s.id for s in scenarios}:
        raise SystemExit(f"{path}: a replay of another generated corpus: replay it again (a new --generated)")
    return Generated({s.id: s for s in scenarios}, calls)


def check(shipped: dict[Preset, Actions], report_path: Path) -> bool:
    """The "as shipped" actions against an eval's JSON report: the same action after every step of every scenario."""
    report = json.loads(report_path.read_text())
    ok = True
    for preset, actions in shipped.items():
        pipeline = report["actions"].get(loop_detector_system(preset))
        if pipeline is None:
            continue
        common = sorted(set(pipeline) & set(actions))
        differ = [sid for sid in common if compact_actions(actions[sid]) != pipeline[sid]]
        print(f"check ({preset}): offline = {report_path}'s pipeline actions on {len(common) - len(differ)} of "
              f"{len(common)} scenarios", file=sys.stderr)
        for sid in differ[:10]:
            print(f"  {sid}\n    pipeline {pipeline[sid]}\n    offline  {compact_actions(actions[sid])}",
                  file=sys.stderr)
        ok = ok and not differ
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--real-runs", required=True, help="the runs extract.py rebuilt (corpora/real-runs/README.md)")
    ap.add_argument("--labels", default=str(LABELS_FILE))
    ap.add_argument("--data", required=True, help="a replay's data directory (replayed into when it does not exist)")
    ap.add_argument("--content", default=",".join(CONTENT_MODES), help="content modes (default: all three)")
    ap.add_argument("--presets", default=",".join(PRESETS), help="presets (default: default,protect)")
    ap.add_argument("--variants", help="comma-separated parts of variant names (default: all; as shipped always: "
                    "--variants 'as shipped' for it alone)")
    ap.add_argument("--check", metavar="REPORT", help="an eval --real-runs JSON report to check as shipped against")
    ap.add_argument("--generated", metavar="DIR", help="the generated corpus too: its replay's data directory")
    args = ap.parse_args()
    presets: list[Preset] = [p for p in PRESETS if p in args.presets.split(",")]
    data, calls = load_data(args)
    generated = load_generated(args.generated) if args.generated else None
    wanted = [w.strip() for w in args.variants.split(",")] if args.variants else None
    variants = [v for v in VARIANTS if v is VARIANTS[0] or wanted is None or any(w in v.name for w in wanted)]

    header = ["preset", "content"] + [
        f"{g.label} (loops: {sum(data.labels[r.id].label == 'loop' and data.labels[r.id].clear for r in g.runs)})"
        for g in run_groups(data.runs)] + (["generated"] if generated else [])
    print("Clear labels. default: recall at warn / honest runs flagged / median wasted steps to warn; protect: recall "
          "at block / honest runs blocked" + ("; generated: recall / false flags (protect: at block)" if generated
                                              else "") + ". Bold: not as shipped.\n")
    shipped_rows: list[list[str]] | None = None
    for variant in variants:
        try:
            real, replaced = score(variant, calls, presets)
            gen = score(variant, generated.calls, presets)[0] if generated else None
        except NotApplicable as exc:
            print(f"### {variant.name}\n\nnot applicable: {exc}\n")
            continue
        rows = table(real, gen, data, generated, shipped_rows)
        print_table(variant.name, header, rows)
        if replaced:
            print(f"({variant.name}: replaced {', '.join(replaced)})", file=sys.stderr)
        if shipped_rows is None:
            shipped_rows = rows
            report = Path(args.check) if args.check else Path(args.data) / "eval.json"
            if report.is_file() and not check(real, report):
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
