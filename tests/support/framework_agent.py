"""A tool-calling agent written with an agent framework, traced the framework's own way, exporting OTLP/HTTP.

Run by ``tests/ingest/test_frameworks.py`` from the framework's cached venv (``support/frameworks.py``); it imports
nothing from loop-detector. The model is the local OpenAI-compatible stub (``examples/openai_stub.py``, which the
test serves): the system prompt's ``[loop N]`` / ``[healthy]`` marker picks the scenario, so every framework runs the
same conversation.

    python tests/support/framework_agent.py '{"framework": "pydantic-ai", "otlp": "...", "openai_base_url": "...",
                                             "tools": [...], "agents": [{"session", "scenario", "steps"}], ...}'

Prints one JSON line: per agent, the trace id of its run (the trace that started the most spans during it), and the
versions of the packages used.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback
from importlib import metadata
from typing import Any

# this script's folder (tests/support) is not a package path: its agents.py would shadow the Agents SDK's `agents`
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
CONFIG: dict[str, Any] = json.loads(sys.argv[1])
FRAMEWORK: str = CONFIG["framework"]
CONTENT: bool = bool(CONFIG.get("content", True))
# how long each tool takes, in seconds (real tools are not instantaneous: a file read, a test run, an HTTP call)
TOOL_SECONDS: float = float(CONFIG.get("tool_seconds", 0))
os.environ["OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"] = "4096"
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # CrewAI's own telemetry (not ours) off
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM: its bundled price map, no download
os.environ["OPENAI_API_KEY"] = "sk-stub"
os.environ.update(CONFIG.get("env", {}))  # the framework's own switches (schema version, content capture)

from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

SPANS: dict[str, int] = {}  # spans started, per trace id (hex), in start order


class SpanCounter(SpanProcessor):
    """Counts the spans each trace starts: a run's trace is the one with the most spans started during it (some
    instrumentations start a lone extra root span, e.g. OpenLLMetry's LangGraph on a second run in a process)."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        trace_id = format(span.get_span_context().trace_id, "032x")
        SPANS[trace_id] = SPANS.get(trace_id, 0) + 1


def make_provider() -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": f"agent-{FRAMEWORK}"}))
    provider.add_span_processor(SpanCounter())
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=CONFIG["otlp"].rstrip("/") + "/v1/traces", timeout=10), schedule_delay_millis=200))
    trace.set_tracer_provider(provider)
    return provider


def system_prompt(scenario: str, steps: int) -> str:
    marker = f"[{scenario} {steps}]" if scenario in ("loop", "batch") else "[healthy]"
    return f"You are a coding agent. {marker}"


def user_prompt(scenario: str) -> str:
    return {"loop": "Fix the failing build.", "batch": "Triage the messages in the inbox."}.get(
        scenario, "Add a --verbose flag.")


def tool_result(name: str, args: dict[str, Any], scenario: str, counter: list[int]) -> str:
    counter[0] += 1
    if TOOL_SECONDS:
        time.sleep(TOOL_SECONDS)
    if scenario == "loop":
        return "port: 8080\nhost: 0.0.0.0\n"
    if scenario == "batch":  # one message after the other: another message each time, each the same size
        return f"message {counter[0]:02d}: 1 attachment, 212 words, status unread"
    return f"ok: {name} {json.dumps(args, sort_keys=True)} gave result number {counter[0]}"


def tool_names() -> list[str]:
    return [t["function"]["name"] for t in CONFIG["tools"]]


def tool_functions(scenario: str) -> list[Any]:
    """One Python function per stub tool, with the stub's argument names as optional parameters (frameworks derive
    the tool schema from the signature)."""
    counter = [0]

    def make(name: str) -> Any:
        def fn(path: str = "", pattern: str = "", target: str = "", line: int = 0, message: str = "",
               query: str = "") -> str:
            args = {k: v for k, v in {"path": path, "pattern": pattern, "target": target, "line": line,
                                      "message": message, "query": query}.items() if v}
            return tool_result(name, args, scenario, counter)
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = f"{name} tool"
        return fn

    return [make(name) for name in tool_names()]


