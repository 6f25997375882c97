"""``loop-detector eval``: replay a labeled corpus through the real pipeline and measure detection quality.

Two corpora: the generated one (:mod:`detector.evaluation.corpus`: every scenario becomes real GenAI spans, emitted
with the OpenTelemetry SDK and its OTLP/HTTP exporter) and the recorded one (:mod:`detector.evaluation.recorded`:
sessions as real frameworks' own instrumentation exported them, posted as OTLP/JSON with their timestamps moved to
now and every gap kept). Either goes into a service running in-process (receiver -> chDB -> materialized view ->
scheduled detector -> decision API), once per configuration: the defaults and ``preset: protect``. The runs are
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

import json
import logging
import math
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import httpx
from loop_detector_sdk.evidence.fingerprints import genai_call_evidence
from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from detector.core.escalation import ACTION_RANK
from detector.evaluation.baselines import StoredCall, ToolRun, all_baselines
from detector.evaluation.corpus import LEGIT_FAMILIES, LOOP_FAMILIES, CallSpec, Scenario
from detector.ingest import semconv as sc
from detector.settings.config import AppConfig, parse_config
from detector.settings.vocabulary import ACTION_ALLOW, ACTION_BLOCK, ACTION_WARN, LEVEL_NONE

__all__ = [
    "GroupMetrics", "LOOP_DETECTOR", "LOOP_DETECTOR_PROTECT",
    "PRESET_TARGETS", "ProgressBar", "Replay", "check_preset_targets", "replay_recorded", "stored_steps_of_traces",
    "RunScore", "System", "TARGET_FP_RATE", "TARGET_MEDIAN_DELAY_WARN",
    "TARGET_RECALL_WARN", "baseline_actions", "check_targets", "emit_call", "eval_service_config",
    "evaluate_systems", "render", "replay", "run_eval", "scenario_duration_ns", "schema_fingerprint",
    "score_run", "stored_steps", "wait_for_watermark",
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


# ============================================================================================ emitting


def emit_call(tracer: Tracer, call: CallSpec, *, session_id: str, start_ns: int, capture_content: bool,
              history: list[dict[str, Any]], parent: otel_context.Context | None = None,
              virtual_key: str | None = None, app_fingerprints: bool = False) -> int:
    """Emit one model call and its tool runs as GenAI spans starting at ``start_ns``; returns when the step
    ended. ``history`` is the conversation so far (GenAI message format); it grows like a real agent's:
    the user text, the assistant message, the tool results. ``call.restart`` starts a fresh conversation
    (a stateless request). Content (messages, tool arguments and results) only with ``capture_content``,
    as every instrumentation makes it opt-in; without it, ``app_fingerprints`` puts on each chat span the
    ``loop_detector.fp.*`` attributes the SDK's completion hook would set from the same messages."""
    if call.restart:
        history.clear()
    if call.user_text:
        history.append({"role": "user", "parts": [{"type": "text", "content": call.user_text}]})
    attrs: dict[str, Any] = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
        sc.GEN_AI_PROVIDER_NAME: "openai",
        sc.GEN_AI_REQUEST_MODEL: call.model,
        sc.GEN_AI_CONVERSATION_ID: session_id,
    }
    if virtual_key:
        attrs[sc.LOOP_VIRTUAL_KEY] = virtual_key
    if call.max_tokens:
        attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] = call.max_tokens
    parts: list[dict[str, Any]] = []
    if call.output_text:
        parts.append({"type": "text", "content": call.output_text})
    for i, tool in enumerate(call.tools):
        parts.append({"type": "tool_call", "id": f"call_{i}", "name": tool.name, "arguments": tool.arguments})
    finish = "tool_calls" if call.tools else "stop"
    if capture_content:
        attrs[sc.GEN_AI_INPUT_MESSAGES] = json.dumps(history)
    elif app_fingerprints:  # what the completion hook sets, from the same messages (none out of a failed call)
        outputs = [] if call.error else [{"role": "assistant", "parts": parts, "finish_reason": finish}]
        attrs.update(genai_call_evidence(call.model, history, outputs).span_attributes())
    if not call.error:  # a failed request has no response: no usage, no output
        attrs.update({
            sc.GEN_AI_RESPONSE_MODEL: call.model,
            sc.GEN_AI_USAGE_INPUT_TOKENS: call.input_tokens,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: call.output_tokens,
            sc.GEN_AI_RESPONSE_FINISH_REASONS: [finish],
        })
        if call.cost_usd is not None:
            attrs[sc.GEN_AI_USAGE_COST] = call.cost_usd
        if capture_content:
            attrs[sc.GEN_AI_OUTPUT_MESSAGES] = json.dumps([{"role": "assistant", "parts": parts,
                                                            "finish_reason": finish}])
    end_ns = start_ns + int(call.duration_s * 1e9)
    span = tracer.start_span(f"chat {call.model}", context=parent, kind=SpanKind.CLIENT, attributes=attrs,
                             start_time=start_ns)
    if call.error:
        span.set_attribute(sc.ERROR_TYPE, call.error)
        span.set_status(Status(StatusCode.ERROR, call.error_message or call.error))
    span.end(end_time=end_ns)
    if call.error:
        return end_ns
    if call.keep_output:
        history.append({"role": "assistant", "parts": parts})

    step_end = end_ns
    for i, tool in enumerate(call.tools):  # parallel tool calls run side by side
        tool_attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
            sc.GEN_AI_TOOL_NAME: tool.name,
            sc.GEN_AI_TOOL_CALL_ID: f"call_{i}",
            sc.GEN_AI_CONVERSATION_ID: session_id,
        }
        if capture_content:
            tool_attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = json.dumps(tool.arguments)
            if tool.result and not tool.error:
                tool_attrs[sc.GEN_AI_TOOL_CALL_RESULT] = tool.result
        t_end = end_ns + int(tool.duration_s * 1e9) + i * 1000
        tspan = tracer.start_span(f"execute_tool {tool.name}", context=parent, kind=SpanKind.INTERNAL,
                                  attributes=tool_attrs, start_time=end_ns + i * 1000)
        if tool.error:
            tspan.set_attribute(sc.ERROR_TYPE, tool.error)
            tspan.set_status(Status(StatusCode.ERROR, tool.error_message or tool.error))
        tspan.end(end_time=t_end)
        step_end = max(step_end, t_end)
        result = f"error: {tool.error_message or tool.error}" if tool.error else tool.result
        history.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": f"call_{i}",
                                                   "response": result}]})
    return step_end + 10_000_000


