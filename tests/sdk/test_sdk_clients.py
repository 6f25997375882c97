"""The client guards with the real ``openai`` and ``anthropic`` SDKs against the local stub model
(examples/openai_stub.py: chat completions, the Responses API and Anthropic Messages, plain and streamed)
and a real running service: every spelling of a request is checked first (create, stream=True, the stream
helpers, with_raw_response / with_streaming_response, with_options copies), an exact repeat is refused before
it reaches the model, inject lands in the system prompt the model receives, throttle waits, a blocked
session never reaches the model."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
import pytest
from loop_detector_sdk import (
    AsyncLoopGuard,
    LoopBlockedError,
    LoopGuard,
    guard_anthropic,
    guard_openai,
    request_fingerprint,
)
from support.enforcement import uid

MODEL = "gpt-4o-mini"
CLAUDE = "claude-sonnet-5"
MESSAGES = [{"role": "system", "content": "You deploy services."}, {"role": "user", "content": "Deploy again."}]


def sent_since(requests: list[dict[str, Any]], mark: int) -> list[dict[str, Any]]:
    return requests[mark:]


# -- openai: chat completions --------------------------------------------------------------------------------------
def test_openai_chat_every_spelling_is_checked_and_the_repeat_never_sent(svc, stub):
    _, eps = svc
    url, requests = stub
    with LoopGuard(eps.api, blocklist_interval=None) as guard:
        client = guard_openai(openai.OpenAI(base_url=url + "/v1", api_key="stub"), guard, session_id=uid("chat"),
                              trace_id=uid("trace"))
        mark = len(requests)
        first = client.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert first.choices[0].message.content
        chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
        assert chunks[-1].choices[0].finish_reason == "stop"
        with client.chat.completions.stream(model=MODEL, messages=MESSAGES) as stream:
            assert stream.get_final_completion().choices[0].message.content
        assert len(sent_since(requests, mark)) == 3
        for spelling in (lambda: client.chat.completions.create(model=MODEL, messages=MESSAGES),
                         lambda: client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True),
                         lambda: client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES),
                         lambda: client.with_options(timeout=5).chat.completions.create(model=MODEL,
                                                                                        messages=MESSAGES)):
            with pytest.raises(LoopBlockedError) as info:
                spelling()
            assert info.value.reason == "exact_prompt_repeat" and info.value.retry_after == 60
        assert len(sent_since(requests, mark)) == 3  # no repeat left the client
        other = [*MESSAGES, {"role": "user", "content": "Check the logs first."}]
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=other)
        assert raw.parse().choices[0].message.content and len(sent_since(requests, mark)) == 4
        assert client.models is client.wrapped.models  # the rest of the client passes through


def test_openai_inject_reaches_the_model_and_throttle_waits(svc, stub, inject_session, throttle_session,
                                                            monkeypatch):
    _, eps = svc
    url, requests = stub
    slept: list[float] = []
    monkeypatch.setattr(LoopGuard, "sleep", staticmethod(slept.append))
    with LoopGuard(eps.api, blocklist_interval=None) as guard:
        raw = openai.OpenAI(base_url=url + "/v1", api_key="stub")
        client = guard_openai(raw, guard, session_id=inject_session)
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert requests[-1]["messages"][0]["content"].startswith("You deploy services.\n\nLoop detected.")
        assert MESSAGES[0]["content"] == "You deploy services."  # the caller's messages are not modified
        client.responses.create(model=MODEL, input="Deploy again.", instructions="You deploy services.")
        assert requests[-1]["instructions"].startswith("You deploy services.\n\nLoop detected.")
        with client.responses.stream(model=MODEL, input="Deploy again.") as stream:
            stream.get_final_response()
        assert requests[-1]["instructions"].startswith("Loop detected.")
        prepend = guard_openai(raw, guard, session_id=inject_session, position="prepend")
        prepend.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert requests[-1]["messages"][0]["content"].endswith("\n\nYou deploy services.")

        assert not slept
        guard_openai(raw, guard, session_id=throttle_session).responses.create(model=MODEL, input="hi")
        assert slept == [1.0]


# -- openai: the Responses API ---------------------------------------------------------------------------------------
def test_openai_responses_every_spelling_is_checked(svc, stub):
    _, eps = svc
    url, requests = stub
    with LoopGuard(eps.api, blocklist_interval=None) as guard:
        client = guard_openai(openai.OpenAI(base_url=url + "/v1", api_key="stub"), guard, session_id=uid("resp"))
        kwargs = {"model": MODEL, "input": [{"role": "user", "content": "Deploy again."}],
                  "instructions": "You deploy services."}
        mark = len(requests)
        assert client.responses.create(**kwargs).output_text
        events = list(client.responses.create(**kwargs, stream=True))
        assert events[-1].type == "response.completed"
        with client.responses.stream(**kwargs) as stream:
            assert stream.get_final_response().output_text
        with pytest.raises(LoopBlockedError), client.responses.with_streaming_response.create(**kwargs) as response:
            response.parse()
        with pytest.raises(LoopBlockedError):
            client.responses.create(**kwargs)
        assert len(sent_since(requests, mark)) == 3
        # the same input on a conversation that moved on is another request
        client.responses.create(**kwargs, previous_response_id="resp_earlier")
        assert len(sent_since(requests, mark)) == 4


def test_openai_blocked_session_never_reaches_the_model(svc, stub, blocked_session):
    _, eps = svc
    url, requests = stub
    with LoopGuard(eps.api, blocklist_interval=None) as guard:
        client = guard_openai(openai.OpenAI(base_url=url + "/v1", api_key="stub"), guard, session_id=blocked_session)
        mark = len(requests)
        with pytest.raises(LoopBlockedError) as info:
            client.responses.create(model=MODEL, input="hi", stream=True)
        assert info.value.body["error"]["reason"] == "session_blocked" and len(requests) == mark


def test_openai_async_chat_responses_and_streams(svc, stub, inject_session):
    _, eps = svc
    url, requests = stub

    async def main() -> None:
        async with AsyncLoopGuard(eps.api, blocklist_interval=None) as guard:
            client = guard_openai(openai.AsyncOpenAI(base_url=url + "/v1", api_key="stub"), guard,
                                  session_id=uid("async"), trace_id=uid("trace"))
            mark = len(requests)
            await client.chat.completions.create(model=MODEL, messages=MESSAGES)
            stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
            assert [c async for c in stream]
            async with client.chat.completions.stream(model=MODEL, messages=MESSAGES) as s:
                assert (await s.get_final_completion()).choices[0].message.content
            with pytest.raises(LoopBlockedError):
                async with client.chat.completions.stream(model=MODEL, messages=MESSAGES) as s:
                    pass
            with pytest.raises(LoopBlockedError):
                async with client.chat.completions.with_streaming_response.create(model=MODEL,
                                                                                  messages=MESSAGES) as r:
                    await r.parse()
            assert len(requests) - mark == 3

            kwargs = {"model": MODEL, "input": "Deploy again."}
            await client.responses.create(**kwargs)
            events = [e async for e in await client.responses.create(**kwargs, stream=True)]
            assert events[-1].type == "response.completed"
            async with client.responses.stream(**kwargs) as s:
                await s.get_final_response()
            with pytest.raises(LoopBlockedError):
                await client.responses.create(**kwargs)
            assert len(requests) - mark == 6

            injected = guard_openai(openai.AsyncOpenAI(base_url=url + "/v1", api_key="stub"), guard,
                                    session_id=inject_session)
            async with injected.responses.stream(model=MODEL, input="hi", instructions="Be brief.") as s:
                await s.get_final_response()
            assert requests[-1]["instructions"].startswith("Be brief.\n\nLoop detected.")

    asyncio.run(main())


# -- anthropic: Messages --------------------------------------------------------------------------------------------
def test_anthropic_messages_sync_streams_and_inject(svc, stub, inject_session):
    _, eps = svc
    url, requests = stub
    messages = [{"role": "user", "content": "Deploy again."}]
    with LoopGuard(eps.api, blocklist_interval=None) as guard:
        client = guard_anthropic(anthropic.Anthropic(base_url=url, api_key="stub"), guard, session_id=uid("claude"))
        kwargs = {"model": CLAUDE, "max_tokens": 256, "system": "You deploy services.", "messages": messages}
        mark = len(requests)
        assert client.messages.create(**kwargs).content[0].text
        assert [e.type for e in client.messages.create(**kwargs, stream=True)][-1] == "message_stop"
        with client.messages.stream(**kwargs) as stream:
            assert stream.get_final_message().stop_reason == "end_turn"
        with pytest.raises(LoopBlockedError) as info:
            client.messages.with_raw_response.create(**kwargs)
        assert info.value.reason == "exact_prompt_repeat"
        assert len(requests) - mark == 3
        client.messages.create(**{**kwargs, "system": "You deploy services carefully."})  # another request
        assert len(requests) - mark == 4
        assert client.models is client.wrapped.models

        injected = guard_anthropic(anthropic.Anthropic(base_url=url, api_key="stub"), guard, session_id=inject_session)
        injected.messages.create(**kwargs)
        assert requests[-1]["system"].startswith("You deploy services.\n\nLoop detected.")
        blocks = [{"type": "text", "text": "You deploy services."}]
        with injected.with_options(max_retries=0).messages.stream(**{**kwargs, "system": blocks}) as stream:
            stream.get_final_message()
        assert requests[-1]["system"][0] == blocks[0] and requests[-1]["system"][1]["text"].startswith("Loop detected.")
        assert len(blocks) == 1


def test_anthropic_async(svc, stub, blocked_session):
    _, eps = svc
    url, requests = stub

    async def main() -> None:
        async with AsyncLoopGuard(eps.api, blocklist_interval=None) as guard:
            client = guard_anthropic(anthropic.AsyncAnthropic(base_url=url, api_key="stub"), guard,
                                     session_id=uid("aclaude"))
            kwargs = {"model": CLAUDE, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
            mark = len(requests)
            await client.messages.create(**kwargs)
            async with client.messages.stream(**kwargs) as s:
                await s.get_final_message()
            assert [e async for e in await client.messages.create(**kwargs, stream=True)]
            with pytest.raises(LoopBlockedError):
                async with client.messages.stream(**kwargs) as s:
                    pass
            assert len(requests) - mark == 3
            blocked = guard_anthropic(anthropic.AsyncAnthropic(base_url=url, api_key="stub"), guard,
                                      session_id=blocked_session)
            with pytest.raises(LoopBlockedError):
                await blocked.messages.create(**kwargs)
            assert len(requests) - mark == 3

    asyncio.run(main())


def test_fingerprints_match_what_the_wrappers_send():
    """The wrappers' pending fingerprint is request_fingerprint of the documented fields (docs/sdk.md)."""
    from loop_detector_sdk.anthropic_wrap import messages_pending
    from loop_detector_sdk.openai_wrap import chat_pending, responses_pending

    assert chat_pending({"model": MODEL, "messages": MESSAGES, "temperature": 0})["request_fingerprint"] == \
        request_fingerprint(MODEL, MESSAGES)
    assert responses_pending({"model": MODEL, "input": "x", "instructions": "y"})["request_fingerprint"] == \
        request_fingerprint(MODEL, "x", instructions="y")
    assert messages_pending({"model": CLAUDE, "messages": [], "system": "s"})["request_fingerprint"] == \
        request_fingerprint(CLAUDE, [], system="s")
