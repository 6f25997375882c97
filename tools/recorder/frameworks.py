"""One runner per framework: the agent written the way that framework's users write it, instrumented the way
its users instrument it, pointed at the stub model.

Each runner is set up once per interpreter (instrumentors patch globally) with the recorder's tracer provider
and the content switch, then runs scenarios. A runner imports only its own framework, so each worker process
loads one framework and one instrumentation.

Sessions are set the way each framework's users set them:

- pydantic-ai: ``agent.run_sync(..., conversation_id=...)`` (emitted as ``gen_ai.conversation.id``);
- OpenAI Agents SDK + OpenInference: ``openinference.instrumentation.using_session(...)`` (``session.id``);
- LangGraph (both instrumentations): ``config={"configurable": {"thread_id": ...}, "metadata": {"session_id":
  ...}}``; the thread is the conversation's (a restarted or batch run gets a fresh thread, the same session);
- openai-v2: W3C baggage ``session.id`` copied onto spans by ``opentelemetry-processor-baggage``'s
  ``BaggageSpanProcessor`` for multi-run scenarios; single-run scenarios set no session (the trace is the
  session), as most plain-SDK apps do. Each agent run is wrapped in one app span (``run_agent``) so its chat
  spans share a trace.
"""


import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from agent_tools import ToolError
from scenarios import Scenario

MODEL = "gpt-4o-mini"


def agent_name(sc: Scenario) -> str:
    s = sc.system.lower()
    for word, name in (("sre", "sre_agent"), ("coding", "coding_agent"), ("operations", "ops_agent"),
                       ("knowledge base", "support_agent"), ("database", "db_planner"),
                       ("release notes", "release_writer"), ("triage", "ticket_triage")):
        if word in s:
            return name
    return "assistant"


def _json_type(annotation: Any) -> str:
    return {int: "integer", float: "number", bool: "boolean"}.get(annotation, "string")


def openai_tool_schema(fn: Callable[..., str]) -> dict[str, Any]:
    """The Chat Completions tool schema of a typed function (what a plain-SDK app writes by hand)."""
    sig = inspect.signature(fn)
    props = {n: {"type": _json_type(p.annotation if not isinstance(p.annotation, str) else
                                    {"int": int, "float": float, "bool": bool}.get(p.annotation, str))}
             for n, p in sig.parameters.items()}
    required = [n for n, p in sig.parameters.items() if p.default is inspect.Parameter.empty]
    return {"type": "function", "function": {"name": fn.__name__, "description": (fn.__doc__ or "").strip(),
                                             "parameters": {"type": "object", "properties": props,
                                                            "required": required}}}


class Runner:
    framework: str = ""

    def __init__(self, provider: Any, base_url: str, content: bool) -> None:
        self.provider, self.base_url, self.content = provider, base_url, content

    def run(self, sc: Scenario, tools: dict[str, Callable[..., str]], session_id: str | None,
            on_turn: Callable[[int], None]) -> None:
        raise NotImplementedError


# --- pydantic-ai ------------------------------------------------------------------------------------------

class PydanticAIRunner(Runner):
    framework = "pydantic_ai"

    def __init__(self, provider: Any, base_url: str, content: bool) -> None:
        super().__init__(provider, base_url, content)
        from pydantic_ai import Agent
        from pydantic_ai.models.instrumented import InstrumentationSettings
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        Agent.instrument_all(InstrumentationSettings(tracer_provider=provider, include_content=content))
        self.model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key="sk-stub"))

    def run(self, sc, tools, session_id, on_turn):
        from pydantic_ai import Agent, ModelRetry
        from pydantic_ai.exceptions import AgentRunError
        from pydantic_ai.usage import UsageLimits

        def wrap(fn: Callable[..., str]) -> Callable[..., str]:
            @functools.wraps(fn)
            def tool(*args: Any, **kwargs: Any) -> str:
                try:
                    return fn(*args, **kwargs)
                except ToolError as exc:  # pydantic-ai's way of telling the model a call failed
                    raise ModelRetry(str(exc)) from exc
            return tool

        agent = Agent(self.model, instructions=sc.system, name=agent_name(sc),
                      tools=[wrap(tools[n]) for n in sc.tools],
                      retries={"tools": 20, "output": sc.max_validations})
        if sc.validator is not None:
            validator = sc.validator

            @agent.output_validator
            def check(output: str) -> str:
                feedback = validator(output)
                if feedback:
                    raise ModelRetry(feedback)
                return output

        history = None
        for i, turn in enumerate(sc.turns):
            on_turn(i)
            try:
                result = agent.run_sync(turn.user, message_history=history if turn.history else None,
                                        conversation_id=session_id,
                                        usage_limits=UsageLimits(request_limit=sc.max_calls))
                history = result.all_messages()
            except AgentRunError as exc:  # UsageLimitExceeded, UnexpectedModelBehavior: the run fails
                print(f"    run {i} ended: {type(exc).__name__}: {str(exc)[:80]}")
                history = None


