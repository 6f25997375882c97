"""Record the framework corpus: real agent frameworks, their own OpenTelemetry instrumentation, a scripted
stub model, and the OTLP the real exporter posts, saved as OTLP/JSON with a labelled manifest.

    python3.11 -m venv .venv-rec && .venv-rec/bin/pip install -r tools/recorder/requirements.txt
    .venv-rec/bin/python tools/recorder/record.py                       # everything
    .venv-rec/bin/python tools/recorder/record.py --framework openai_v2 --scenario ci_poll_fixed
    .venv-rec/bin/python tools/recorder/record.py --check               # parse and count only

The parent process starts one worker interpreter per (framework, content mode), because instrumentors patch
libraries globally and some read their content switch from the environment at import. A worker starts two
local HTTP servers on free ports: the stub model (``stub_model.py``) and an OTLP/HTTP capture endpoint. The
agent's spans go through the SDK's ``BatchSpanProcessor`` and the real ``OTLPSpanExporter`` (protobuf) to the
capture endpoint; after each session the provider is flushed and every request posted during the session is
merged (their ``resourceSpans`` concatenated, nothing else touched) into one ``ExportTraceServiceRequest``,
written as OTLP/JSON: the protobuf JSON mapping with lowerCamelCase keys, enums as integers and trace/span ids
as hex, as the OTLP specification requires of OTLP/HTTP JSON.

Nothing about this machine is recorded: the resource is set explicitly (service name, version, environment),
``host.*``, ``process.*``, ``os.*`` and ``container.*`` resource attributes would be dropped, and any path of
this checkout, virtualenv or Python install in a string value (exception stack traces) is rewritten to a fixed
``/app`` layout. The recorder fails if a machine path or the host name is still in a file.

This module imports nothing from ``detector``: it runs in its own virtualenv with the frameworks.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent  # the recorder: this script, its scenarios, tools, runners and stub model
REPO = HERE.parents[1]
CORPUS = REPO / "recordings"  # what it writes: the recorded corpus that `loop-detector eval --recorded` reads
OUT = CORPUS / "otlp"
MANIFEST = CORPUS / "manifest.json"
FRAMEWORKS = ("pydantic_ai", "openai_agents", "langgraph_openllmetry", "langgraph_openinference", "openai_v2")
SERVICES = {"pydantic_ai": "ops-assistant-pydantic-ai", "openai_agents": "support-desk-agents",
            "langgraph_openllmetry": "langgraph-agent", "langgraph_openinference": "langgraph-agent",
            "openai_v2": "support-app"}
INSTRUMENTATION = {
    "pydantic_ai": "pydantic-ai native (Agent.instrument_all(InstrumentationSettings(...)))",
    "openai_agents": "openinference-instrumentation-openai-agents",
    "langgraph_openllmetry": "opentelemetry-instrumentation-langchain (OpenLLMetry)",
    "langgraph_openinference": "openinference-instrumentation-langchain",
    "openai_v2": "opentelemetry-instrumentation-openai-v2",
}
CONTENT_SWITCH = {
    "pydantic_ai": {"on": "InstrumentationSettings(include_content=True)",
                    "off": "InstrumentationSettings(include_content=False)"},
    "openai_agents": {"on": "TraceConfig() (default: inputs and outputs recorded)",
                      "off": "TraceConfig(hide_inputs=True, hide_outputs=True)"},
    "langgraph_openllmetry": {"on": "TRACELOOP_TRACE_CONTENT=true (the default)",
                              "off": "TRACELOOP_TRACE_CONTENT=false"},
    "langgraph_openinference": {"on": "TraceConfig() (default: inputs and outputs recorded)",
                                "off": "TraceConfig(hide_inputs=True, hide_outputs=True)"},
    "openai_v2": {"on": "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental, "
                        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only",
                  "off": "default (nothing set: v1.30 GenAI conventions, no content, no tool spans)"},
}
# span attributes that carry a session / conversation id in the instrumentations recorded here
SESSION_KEYS = ("gen_ai.conversation.id", "session.id", "traceloop.association.properties.session_id",
                "traceloop.association.properties.thread_id")
LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "completion"}
SCRUBBED_RESOURCE_PREFIXES = ("host.", "process.", "os.", "container.")


# --- capture endpoint -------------------------------------------------------------------------------------

class Capture:
    """An OTLP/HTTP traces endpoint that keeps the raw protobuf bodies the exporter posts."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()
        capture = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces" and self.headers.get("content-type") == "application/x-protobuf"
                if ok:
                    with capture.lock:
                        capture.bodies.append(body)
                data = ExportTraceServiceResponse().SerializeToString() if ok else b"unexpected request"
                self.send_response(200 if ok else 400)
                self.send_header("content-type", "application/x-protobuf" if ok else "text/plain")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="otlp-capture", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def take(self) -> list[bytes]:
        with self.lock:
            bodies, self.bodies = self.bodies, []
        return bodies


