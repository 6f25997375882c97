"""``loop-detector demo``: two simulated agents, one stuck and one healthy, and the decisions they get.

Both agents emit real GenAI spans through the OpenTelemetry SDK and OTLP/HTTP exporter, exactly like an
instrumented application. After each step the demo asks the decision API what the agent should do next
and prints it, so the looping agent is seen escalating while the healthy one stays ``allow``.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Tracer

from detector.evaluation.simulate import SimulatedStep, ToolCall, emit_step, start_run, wait_for_detector
from detector.settings.vocabulary import ACTION_ALLOW, ACTION_BLOCK, ACTION_INJECT, ACTION_THROTTLE, ACTION_WARN

__all__ = ["ARRIVAL_TIMEOUT", "COLORS", "DEFAULT_API", "DemoFailed", "HEALTHY_TOOLS", "LEGEND", "healthy_step",
           "looping_step", "otlp_of", "run_demo"]

COLORS = {ACTION_ALLOW: "32", ACTION_WARN: "33", ACTION_THROTTLE: "35", ACTION_INJECT: "36", ACTION_BLOCK: "1;31"}

HEALTHY_TOOLS = [
    ("list_files", {"path": "src/"}), ("read_file", {"path": "src/app.py"}), ("grep", {"pattern": "def main"}),
    ("read_file", {"path": "src/util.py"}), ("run_tests", {"target": "tests/test_app.py"}),
    ("edit_file", {"path": "src/app.py", "line": 42}), ("run_tests", {"target": "tests/"}),
    ("read_file", {"path": "README.md"}), ("edit_file", {"path": "README.md", "line": 7}),
    ("git_diff", {}), ("run_linter", {"path": "src/"}), ("git_commit", {"message": "fix parsing"}),
    ("search_docs", {"query": "config reload"}), ("read_file", {"path": "docs/config.md"}),
]


def looping_step(i: int) -> SimulatedStep:
    return SimulatedStep(user_text="" if i else "Fix the failing build.",
                         output_text="Let me read the config file to find the problem.",
                         tools=[ToolCall("read_file", {"path": "config.yaml"})],
                         input_tokens=1200 + 180 * i, output_tokens=42)


def healthy_step(i: int) -> SimulatedStep:
    name, args = HEALTHY_TOOLS[i % len(HEALTHY_TOOLS)]
    return SimulatedStep(user_text="" if i else "Add a --verbose flag to the CLI.",
                         output_text=f"Step {i + 1}: using {name} to make progress on {args or 'the change'}.",
                         tools=[ToolCall(name, dict(args))], input_tokens=900 + 150 * i,
                         output_tokens=80 + (i * 37) % 90)


DEFAULT_API = "http://127.0.0.1:8080"  # serve's default --api-port: the one service the demo looks for unasked
ARRIVAL_TIMEOUT = 15.0  # seconds for the first spans to be scored before the demo says they went elsewhere
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http"

LEGEND = """\
  action      what the agent is told before its next call: the strongest answer of every detector
              (allow < warn < throttle < inject < block)
  level       the escalation level of the confidence score (none, warn, throttle, inject, hard_stop): it climbs
              one step at a time, after several calls in a row past a threshold
  by          the detector that decided the action, and (in brackets) the evidence it rests on: no_progress is
              the early warning (calls repeating with nothing new, flagged before the score has climbed: hence
              "warn" beside level "none"), confidence is the score's level, anything else a configured rule
  dominant    the signal that weighs most in the confidence score
