"""The repository's corpora through the pipeline, in process and deterministically, for a golden comparison.

``loop-detector eval`` replays the corpora through a running service (OTLP exporters, HTTP, the scheduler), with
random ids and wall-clock times. This replays the same corpora the same way, round by round (one LLM call of every
run per round, the decisions read after each round), but with everything that varies pinned: span and trace ids from
a seeded generator, span times from a fixed origin, the receiver's decoders called directly (with that origin as their
"now"), one insert into ``otel.otel_traces`` and one detection cycle per round. What comes out is, per corpus and
configuration:

- ``calls``: per run, a digest of every ``otel.genai_calls`` row of its traces (every column but ``inserted_at``, in
  span order): what the normalization made of the spans;
- ``decisions``: per run, the decision an agent reads after each of its calls (action, level, confidence, dominant
  signal, detector, rule, evidence).

It uses only what every release since c7acdac has (the decoders, ``Store.insert_arrow``, ``DetectorJob``, the span
emitter: ``detector.evaluation.emit`` since it was split out of ``evaluate``, before that ``evaluate.emit_call``), so
this file, with that one import adjusted, produces the golden on an older checkout: ``tests/data/golden_pipeline.json.gz`` was written this way from
6a852c8, the last commit that normalized on insert (the command is in that file, ``produced_by``), and
``tests/evaluation/test_golden_pipeline.py`` compares the current pipeline with it.

    .venv/bin/python tests/support/golden_pipeline.py OUT.json[.gz] [--commit SHA]
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script from any checkout: that checkout's package first
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from detector.core.decisions import DecisionBook
from detector.detection.job import DetectorJob
from detector.evaluation.corpus import generate_corpus
from detector.evaluation.corpus_records import Scenario
from detector.evaluation.emit import emit_call, scenario_duration_ns
from detector.evaluation.recorded import Recording, load_recordings
from detector.evaluation.simulate import start_run
from detector.ingest.otlp import decode_json, decode_protobuf
from detector.settings.config import AppConfig, IngestSettings, parse_config  # (every release has them there)
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore

__all__ = ["BASE_NS", "CONFIGS", "GOLDEN_FAMILIES", "golden", "replay_generated", "replay_recorded"]

BASE_NS = 1_780_000_000 * 10**9  # 2026-05-28 20:26:40 UTC: the corpora's runs end about here
SEED = 26
DECISION_FIELDS = ("action", "level", "confidence", "dominant_signal", "detector", "rule_name", "evidence")
SELECT_CALLS = """
SELECT * EXCEPT (inserted_at) FROM otel.genai_calls WHERE trace_id IN {t:Array(String)} ORDER BY ts, span_id
"""
SELECT_SPAN_SESSIONS = """
SELECT span_id, session_id, session_source FROM otel.genai_calls WHERE span_id IN {s:Array(String)}
"""


def configs() -> dict[str, AppConfig]:
    return {"default": AppConfig(), "protect": parse_config({"preset": "protect"}, "protect")}


CONFIGS = ("default", "protect")


class SeededIds(IdGenerator):
    """Trace and span ids from a seeded generator: the same spans on every run."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self.random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self.random.getrandbits(128) or 1