def scenario_duration_ns(scenario: Scenario) -> int:
    """How long the run lasts in span time (gaps, calls, tools)."""
    total = 0.0
    for call in scenario.calls:
        total += call.gap_s + call.duration_s + max((t.duration_s for t in call.tools), default=0.0) + 0.01
    return int(total * 1e9)


# ============================================================================================ progress


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
            reply = client.post(f"{eps.otlp}/v1/traces", content=body, headers={"content-type": "application/json"})
            if reply.status_code != 200:
                raise RuntimeError(f"the receiver refused a recorded request: {reply.status_code} {reply.text[:200]}")

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


# ============================================================================================ baselines


def baseline_actions(steps: Sequence[Any]) -> dict[str, tuple[str, list[str]]]:
    """Per baseline (name -> (label, actions)): 'block' on the calls where it fires, else 'allow'.
    A baseline has one action; a firing counts both at warn and at block."""
    out: dict[str, tuple[str, list[str]]] = {}
    for baseline in all_baselines():
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


# ============================================================================================ rendering


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _fmt_delay(med: float | None, mx: int | None) -> str:
    if med is None:
        return "-"
    return f"{med:g} / {mx}"


def render(metrics: dict[str, Any], markdown: bool = False) -> str:
    """The tables: loop families (recall, delays), legit families (false positives), the summary matrix,
    and the targets."""
    systems = metrics["systems"]
    lines: list[str] = []

    def table(header: list[str], rows: list[list[str]]) -> None:
        if markdown:
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "|".join("---" if i == 0 or i == 1 else "---:" for i in range(len(header))) + "|")
            lines.extend("| " + " | ".join(r) + " |" for r in rows)
        else:
            widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
            fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
            lines.append(fmt.format(*header))
            lines.append("  ".join("-" * w for w in widths))
            lines.extend(fmt.format(*r) for r in rows)
        lines.append("")

    loop_fams = [f for f, v in metrics["families"].items() if next(iter(v.values()))["loop_runs"]]
    legit_fams = [f for f, v in metrics["families"].items() if next(iter(v.values()))["legit_runs"]]

    lines.append("## By configuration and content mode" if markdown else "BY CONFIGURATION AND CONTENT MODE")
    lines.append("")
    lines.append("Wasted calls to a flag count the first wasted call as 1 (flagged by the 2nd wasted call: 2)."
                 if markdown else "(wasted calls to a flag: the first wasted call counts as 1)")
    lines.append("")
    rows = []
    groups = [("all", metrics["overall"])] + [(mode, by) for mode, by in metrics.get("by_content", {}).items()]
    for mode, by_system in groups:
        for i, sys_ in enumerate(systems):
            m = by_system[sys_["name"]]
            rows.append([mode if i == 0 else "", sys_["label"], f"{m['loop_runs']}/{m['legit_runs']}",
                         _fmt_rate(m["recall_warn"]), _fmt_rate(m["recall_block"]),
                         f"{_fmt_rate(m['fp_rate_warn'])} ({m['fp_warn']})",
                         f"{_fmt_rate(m['fp_rate_block'])} ({m['fp_block']})",
                         _fmt_delay(m["calls_to_warn_median"], m["calls_to_warn_p90"]),
                         _fmt_delay(m["calls_to_block_median"], m["calls_to_block_p90"])])
    table(["content", "system", "loops/legit", "recall warn", "recall block", "false flags", "false blocks",
           "calls to warn med/p90", "calls to block med/p90"], rows)

    lines.append("## Loop runs: recall and wasted calls to a flag (the first wasted call counts as 1)" if markdown else
                 "LOOP RUNS: recall and wasted calls to a flag (the first wasted call counts as 1)")
    lines.append("")
    rows = []
    for fam in [*loop_fams, "ALL LOOP FAMILIES"]:
        for i, s in enumerate(systems):
            m = metrics["overall"][s["name"]] if fam == "ALL LOOP FAMILIES" else metrics["families"][fam][s["name"]]
            rows.append([fam if i == 0 else "", s["label"], str(m["loop_runs"]), _fmt_rate(m["recall_warn"]),
                         _fmt_rate(m["recall_block"]), _fmt_delay(m["calls_to_warn_median"], m["calls_to_warn_max"]),
                         _fmt_delay(m["calls_to_block_median"], m["calls_to_block_max"]), str(m["early_alarms"])])
    table(["family", "system", "runs", "recall warn", "recall block", "calls to warn med/max",
           "calls to block med/max", "early alarms"], rows)

    lines.append("## Legit runs: false positives" if markdown else "LEGIT RUNS: false positives")
    lines.append("")
    rows = []
    for fam in [*legit_fams, "ALL LEGIT FAMILIES"]:
        for i, s in enumerate(systems):
            m = metrics["overall"][s["name"]] if fam == "ALL LEGIT FAMILIES" else metrics["families"][fam][s["name"]]
            rows.append([fam if i == 0 else "", s["label"], str(m["legit_runs"]),
                         f"{_fmt_rate(m['fp_rate_warn'])} ({m['fp_warn']})", f"{_fmt_rate(m['fp_rate_block'])} ({m['fp_block']})"])
    table(["family", "system", "runs", "FP any action", "FP block"], rows)

    lines.append("## Summary: recall at warn (loop families) / false-positive rate (legit families)" if markdown else
                 "SUMMARY: recall at warn (loop families) / false-positive rate (legit families)")
    lines.append("")
    short = {s["name"]: _short_label(s) for s in systems}
    rows = []
    for fam in loop_fams:
        rows.append([fam, "recall"] + [_fmt_rate(metrics["families"][fam][s["name"]]["recall_warn"]) for s in systems])
    for fam in legit_fams:
        rows.append([fam, "FP"] + [_fmt_rate(metrics["families"][fam][s["name"]]["fp_rate_warn"]) for s in systems])
    table(["family", "metric"] + [short[s["name"]] for s in systems], rows)

    if metrics.get("preset_targets"):
        lines.append("## Targets" if markdown else "TARGETS")
        lines.append("")
        for t in metrics["preset_targets"]:
            mark = "met" if t["met"] else "NOT MET"
            where = f"{t['preset']}, content {t['content']}"
            lines.append(f"- {where}: {t['target']}: {t['value']} ({mark})" if markdown
                         else f"  [{mark:^7}] {where}: {t['target']}: {t['value']}")
        lines.append("")
    return "\n".join(lines)


def _short_label(system: dict[str, Any]) -> str:
    if system["kind"] != "baseline":
        return system["label"]
    return system["label"].split(")")[0] + ")"


# ============================================================================================ entry point


def run_eval(scenarios: Sequence[Any], config: AppConfig | None = None, *, config_label: str = LOOP_DETECTOR,
             blocking_pass: bool = True, progress: bool = True, stream: TextIO | None = None) -> dict[str, Any]:
    """Replay the corpus (once per configuration: ``config``, by default the defaults, and with ``blocking_pass``
    the protect preset), run the baselines on the stored rows, compute metrics. ``scenarios``: built-in scenarios
    (:class:`~detector.evaluation.corpus.Scenario`) or recordings (:class:`~detector.evaluation.recorded.Recording`)."""
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
