"""Corpora replayed through a service running in-process (receiver -> chDB -> the detection cycle -> the decision
API), one model call of every run per round: send, wait until the detector's watermark has passed it (and one more
cycle), then read every run's decision for its session and trace, as an agent would before its next call. Afterwards
the rows the pipeline stored are read back, call by call, for the baselines."""

from __future__ import annotations

import logging
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import httpx
from opentelemetry import context as otel_context
from opentelemetry.trace import Tracer

from detector.evaluation.baselines import StoredCall, ToolRun
from detector.evaluation.corpus_records import CallSpec, Scenario
from detector.evaluation.emit import emit_call, scenario_duration_ns
from detector.evaluation.quality import LOOP_DETECTOR
from detector.settings.config import AppConfig

__all__ = [
    "ProgressBar", "Replay", "eval_service_config", "replay", "replay_recorded", "stored_steps",
    "stored_steps_of_traces", "wait_for_watermark",
]


class ProgressBar:
    """A progress bar on stderr (a line per 10% when stderr is not a terminal)."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = max(1, total)
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.done = 0
        self.started = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_decile = -1

    def update(self, n: int, note: str = "") -> None:
        self.done = min(self.total, self.done + n)
        if not self.enabled:
            return
        frac = self.done / self.total
        elapsed = time.monotonic() - self.started
        if self.tty:
            width = 30
            bar = "#" * int(frac * width) + "." * (width - int(frac * width))
            self.stream.write(f"\r{self.label} [{bar}] {frac:4.0%} {self.done}/{self.total} calls {elapsed:5.1f}s {note}  ")
            self.stream.flush()
        elif int(frac * 10) != self._last_decile:
            self._last_decile = int(frac * 10)
            self.stream.write(f"{self.label}: {frac:4.0%} ({self.done}/{self.total} calls, {elapsed:.1f}s)\n")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


# ============================================================================================ replaying


@dataclass
class _Run:
    scenario: Scenario
    t_ns: int
    session: int | None = None
    run: int = 0
    span: Any = None
    ctx: otel_context.Context | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    session_id: str = ""
    trace_id: str = ""
    session_ids: list[str] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Replay:
    """What one pass through the pipeline produced."""

    config_name: str
    decisions: dict[str, list[dict[str, Any]]]  # scenario id -> the decision read after each call
    steps: dict[str, list[Any]]  # scenario id -> baseline StoredCall per call (from the stored rows)
    seconds: float
    calls: int


def wait_for_watermark(client: httpx.Client, api: str, after_us: int, timeout: float = 60.0) -> None:
    """Wait until the detector has read past ``after_us`` and published what it found.

    ``/healthz`` reports the watermark as soon as a cycle has read its calls, slightly before that cycle's
    decisions are published; waiting for one more completed cycle (``cycles`` moving on) closes the gap."""
    deadline = time.monotonic() + timeout
    seen_cycles: int | None = None
    while time.monotonic() < deadline:
        health = client.get(f"{api}/healthz").json()
        if seen_cycles is None and health["watermark_us"] >= after_us:
            seen_cycles = health["cycles"]
        elif seen_cycles is not None and health["cycles"] > seen_cycles:
            return
        time.sleep(0.02)
    raise RuntimeError(f"the detector did not catch up within {timeout:.0f} s")


def eval_service_config(config: AppConfig) -> AppConfig:
    """The config as given, with the detector scheduled fast (replay speed only, not detection)."""
    config = config.model_copy(deep=True)
    config.detector.interval_seconds = 0.1
    config.detector.checkpoint_seconds = 0
    config.detector.watermark_lag_seconds = 0
    return config


def replay(scenarios: Sequence[Scenario], config: AppConfig, *, config_name: str = LOOP_DETECTOR,
           progress: ProgressBar | None = None, data_dir: str | None = None) -> Replay:
    """Replay every scenario through a fresh in-process service running ``config``; one call of every run
    per round, the decision read after each call."""
    from detector.evaluation.simulate import otlp_tracer, start_run
    from detector.service.process import running_service

    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    # a 0.1 s detector interval makes APScheduler log every skipped run (a cycle still running): harmless
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="loop-detector-eval-") as tmp, \
            running_service(eval_service_config(config), data_dir or tmp) as (service, eps), \
            httpx.Client(timeout=30.0) as client, \
            otlp_tracer(eps.otlp, service_name="loop-detector-eval") as (tracer, provider):
        now = time.time_ns()
        runs = [_Run(s, t_ns=now - scenario_duration_ns(s) - 2_000_000_000) for s in scenarios]
        rounds = max(len(s.calls) for s in scenarios)
        for i in range(rounds):
            active = [r for r in runs if i < len(r.scenario.calls)]
            for run in active:
                call = run.scenario.calls[i]
                if call.session != run.session:
                    _start_session(run, call, tracer, tag, start_run)
                elif call.run != run.run:
                    _start_trace(run, call, tracer, start_run)  # the run restarted: a new trace, the same session
                start = run.t_ns + int(call.gap_s * 1e9)
                run.t_ns = emit_call(tracer, call, session_id=run.session_id, start_ns=start,
                                     capture_content=run.scenario.capture_content, history=run.history,
                                     parent=run.ctx, virtual_key=run.scenario.virtual_key or None,
                                     app_fingerprints=run.scenario.app_fingerprints)
                if i == len(run.scenario.calls) - 1:
                    run.span.end(end_time=run.t_ns)
            provider.force_flush()
            wait_for_watermark(client, eps.api, time.time_ns() // 1000)
            for run in active:
                params = {"session_id": run.session_id, "trace_id": run.trace_id}
                if run.scenario.virtual_key:
                    params["virtual_key"] = run.scenario.virtual_key
                run.decisions.append(client.get(f"{eps.api}/v1/decision", params=params).json())
            if progress is not None:
                progress.update(len(active), f"round {i + 1}/{rounds}")
        provider.force_flush()
        wait_for_watermark(client, eps.api, time.time_ns() // 1000)
        steps = stored_steps(service.store, runs)
    return Replay(config_name=config_name, decisions={r.scenario.id: r.decisions for r in runs}, steps=steps,
                  seconds=time.monotonic() - started, calls=sum(len(s.calls) for s in scenarios))


def _start_session(run: _Run, call: CallSpec, tracer: Tracer, tag: str, start_run: Callable[..., Any]) -> None:
    if run.span is not None:
        run.span.end(end_time=run.t_ns)
    run.session = call.session
    run.session_id = f"eval-{tag}-{run.scenario.id}-s{call.session}"
    run.session_ids.append(run.session_id)
    _start_trace(run, call, tracer, start_run, end=False)


def _start_trace(run: _Run, call: CallSpec, tracer: Tracer, start_run: Callable[..., Any], end: bool = True) -> None:
    if end and run.span is not None:
        run.span.end(end_time=run.t_ns)
    run.run = call.run
    run.history = []
    run.span, run.ctx = start_run(tracer, agent_name=run.scenario.agent_name, session_id=run.session_id,
                                  start_ns=run.t_ns + int(call.gap_s * 1e9) - 1000,
                                  virtual_key=run.scenario.virtual_key or None)
    run.trace_id = format(run.span.get_span_context().trace_id, "032x")


SELECT_CALL_ROWS = """
SELECT session_id, trace_id, span_id, call_kind, toUnixTimestamp64Nano(ts) AS ts_ns, request_fp, is_error,
       error_fp, tool_fp
