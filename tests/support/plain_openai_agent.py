"""An agent as a new user writes it: the ``openai`` SDK and the OpenTelemetry API only, no exporter set up in code.

Run under ``opentelemetry-instrument`` (tests/ingest/test_grpc.py), which installs the SDK, the exporters chosen
by the environment and every instrumentation found (here openai-v2):

    OTEL_EXPORTER_OTLP_PROTOCOL=grpc opentelemetry-instrument python plain_openai_agent.py SESSION STEPS

``OPENAI_BASE_URL`` points the SDK at the local stub. One agent run is one trace: an ``invoke_agent`` root span
(the OpenTelemetry API is what an agent framework uses for it) around the chat calls. Prints the trace id.
"""

from __future__ import annotations

import json
import sys

import openai
from opentelemetry import trace

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "read a file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]


def main() -> None:
    session, steps = sys.argv[1], int(sys.argv[2])
    client = openai.OpenAI(api_key="sk-stub", max_retries=0, timeout=20)
    tracer = trace.get_tracer("plain-agent")
    messages = [{"role": "system", "content": "You are a coding agent. [loop]"},
                {"role": "user", "content": "Fix the failing build."}]
    with tracer.start_as_current_span("invoke_agent coder", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder",
            "gen_ai.conversation.id": session}) as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        for _ in range(steps):
            message = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS).choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or []:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "port: 8080\nhost: 0.0.0.0\n"})
    print(json.dumps({"trace_id": trace_id}))


if __name__ == "__main__":
    main()