# --- OTLP/JSON ---------------------------------------------------------------------------------------------

def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_b64(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode()


def _convert_ids(doc: dict[str, Any], convert: Any) -> None:
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = convert(span[key])
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if link.get(key):
                            link[key] = convert(link[key])


def to_otlp_json(request: Any) -> dict[str, Any]:
    """The OTLP/JSON form of an ExportTraceServiceRequest (protobuf JSON mapping, ids as hex, enums as ints)."""
    from google.protobuf.json_format import MessageToDict

    doc = MessageToDict(request, use_integers_for_enums=True)
    _convert_ids(doc, _b64_to_hex)
    return doc


def from_otlp_json(doc: dict[str, Any]) -> Any:
    """Back to the protobuf message (the ids to base64 first, which the plain protobuf mapping expects)."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = json.loads(json.dumps(doc))
    _convert_ids(doc, _hex_to_b64)
    return ParseDict(doc, ExportTraceServiceRequest())


def merge(bodies: Iterable[bytes]) -> Any:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    merged = ExportTraceServiceRequest()
    for body in bodies:
        part = ExportTraceServiceRequest()
        part.ParseFromString(body)
        merged.resource_spans.extend(part.resource_spans)
    return merged


def scrub_resources(request: Any) -> list[str]:
    """Drop machine-describing resource attributes; returns the keys dropped (none, with our explicit Resource)."""
    dropped = []
    for rs in request.resource_spans:
        keep = [kv for kv in rs.resource.attributes if not kv.key.startswith(SCRUBBED_RESOURCE_PREFIXES)]
        dropped += [kv.key for kv in rs.resource.attributes if kv.key.startswith(SCRUBBED_RESOURCE_PREFIXES)]
        del rs.resource.attributes[:]
        rs.resource.attributes.extend(keep)
    return sorted(set(dropped))


def machine_paths() -> list[tuple[str, str]]:
    """(this machine's path, its replacement), longest first; applied to every string of a recording."""
    pairs = {
        sysconfig.get_paths()["purelib"]: "/app/.venv/lib/python3.11/site-packages",
        sys.prefix: "/app/.venv",
        str(REPO): "/app",
        sys.base_prefix: "/usr/local",
        str(Path.home()): "/home/app",
    }
    return sorted(((k, v) for k, v in pairs.items() if k and k != "/"), key=lambda kv: -len(kv[0]))


def scrub_text(text: str) -> str:
    for path, replacement in machine_paths():
        text = text.replace(path, replacement)
    return text


def forbidden_strings() -> list[str]:
    host = socket.gethostname()
    out = [p for p, _ in machine_paths()]
    if len(host) >= 6:
        out.append(host)
    return out


def _attr_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def span_stats(request: Any) -> dict[str, Any]:
    """Counts and ids a replayer needs, read from the spans as emitted."""
    spans = [(s, {kv.key: _attr_value(kv.value) for kv in s.attributes})
             for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    spans.sort(key=lambda x: x[0].start_time_unix_nano)
    traces: list[str] = []
    for s, _ in spans:
        if s.trace_id.hex() not in traces:
            traces.append(s.trace_id.hex())

    def is_llm(a: dict[str, Any]) -> bool:
        return (a.get("gen_ai.operation.name") in LLM_OPERATIONS or a.get("openinference.span.kind") == "LLM"
                or a.get("llm.request.type") in LLM_OPERATIONS)

    def is_tool(a: dict[str, Any]) -> bool:
        return (a.get("gen_ai.operation.name") == "execute_tool" or a.get("openinference.span.kind") == "TOOL"
                or a.get("traceloop.span.kind") == "tool")

    candidates: dict[str, list[str]] = {}
    for _, a in spans:
        for key in SESSION_KEYS:
            if a.get(key) and a[key] not in candidates.setdefault(key, []):
                candidates[key].append(a[key])
    return {"spans": len(spans), "llm_spans": sum(1 for _, a in spans if is_llm(a)),
            "session_candidates": candidates,
            "tool_spans": sum(1 for _, a in spans if is_tool(a)),
            "error_spans": sum(1 for s, _ in spans if s.status.code == 2), "trace_ids": traces,
            "attribute_keys": sorted({k for _, a in spans for k in a})}


# --- worker -----------------------------------------------------------------------------------------------

def session_id_for(framework: str, content: str, scenario: Any) -> str | None:
    if framework == "openai_v2" and len(scenario.turns) == 1:
        return None  # a plain-SDK app with one run: no session id, the trace is the session
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"recorded-session/{framework}/{content}/{scenario.id}"))


def versions(framework: str) -> dict[str, str]:
    from frameworks import PACKAGES

    names = [*PACKAGES[framework], "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"]
    return {n: importlib.metadata.version(n) for n in names}


def run_worker(framework: str, content: str, scenario_ids: list[str], results: Path) -> None:
    from agent_tools import World, make_tools
    from frameworks import RUNNERS
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from scenarios import BY_ID
    from stub_model import StubModel

    capture = Capture()
    stub = StubModel().__enter__()
    resource = Resource.create({"service.name": SERVICES[framework], "service.version": "1.4.0",
                                "deployment.environment.name": "staging"})
    provider = TracerProvider(resource=resource)
    if framework == "openai_v2":
        from opentelemetry.processor.baggage import ALLOW_ALL_BAGGAGE_KEYS, BaggageSpanProcessor

        provider.add_span_processor(BaggageSpanProcessor(ALLOW_ALL_BAGGAGE_KEYS))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=capture.endpoint)))
    trace.set_tracer_provider(provider)
    runner = RUNNERS[framework](provider, stub.base_url, content == "on")
    vers = versions(framework)
    forbidden = forbidden_strings()
    entries = []
    for sid in scenario_ids:
        sc = BY_ID[sid]
        print(f"  {framework:24} content {content:3}  {sid}", flush=True)
        world = World(sc.id)
        stub.policy, stub.log = sc.policy, []
        turn_starts: list[int] = []
        session_id = session_id_for(framework, content, sc)
        started = time.monotonic()
        runner.run(sc, make_tools(world), session_id,
                   lambda i, starts=turn_starts: starts.append(len(stub.log)))
        provider.force_flush()
        request = merge(capture.take())
        dropped = scrub_resources(request)
        text = scrub_text(json.dumps(to_otlp_json(request), separators=(",", ":"), ensure_ascii=False))
        leaks = [f for f in forbidden if f in text]
        if leaks:
            raise SystemExit(f"{sid}: machine-specific strings left in the recording: {leaks}")
        name = f"{sc.id}__{framework}__content_{content}.json"
        OUT.mkdir(exist_ok=True)
        (OUT / name).write_text(text + "\n", encoding="utf-8")
        stats = span_stats(from_otlp_json(json.loads(text)))
        calls = len(stub.log)
        if sc.label == "loop":
            onset = (turn_starts[sc.onset_turn] if sc.onset_turn is not None else
                     next(i for i, c in enumerate(stub.log) if c.wasted))
        else:
            onset = None
            assert not any(c.wasted for c in stub.log), sid
        session_keys = sorted(k for k in stats.pop("attribute_keys")
                              if session_id and _has_value(request, k, session_id))
        entries.append({
            "file": f"otlp/{name}", "scenario": sc.id, "family": sc.family, "label": sc.label,
            "look_alike_of": sc.look_alike_of or None, "framework": framework,
            "instrumentation": INSTRUMENTATION[framework], "versions": vers, "content": content,
            "content_switch": CONTENT_SWITCH[framework][content],
            "session_id": session_id, "session_attributes": session_keys, "trace_ids": stats.pop("trace_ids"),
            "runs": len(sc.turns), "run_first_call": turn_starts, "llm_calls": calls, "onset": onset,
            "wasted_calls": calls - onset if onset is not None else 0,
            **stats, "seconds": round(time.monotonic() - started, 1),
            "resource_attributes_dropped": dropped,
            "description": f"{sc.summary} " + (f"Onset: {sc.onset_rule}" if sc.onset_rule else
                                               "Honest: no call repeats earlier behaviour without progress."),
        })
        if stats["llm_spans"] != calls:
            print(f"    note: {stats['llm_spans']} LLM spans for {calls} model calls")
    stub.__exit__()
    provider.shutdown()
    results.write_text(json.dumps(entries))


