"""What each rule of the progress model earns: detection quality with and without it, on the real runs and on the
generated corpus (the ablation table of docs/detection-quality.md).

    .venv/bin/python tools/progress_ablation.py --real-runs real-runs.jsonl --data /tmp/ablation

The runs are replayed once through the real pipeline (receiver, chDB, the view's fingerprints; default configuration),
content captured and not; the stored calls are then scored again by the engine, in process, once per variant. That
second pass is what the pipeline itself does with those rows (the detector reads them back in span order and scores
them call by call: ``detector.core.engine``), so "as shipped" equals the pipeline's own figures, and each variant
differs from it by one rule. A variant switches a rule off in the Python source of the core (this tool runs it
uncompiled); the rows' own flags (a failure's wording, a status in progress) are switched off by clearing them.
Developer tool: not part of the package.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ["LOOP_DETECTOR_PURE_PYTHON"] = "1"  # variants patch the Python source of the core
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detector.core import progress, scope_scoring  # noqa: E402
from detector.core.decisions import strongest  # noqa: E402
from detector.core.engine import Engine  # noqa: E402
from detector.core.models import Call  # noqa: E402
from detector.detection.engine_config import engine_tuning  # noqa: E402
from detector.settings.config import AppConfig  # noqa: E402
from detector.settings.vocabulary import SCOPE_SESSION, SCOPE_TRACE  # noqa: E402
from detector.storage.call_rows import CALL_COLUMNS  # noqa: E402

Patch = Callable[[], Iterator[None]]


@contextmanager
def _set(module: Any, **values: Any) -> Iterator[None]:
    old = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


def _without(rule: Callable[..., int]) -> Patch:
    return lambda: _set(progress, RULES=tuple(r for r in progress.RULES if r is not rule))


def _calls_without(field: str) -> Callable[[list[Call]], list[Call]]:
    return lambda calls: [dataclasses.replace(c, **{field: False}) if getattr(c, field) else c for c in calls]


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# name -> (what the variant changes, a patch of the core, a change of the stored calls)
VARIANTS: dict[str, tuple[Patch, Callable[[list[Call]], list[Call]] | None]] = {
    "as shipped": (_nothing, None),
    "memory of 5 steps (was 10)": (lambda: _set(progress, MEMORY=5), None),
    "memory of 16 steps": (lambda: _set(progress, MEMORY=16), None),
    "memory of 32 steps": (lambda: _set(progress, MEMORY=32), None),
    "a loop is 2 wasted steps in a row (was 3)": (
        lambda: _chain(_set(progress, RUN_TO_WARN=2), _set(scope_scoring, RUN_TO_WARN=2)), None),
    "a loop is 4 wasted steps in a row": (
        lambda: _chain(_set(progress, RUN_TO_WARN=4), _set(scope_scoring, RUN_TO_WARN=4)), None),
    "without same_failure (any arguments)": (_without(progress.same_failure), None),
    "without the failure wording (status errors only)": (_nothing, _calls_without("observation_failed")),
    "without same_call_near_result": (_without(progress.same_call_near_result), None),
    "without shifted_call_same_content": (_without(progress.shifted_call_same_content), None),
    "without same_reply": (_without(progress.same_reply), None),
    "without same_sizes (content off)": (_without(progress.same_sizes), None),
    "without backoff (growing waits)": (lambda: _set(progress, backing_off=lambda steps: False), None),
    "without a status in progress (polling)": (_nothing, _calls_without("observation_pending")),
}


@contextmanager
def _chain(*managers: Any) -> Iterator[None]:
    for m in managers:
        m.__enter__()
    try:
        yield
    finally:
        for m in reversed(managers):
            m.__exit__(None, None, None)


def run_id(session_id: str) -> str:
    """The scenario of a replayed session: ``eval-<tag>-<scenario id>-s<n>``."""
    return session_id.split("-", 2)[2].rsplit("-s", 1)[0]


def replay_offline(calls: list[Call], config: AppConfig) -> dict[str, list[str]]:
    """Per scenario, the action after each model call and the tool spans that followed it (session and trace), as
    the replay read them from the API."""
    by_run: dict[str, list[Call]] = defaultdict(list)
    for c in calls:
        by_run[run_id(c.session_id)].append(c)
    actions = {}
    for rid, cs in by_run.items():
        engine = Engine(engine_tuning(config))
        cs.sort(key=lambda c: (c.ts_ns, c.span_id))
        groups: list[list[Call]] = []
        before: list[Call] = []
        for c in cs:
            if c.is_llm:
                groups.append([c])
            elif groups:
                groups[-1].append(c)
            else:
                before.append(c)
        if groups:
            groups[0] = before + groups[0]
        out = []
        for group in groups:
            engine.process(group, now_us=group[-1].ts_ns // 1000 + 1)
            call = next(c for c in group if c.is_llm)
            scopes = [engine.states.get((SCOPE_SESSION, engine.scopes.session_of(call, engine.states[(SCOPE_TRACE, call.trace_id)]))),
                      engine.states.get((SCOPE_TRACE, call.trace_id))]
            best = strongest([engine.decision_for(st, now_us=0) for st in scopes if st is not None])
            out.append(best.action if best else "allow")
        actions[rid] = out
    return actions


def stored_calls(data_dir: Path) -> list[Call]:
    from detector.storage.transport import ChdbStore

    store = ChdbStore(str(data_dir))
    try:
        cols = store.arrow(f"SELECT {CALL_COLUMNS} FROM otel.genai_calls WHERE call_kind IN ('llm', 'tool', 'agent') "
                           "ORDER BY ts, span_id").to_pydict()
    finally:
        store.close()
    return Call.from_columns(cols)


def main() -> int:
    from detector.evaluation.corpus import generate_corpus
    from detector.evaluation.quality import score_run
    from detector.evaluation.real_runs import (
        LABELS_FILE,
        load_labels,
        load_real_runs,
        real_run_metrics,
        score_real_run,
        to_scenario,
    )
    from detector.evaluation.replay import replay

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--real-runs", required=True, help="the runs extract.py rebuilt (corpora/real-runs/README.md)")
    ap.add_argument("--labels", default=str(LABELS_FILE))
    ap.add_argument("--data", required=True, help="where the replays' data directories go (reused when present)")
    ap.add_argument("--no-generated", action="store_true", help="the real runs only")
    a = ap.parse_args()
    labels = load_labels(a.labels)
    runs = [r for r in load_real_runs(a.real_runs) if r.id in labels]
    data = Path(a.data)
    real_dir, gen_dir = data / "real", data / "generated"
    if not real_dir.exists():
        scenarios = []
        for mode in ("on", "off"):
            for r in runs:
                sc = to_scenario(r, labels[r.id], capture_content=mode == "on")
                sc.id = f"{r.id}~{mode}"
                scenarios.append(sc)
        replay(scenarios, AppConfig(), data_dir=str(real_dir))
    generated = [] if a.no_generated else generate_corpus()
    if generated and not gen_dir.exists():
        replay(generated, AppConfig(), data_dir=str(gen_dir))
    real_calls = stored_calls(real_dir)
    gen_calls = stored_calls(gen_dir) if generated else []
    by_id = {s.id: s for s in generated}

    header = ["variant", "real, content on: recall / honest flagged / median wasted", "real, content off: recall / "
              "honest flagged", "generated: recall / false flags"]
    print("| " + " | ".join(header) + " |")
    print("|---|---:|---:|---:|")
    for name, (patch, change) in VARIANTS.items():
        with patch():
            acts = replay_offline(change(real_calls) if change else real_calls, AppConfig())
            cells = []
            for mode in ("on", "off"):
                scores = [score_real_run(acts[f"{r.id}~{mode}"], labels[r.id]) for r in runs]
                m = real_run_metrics(scores)
                cell = f"{m['recall_warn']:.2f} / {m['honest_flagged_n']} of {m['honest']}"
                if mode == "on":
                    cell += f" / {m['wasted_to_warn_median']}"
                cells.append(cell)
            if generated:
                gen_acts = replay_offline(change(gen_calls) if change else gen_calls, AppConfig())
                loops = [score_run(gen_acts[s], by_id[s].label, by_id[s].onset) for s in gen_acts
                         if by_id[s].label == "loop"]
                legit = [score_run(gen_acts[s], by_id[s].label, by_id[s].onset) for s in gen_acts
                         if by_id[s].label != "loop"]
                cells.append(f"{sum(x.caught_warn for x in loops) / len(loops):.2f} / "
                             f"{sum(x.first_warn is not None for x in legit)} of {len(legit)}")
            else:
                cells.append("-")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
