"""A tool-calling agent on the real ``openai`` SDK, instrumented by one GenAI instrumentation, exporting OTLP.

Run by ``tests/ingest/test_instrumentations.py`` in a fresh interpreter per instrumentation (instrumentors patch
the ``openai`` module globally), possibly from another virtual environment: it imports nothing from
loop-detector, only ``openai``, the OpenTelemetry SDK and OTLP/HTTP exporter, and the instrumentation.

    python tests/support/instrumented_agent.py '{"instrumentation": "openai-v2", "content": true, ...}'

Configuration (one JSON argument):

- ``instrumentation``: ``openai-v2`` (opentelemetry-instrumentation-openai-v2), ``openllmetry``
  (opentelemetry-instrumentation-openai), ``openinference`` (openinference-instrumentation-openai) or
  ``openlit``;
- ``content``: message content capture on or off, through each library's own switch;
- ``content_mode``: ``span`` (content on the span, the default), ``event_only`` (openai-v2 with util-genai's
  latest conventions: one ``gen_ai.client.inference.operation.details`` log record per call, nothing on the
  span) or ``events`` (OpenLLMetry with ``use_legacy_attributes=False``: the 1.30 conventions, one log record
  per message, ``gen_ai.user.message``, ``gen_ai.choice``, ...); log records are exported with the OTLP log
  exporter of the same transport;
- ``transport``: ``http`` (OTLP/HTTP to ``otlp``, the default) or ``grpc`` (OTLP/gRPC to ``otlp_grpc``);
- ``session_mode``: where the session id goes: ``native`` (the library's own way: traceloop association
  properties for OpenLLMetry, ``using_session`` for OpenInference), ``processor`` (``loop_detector.session_id``
  on every span, from a small span processor), ``baggage`` (``session.id`` in the OpenTelemetry baggage,
  copied onto every span by ``opentelemetry-processor-baggage``, the standard route) or ``invoke_agent``
  (``gen_ai.conversation.id`` on the agent run's root span only);
- ``attribute_count_limit``: the SDK's span attribute limit (default 4096; 128 is the SDK's own default);
- ``otlp`` (base URL of the OTLP/HTTP receiver), ``openai_base_url`` (the stub's ``.../v1``),
  ``examples_dir`` (for the stub's tool list), ``agents`` (``[{"session", "scenario", "steps"}]``),
  ``pricing_json`` (OpenLIT's price file).

Each agent run is one trace: an ``invoke_agent`` root span, the instrumentation's chat spans, and one tool
span per tool run in the dialect that goes with the instrumentation (semconv ``execute_tool``, traceloop
``@tool``, OpenInference ``TOOL``), as the matching agent SDKs write them. Prints one JSON line: per agent, its
trace id and the usage of every successful call, plus the versions of the packages used.
"""

from __future__ import annotations

import contextvars
import json
import os
import sys
from importlib import metadata
from typing import Any

CONFIG: dict[str, Any] = json.loads(sys.argv[1])
INSTRUMENTATION: str = CONFIG["instrumentation"]
CONTENT: bool = bool(CONFIG["content"])
SESSION_MODE: str = CONFIG.get("session_mode", "native")
CONTENT_MODE: str = CONFIG.get("content_mode", "span")
TRANSPORT: str = CONFIG.get("transport", "http")

# Indexed dialects (OpenInference, OpenLLMetry before 0.5x) write several attributes per message: past the SDK's
# default limit of 128 attributes a span drops the rest, usage and output included (docs/instrumentations.md).
os.environ["OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"] = str(CONFIG.get("attribute_count_limit", 4096))

# Content capture, each library's own switch (read when the instrumentation is imported or instrumented).
if INSTRUMENTATION == "openai-v2":
    if CONTENT:
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = (
            "event_only" if CONTENT_MODE == "event_only" else "span_only")
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    else:
        os.environ.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
elif INSTRUMENTATION == "openllmetry":
    os.environ["TRACELOOP_TRACE_CONTENT"] = "true" if CONTENT else "false"
elif INSTRUMENTATION == "openinference":
    for var in ("OPENINFERENCE_HIDE_INPUTS", "OPENINFERENCE_HIDE_OUTPUTS"):
        os.environ[var] = "false" if CONTENT else "true"

import openai  # noqa: E402
from opentelemetry import context as otel_context  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.trace import SpanKind, Status, StatusCode  # noqa: E402

