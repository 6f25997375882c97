"""A tool-calling agent on the real ``openai`` SDK with the official ``opentelemetry-instrumentation-openai-v2``, in
its default mode (no content capture), exporting OTLP/HTTP; run by ``tests/sdk/test_completion_hook.py`` in a fresh
interpreter (the instrumentor patches ``openai`` globally, and util-genai reads the completion hook's name from the
environment when the instrumentor starts).

    python tests/support/hooked_agent.py '{"otlp": ..., "openai_base_url": ..., "examples_dir": ..., "canary": ...,
                                           "agents": [{"session", "scenario", "steps", "items"?}], "api": ...,
                                           "tool_seconds": ...}'

The environment decides whether the completion hook runs (``OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK=loop_detector``
or nothing): the script sets nothing about it. Every prompt and tool result carries ``canary``. The loggers of the
hook, the SDK and util-genai write to stderr at DEBUG (the test looks for the canary there). Prints one JSON line:
per agent, its trace id and, per model call, the messages it sent and the assistant message it got (the test
recomputes the fingerprints from them). Scenarios: the stub's ``loop``, ``healthy`` and ``batch`` (one procedure over
``items`` messages, every tool result the same size); each tool takes ``tool_seconds`` (default 0). With ``api`` (the service's API URL), each call's span is exported as the call
ends, and the decision an agent would read before its next call (``GET /v1/decision``, once the detector has scored
the span) is recorded with the call.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

CONFIG: dict[str, Any] = json.loads(sys.argv[1])
CANARY: str = CONFIG["canary"]

for name in ("loop_detector", "opentelemetry.util.genai", "opentelemetry.instrumentation.openai_v2"):
    logging.getLogger(name).setLevel(logging.DEBUG)
logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")

import openai  # noqa: E402
from loop_detector_sdk import LoopAttributesSpanProcessor, loop_context  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

sys.path.insert(0, CONFIG["examples_dir"])
from openai_stub import TOOL_SCHEMAS  # noqa: E402


def run_tool(name: str, args: dict[str, Any], scenario: str, step: int) -> str:
    time.sleep(float(CONFIG.get("tool_seconds", 0)))  # a real tool takes time (a read, a test run, a request)
    if scenario == "loop":
        return f"port: 8080\nhost: 0.0.0.0\n# {CANARY}\n"  # never what the agent looks for
    if scenario == "batch":  # one message after the other: another message each time, each the same size
        return f"message {step:02d}: 1 attachment, 212 words, status unread ({CANARY})"
    return f"ok: {name} {json.dumps(args, sort_keys=True)} gave result number {step} ({CANARY})"


PROMPTS = {"batch": "Triage the messages in the inbox."}


def decision_after_call(provider: TracerProvider, session: str) -> dict[str, Any]:
    """The session's decision once the call just made has been exported and scored."""
    import httpx

    from detector.evaluation.simulate import wait_for_detector

    provider.force_flush()
    wait_for_detector(CONFIG["api"], time.time_ns() // 1000)
    d = httpx.get(f"{CONFIG['api']}/v1/decision", params={"session_id": session}, timeout=10).json()
    return {k: d.get(k) for k in ("action", "level", "confidence", "evidence", "dominant_signal", "detector")}


def run_agent(client: openai.OpenAI, provider: TracerProvider, tracer: trace.Tracer, session: str, scenario: str,
              steps: int, items: int | None = None) -> dict[str, Any]:
    marker = f"[{scenario} {items}]" if items else f"[{scenario}]"  # [batch N]: the procedure goes over N items
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a coding agent. {marker} Secret: {CANARY}"},
        {"role": "user", "content": f"{PROMPTS.get(scenario, 'Fix the failing build.')} Token {CANARY}"},
    ]
    calls = []
    with loop_context(session_id=session), tracer.start_as_current_span(f"invoke_agent {scenario}") as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        for step in range(steps):
            sent = json.loads(json.dumps(messages))
            response = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOL_SCHEMAS)
            message = response.choices[0].message.model_dump(exclude_none=True)
            calls.append({"messages": sent, "reply": message})
            if CONFIG.get("api"):
                calls[-1]["decision"] = decision_after_call(provider, session)
            messages.append(message)
            if not message.get("tool_calls"):
                break
            for call in message["tool_calls"]:
                args = json.loads(call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": run_tool(call["function"]["name"], args, scenario, step)})
    return {"session": session, "scenario": scenario, "trace_id": trace_id, "calls": calls}


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "hooked-agent"}))
    provider.add_span_processor(LoopAttributesSpanProcessor())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=CONFIG["otlp"].rstrip("/") + "/v1/traces",
                                                                    timeout=10), schedule_delay_millis=200))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    client = openai.OpenAI(base_url=CONFIG["openai_base_url"], api_key="sk-stub", max_retries=0, timeout=20)
    tracer = provider.get_tracer("hooked-agent")
    runs = [run_agent(client, provider, tracer, a["session"], a["scenario"], int(a["steps"]), a.get("items"))
            for a in CONFIG["agents"]]
    provider.shutdown()
    print(json.dumps({"agents": runs}))


if __name__ == "__main__":
    main()