# --- OpenAI Agents SDK + OpenInference --------------------------------------------------------------------

class OpenAIAgentsRunner(Runner):
    framework = "openai_agents"

    def __init__(self, provider: Any, base_url: str, content: bool) -> None:
        super().__init__(provider, base_url, content)
        from agents import set_default_openai_client
        from openai import AsyncOpenAI
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        OpenAIAgentsInstrumentor().instrument(
            tracer_provider=provider, config=TraceConfig(hide_inputs=not content, hide_outputs=not content))
        set_default_openai_client(AsyncOpenAI(base_url=base_url, api_key="sk-stub"), use_for_tracing=False)

    def run(self, sc, tools, session_id, on_turn):
        from agents import Agent, function_tool
        from agents import Runner as AgentsRunner
        from agents.exceptions import AgentsException
        from openinference.instrumentation import using_session

        def tool(fn: Callable[..., str]) -> Any:
            # The SDK's default failure handler tells the model only "An error occurred while running the tool"
            # (and redacts the span's error); apps that let the model react to errors pass the error text on.
            return function_tool(fn, failure_error_function=lambda _ctx, exc: f"Error: {exc}")

        if sc.kind == "handoff":
            made = [Agent(name=a.name, instructions=a.instructions, model=MODEL,
                          tools=[tool(tools[n]) for n in a.tools]) for a in sc.agents]
            made[0].handoffs, made[1].handoffs = [made[1]], [made[0]]
            entry = made[0]
        else:
            entry = Agent(name=agent_name(sc), instructions=sc.system, model=MODEL,
                          tools=[tool(tools[n]) for n in sc.tools])
        items: list[Any] = []
        for i, turn in enumerate(sc.turns):
            on_turn(i)
            items = [*items, {"role": "user", "content": turn.user}] if turn.history and items else turn.user
            try:
                with using_session(session_id):
                    result = AgentsRunner.run_sync(entry, items, max_turns=sc.max_calls)
                items = result.to_input_list()
            except AgentsException as exc:  # MaxTurnsExceeded
                print(f"    run {i} ended: {type(exc).__name__}: {str(exc)[:80]}")
                items = []


# --- LangGraph (OpenLLMetry or OpenInference) -------------------------------------------------------------

def _transfer_fn(to: str) -> Callable[[], str]:
    def transfer() -> str:
        return f"Transferred to {to}."
    return transfer