sys.path.insert(0, CONFIG["examples_dir"])
from openai_stub import TOOL_SCHEMAS  # noqa: E402

SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("session", default=None)


class SessionAttributeProcessor(SpanProcessor):
    """Copies the current session id onto every span as it starts, under ``attribute``.

    With ``loop_detector.session_id`` it is what loop-detector's SDK helper does; with
    ``traceloop.association.properties.session_id`` it is what traceloop-sdk's
    ``Traceloop.set_association_properties({"session_id": ...})`` does (traceloop-sdk itself cannot be
    installed beside opentelemetry-sdk 1.45.2, see docs/instrumentations.md).
    """

    def __init__(self, attribute: str) -> None:
        self.attribute = attribute

    def on_start(self, span: Any, parent_context: otel_context.Context | None = None) -> None:
        session = SESSION.get()
        if session:
            span.set_attribute(self.attribute, session)

    def on_end(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def make_provider() -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": f"agent-{INSTRUMENTATION}"}))
    if SESSION_MODE == "processor":
        provider.add_span_processor(SessionAttributeProcessor("loop_detector.session_id"))
    elif SESSION_MODE == "baggage":
        from opentelemetry.processor.baggage import ALLOW_ALL_BAGGAGE_KEYS, BaggageSpanProcessor

        provider.add_span_processor(BaggageSpanProcessor(ALLOW_ALL_BAGGAGE_KEYS))
    elif SESSION_MODE == "native" and INSTRUMENTATION == "openllmetry":
        provider.add_span_processor(SessionAttributeProcessor("traceloop.association.properties.session_id"))
    if TRANSPORT == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        exporter: Any = GrpcSpanExporter(endpoint=CONFIG["otlp_grpc"], insecure=True, timeout=10)
    else:
        exporter = OTLPSpanExporter(endpoint=CONFIG["otlp"].rstrip("/") + "/v1/traces", timeout=10)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    trace.set_tracer_provider(provider)
    return provider


def make_logger_provider() -> Any:
    """The log pipeline, for the content modes that write log records."""
    if CONTENT_MODE == "span":
        return None
    from opentelemetry._logs import set_logger_provider
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    if TRANSPORT == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        exporter = OTLPLogExporter(endpoint=CONFIG["otlp_grpc"], insecure=True, timeout=10)
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter

        exporter = HttpLogExporter(endpoint=CONFIG["otlp"].rstrip("/") + "/v1/logs", timeout=10)
    logger_provider = LoggerProvider(resource=Resource.create({"service.name": f"agent-{INSTRUMENTATION}"}))
    # A real app's log records normally reach the receiver before their spans (the SDK exports logs every second,
    # spans every five): here spans go every 200 ms, so logs go every 100 ms, as much ahead. A call's content logs
    # must be stored by the time the detection cycle normalizes its span.
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(exporter, schedule_delay_millis=100))
    set_logger_provider(logger_provider)
    return logger_provider


def instrument(provider: TracerProvider, logger_provider: Any = None) -> list[str]:
    """Instrument the openai module; returns the distributions whose versions matter."""
    if INSTRUMENTATION == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider, logger_provider=logger_provider)
        return ["opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai"]
    if INSTRUMENTATION == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        if CONTENT_MODE == "events":  # content as per-message log records instead of span attributes
            OpenAIInstrumentor(use_legacy_attributes=False).instrument(tracer_provider=provider,
                                                                       logger_provider=logger_provider)
        else:
            OpenAIInstrumentor().instrument(tracer_provider=provider)
        return ["opentelemetry-instrumentation-openai", "opentelemetry-semantic-conventions-ai"]
    if INSTRUMENTATION == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
        return ["openinference-instrumentation-openai", "openinference-semantic-conventions"]
    if INSTRUMENTATION == "openlit":
        import openlit

        # openlit finds the global tracer provider set above; HTTP-client instrumentors are not wanted here
        openlit.init(application_name=f"agent-{INSTRUMENTATION}", capture_message_content=CONTENT,
                     disable_metrics=True, pricing_json=CONFIG.get("pricing_json"),
                     disabled_instrumentors=["httpx", "requests", "urllib3", "urllib", "aiohttp-client"])
        return ["openlit"]
    raise SystemExit(f"unknown instrumentation {INSTRUMENTATION!r}")


