"""``loop-detector demo``: two simulated agents, one stuck and one healthy, and the decisions they get.

Both agents emit real GenAI spans through the OpenTelemetry SDK and OTLP/HTTP exporter, exactly like an
instrumented application. After each step the demo asks the decision API what the agent should do next
and prints it, so the looping agent is seen escalating while the healthy one stays ``allow``.
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from contextlib import ExitStack

import httpx

from detector.evaluation.simulate import SimulatedStep, ToolCall, emit_step, otlp_tracer, start_run, wait_for_detector
from detector.settings.vocabulary import ACTION_ALLOW, ACTION_BLOCK, ACTION_INJECT, ACTION_THROTTLE, ACTION_WARN

__all__ = ["COLORS", "DEFAULT_API", "DEFAULT_OTLP", "HEALTHY_TOOLS", "LEGEND", "healthy_step", "looping_step",
           "run_demo"]

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


DEFAULT_API = "http://127.0.0.1:8080"
DEFAULT_OTLP = "http://127.0.0.1:4318"

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


def _running(api: str) -> bool:
    """Whether a loop-detector answers on ``api`` (the demo then uses it instead of starting one)."""
    try:
        return httpx.get(f"{api}/healthz", timeout=0.5).json().get("status") == "ok"
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


def _decided_by(decision: dict) -> str:
    """The detector behind a decision (a rule by its name), with the evidence it rests on."""
    by = decision.get("rule_name") or decision.get("detector") or ""
    evidence = decision.get("evidence", "none")
    return f"{by} ({evidence})" if evidence not in ("", "none") else by


def _paint(text: str, action: str, color: bool) -> str:
    return f"\x1b[{COLORS.get(action, '0')}m{text}\x1b[0m" if color else text


def run_demo(endpoint: str | None = None, otlp_endpoint: str | None = None, calls: int = 14, color: bool = True,
             out=None) -> int:  # noqa: ANN001 - a text stream
    out = out or sys.stdout
    color = color and getattr(out, "isatty", lambda: False)()
    with ExitStack() as stack:
        if endpoint is None and _running(DEFAULT_API):
            endpoint, otlp_endpoint = DEFAULT_API, otlp_endpoint or DEFAULT_OTLP
            print(f"using the loop-detector already running at {endpoint}", file=out)
        if endpoint is None:
            from detector.service.process import running_service
            from detector.settings.config import AppConfig

            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="loop-detector-demo-"))
            _, eps = stack.enter_context(running_service(AppConfig(), data_dir))
            endpoint, otlp_endpoint = eps.api, eps.otlp
            print(f"started loop-detector in-process (API {endpoint}, OTLP {otlp_endpoint})", file=out)
        elif not _running(endpoint):
            print(f"no loop-detector answers at {endpoint}/healthz: start one (loop-detector serve), or leave out "
                  "--endpoint and the demo runs its own", file=sys.stderr)
            return 1
        if otlp_endpoint is None:
            otlp_endpoint = httpx.URL(endpoint).copy_with(port=4318).__str__().rstrip("/")
        client = stack.enter_context(httpx.Client(timeout=5.0))
        tracer, provider = stack.enter_context(otlp_tracer(otlp_endpoint, service_name="loop-detector-demo"))

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

        print(LEGEND, file=out)
        header = (f"{'call':>4}  {'agent':<14} {'action':<9} {'level':<10} {'confidence':>10}  {'by':<20} "
                  "dominant signal")
        print(header, file=out)
        print("-" * len(header), file=out)
        for i in range(calls):
            for name, (session, make_step) in agents.items():
                st = state[name]
                # in the agent's own time: each step right after the last (the demo's pause to read the decision
                # is not the agent waiting, which a poll would be)
                st["t"] = emit_step(tracer, make_step(i), session_id=session, start_ns=st["t"],
                                    history=st["history"], parent=st["ctx"])
            provider.force_flush()
            wait_for_detector(endpoint, time.time_ns() // 1000, client=client)
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
