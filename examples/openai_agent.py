"""A minimal tool-calling agent on the OpenAI SDK, traced by the official OpenTelemetry instrumentation
(``opentelemetry-instrumentation-openai-v2``) and guarded by loop-detector.

    python examples/openai_agent.py                      # everything in-process: stub model + loop-detector
    python examples/openai_agent.py --scenario healthy   # an agent that makes progress
    python examples/openai_agent.py --loop-detector http://127.0.0.1:8080 --otlp http://127.0.0.1:4318 \\
        --openai-base-url http://127.0.0.1:8765/v1        # against `loop-detector serve` and examples/openai_stub.py

What it shows:

- the app changes nothing but its OpenTelemetry set-up: ``OpenAIInstrumentor().instrument()`` writes a GenAI
  ``chat`` span per call, the standard OTLP/HTTP exporter sends it to loop-detector;
- the session: openai-v2 writes no session id, so :class:`detector.sdk.LoopAttributesSpanProcessor` copies
  the one given to ``loop_context(session_id=...)`` onto every span (``loop_detector.session_id``);
- enforcement: ``guard_openai`` asks loop-detector before each call (``POST /v1/check``) and applies the
  answer: waits on throttle, adds the break instruction to the system prompt on inject, raises
  ``LoopBlockedError`` on block. After each step the example also prints ``GET /v1/decision``.

Needs ``pip install -e '.[instrumentations]'``. Set ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only``
(or pass ``--content``) to capture message content; loop-detector works without it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="An OpenAI-SDK agent guarded by loop-detector")
    parser.add_argument("--scenario", choices=["loop", "healthy"], default="loop")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--content", action="store_true", help="capture message content on the spans")
    parser.add_argument("--loop-detector", help="loop-detector API URL (default: start one in-process)")
    parser.add_argument("--otlp", help="OTLP/HTTP base URL (default: the in-process one, else :4318 of the API host)")
    parser.add_argument("--openai-base-url", help="OpenAI-compatible base URL (default: start the stub in-process)")
    parser.add_argument("--model", default="gpt-4o-mini")
    return parser.parse_args(argv)


def run_tool(name: str, args: dict[str, Any], step: int, scenario: str) -> str:
    if scenario == "loop":
        return "port: 8080\nhost: 0.0.0.0\n"
    return f"{name}({json.dumps(args)}): result {step}"


def wait_until_scored(client: httpx.Client, api: str, after_us: int, timeout: float = 10.0) -> None:
    """Spans are scored after they are exported: wait until loop-detector has read past ``after_us``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get(f"{api}/healthz").json().get("watermark_us", 0) >= after_us:
            return
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.getLogger("apscheduler").setLevel(logging.ERROR)  # "skipped: maximum number of running instances"
    if args.content:
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"

    from openai import OpenAI
    from openai_stub import TOOL_SCHEMAS, serve_stub
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from detector.sdk import LoopAttributesSpanProcessor, LoopBlockedError, LoopGuard, guard_openai, loop_context

    with ExitStack() as stack:
        api, otlp = args.loop_detector, args.otlp
        if api is None:
            from detector.service.process import running_service
            from detector.settings.config import AppConfig

            config = AppConfig()
            config.detector.interval_seconds = 0.2
            config.loop_detection.throttle_delay_seconds = 1
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="loop-detector-example-"))
            _, eps = stack.enter_context(running_service(config, data_dir))
            api, otlp = eps.api, eps.otlp
            print(f"loop-detector in-process: API {api}, OTLP {otlp}")
        elif otlp is None:
            otlp = str(httpx.URL(api).copy_with(port=4318)).rstrip("/")
        base_url = args.openai_base_url
        if base_url is None:
            base_url = stack.enter_context(serve_stub()) + "/v1"
            print(f"OpenAI stub in-process: {base_url}")

        # 1. OpenTelemetry: the official instrumentation, loop-detector's span processor, the OTLP exporter
        provider = TracerProvider(resource=Resource.create({"service.name": "openai-agent-example"}))
        provider.add_span_processor(LoopAttributesSpanProcessor())
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp}/v1/traces"),
                                                       schedule_delay_millis=200))
        stack.callback(provider.shutdown)
        OpenAIInstrumentor().instrument(tracer_provider=provider)
        stack.callback(OpenAIInstrumentor().uninstrument)
        tracer = provider.get_tracer("openai-agent-example")

        # 2. loop-detector's guard around the OpenAI client
        guard = stack.enter_context(LoopGuard(api, timeout=2.0))
        client = guard_openai(OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "sk-stub"), max_retries=0), guard)
        # the decision reads need the service's API token when it listens beyond loopback (the compose stack's)
        token = os.environ.get("LOOP_DETECTOR_API_TOKEN")
        http = stack.enter_context(httpx.Client(timeout=5.0, headers={"Authorization": f"Bearer {token}"} if token
                                                else {}))

        session = f"example-{args.scenario}-{uuid.uuid4().hex[:6]}"
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": f"You are a coding agent. [{args.scenario}]"},
            {"role": "user", "content": "Fix the failing build." if args.scenario == "loop" else "Add a --verbose flag."},
        ]
        print(f"session {session}\n{'step':>4}  {'tool call':<40} {'action':<9} {'level':<10} {'confidence':>10}")
        with loop_context(session_id=session), tracer.start_as_current_span(
                "invoke_agent coding-agent", attributes={"gen_ai.operation.name": "invoke_agent",
                                                         "gen_ai.agent.name": "coding-agent"}):
            for step in range(1, args.steps + 1):
                try:
                    response = client.chat.completions.create(model=args.model, messages=messages,
                                                              tools=TOOL_SCHEMAS)
                except LoopBlockedError as exc:
                    print(f"{step:>4}  blocked by loop-detector: {json.dumps(exc.body)}")
                    break
                message = response.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                calls = message.tool_calls or []
                for call in calls:
                    tool_args = json.loads(call.function.arguments)
                    with tracer.start_as_current_span(f"execute_tool {call.function.name}", attributes={
                            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.function.name,
                            "gen_ai.tool.call.id": call.id}):
                        result = run_tool(call.function.name, tool_args, step, args.scenario)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                provider.force_flush()
                wait_until_scored(http, api, time.time_ns() // 1000)
                d = http.get(f"{api}/v1/decision", params={"session_id": session}).json()
                shown = ", ".join(f"{c.function.name}({c.function.arguments})" for c in calls) or "(final answer)"
                print(f"{step:>4}  {shown[:40]:<40} {d['action']:<9} {d['level']:<10} {d['confidence']:>10.3f}")
                if not calls:
                    break
    return 0


if __name__ == "__main__":
    sys.exit(main())