# -- the frameworks ---------------------------------------------------------------------------------------------


def run_pydantic_ai(provider: TracerProvider, agent: dict[str, Any]) -> None:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider, include_content=CONTENT,
                                                 version=int(CONFIG.get("pydantic_ai_version", 3))))
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=CONFIG["openai_base_url"],
                                                                    api_key="sk-stub"))
    pa = Agent(model, system_prompt=system_prompt(agent["scenario"], agent["steps"]),
               tools=[Tool(f, name=f.__name__) for f in tool_functions(agent["scenario"])])
    pa.run_sync(user_prompt(agent["scenario"]), conversation_id=agent["session"])


def run_strands(provider: TracerProvider, agent: dict[str, Any]) -> None:
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    model = OpenAIModel(client_args={"base_url": CONFIG["openai_base_url"], "api_key": "sk-stub"},
                        model_id="gpt-4o-mini")
    tools = [tool(f) for f in tool_functions(agent["scenario"])]
    sa = Agent(model=model, tools=tools, system_prompt=system_prompt(agent["scenario"], agent["steps"]),
               trace_attributes={"session.id": agent["session"]}, callback_handler=None)
    sa(user_prompt(agent["scenario"]))


def run_google_adk(provider: TracerProvider, agent: dict[str, Any]) -> None:
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    model = LiteLlm(model="openai/gpt-4o-mini", api_base=CONFIG["openai_base_url"], api_key="sk-stub")
    adk = LlmAgent(name="coder", model=model, instruction=system_prompt(agent["scenario"], agent["steps"]),
                   tools=tool_functions(agent["scenario"]))
    sessions = InMemorySessionService()

    async def go() -> None:
        await sessions.create_session(app_name="coder-app", user_id="u1", session_id=agent["session"])
        runner = Runner(agent=adk, app_name="coder-app", session_service=sessions)
        message = types.Content(role="user", parts=[types.Part(text=user_prompt(agent["scenario"]))])
        async for _ in runner.run_async(user_id="u1", session_id=agent["session"], new_message=message):
            pass

    asyncio.run(go())


def run_crewai(provider: TracerProvider, agent: dict[str, Any]) -> None:
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool
    from openinference.instrumentation import using_session
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    if not getattr(run_crewai, "instrumented", False):
        CrewAIInstrumentor().instrument(tracer_provider=provider)
        OpenAIInstrumentor().instrument(tracer_provider=provider)
        run_crewai.instrumented = True  # type: ignore[attr-defined]
    llm = LLM(model="openai/gpt-4o-mini", base_url=CONFIG["openai_base_url"], api_key="sk-stub")
    tools = [tool(f.__name__)(f) for f in tool_functions(agent["scenario"])]
    crew_agent = Agent(role="coder", goal=user_prompt(agent["scenario"]), llm=llm, tools=tools,
                       backstory=system_prompt(agent["scenario"], agent["steps"]), max_iter=agent["steps"] + 2)
    task = Task(description=user_prompt(agent["scenario"]), expected_output="the change", agent=crew_agent)
    with using_session(agent["session"]):
        Crew(agents=[crew_agent], tasks=[task]).kickoff()


