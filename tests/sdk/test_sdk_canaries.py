"""No content leaves the app through a guard: with canary strings in the system prompt, the user's message, every
tool result and the tool arguments, every check a guard sends (recorded on the wire, to a live service) carries
fingerprints and never a canary, and the SDK logs none. Each Python guard with its real library against the local
stub model: the ``openai`` wrapper (chat completions and the Responses API), ``anthropic``, the LangChain middleware,
the OpenAI Agents SDK's hooks, and the LiteLLM guardrail's check (its pending call; the proxy itself runs in
``test_sdk_litellm.py``)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import anthropic
import httpx
import openai
import pytest
from loop_detector_sdk import AsyncLoopGuard, LoopBlockedError, LoopGuard, guard_anthropic, guard_openai
from loop_detector_sdk.evidence.fingerprints import VERSION as EVIDENCE_VERSION
from support.enforcement import uid

CANARY = "CANARY-9d41e7"
MODEL = "gpt-4o-mini"


class Recording(httpx.BaseTransport):
    """The real HTTP transport, with every request body kept."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.bodies: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.read())
        return self.inner.handle_request(request)


class AsyncRecording(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.bodies: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(await request.aread())
        return await self.inner.handle_async_request(request)


@pytest.fixture()
def sdk_logs(caplog):
    caplog.set_level(logging.DEBUG, logger="loop_detector")
    yield caplog
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("loop_detector")]
    assert not any(CANARY in m for m in ours), ours


def checks_of(bodies: list[bytes]) -> list[dict[str, Any]]:
    """The checks sent, after asserting no canary is in any of them."""
    checks = []
    for body in bodies:
        assert CANARY.encode() not in body, body[:500]
        if body:
            checks.append(json.loads(body))
    return checks


def assert_fingerprinted(checks: list[dict[str, Any]], models: int, tools: int = 0) -> None:
    model_checks = [c for c in checks if "request_fingerprint" in c.get("pending", {})]
    tool_checks = [c for c in checks if "tool_name" in c.get("pending", {})]
    assert len(model_checks) >= models and len(tool_checks) >= tools, checks
    for c in model_checks:
        evidence = c["pending"]["evidence"]
        assert evidence["version"] == EVIDENCE_VERSION and evidence["request"] and "input" in evidence
    for c in tool_checks:
        assert set(c["pending"]) == {"tool_name", "evidence"} and c["pending"]["evidence"]["tool"]


def _openai_loop(client: Any, steps: int) -> None:
    """A chat agent on the stub's looping scenario: canaries in the prompts and in every tool result."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"[loop] You fix configs. {CANARY}"},
                                      {"role": "user", "content": f"Fix it, token {CANARY}."}]
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    for _ in range(steps):
        message = client.chat.completions.create(model=MODEL, messages=messages, tools=tools).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"port: 80 {CANARY}"})


def test_openai_chat_and_responses(svc, stub, sdk_logs):
    _, eps = svc
    url, _ = stub
    wire = Recording()
    with LoopGuard(eps.api, blocklist_interval=None, transport=wire) as guard:
        client = guard_openai(openai.OpenAI(base_url=url + "/v1", api_key="stub"), guard, session_id=uid("canary"))
        _openai_loop(client, 3)
        response = client.responses.create(model=MODEL, instructions=f"Be brief {CANARY}", input=[
            {"role": "user", "content": f"Fix it {CANARY}"},
            {"type": "function_call", "name": "read_file", "arguments": json.dumps({"path": CANARY}), "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": f"nothing {CANARY}"}])
        assert response.output
    checks = checks_of(wire.bodies)
    assert_fingerprinted(checks, models=4)
    inputs = [c["pending"]["evidence"]["input"] for c in checks[:3]]
    assert inputs[1] == inputs[2] != inputs[0]  # the same tool result twice: the same observation


def test_anthropic(svc, stub, sdk_logs):
    _, eps = svc
    url, _ = stub
    wire = Recording()
    with LoopGuard(eps.api, blocklist_interval=None, transport=wire) as guard:
        client = guard_anthropic(anthropic.Anthropic(base_url=url, api_key="stub"), guard, session_id=uid("canary"))
        client.messages.create(model="claude-sonnet-5", max_tokens=100, system=f"You fix configs. {CANARY}", messages=[
            {"role": "user", "content": f"Fix it {CANARY}"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file",
                                               "input": {"path": CANARY}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": f"x {CANARY}"}]}])
    assert_fingerprinted(checks_of(wire.bodies), models=1)


def test_langchain_middleware(svc, stub, sdk_logs):
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from loop_detector_sdk.langchain_middleware import LoopGuardMiddleware

    _, eps = svc
    url, _ = stub

    @tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        return f"port: 80 {CANARY}"

    wire = Recording()
    with LoopGuard(eps.api, blocklist_interval=None, transport=wire) as guard:
        model = ChatOpenAI(model=MODEL, base_url=url + "/v1", api_key="stub", max_retries=0)
        graph = create_agent(model, [read_file], system_prompt=f"[loop] You fix configs. {CANARY}",
                             middleware=[LoopGuardMiddleware(guard, session_id=uid("canary"))])
        with pytest.raises(LoopBlockedError):  # the tool loop is caught from the tool's fingerprints alone
            graph.invoke({"messages": [{"role": "user", "content": f"Fix it {CANARY}"}]})
    assert_fingerprinted(checks_of(wire.bodies), models=3, tools=3)


def test_openai_agents_hooks(svc, stub, sdk_logs):
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from loop_detector_sdk.openai_agents_hooks import LoopGuardHooks, guard_run_config

    set_tracing_disabled(True)
    _, eps = svc
    url, _ = stub

    @function_tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        return f"port: 80 {CANARY}"

    wire = AsyncRecording()

    async def main() -> None:
        async with AsyncLoopGuard(eps.api, blocklist_interval=None, transport=wire) as guard:
            model = OpenAIChatCompletionsModel(model=MODEL, openai_client=openai.AsyncOpenAI(
                base_url=url + "/v1", api_key="stub", max_retries=0))
            agent = Agent(name="fixer", instructions=f"[loop] You fix configs. {CANARY}", tools=[read_file],
                          model=model)
            session = uid("canary")
            with pytest.raises(LoopBlockedError):
                await Runner.run(agent, f"Fix it {CANARY}", max_turns=8, run_config=guard_run_config(
                    guard, session_id=session), hooks=LoopGuardHooks(guard, session_id=session))

    asyncio.run(main())
    assert_fingerprinted(checks_of(wire.bodies), models=3, tools=3)


def test_the_litellm_guardrails_pending_calls():
    """The guardrail's check of a chat, Responses or Messages request is the wrappers' pending call
    (``litellm_guardrail.request_pending``; LiteLLM itself lives in its own venv, ``test_sdk_litellm.py``)."""
    from loop_detector_sdk.anthropic_wrap import messages_pending
    from loop_detector_sdk.openai_wrap import chat_pending, responses_pending

    chat = {"model": MODEL, "messages": [{"role": "system", "content": CANARY}, {"role": "user", "content": CANARY}]}
    responses = {"model": MODEL, "input": CANARY, "instructions": CANARY}
    messages = {"model": "claude", "system": CANARY, "messages": [{"role": "user", "content": CANARY}]}
    for pending in (chat_pending(chat), responses_pending(responses), messages_pending(messages)):
        assert CANARY not in json.dumps(pending) and pending["evidence"]["version"] == EVIDENCE_VERSION