class LangGraphRunner(Runner):
    def __init__(self, provider: Any, base_url: str, content: bool) -> None:
        super().__init__(provider, base_url, content)
        from langchain_openai import ChatOpenAI

        self.llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key="sk-stub", temperature=0)

    def _tools(self, tools: dict[str, Callable[..., str]], names: tuple[str, ...]) -> list[Any]:
        from langchain_core.tools import StructuredTool

        return [StructuredTool.from_function(tools[n]) for n in names]

    def _graph_tools(self, sc: Scenario, tools: dict[str, Callable[..., str]]) -> Any:
        from langchain_core.messages import SystemMessage
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition

        lc_tools = self._tools(tools, sc.tools)
        llm = self.llm.bind_tools(lc_tools) if lc_tools else self.llm

        def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [llm.invoke([SystemMessage(sc.system), *state["messages"]])]}

        g = StateGraph(MessagesState)
        g.add_node("agent", agent)
        g.add_edge(START, "agent")
        if lc_tools:
            g.add_node("tools", ToolNode(lc_tools, handle_tool_errors=True))
            g.add_conditional_edges("agent", tools_condition)
            g.add_edge("tools", "agent")
        return g

    def _graph_validate(self, sc: Scenario) -> Any:
        from langchain_core.messages import HumanMessage, SystemMessage
        from langgraph.graph import END, START, MessagesState, StateGraph

        validator = sc.validator
        assert validator is not None

        def writer(state: MessagesState) -> dict[str, Any]:
            return {"messages": [self.llm.invoke([SystemMessage(sc.system), *state["messages"]])]}

        def check(state: MessagesState) -> dict[str, Any]:
            feedback = validator(str(state["messages"][-1].content))
            return {"messages": [HumanMessage(feedback)]} if feedback else {}

        def route(state: MessagesState) -> str:
            return "writer" if isinstance(state["messages"][-1], HumanMessage) else END

        g = StateGraph(MessagesState)
        g.add_node("writer", writer)
        g.add_node("check", check)
        g.add_edge(START, "writer")
        g.add_edge("writer", "check")
        g.add_conditional_edges("check", route, ["writer", END])
        return g

    def _graph_handoff(self, sc: Scenario, tools: dict[str, Callable[..., str]]) -> Any:
        from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
        from langchain_core.tools import StructuredTool
        from langgraph.graph import END, START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode

        class State(MessagesState):
            active: str

        def key(name: str) -> str:
            return name.lower().replace(" ", "_")

        all_tools: list[Any] = []
        nodes = {}
        for spec, other in ((sc.agents[0], sc.agents[1]), (sc.agents[1], sc.agents[0])):
            handoff = StructuredTool.from_function(
                _transfer_fn(other.name), name=f"transfer_to_{key(other.name)}",
                description=f"Hand the conversation over to the {other.name.lower()}.")
            own = [*self._tools(tools, spec.tools), handoff]
            all_tools += own
            bound = self.llm.bind_tools(own)

            def node(state: State, _spec: Any = spec, _bound: Any = bound) -> dict[str, Any]:
                reply = _bound.invoke([SystemMessage(_spec.instructions), *state["messages"]])
                return {"messages": [reply], "active": key(_spec.name)}
            nodes[key(spec.name)] = node

        def after_agent(state: State) -> str:
            last = state["messages"][-1]
            return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

        def after_tools(state: State) -> str:
            last = state["messages"][-1]
            if isinstance(last, ToolMessage) and last.name and last.name.startswith("transfer_to_"):
                return last.name.removeprefix("transfer_to_")
            return state["active"]

        g = StateGraph(State)
        for name, node in nodes.items():
            g.add_node(name, node)
            g.add_conditional_edges(name, after_agent, ["tools", END])
        g.add_node("tools", ToolNode(all_tools, handle_tool_errors=True))
        g.add_edge(START, key(sc.agents[0].name))
        g.add_conditional_edges("tools", after_tools, list(nodes))
        return g

    def run(self, sc, tools, session_id, on_turn):
        from langchain_core.messages import HumanMessage
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.errors import GraphRecursionError

        if sc.kind == "handoff":
            g = self._graph_handoff(sc, tools)
        elif sc.kind == "validate":
            g = self._graph_validate(sc)
        else:
            g = self._graph_tools(sc, tools)
        app = g.compile(checkpointer=InMemorySaver())
        thread = f"{session_id}-0"
        limit = 2 * (sc.max_validations if sc.kind == "validate" else sc.max_calls)
        for i, turn in enumerate(sc.turns):
            on_turn(i)
            if not turn.history:
                thread = f"{session_id}-{i}"
            config = {"configurable": {"thread_id": thread}, "metadata": {"session_id": session_id},
                      "recursion_limit": limit}
            try:
                app.invoke({"messages": [HumanMessage(turn.user)]}, config=config)
            except GraphRecursionError as exc:
                print(f"    run {i} ended: {type(exc).__name__}")