"""


def _health(api: str) -> dict[str, Any] | None:
    """What a loop-detector answering on ``api`` says of itself at ``/healthz`` (None: no loop-detector there)."""
    try:
        health = httpx.get(f"{api}/healthz", timeout=0.5).json()
    except (httpx.HTTPError, ValueError):
        return None
    return health if isinstance(health, dict) and health.get("status") == "ok" else None


def otlp_of(api: str, health: dict[str, Any]) -> str | None:
    """Where the service answering on ``api`` receives OTLP/HTTP: the port (and scheme) it reports at ``/healthz``
    on the host the API was reached on (every listener binds the same ``--host``); None when it does not say."""
    reported = health.get("otlp_http") or ""
    if not reported:
        return None
    otlp = httpx.URL(reported)
    return str(httpx.URL(api).copy_with(scheme=otlp.scheme, port=otlp.port, path="/")).rstrip("/")


class DemoFailed(Exception):
    """The demo cannot show anything: one line saying why, and what to do."""


class _CountingExporter(SpanExporter):
    """The OTLP/HTTP exporter, counting the spans it failed to deliver (the demo then stops and says so)."""

    def __init__(self, endpoint: str) -> None:
        self.inner = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=5)
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


@contextmanager
def _tracer(endpoint: str) -> Iterator[tuple[Tracer, TracerProvider, _CountingExporter]]:
    provider = TracerProvider(resource=Resource.create({"service.name": "loop-detector-demo"}))
    exporter = _CountingExporter(endpoint)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    # the exporter's own retry warnings would bury the one line the demo prints when spans do not arrive
    quiet = logging.getLogger(_EXPORTER_LOGGER)
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        yield provider.get_tracer("loop-detector.demo"), provider, exporter
    finally:
        provider.shutdown()
        quiet.setLevel(level)


def _wait_for_arrival(client: httpx.Client, api: str, otlp: str, trace_id: str, session: str) -> None:
    """Wait until the detector behind ``api`` knows the demo's first trace (a trace id alone is answered with the
    session the detector saw it in), or fail: the spans went somewhere it does not read."""
    timeout = ARRIVAL_TIMEOUT
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(f"{api}/v1/decision", params={"trace_id": trace_id})
        if answer.status_code != 200:
            raise DemoFailed(f"the loop-detector at {api} answered /v1/decision with HTTP {answer.status_code}: "
                             "the demo reads decisions without a token (an API on loopback)")
        if answer.json().get("session_id") == session:
            return
        if time.monotonic() > deadline:
            raise DemoFailed(f"the spans sent to {otlp}/v1/traces were accepted but did not reach the loop-detector "
                             f"at {api} within {timeout:.0f} s: pass --otlp-endpoint with the OTLP/HTTP address it "
                             "receives on (its startup line says it)")
        time.sleep(0.1)


def _decided_by(decision: dict) -> str:
    """The detector behind a decision (a rule by its name), with the evidence it rests on."""
    by = decision.get("rule_name") or decision.get("detector") or ""
    evidence = decision.get("evidence", "none")
    return f"{by} ({evidence})" if evidence not in ("", "none") else by


def _paint(text: str, action: str, color: bool) -> str:
    return f"\x1b[{COLORS.get(action, '0')}m{text}\x1b[0m" if color else text


def run_demo(endpoint: str | None = None, otlp_endpoint: str | None = None, calls: int = 14, color: bool = True,
             out=None) -> int:  # noqa: ANN001 - a text stream
    """Run the demo; 0 when it ran, 1 (with one line on stderr) when it could not show anything."""
    try:
        return _run(endpoint, otlp_endpoint, calls, color, out or sys.stdout)
    except DemoFailed as exc:
        print(exc, file=sys.stderr)
        return 1


def _service(endpoint: str | None, otlp_endpoint: str | None, stack: ExitStack, out: Any) -> tuple[str, str]:
    """The API and the OTLP/HTTP endpoint the demo uses: the service at ``endpoint``, else one on the default
    port, else one started in-process."""
    if endpoint is None:
        health = _health(DEFAULT_API)
        if health is not None:
            endpoint = DEFAULT_API
            print(f"using the loop-detector already running at {endpoint} (--endpoint URL: another one)", file=out)
    else:
        endpoint = endpoint.rstrip("/")
        health = _health(endpoint)
        if health is None:
            raise DemoFailed(f"no loop-detector answers at {endpoint}/healthz: start one (loop-detector serve), or "
                             "leave out --endpoint and the demo runs its own")
    if endpoint is None or health is None:
        from detector.service.process import running_service
        from detector.settings.config import AppConfig

        data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="loop-detector-demo-"))
        _, eps = stack.enter_context(running_service(AppConfig(), data_dir))
        print(f"no loop-detector at {DEFAULT_API} (the default; --endpoint URL to use another): started one "
              f"in-process (API {eps.api}, OTLP {eps.otlp})", file=out)
        return eps.api, otlp_endpoint or eps.otlp
    if otlp_endpoint is None:
        otlp_endpoint = otlp_of(endpoint, health)
        if otlp_endpoint is None:
            raise DemoFailed(f"the loop-detector at {endpoint} (version {health.get('version', '?')}) does not say "
                             "where it receives OTLP: pass --otlp-endpoint with its OTLP/HTTP address")
    print(f"sending the agents' spans to {otlp_endpoint}/v1/traces", file=out)
    return endpoint, otlp_endpoint.rstrip("/")


def _run(endpoint: str | None, otlp_endpoint: str | None, calls: int, color: bool, out: Any) -> int:
    color = color and getattr(out, "isatty", lambda: False)()
    with ExitStack() as stack:
        endpoint, otlp_endpoint = _service(endpoint, otlp_endpoint, stack, out)
        client = stack.enter_context(httpx.Client(timeout=5.0))
        tracer, provider, exporter = stack.enter_context(_tracer(otlp_endpoint))

        run_id = uuid.uuid4().hex[:8]
        agents = {
            "stuck-agent": (f"demo-stuck-{run_id}", looping_step),
            "healthy-agent": (f"demo-healthy-{run_id}", healthy_step),
        }
        state = {}
        t0 = time.time_ns()
        for name, (session, _) in agents.items():
            span, ctx = start_run(tracer, agent_name=name, session_id=session, start_ns=t0)
            state[name] = {"t": t0, "history": [], "ctx": ctx, "span": span}
        first_session, _ = agents["stuck-agent"]
        first_trace = format(state["stuck-agent"]["span"].get_span_context().trace_id, "032x")

        header = (f"{'call':>4}  {'agent':<14} {'action':<9} {'level':<10} {'confidence':>10}  {'by':<20} "
                  "dominant signal")
        for i in range(calls):
            for name, (session, make_step) in agents.items():
                st = state[name]
                # in the agent's own time: each step right after the last (the demo's pause to read the decision
                # is not the agent waiting, which a poll would be)
                st["t"] = emit_step(tracer, make_step(i), session_id=session, start_ns=st["t"],
                                    history=st["history"], parent=st["ctx"])
            provider.force_flush()
            if exporter.failed:
                raise DemoFailed(f"nothing took the spans sent to {otlp_endpoint}/v1/traces (unreachable, or "
                                 "refused): pass --otlp-endpoint with the OTLP/HTTP address the loop-detector at "
                                 f"{endpoint} receives on (its startup line says it)")
            try:
                wait_for_detector(endpoint, time.time_ns() // 1000, client=client)
            except TimeoutError as exc:
                raise DemoFailed(f"the loop-detector at {endpoint}: {exc}") from None
            if i == 0:
                _wait_for_arrival(client, endpoint, otlp_endpoint, first_trace, first_session)
                print(LEGEND, file=out)
                print(header, file=out)
                print("-" * len(header), file=out)
            for name, (session, _) in agents.items():
                d = client.get(f"{endpoint}/v1/decision", params={"session_id": session}).json()
                acting = d["action"] != ACTION_ALLOW
                line = (f"{i + 1:>4}  {name:<14} {d['action']:<9} {d['level']:<10} {d['confidence']:>10.3f}  "
                        f"{_decided_by(d) if acting else '':<20} {d['dominant_signal'] if acting else ''}").rstrip()
                print(_paint(line, d["action"], color), file=out)
        for st in state.values():
            st["span"].end()
        final = {n: client.get(f"{endpoint}/v1/decision", params={"session_id": s}).json()["action"]
                 for n, (s, _) in agents.items()}
        print(f"\nfinal: stuck-agent -> {final['stuck-agent']}, healthy-agent -> {final['healthy-agent']}", file=out)
    return 0