FROM otel.genai_calls
WHERE session_id IN {sessions:Array(String)} AND call_kind IN ('llm', 'tool')
ORDER BY ts, span_id
"""

SELECT_CONTENT_HASHES = """
SELECT SpanId AS span_id,
       if(SpanAttributes['gen_ai.output.messages'] != '', cityHash64(SpanAttributes['gen_ai.output.messages']), 0)
           AS output_fp,
       if(SpanAttributes['gen_ai.tool.call.result'] != '', cityHash64(SpanAttributes['gen_ai.tool.call.result']), 0)
           AS result_fp
FROM otel.otel_traces
WHERE SpanAttributes['gen_ai.conversation.id'] IN {sessions:Array(String)}
"""


def stored_steps(store: Any, runs: Sequence[_Run]) -> dict[str, list[Any]]:
    """The baselines' input: per scenario, one StoredCall per model call, built from the stored rows (tool spans
    attached to the model call they followed in the same trace)."""

    by_session = {sid: run.scenario.id for run in runs for sid in run.session_ids}
    sessions = list(by_session)
    rows = store.rows(SELECT_CALL_ROWS, {"sessions": sessions})
    hashes = {r["span_id"]: r for r in store.rows(SELECT_CONTENT_HASHES, {"sessions": sessions})}
    steps: dict[str, list[Any]] = {run.scenario.id: [] for run in runs}
    current: dict[str, dict[str, Any]] = {}  # trace -> the step being built
    built: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        scenario_id = by_session[row["session_id"]]
        h = hashes.get(row["span_id"], {})
        if row["call_kind"] == "llm":
            step = {"trace_id": row["trace_id"], "session_id": row["session_id"], "request_fp": row["request_fp"],
                    "is_error": bool(row["is_error"]), "error_fp": row["error_fp"], "output_fp": h.get("output_fp", 0),
                    "tools": []}
            current[row["trace_id"]] = step
            built[scenario_id].append(step)
        elif row["trace_id"] in current:
            current[row["trace_id"]]["tools"].append(ToolRun(fp=row["tool_fp"], is_error=bool(row["is_error"]),
                                                             error_fp=row["error_fp"], result_fp=h.get("result_fp", 0)))
    for run in runs:
        got = built[run.scenario.id]
        if len(got) != len(run.scenario.calls):
            raise RuntimeError(f"{run.scenario.id}: {len(run.scenario.calls)} model calls emitted, {len(got)} stored")
        steps[run.scenario.id] = [StoredCall(**{**s, "tools": tuple(s["tools"])}) for s in got]
    return steps


SELECT_TRACE_CALL_ROWS = """
SELECT session_id, session_source, trace_id, span_id, call_kind, toUnixTimestamp64Nano(ts) AS ts_ns, request_fp,
       is_error, error_fp, tool_fp
