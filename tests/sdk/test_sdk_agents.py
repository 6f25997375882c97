"""The agent-framework guards with the real libraries against the local stub model and a live service:
LangChain v1 (``create_agent`` with ``LoopGuardMiddleware``, on ``ChatOpenAI``) and the OpenAI Agents SDK
(``guard_run_config`` + ``LoopGuardHooks``, on both its chat-completions and Responses models). Each: a looping
agent is stopped before its third identical tool call runs, an exact repeat of a model call never reaches the
model, inject reaches the model's system prompt, a blocked session is refused before the first call."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from loop_detector_sdk import AsyncLoopGuard, LoopBlockedError, LoopGuard
from support.enforcement import uid

MODEL = "gpt-4o-mini"


# -- LangChain v1 ------------------------------------------------------------------------------------------------
@pytest.fixture()
def lc(stub):
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    url, requests = stub
    ran: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        ran.append(path)
        return "port: 80"

    def make(middleware: Any, tools: bool = True, system: str = "[loop] You fix configs.") -> Any:
        model = ChatOpenAI(model=MODEL, base_url=url + "/v1", api_key="stub", max_retries=0)
        return create_agent(model, [read_file] if tools else [], system_prompt=system, middleware=[middleware])

    return make, ran, requests


def test_langchain_tool_loop_is_stopped_before_the_third_identical_call(svc, lc):
    from loop_detector_sdk.langchain_middleware import LoopGuardMiddleware

    _, eps = svc
    make, ran, requests = lc
    with LoopGuard(eps.api, blocklist_interval=None) as guard:
        mark = len(requests)
        graph = make(LoopGuardMiddleware(guard, session_id=uid("lc")))
        with pytest.raises(LoopBlockedError) as info:
            graph.invoke({"messages": [{"role": "user", "content": "Fix the config."}]})
        assert info.value.reason == "failure_loop" and info.value.body["error"]["enforcement_level"] == "hard_stop"
        assert ran == ["config.yaml", "config.yaml"]  # the third read never ran
        assert len(requests) - mark == 3


def test_langchain_model_repeat_inject_and_thread_session(svc, lc, inject_session, blocked_session):
    from loop_detector_sdk.langchain_middleware import LoopGuardMiddleware

    _, eps = svc
    make, _, requests = lc
    question = {"messages": [{"role": "user", "content": "What is the port?"}]}
    with LoopGuard(eps.api, blocklist_interval=None) as guard:
        mark = len(requests)
        graph = make(LoopGuardMiddleware(guard, session_id=uid("lc-repeat")), tools=False, system="Answer.")
        for _ in range(3):
            assert graph.invoke(question)["messages"][-1].content
        with pytest.raises(LoopBlockedError) as info:
            graph.invoke(question)
        assert info.value.reason == "exact_prompt_repeat" and len(requests) - mark == 3

        make(LoopGuardMiddleware(guard, session_id=inject_session), tools=False, system="Answer.").invoke(question)
        assert requests[-1]["messages"][0] == {"role": "system", "content": requests[-1]["messages"][0]["content"]}
        assert requests[-1]["messages"][0]["content"].startswith("Answer.\n\nLoop detected.")

        # no session given: the LangGraph thread is the session
        mark = len(requests)
        with pytest.raises(LoopBlockedError) as info:
            make(LoopGuardMiddleware(guard), tools=False).invoke(
                question, config={"configurable": {"thread_id": blocked_session}})
        assert info.value.reason == "session_blocked" and len(requests) == mark


def test_langchain_async(svc, lc):
    from loop_detector_sdk.langchain_middleware import LoopGuardMiddleware

    _, eps = svc
    make, ran, requests = lc

    async def main() -> None:
        async with AsyncLoopGuard(eps.api, blocklist_interval=None) as guard:
            with pytest.raises(LoopBlockedError):
                await make(LoopGuardMiddleware(guard, session_id=uid("alc"))).ainvoke(
                    {"messages": [{"role": "user", "content": "Fix the config."}]})
        assert ran == ["config.yaml", "config.yaml"]
        ran.clear()
        # a sync guard, run in a worker thread
        with LoopGuard(eps.api, blocklist_interval=None) as sync_guard, pytest.raises(LoopBlockedError):
            await make(LoopGuardMiddleware(sync_guard, session_id=uid("alc2"))).ainvoke(
                {"messages": [{"role": "user", "content": "Fix the config."}]})
        assert ran == ["config.yaml", "config.yaml"]

    asyncio.run(main())
    aguard = AsyncLoopGuard(eps.api, blocklist_interval=None)
    with pytest.raises(TypeError):  # a sync run cannot await an async guard
        make(LoopGuardMiddleware(aguard, session_id=uid("x"))).invoke({"messages": [{"role": "user", "content": "x"}]})
    asyncio.run(aguard.aclose())


# -- the OpenAI Agents SDK ------------------------------------------------------------------------------------------
@pytest.fixture()
def agents_sdk(stub):
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no trace export to OpenAI's servers
    url, requests = stub
    ran: list[str] = []

    @function_tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        ran.append(path)
        return "port: 80"

    def make(kind: str, instructions: str = "[loop] You fix configs.", tools: bool = True) -> Any:
        cls = OpenAIChatCompletionsModel if kind == "chat" else OpenAIResponsesModel
        model = cls(model=MODEL, openai_client=AsyncOpenAI(base_url=url + "/v1", api_key="stub", max_retries=0))
        return Agent(name="fixer", instructions=instructions, tools=[read_file] if tools else [], model=model)

    return make, ran, requests


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_openai_agents_tool_loop_and_model_repeat(svc, agents_sdk, kind):
    from agents import Runner
    from loop_detector_sdk.openai_agents_hooks import LoopBlockedAgentsError, LoopGuardHooks, guard_run_config

    _, eps = svc
    make, ran, requests = agents_sdk

    async def main() -> None:
        async with AsyncLoopGuard(eps.api, blocklist_interval=None) as guard:
            session = uid(f"ag-{kind}")
            mark = len(requests)
            with pytest.raises(LoopBlockedError) as info:
                await Runner.run(make(kind), "Fix the config.", max_turns=8,
                                 run_config=guard_run_config(guard, session_id=session),
                                 hooks=LoopGuardHooks(guard, session_id=session))
            assert isinstance(info.value, LoopBlockedAgentsError) and info.value.reason == "failure_loop"
            assert ran == ["config.yaml", "config.yaml"] and len(requests) - mark == 3

            session = uid(f"ag-repeat-{kind}")
            mark = len(requests)
            config = guard_run_config(guard, session_id=session)
            for _ in range(3):
                assert (await Runner.run(make(kind, "Answer.", tools=False), "What is the port?",
                                         run_config=config)).final_output
            with pytest.raises(LoopBlockedError) as info:
                await Runner.run(make(kind, "Answer.", tools=False), "What is the port?", run_config=config)
            assert info.value.reason == "exact_prompt_repeat" and len(requests) - mark == 3

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_openai_agents_inject_blocked_and_chained_filter(svc, agents_sdk, inject_session, blocked_session, kind):
    from agents import RunConfig, Runner
    from agents.run_config import ModelInputData
    from loop_detector_sdk.openai_agents_hooks import guard_run_config

    _, eps = svc
    make, _, requests = agents_sdk
    seen: list[str | None] = []

    def user_filter(data: Any) -> ModelInputData:  # the app's own filter: runs after the check
        seen.append(data.model_data.instructions)
        return data.model_data

    async def main() -> None:
        with LoopGuard(eps.api, blocklist_interval=None) as guard:  # a sync guard, run in a worker thread
            config = guard_run_config(guard, RunConfig(call_model_input_filter=user_filter), session_id=inject_session)
            await Runner.run(make(kind, "Answer.", tools=False), "What is the port?", run_config=config)
            sent = requests[-1]
            instructions = sent["messages"][0]["content"] if kind == "chat" else sent["instructions"]
            assert instructions.startswith("Answer.\n\nLoop detected.") and seen == [instructions]

            mark = len(requests)
            with pytest.raises(LoopBlockedError) as info:
                await Runner.run(make(kind), "Fix the config.",
                                 run_config=guard_run_config(guard, session_id=blocked_session))
            assert info.value.reason == "session_blocked" and len(requests) == mark

    asyncio.run(main())