class LangGraphOpenLLMetryRunner(LangGraphRunner):
    framework = "langgraph_openllmetry"

    def __init__(self, provider: Any, base_url: str, content: bool) -> None:
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        # content switch: TRACELOOP_TRACE_CONTENT (set by the recorder before this process imports anything)
        LangchainInstrumentor().instrument(tracer_provider=provider)
        super().__init__(provider, base_url, content)


class LangGraphOpenInferenceRunner(LangGraphRunner):
    framework = "langgraph_openinference"

    def __init__(self, provider: Any, base_url: str, content: bool) -> None:
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(
            tracer_provider=provider, config=TraceConfig(hide_inputs=not content, hide_outputs=not content))
        super().__init__(provider, base_url, content)


# --- the openai SDK + opentelemetry-instrumentation-openai-v2 ---------------------------------------------

class OpenAIV2Runner(Runner):
    framework = "openai_v2"

    def __init__(self, provider: Any, base_url: str, content: bool) -> None:
        super().__init__(provider, base_url, content)
        from openai import OpenAI
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        # content switch: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (set by the recorder)
        OpenAIInstrumentor().instrument(tracer_provider=provider)
        self.client = OpenAI(base_url=base_url, api_key="sk-stub")
        self.tracer = provider.get_tracer("support-app")

    def _agent_run(self, sc: Scenario, tools: dict[str, Callable[..., str]], messages: list[dict[str, Any]]) -> None:
        schemas = [openai_tool_schema(tools[n]) for n in sc.tools]
        validations = 0
        for _ in range(sc.max_calls):
            kwargs: dict[str, Any] = {"tools": schemas} if schemas else {}
            response = self.client.chat.completions.create(model=MODEL, messages=messages, **kwargs)
            msg = response.choices[0].message
            messages.append(msg.model_dump(exclude_none=True, exclude={"refusal", "annotations", "audio"}))
            if msg.tool_calls:
                for tc in msg.tool_calls:
                    try:
                        out = tools[tc.function.name](**json.loads(tc.function.arguments or "{}"))
                    except ToolError as exc:
                        out = json.dumps({"error": str(exc)})
                    messages.append({"role": "tool", "tool_call_id": tc.id, "content": out})
                continue
            if sc.validator is not None and validations < sc.max_validations:
                feedback = sc.validator(msg.content or "")
                if feedback:
                    validations += 1
                    messages.append({"role": "user", "content": feedback})
                    continue
            return

    def run(self, sc, tools, session_id, on_turn):
        from opentelemetry import baggage, context

        token = context.attach(baggage.set_baggage("session.id", session_id)) if session_id else None
        try:
            messages: list[dict[str, Any]] = [{"role": "system", "content": sc.system}]
            for i, turn in enumerate(sc.turns):
                on_turn(i)
                if not turn.history:
                    messages = [{"role": "system", "content": sc.system}]
                messages.append({"role": "user", "content": turn.user})
                with self.tracer.start_as_current_span("run_agent"):
                    self._agent_run(sc, tools, messages)
        finally:
            if token is not None:
                context.detach(token)


RUNNERS: dict[str, type[Runner]] = {r.framework: r for r in (
    PydanticAIRunner, OpenAIAgentsRunner, LangGraphOpenLLMetryRunner, LangGraphOpenInferenceRunner, OpenAIV2Runner)}
PACKAGES = {
    "pydantic_ai": ["pydantic-ai-slim", "openai"],
    "openai_agents": ["openai-agents", "openinference-instrumentation-openai-agents", "openinference-instrumentation"],
    "langgraph_openllmetry": ["langgraph", "langchain-core", "langchain-openai", "opentelemetry-instrumentation-langchain"],
    "langgraph_openinference": ["langgraph", "langchain-core", "langchain-openai",
                                "openinference-instrumentation-langchain", "openinference-instrumentation"],
    "openai_v2": ["openai", "opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai",
                  "opentelemetry-processor-baggage"],
}