def _has_value(request: Any, key: str, value: str) -> bool:
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                for kv in s.attributes:
                    if kv.key == key and str(_attr_value(kv.value)) == value:
                        return True
    return False


# --- parent -----------------------------------------------------------------------------------------------

def worker_env(framework: str, content: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENINFERENCE_", "TRACELOOP_"))}
    env.update({"OPENAI_API_KEY": "sk-stub", "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false",
                "PYTHONHASHSEED": "0"})
    if framework == "langgraph_openllmetry":
        env["TRACELOOP_TRACE_CONTENT"] = "true" if content == "on" else "false"
    if framework == "openai_v2" and content == "on":
        env["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
    return env


MANIFEST_HEAD = {
    "description": (
        "Agent runs recorded from real frameworks and their own OpenTelemetry instrumentation against a "
        "scripted stub model (record.py). One file per session: an OTLP/JSON ExportTraceServiceRequest with "
        "every span the instrumentation emitted, timestamps as recorded (a replayer shifts them; gaps are real)."),
    "onset": (
        "For a loop, the 0-based index, among the session's LLM (model inference) calls in time order, of the "
        "first wasted call: the first call that repeats earlier behaviour without progress (the same or a "
        "reworded action whose observation brings nothing new, the same plan or text restated, a hand-off "
        "bounced back, a restarted run repeating the same steps). Derived from the scripted model's own "
        "per-call ground truth while recording (or, for restarts, the first call of the second run); each "
        "entry's description says how. wasted_calls = llm_calls - onset. Honest runs have onset null."),
    "fields": {
        "file": "path of the OTLP/JSON file, relative to this manifest",
        "session_id": "the session id the app set (null: none set; the trace is the session)",
        "session_attributes": "span attribute keys that carry session_id as recorded",
        "trace_ids": "hex trace ids in order of their first span",
        "run_first_call": "index of the first LLM call of each agent run (turn or restart)",
        "llm_calls": "model calls answered by the stub (one per LLM call)",
        "llm_spans": "spans the instrumentation marked as LLM calls (gen_ai.operation.name chat, "
                     "openinference.span.kind LLM, llm.request.type chat)",
        "tool_spans": "spans marked as tool executions (execute_tool, TOOL, traceloop.span.kind tool)",
        "session_candidates": "distinct values, in order, of each span attribute that can carry a session "
                              "(gen_ai.conversation.id, session.id, OpenLLMetry's association properties)",
    },
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record the framework corpus (see the module docstring).")
    parser.add_argument("--framework", action="append", choices=FRAMEWORKS)
    parser.add_argument("--content", action="append", choices=["on", "off"])
    parser.add_argument("--scenario", action="append")
    parser.add_argument("--check", action="store_true", help="only parse every recording and print span counts")
    parser.add_argument("--worker", nargs=3, metavar=("FRAMEWORK", "CONTENT", "RESULTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    if args.worker:
        framework, content, results = args.worker
        run_worker(framework, content, args.scenario or [], Path(results))
        return 0
    if args.check:
        return check()
    from scenarios import SCENARIOS

    plan: dict[tuple[str, str], list[str]] = {}
    for sc in SCENARIOS:
        if args.scenario and sc.id not in args.scenario:
            continue
        for fw, content in sc.runs_on:
            if (args.framework and fw not in args.framework) or (args.content and content not in args.content):
                continue
            plan.setdefault((fw, content), []).append(sc.id)
    old = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"recordings": []}
    entries = {e["file"]: e for e in old["recordings"]}
    with tempfile.TemporaryDirectory() as tmp:
        for (fw, content), ids in sorted(plan.items()):
            results = Path(tmp) / f"{fw}-{content}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", fw, content, str(results)]
            for sid in ids:
                cmd += ["--scenario", sid]
            subprocess.run(cmd, env=worker_env(fw, content), check=True)
            for e in json.loads(results.read_text()):
                entries[e["file"]] = e
    recordings = sorted(entries.values(), key=lambda e: e["file"])
    MANIFEST.write_text(json.dumps({**MANIFEST_HEAD, "recordings": recordings}, indent=1) + "\n")
    print(f"{len(recordings)} recordings in {MANIFEST.relative_to(REPO)}")
    return check()


def check() -> int:
    """Parse every file as an ExportTraceServiceRequest (plain protobuf JSON mapping, and with hex ids) and
    print span counts per recording."""
    from google.protobuf.json_format import Parse
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    manifest = json.loads(MANIFEST.read_text())
    files = sorted(OUT.glob("*.json"))
    listed = {e["file"] for e in manifest["recordings"]}
    bad = [f.name for f in files if f"otlp/{f.name}" not in listed] + [
        f for f in listed if not (CORPUS / f).exists()]
    print(f"{'recording':66} {'label':5} {'spans':>5} {'llm':>4} {'tool':>4} {'traces':>6} onset")
    for e in manifest["recordings"]:
        text = (CORPUS / e["file"]).read_text()
        Parse(text, ExportTraceServiceRequest())  # the file is valid protobuf JSON as it stands
        request = from_otlp_json(json.loads(text))  # and its hex ids are 16/8-byte ids
        stats = span_stats(request)
        assert all(len(t) == 32 for t in stats["trace_ids"]), e["file"]
        if stats["trace_ids"] != e["trace_ids"] or stats["spans"] != e["spans"]:
            bad.append(e["file"])
        print(f"{e['file'][5:-5]:66} {e['label']:5} {stats['spans']:>5} {stats['llm_spans']:>4} "
              f"{stats['tool_spans']:>4} {len(stats['trace_ids']):>6} {e['onset'] if e['onset'] is not None else '-'}")
    if bad:
        print("mismatched or unlisted:", bad)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
