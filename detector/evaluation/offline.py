"""A replay scored again offline: the calls a replay stored (``otel.genai_calls`` in its data directory), scored by the
engine in process, and the decision read after each model call as the replay reads it from the API.

That is what the pipeline's detector does with those rows (it reads them back in span order and scores them call by
call: :mod:`detector.core.engine`), without the service, the clock or the OTLP round trip: seconds instead of the
replay's minutes, so that one replay can be scored many times (another preset, a change of the core:
``tools/progress_ablation.py``). The calls stored do not depend on the configuration the replay ran (the replay
sends every call whatever it is told), so a replay under the default configuration is scored offline under any other.
``tests/evaluation/test_offline.py`` checks that the offline actions are the pipeline's, step by step.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from detector.core.decisions import strongest
from detector.core.engine import Engine, span_order
from detector.core.models import Call
from detector.detection.engine_config import engine_tuning
from detector.settings.config import AppConfig
from detector.settings.vocabulary import ACTION_ALLOW, SCOPE_KEY, SCOPE_SESSION, SCOPE_TRACE

__all__ = ["rescore", "scenario_of", "stored_calls"]

SELECT_CALLS = "SELECT {columns} FROM otel.genai_calls WHERE call_kind IN ('llm', 'tool', 'agent') ORDER BY ts, span_id"


def stored_calls(data_dir: str | Path) -> list[Call]:
    """Every call a replay stored, read from a copy of its data directory (chDB opens a directory from one process
    only, and writes to the one it opens: the replay's own is left as it is)."""
    from detector.storage.call_rows import CALL_COLUMNS
    from detector.storage.transport import ChdbStore

    source = Path(data_dir) / "chdb"
    if not source.is_dir():
        raise FileNotFoundError(f"{data_dir}: not a replay's data directory (no chdb/ in it)")
    with tempfile.TemporaryDirectory(prefix="loop-detector-offline-") as tmp:
        shutil.copytree(source, Path(tmp) / "chdb", symlinks=True)  # chDB links its tables relatively
        store = ChdbStore(tmp)
        try:
            columns = store.arrow(SELECT_CALLS.format(columns=CALL_COLUMNS)).to_pydict()
        finally:
            store.close()
    return Call.from_columns(columns)


def scenario_of(session_id: str) -> str:
    """The scenario a replayed session belongs to: the replay names them ``eval-<tag>-<scenario id>-s<n>``."""
    return session_id.split("-", 2)[2].rsplit("-s", 1)[0]


def rescore(calls: Iterable[Call], config: AppConfig) -> dict[str, list[str]]:
    """Per scenario, the action after each model call (and the tool runs that followed it, before the next model
    call), as the replay reads it: the strongest decision of the call's session, trace and key, after the engine
    (configured by ``config``, a fresh one per scenario) has scored every call up to there."""
    by_scenario: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        by_scenario[scenario_of(call.session_id)].append(call)
    tuning = engine_tuning(config)
    return {sid: _actions(Engine(tuning), sorted(cs, key=span_order)) for sid, cs in by_scenario.items()}


def _steps(calls: Sequence[Call]) -> list[list[Call]]:
    """The calls in steps: a model call and the tool runs after it; what comes before the first model call (the run's
    root span) goes with the first step."""
    steps: list[list[Call]] = []
    before: list[Call] = []
    for call in calls:
        if call.is_llm:
            steps.append([call])
        elif steps:
            steps[-1].append(call)
        else:
            before.append(call)
    if steps:
        steps[0] = before + steps[0]
    return steps


def _actions(engine: Engine, calls: Sequence[Call]) -> list[str]:
    actions = []
    for step in _steps(calls):
        engine.process(step, now_us=step[-1].ts_ns // 1000 + 1)
        model = next(c for c in step if c.is_llm)
        trace = engine.states.get((SCOPE_TRACE, model.trace_id))
        scopes = [trace, engine.states.get((SCOPE_KEY, model.virtual_key)) if model.virtual_key else None]
        if trace is not None:
            scopes.append(engine.states.get((SCOPE_SESSION, engine.scopes.session_of(model, trace))))
        best = strongest([engine.decision_for(st, now_us=0) for st in scopes if st is not None])
        actions.append(best.action if best is not None else ACTION_ALLOW)
    return actions