class _Pipeline:
    """A fresh store with the schema, and a detector over it: spans in, one cycle per round, decisions out."""

    def __init__(self, directory: str, config: AppConfig) -> None:
        self.store = ChdbStore(directory)
        apply_schema(self.store)
        config = config.model_copy(deep=True)
        config.detector.watermark_lag_seconds = 0
        self.job = DetectorJob(self.store, config, DecisionBook())
        self.job.load()
        self.settings = IngestSettings(max_body_bytes=1 << 30)

    def insert(self, tables: list[Any]) -> None:
        import pyarrow as pa

        tables = [t for t in tables if t.num_rows]
        if tables:
            self.store.insert_arrow("otel.otel_traces", pa.concat_tables(tables))
        self.job.run_cycle()

    def decision(self, session_id: str, trace_id: str, virtual_key: str | None, now_ns: int) -> list[Any]:
        d = self.job.book.lookup(session_id, trace_id, virtual_key, None, now_us=now_ns // 1000)
        return [round(v, 6) if isinstance(v, float) else v for v in (getattr(d, f) for f in DECISION_FIELDS)]

    def call_digests(self, traces: Sequence[str]) -> list[str]:
        rows = self.store.rows(SELECT_CALLS, {"t": sorted(set(traces))})
        return [hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()[:16] for r in rows]

    def close(self) -> None:
        self.store.close()


def replay_generated(scenarios: Sequence[Scenario], config: AppConfig, directory: str) -> dict[str, Any]:
    """The generated corpus, as ``replay.replay`` emits it (the same span-building code), round by round."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "loop-detector-eval"}), id_generator=SeededIds(SEED))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("golden")
    pipeline = _Pipeline(directory, config)
    runs = [{"scenario": s, "t_ns": BASE_NS - scenario_duration_ns(s), "session": None, "run": 0, "span": None,
             "ctx": None, "history": [], "session_id": "", "trace_id": "", "traces": [], "decisions": []}
            for s in scenarios]

    def open_trace(run: dict[str, Any], call: Any) -> None:
        run["run"], run["history"] = call.run, []
        run["span"], run["ctx"] = start_run(tracer, agent_name=run["scenario"].agent_name, session_id=run["session_id"],
                                            start_ns=run["t_ns"] + int(call.gap_s * 1e9) - 1000,
                                            virtual_key=run["scenario"].virtual_key or None)
        run["trace_id"] = format(run["span"].get_span_context().trace_id, "032x")
        run["traces"].append(run["trace_id"])

    try:
        for i in range(max(len(s.calls) for s in scenarios)):
            active = [r for r in runs if i < len(r["scenario"].calls)]
            for run in active:
                call = run["scenario"].calls[i]
                if call.session != run["session"] or call.run != run["run"]:
                    if run["span"] is not None:
                        run["span"].end(end_time=run["t_ns"])
                    if call.session != run["session"]:
                        run["session"] = call.session
                        run["session_id"] = f"golden-{run['scenario'].id}-s{call.session}"
                    open_trace(run, call)
                run["t_ns"] = emit_call(tracer, call, session_id=run["session_id"],
                                        start_ns=run["t_ns"] + int(call.gap_s * 1e9),
                                        capture_content=run["scenario"].capture_content, history=run["history"],
                                        parent=run["ctx"], virtual_key=run["scenario"].virtual_key or None)
                if i == len(run["scenario"].calls) - 1:
                    run["span"].end(end_time=run["t_ns"])
            spans = memory.get_finished_spans()
            memory.clear()
            body = encode_spans(spans).SerializeToString()
            pipeline.insert([decode_protobuf(body, pipeline.settings, now_ns=BASE_NS).spans.to_arrow()])
            for run in active:
                run["decisions"].append(pipeline.decision(run["session_id"], run["trace_id"],
                                                          run["scenario"].virtual_key or None, BASE_NS))
        return {"calls": {r["scenario"].id: pipeline.call_digests(r["traces"]) for r in runs},
                "decisions": {r["scenario"].id: r["decisions"] for r in runs}}
    finally:
        pipeline.close()
        provider.shutdown()


def replay_recorded(recordings: Sequence[Recording], config: AppConfig, directory: str) -> dict[str, Any]:
    """The recorded corpus, as ``replay.replay_recorded`` sends it (what had ended by the end of each LLM call),
    every session moved to end at the fixed origin."""
    pipeline = _Pipeline(directory, config)
    shift = {r.id: BASE_NS - max(sp.end for sp in r.spans) for r in recordings}
    batches = {r.id: r.batches() for r in recordings}
    decisions: dict[str, list[Any]] = {r.id: [] for r in recordings}
    sessions: dict[str, str] = {}
    try:
        for i in range(max(len(b) for b in batches.values())):
            active = [r for r in recordings if i < len(batches[r.id])]
            bodies = [r.request(batches[r.id][i] + (r.rest() if i == len(batches[r.id]) - 1 else []), shift[r.id])
                      for r in active]
            pipeline.insert([decode_json(b, pipeline.settings, now_ns=BASE_NS).spans.to_arrow() for b in bodies])
            wanted = [r.calls[i].body["spanId"] for r in active]
            resolved = {row["span_id"]: row for row in pipeline.store.rows(SELECT_SPAN_SESSIONS, {"s": wanted})}
            for r in active:
                span = r.calls[i].body
                row = resolved.get(span["spanId"], {})
                session = row.get("session_id", "")
                if row.get("session_source") not in (None, "", "trace"):
                    sessions.setdefault(r.id, session)
                elif r.id in sessions:
                    session = sessions[r.id]
                decisions[r.id].append(pipeline.decision(session or span["traceId"], span["traceId"], None, BASE_NS))
        traces = {r.id: [sp.body["traceId"] for sp in r.spans] for r in recordings}
        return {"calls": {rid: pipeline.call_digests(t) for rid, t in traces.items()}, "decisions": decisions}
    finally:
        pipeline.close()


def _each(replays: Iterator[tuple[str, str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": {}, "decisions": {}}
    for corpus, config_name, result in replays:
        out["calls"].setdefault(corpus, result["calls"])  # the same spans under either configuration
        out["decisions"][f"{corpus}/{config_name}"] = result["decisions"]
    return out


# The generated corpus's families when the golden file was written (CORPUS_VERSION 1): families added since (issue 31's)
# have no decisions of the previous pipeline to compare with, and their generators leave these runs unchanged (each
# run is seeded by its family and variant).
GOLDEN_FAMILIES = (
    "exact_tool_repeat", "ab_cycle", "long_cycle", "error_retry", "regenerated_text", "context_growth", "runaway_cost",
    "monologue", "empty_responses", "reworded_search", "shifted_reread", "handoff_bounce", "replan_go_on",
    "restart_loop", "fresh_id_error", "batch_template", "polling_backoff", "transient_error", "pagination",
    "same_greeting", "long_productive", "parallel_burst", "edit_test_cycle", "refined_search", "paged_read",
    "handoff_resolved", "go_on_progress", "restart_recovers", "flaky_backoff", "ci_poll_fixed", "page_scroll",
)


def golden() -> dict[str, Any]:
    """Both corpora under both configurations. chDB opens one data directory per process: run this in a process of
    its own (the test and the script do)."""
    scenarios, recordings = generate_corpus(families=GOLDEN_FAMILIES), load_recordings()

    def replays() -> Iterator[tuple[str, str, Any]]:
        with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
            for name, config in configs().items():
                yield "generated", name, replay_generated(scenarios, config, f"{tmp}/g-{name}")
                yield "recorded", name, replay_recorded(recordings, config, f"{tmp}/r-{name}")

    return _each(replays())


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--commit", default="", help="the commit of the checkout run, recorded in the file")
    args = parser.parse_args()
    result = golden()
    result["produced_by"] = {"commit": args.commit, "command": " ".join(["python", *sys.argv])}
    data = json.dumps(result, sort_keys=True, separators=(",", ":")).encode()
    Path(args.out).write_bytes(gzip.compress(data, mtime=0) if args.out.endswith(".gz") else data)