def run_langgraph(provider: TracerProvider, agent: dict[str, Any]) -> None:
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    flavour = FRAMEWORK.split("-", 1)[1]
    if not getattr(run_langgraph, "instrumented", False):
        if flavour == "openinference":
            from openinference.instrumentation.langchain import LangChainInstrumentor
        else:
            from opentelemetry.instrumentation.langchain import LangchainInstrumentor as LangChainInstrumentor
        LangChainInstrumentor().instrument(tracer_provider=provider)
        run_langgraph.instrumented = True  # type: ignore[attr-defined]
    model = ChatOpenAI(model="gpt-4o-mini", base_url=CONFIG["openai_base_url"], api_key="sk-stub", max_retries=0)
    tools = [StructuredTool.from_function(f, name=f.__name__) for f in tool_functions(agent["scenario"])]
    graph = create_react_agent(model, tools)
    inputs = {"messages": [("system", system_prompt(agent["scenario"], agent["steps"])),
                           ("user", user_prompt(agent["scenario"]))]}
    config = {"recursion_limit": 4 * agent["steps"] + 10, "metadata": {"session_id": agent["session"]}}
    if flavour == "openinference":
        from openinference.instrumentation import using_session

        with using_session(agent["session"]):
            graph.invoke(inputs, config=config)
    else:  # OpenLLMetry: the run's metadata become traceloop.association.properties.*
        graph.invoke(inputs, config=config)


def run_openai_agents(provider: TracerProvider, agent: dict[str, Any]) -> None:
    from agents import Agent, ModelSettings, function_tool, set_default_openai_client
    from agents import Runner as AgentsRunner
    from openai import AsyncOpenAI
    from openinference.instrumentation import TraceConfig, using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    if not getattr(run_openai_agents, "instrumented", False):
        # content off: OpenInference's own switch (hide_inputs / hide_outputs), as users turn it off
        OpenAIAgentsInstrumentor().instrument(
            tracer_provider=provider, config=TraceConfig(hide_inputs=not CONTENT, hide_outputs=not CONTENT))
        set_default_openai_client(AsyncOpenAI(base_url=CONFIG["openai_base_url"], api_key="sk-stub"),
                                  use_for_tracing=False)
        run_openai_agents.instrumented = True  # type: ignore[attr-defined]
    tools = [function_tool(f, name_override=f.__name__, strict_mode=False) for f in tool_functions(agent["scenario"])]
    oa = Agent(name="coder", instructions=system_prompt(agent["scenario"], agent["steps"]), model="gpt-4o-mini",
               tools=tools, model_settings=ModelSettings(parallel_tool_calls=False))
    with using_session(agent["session"]):
        AgentsRunner.run_sync(oa, user_prompt(agent["scenario"]), max_turns=agent["steps"] + 5)


RUNNERS = {"pydantic-ai": run_pydantic_ai, "openai-agents": run_openai_agents, "strands": run_strands, "google-adk": run_google_adk,
           "crewai": run_crewai, "langgraph-openinference": run_langgraph, "langgraph-openllmetry": run_langgraph}
PACKAGES = {"pydantic-ai": ["pydantic-ai-slim"],
            "openai-agents": ["openai-agents", "openinference-instrumentation-openai-agents"], "strands": ["strands-agents"], "google-adk": ["google-adk", "litellm"],
            "crewai": ["crewai", "openinference-instrumentation-crewai", "openinference-instrumentation-openai"],
            "langgraph-openinference": ["langgraph", "langchain-openai", "openinference-instrumentation-langchain"],
            "langgraph-openllmetry": ["langgraph", "langchain-openai", "opentelemetry-instrumentation-langchain"]}


def main() -> None:
    provider = make_provider()
    runs = []
    for agent in CONFIG["agents"]:
        before = dict(SPANS)
        error = ""
        try:
            RUNNERS[FRAMEWORK](provider, agent)
        except Exception as exc:  # a run may end in the framework's own limit: the spans are what matter
            error = type(exc).__name__
            traceback.print_exc()
        grown = {t: n - before.get(t, 0) for t, n in SPANS.items() if n > before.get(t, 0)}
        runs.append({**agent, "trace_id": max(grown, key=grown.__getitem__) if grown else "", "error": error})
    provider.shutdown()
    versions = {}
    for dist in ["openai", "opentelemetry-sdk", *PACKAGES[FRAMEWORK]]:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    print(json.dumps({"agents": runs, "versions": versions}))


if __name__ == "__main__":
    main()