def run_tool(name: str, args: dict[str, Any], scenario: str, step: int) -> str:
    if scenario == "loop":
        return "port: 8080\nhost: 0.0.0.0\n"  # the file never has what the agent looks for
    return f"ok: {name} {json.dumps(args, sort_keys=True)} gave result number {step}"


def tool_span(tracer: trace.Tracer, name: str, call_id: str, args: dict[str, Any], session: str) -> trace.Span:
    """A tool-run span in the dialect of the agent SDK that goes with the instrumentation."""
    if INSTRUMENTATION == "openllmetry":  # traceloop-sdk's @tool decorator
        attrs: dict[str, Any] = {"traceloop.span.kind": "tool", "traceloop.entity.name": name}
        if CONTENT:
            attrs["traceloop.entity.input"] = json.dumps({"args": [], "kwargs": args})
        return tracer.start_span(f"{name}.tool", kind=SpanKind.INTERNAL, attributes=attrs)
    if INSTRUMENTATION == "openinference":  # openinference-instrumentation's tracer.tool
        attrs = {"openinference.span.kind": "TOOL", "tool.name": name,
                 "input.value": json.dumps(args) if CONTENT else "__REDACTED__", "input.mime_type": "application/json"}
        if SESSION_MODE == "native":
            attrs["session.id"] = session
        return tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=attrs)
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
             "gen_ai.tool.type": "function"}
    if CONTENT:
        attrs["gen_ai.tool.call.arguments"] = json.dumps(args)
    return tracer.start_span(f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attrs)


def run_agent(client: openai.OpenAI, tracer: trace.Tracer, session: str, scenario: str, steps: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a coding agent. [{scenario}]"},
        {"role": "user", "content": "Fix the failing build." if scenario == "loop" else "Add a --verbose flag."},
    ]
    usage: list[list[int]] = []
    errors = 0
    token = SESSION.set(session)
    root_attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"{scenario}-agent"}
    if SESSION_MODE == "invoke_agent":
        root_attrs["gen_ai.conversation.id"] = session
    scope: Any = None
    baggage_token = None
    if SESSION_MODE == "baggage":  # what the app (or a web framework's middleware) does once per request
        from opentelemetry import baggage

        baggage_token = otel_context.attach(baggage.set_baggage("session.id", session))
    if INSTRUMENTATION == "openinference" and SESSION_MODE == "native":
        from openinference.instrumentation import using_session

        scope = using_session(session)
        scope.__enter__()
    try:
        with tracer.start_as_current_span(f"invoke_agent {scenario}-agent", kind=SpanKind.INTERNAL,
                                          attributes=root_attrs) as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            for step in range(steps):
                try:
                    response = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                                              tools=TOOL_SCHEMAS)
                except openai.APIError:
                    errors += 1
                    continue
                assert response.usage is not None
                usage.append([response.usage.prompt_tokens, response.usage.completion_tokens])
                message = response.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    break
                for call in message.tool_calls:
                    args = json.loads(call.function.arguments)
                    span = tool_span(tracer, call.function.name, call.id, args, session)
                    with trace.use_span(span, end_on_exit=True):
                        result = run_tool(call.function.name, args, scenario, step)
                        span.set_status(Status(StatusCode.OK))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    finally:
        if scope is not None:
            scope.__exit__(None, None, None)
        if baggage_token is not None:
            otel_context.detach(baggage_token)
        SESSION.reset(token)
    return {"session": session, "scenario": scenario, "trace_id": trace_id, "usage": usage, "errors": errors}


def main() -> None:
    provider = make_provider()
    logger_provider = make_logger_provider()
    packages = instrument(provider, logger_provider)
    client = openai.OpenAI(base_url=CONFIG["openai_base_url"], api_key="sk-stub", max_retries=0, timeout=20)
    tracer = provider.get_tracer("instrumented-agent")
    runs = [run_agent(client, tracer, a["session"], a["scenario"], int(a["steps"])) for a in CONFIG["agents"]]
    if logger_provider is not None:  # as opentelemetry-instrument's exit handlers do: logs first, then spans
        logger_provider.shutdown()
    provider.shutdown()  # flushes every span to the receiver
    versions = {}
    for dist in ["openai", "opentelemetry-sdk", *packages]:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    print(json.dumps({"agents": runs, "versions": versions}))


if __name__ == "__main__":
    main()
