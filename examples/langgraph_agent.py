"""A LangGraph tool-calling agent, traced with OpenTelemetry and watched by loop-detector.

    python examples/langgraph_agent.py                     # stub model + loop-detector in-process
    python examples/langgraph_agent.py --scenario healthy
    python examples/langgraph_agent.py --loop-detector http://127.0.0.1:8080 --openai-base-url http://127.0.0.1:8765/v1

The graph is the classic agent loop: a ``model`` node (the OpenAI SDK, traced by
``opentelemetry-instrumentation-openai-v2``) and a ``tools`` node, looping while the model asks for tools.
Each tool run is an ``execute_tool`` span and the whole run an ``invoke_agent`` span, as the GenAI semantic
conventions describe agent frameworks. The session goes on every span through
:class:`detector.sdk.LoopAttributesSpanProcessor`, and the ``model`` node asks loop-detector before each call
(``guard_openai``): a block ends the graph through a ``blocked`` state instead of an endless loop.

Needs ``pip install -e '.[instrumentations,examples]'`` (``langgraph``).
"""

from __future__ import annotations

import argparse
import json
import logging
import operator
import os
import sys
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))


class AgentState(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    blocked: str


def build_graph(client: Any, tracer: Any, model: str, scenario: str, tool_schemas: list[dict[str, Any]]) -> Any:
    from langgraph.graph import END, START, StateGraph

    from detector.sdk import LoopBlockedError

    def call_model(state: AgentState) -> dict[str, Any]:
        try:
            response = client.chat.completions.create(model=model, messages=state["messages"], tools=tool_schemas)
        except LoopBlockedError as exc:
            return {"blocked": json.dumps(exc.body)}
        return {"messages": [response.choices[0].message.model_dump(exclude_none=True)]}

    def run_tools(state: AgentState) -> dict[str, Any]:
        results = []
        for call in state["messages"][-1].get("tool_calls", []):
            name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
            with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call["id"]}):
                output = "port: 8080\n" if scenario == "loop" else f"{name}({json.dumps(args)}) done"
            results.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        return {"messages": results}

    def next_step(state: AgentState) -> str:
        if state.get("blocked"):
            return END
        return "tools" if state["messages"][-1].get("tool_calls") else END

    graph = StateGraph(AgentState)
    graph.add_node("model", call_model)
    graph.add_node("tools", run_tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", next_step, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A LangGraph agent watched by loop-detector")
    parser.add_argument("--scenario", choices=["loop", "healthy"], default="loop")
    parser.add_argument("--steps", type=int, default=20, help="model calls at most (LangGraph recursion limit)")
    parser.add_argument("--loop-detector", help="loop-detector API URL (default: start one in-process)")
    parser.add_argument("--otlp", help="OTLP/HTTP base URL (default: the in-process one, else :4318 of the API host)")
    parser.add_argument("--openai-base-url", help="OpenAI-compatible base URL (default: start the stub in-process)")
    parser.add_argument("--model", default="gpt-4o-mini")
    args = parser.parse_args(argv)
    logging.getLogger("apscheduler").setLevel(logging.ERROR)

    import httpx
    from langgraph.errors import GraphRecursionError
    from openai import OpenAI
    from openai_stub import TOOL_SCHEMAS, serve_stub
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from detector.sdk import LoopAttributesSpanProcessor, LoopGuard, guard_openai, loop_context

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
        base_url = args.openai_base_url or stack.enter_context(serve_stub()) + "/v1"

        provider = TracerProvider(resource=Resource.create({"service.name": "langgraph-agent-example"}))
        provider.add_span_processor(LoopAttributesSpanProcessor())
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp}/v1/traces"),
                                                       schedule_delay_millis=200))
        stack.callback(provider.shutdown)
        OpenAIInstrumentor().instrument(tracer_provider=provider)
        stack.callback(OpenAIInstrumentor().uninstrument)
        tracer = provider.get_tracer("langgraph-agent-example")

        guard = stack.enter_context(LoopGuard(api, timeout=2.0))
        client = guard_openai(OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "sk-stub"), max_retries=0), guard)
        app = build_graph(client, tracer, args.model, args.scenario, TOOL_SCHEMAS)

        session = f"langgraph-{args.scenario}-{uuid.uuid4().hex[:6]}"
        state: AgentState = {"messages": [
            {"role": "system", "content": f"You are a coding agent. [{args.scenario}]"},
            {"role": "user", "content": "Fix the failing build." if args.scenario == "loop" else "Add a --verbose flag."},
        ], "blocked": ""}
        print(f"session {session}")
        steps = 0
        with loop_context(session_id=session), tracer.start_as_current_span(
                "invoke_agent langgraph-agent", attributes={"gen_ai.operation.name": "invoke_agent",
                                                            "gen_ai.agent.name": "langgraph-agent"}):
            try:
                for update in app.stream(state, {"recursion_limit": 2 * args.steps}, stream_mode="updates"):
                    if "model" not in update:
                        continue
                    steps += 1
                    out = update["model"]
                    if out.get("blocked"):
                        print(f"{steps:>4}  blocked by loop-detector: {out['blocked']}")
                        break
                    provider.force_flush()
                    d = guard.check(session_id=session)
                    calls = [f"{c['function']['name']}({c['function']['arguments']})"
                             for c in out["messages"][-1].get("tool_calls", [])]
                    print(f"{steps:>4}  {', '.join(calls) or '(final answer)':<40} {d.action:<9} {d.level:<10} "
                          f"{d.confidence:.3f}")
            except GraphRecursionError:
                print(f"stopped after {steps} model calls (recursion limit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