FROM otel.genai_calls
WHERE trace_id IN {traces:Array(String)} AND call_kind IN ('llm', 'tool')
ORDER BY ts, span_id
"""

# Exact hashes of the raw output and tool result, in each dialect (what the baselines compare exactly).
SELECT_TRACE_CONTENT_HASHES = """
SELECT SpanId AS span_id,
       multiIf(SpanAttributes['gen_ai.output.messages'] != '', cityHash64(SpanAttributes['gen_ai.output.messages']),
               SpanAttributes['openinference.span.kind'] = 'LLM' AND SpanAttributes['output.value'] NOT IN ('', '__REDACTED__'),
               cityHash64(SpanAttributes['output.value']), 0) AS output_fp,
       multiIf(SpanAttributes['gen_ai.tool.call.result'] != '', cityHash64(SpanAttributes['gen_ai.tool.call.result']),
               SpanAttributes['openinference.span.kind'] = 'TOOL' AND SpanAttributes['output.value'] NOT IN ('', '__REDACTED__'),
               cityHash64(SpanAttributes['output.value']),
               SpanAttributes['traceloop.entity.output'] != '', cityHash64(SpanAttributes['traceloop.entity.output']), 0)
           AS result_fp
FROM otel.otel_traces
WHERE TraceId IN {traces:Array(String)}
"""

SELECT_SPAN_SESSIONS = """
SELECT span_id, session_id, session_source FROM otel.genai_calls WHERE span_id IN {spans:Array(String)}
"""


def stored_steps_of_traces(store: Any, traces: dict[str, list[str]], expected: dict[str, int]) -> dict[str, list[Any]]:
    """The baselines' input for runs known by their traces (``traces``: run id -> trace ids): one StoredCall per model
    call from the stored rows (tool spans attached to the model call they followed in the same trace)."""
    run_of = {t: rid for rid, ts in traces.items() for t in ts}
    every = list(run_of)
    rows = store.rows(SELECT_TRACE_CALL_ROWS, {"traces": every})
    hashes = {r["span_id"]: r for r in store.rows(SELECT_TRACE_CONTENT_HASHES, {"traces": every})}
    current: dict[str, dict[str, Any]] = {}
    built: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        h = hashes.get(row["span_id"], {})
        if row["call_kind"] == "llm":
            step = {"trace_id": row["trace_id"], "session_id": row["session_id"], "request_fp": row["request_fp"],
                    "is_error": bool(row["is_error"]), "error_fp": row["error_fp"], "output_fp": h.get("output_fp", 0),
                    "tools": []}
            current[row["trace_id"]] = step
            built[run_of[row["trace_id"]]].append(step)
        elif row["trace_id"] in current:
            current[row["trace_id"]]["tools"].append(ToolRun(fp=row["tool_fp"], is_error=bool(row["is_error"]),
                                                             error_fp=row["error_fp"], result_fp=h.get("result_fp", 0)))
    out = {}
    for rid, n in expected.items():
        got = built[rid]
        if len(got) != n:
            raise RuntimeError(f"{rid}: {n} model calls sent, {len(got)} stored")
        out[rid] = [StoredCall(**{**st, "tools": tuple(st["tools"])}) for st in got]
    return out


# The statuses the OTLP/HTTP exporter retries (opentelemetry-exporter-otlp-proto-http: 429, 502, 503, 504), and for
# how long a replay keeps sending one request again (the receiver's refusals under load last about a second each).
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
RETRY_FOR_SECONDS = 60.0


def retry_delay(retry_after: str | None) -> float:
    """The wait a refusal asks for (``Retry-After`` in seconds), 1 s when it names none, never more than 5 s."""
    try:
        return min(5.0, max(0.05, float(retry_after))) if retry_after else 1.0
    except ValueError:
        return 1.0


def replay_recorded(recordings: Sequence[Any], config: AppConfig, *, config_name: str = LOOP_DETECTOR,
                    progress: ProgressBar | None = None, data_dir: str | None = None) -> Replay:
    """Replay recorded sessions (:mod:`detector.evaluation.recorded`) through a fresh in-process service running
    ``config``: every timestamp moved so that each session ends about now (gaps kept), the spans posted as OTLP/JSON
    to the receiver call by call (what had ended by the end of each LLM call), one call of every session per round;
    after each LLM call the decision is read for the call's session and trace, as its agent would."""
    from concurrent.futures import ThreadPoolExecutor

    from detector.service.process import running_service

    started = time.monotonic()
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="loop-detector-eval-") as tmp, \
            running_service(eval_service_config(config), data_dir or tmp) as (service, eps), \
            httpx.Client(timeout=60.0) as client, ThreadPoolExecutor(max_workers=4) as pool:
        now = time.time_ns()
        shift = {r.id: now - 2_000_000_000 - max(sp.end for sp in r.spans) for r in recordings}
        batches = {r.id: r.batches() for r in recordings}
        calls = {r.id: r.calls for r in recordings}
        decisions: dict[str, list[dict[str, Any]]] = {r.id: [] for r in recordings}
        sessions: dict[str, str] = {}  # the session the pipeline resolved for a run (for calls that lost theirs)

        def post(body: bytes) -> None:
            deadline = time.monotonic() + RETRY_FOR_SECONDS
            while True:  # a retryable refusal (a busy machine) is sent again after its delay, as an exporter does
                reply = client.post(f"{eps.otlp}/v1/traces", content=body, headers={"content-type": "application/json"})
                if reply.status_code == 200:
                    return
                if reply.status_code not in RETRYABLE_STATUSES or time.monotonic() > deadline:
                    raise RuntimeError(f"the receiver refused a recorded request: {reply.status_code} "
                                       f"{reply.text[:200]}")
                time.sleep(retry_delay(reply.headers.get("retry-after")))

        rounds = max(len(b) for b in batches.values())
        for i in range(rounds):
            active = [r for r in recordings if i < len(batches[r.id])]
            bodies = [r.request(batches[r.id][i] + (r.rest() if i == len(batches[r.id]) - 1 else []), shift[r.id])
                      for r in active]
            list(pool.map(post, bodies))
            wait_for_watermark(client, eps.api, time.time_ns() // 1000)
            wanted = [calls[r.id][i].body["spanId"] for r in active]
            resolved = {row["span_id"]: row for row in service.store.rows(SELECT_SPAN_SESSIONS, {"spans": wanted})}
            for r in active:
                span = calls[r.id][i].body
                row = resolved.get(span["spanId"], {})
                session = row.get("session_id", "")
                if row.get("session_source") not in (None, "", "trace"):
                    sessions.setdefault(r.id, session)
                elif r.id in sessions:
                    session = sessions[r.id]  # a call that lost its session attribute: its agent still knows it
                params = {"session_id": session or span["traceId"], "trace_id": span["traceId"]}
                decisions[r.id].append(client.get(f"{eps.api}/v1/decision", params=params).json())
            if progress is not None:
                progress.update(len(active), f"round {i + 1}/{rounds}")
        wait_for_watermark(client, eps.api, time.time_ns() // 1000)
        traces = {r.id: sorted({sp.body["traceId"] for sp in r.spans}) for r in recordings}
        steps = stored_steps_of_traces(service.store, traces, {r.id: len(calls[r.id]) for r in recordings})
    return Replay(config_name=config_name, decisions=decisions, steps=steps, seconds=time.monotonic() - started,
                  calls=sum(len(c) for c in calls.values()))
