"""A tiny model server for the examples and tests: OpenAI's ``POST /v1/chat/completions`` and
``POST /v1/responses``, and Anthropic's ``POST /v1/messages``, each plain or streamed (server-sent events in
each API's own event format).

No model behind it: each answer is a pure function of the request, so an agent run against it is
reproducible. The scenario is picked by a marker in the conversation's first user (or system) message:

- ``[loop]``: the model always asks for the same tool call, ``read_file({"path": "config.yaml"})``, with
  the same text: an agent stuck in a loop; ``[loop N]`` gives up with a final answer once the conversation
  holds N tool results (for frameworks that run until the model stops);
- ``[healthy]`` (the default): one different tool call per step (list, read, grep, edit, test...), then a
  final answer once the conversation holds ``HEALTHY_STEPS`` tool results;
- ``[batch N]``: one procedure over N items, an honest run that looks like a loop without content: the model reads
  the inbox's messages one by one (``read_file`` of ``inbox/<name>.eml``, one message after the other), then answers
  once the conversation holds N tool results (the agent's tool results are the same size for every message);
- ``[error]``: every call fails with HTTP 500 (an OpenAI-style error body); ``[ratelimit]``: HTTP 429.

Usage is reported like OpenAI's (``prompt_tokens`` from the size of the messages, ``completion_tokens``
from the size of the answer). The chat completion ``model`` is the requested one with a date suffix, as OpenAI
answers (``gpt-4o-mini`` -> ``gpt-4o-mini-2024-07-18``). The same scenarios hold in every API: the Responses
API counts ``function_call_output`` items as tool results, the Messages API ``tool_result`` blocks.

Run it alone (examples): ``python examples/openai_stub.py --port 8765``; in-process (tests):
``with serve_stub() as base_url: OpenAI(base_url=base_url + "/v1", api_key="stub")``.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the server side needs Starlette; agents importing TOOL_SCHEMAS do not
    from starlette.applications import Starlette

MODEL_SUFFIX = "-2024-07-18"
HEALTHY_STEPS = 12
LOOP_CALL = ("read_file", {"path": "config.yaml"})
LOOP_TEXT = "Let me read the config file again to find the problem."
HEALTHY_TOOLS: list[tuple[str, dict[str, Any]]] = [
    ("list_files", {"path": "src/"}), ("read_file", {"path": "src/app.py"}), ("grep", {"pattern": "def main"}),
    ("read_file", {"path": "src/util.py"}), ("run_tests", {"target": "tests/test_app.py"}),
    ("edit_file", {"path": "src/app.py", "line": 42}), ("run_tests", {"target": "tests/"}),
    ("read_file", {"path": "README.md"}), ("edit_file", {"path": "README.md", "line": 7}),
    ("git_diff", {}), ("run_linter", {"path": "src/"}), ("git_commit", {"message": "fix parsing"}),
    ("search_docs", {"query": "config reload"}), ("read_file", {"path": "docs/config.md"}),
]
# [batch N]: the messages the procedure goes through, in order (names of varied lengths, as real ones are)
BATCH_ITEMS: list[str] = [
    "refund-anna", "invoice-4471", "complaint-bob-smith", "order-88231", "refund-chen", "address-change-kowalski",
    "invoice-4480", "delivery-late-oslo", "refund-diego", "cancel-subscription-eve", "order-88302", "invoice-4492",
    "complaint-fatima-al-sayed", "refund-gus", "warranty-claim-hiro", "order-88417", "invoice-4503", "refund-ines",
    "delivery-damaged-jonas", "order-88520", "complaint-kim", "invoice-4519", "refund-lars-eriksson", "order-88644",
]


def batch_call(i: int) -> tuple[str, dict[str, Any]]:
    """The [batch N] procedure's i-th tool call (0-based)."""
    return "read_file", {"path": f"inbox/{BATCH_ITEMS[i % len(BATCH_ITEMS)]}.eml"}


# The tools an agent declares to the model (names only matter to the stub).
TOOL_SCHEMAS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": name, "description": f"{name} tool",
                                      "parameters": {"type": "object", "properties": {
                                          k: {"type": "integer" if isinstance(v, int) else "string"}
                                          for k, v in args.items()}}}}
    for name, args in {n: a for n, a in [*HEALTHY_TOOLS, LOOP_CALL]}.items()
]


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def scenario_of(messages: list[dict[str, Any]]) -> str:
    for m in messages:
        if m.get("role") in ("system", "developer", "user"):
            text = _text_of(m)
            for name in ("loop", "batch", "error", "ratelimit", "healthy"):
                if f"[{name}]" in text or (name in ("loop", "batch") and re.search(rf"\[{name} \d+\]", text)):
                    return name
    return "healthy"


def loop_limit(messages: list[dict[str, Any]], name: str = "loop") -> int | None:
    """N of a ``[loop N]`` marker: the looping model gives up after N tool results (``[batch N]``: the procedure
    ends after N items)."""
    for m in messages:
        if m.get("role") in ("system", "developer", "user"):
            found = re.search(rf"\[{name} (\d+)\]", _text_of(m))
            if found:
                return int(found.group(1))
    return None


def count_tokens(messages: list[dict[str, Any]]) -> int:
    """A deterministic stand-in for a tokenizer: ~4 characters a token plus a per-message overhead."""
    total = 0
    for m in messages:
        total += 4 + len(_text_of(m)) // 4
        for tc in m.get("tool_calls") or []:
            total += 4 + len(json.dumps(tc.get("function", {}))) // 4
    return total


def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON body for one chat completion request."""
    messages = body.get("messages") or []
    scenario = scenario_of(messages)
    if scenario == "error":
        return 500, {"error": {"message": "The server had an error while processing your request.",
                               "type": "server_error", "param": None, "code": None}}
    if scenario == "ratelimit":
        return 429, {"error": {"message": "Rate limit reached for requests.", "type": "requests",
                               "param": None, "code": "rate_limit_exceeded"}}
    done = sum(1 for m in messages if m.get("role") == "tool")
    tool_call: tuple[str, dict[str, Any]] | None
    limit = loop_limit(messages) if scenario == "loop" else None
    if scenario == "loop" and limit is not None and done >= limit:
        text, tool_call = f"Still failing after {done} attempts; giving up.", None
    elif scenario == "loop":
        text, tool_call = LOOP_TEXT, LOOP_CALL
    elif scenario == "batch":
        items = loop_limit(messages, "batch") or len(BATCH_ITEMS)
        if done >= items:
            text, tool_call = f"Done: the {items} messages of the inbox are triaged.", None
        else:
            tool_call = batch_call(done)
            text = f"Message {done + 1} of {items}: reading {tool_call[1]['path']} to triage it."
    elif done >= HEALTHY_STEPS:
        text, tool_call = f"Done: the change is in place after {done} steps.", None
    else:
        tool_call = HEALTHY_TOOLS[done % len(HEALTHY_TOOLS)]
        text = f"Step {done + 1}: using {tool_call[0]} to make progress on {tool_call[1] or 'the change'}."
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tool_call is not None and body.get("tools"):
        message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                                  "function": {"name": tool_call[0], "arguments": json.dumps(tool_call[1])}}]
        finish = "tool_calls"
    else:
        finish = "stop"
    prompt_tokens = count_tokens(messages)
    completion_tokens = 8 + len(text) // 4 + (12 if "tool_calls" in message else 0)
    model = str(body.get("model", "gpt-4o-mini"))
    return 200, {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model if model.endswith(MODEL_SUFFIX) else model + MODEL_SUFFIX,
        "system_fingerprint": "fp_stub",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def _sse(events: list[tuple[str | None, dict[str, Any] | str]]) -> bytes:
    out = []
    for event, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {event}\n" if event else "") + f"data: {payload}\n\n")
    return "".join(out).encode()


def chat_chunks(body: dict[str, Any], payload: dict[str, Any]) -> bytes:
    """A chat completion as the ``chat.completion.chunk`` events of ``stream=True``."""
    choice = payload["choices"][0]
    message = choice["message"]
    base = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
            "model": payload["model"], "system_fingerprint": "fp_stub"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    text = message["content"] or ""
    half = len(text) // 2
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        (None, chunk({"role": "assistant", "content": "", "refusal": None})),
        (None, chunk({"content": text[:half]})), (None, chunk({"content": text[half:]}))]
    for i, call in enumerate(message.get("tool_calls") or []):
        events.append((None, chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                                    "function": {"name": call["function"]["name"],
                                                                 "arguments": ""}}]})))
        events.append((None, chunk({"tool_calls": [{"index": i, "function": {
            "arguments": call["function"]["arguments"]}}]})))
    events.append((None, chunk({}, choice["finish_reason"])))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append((None, {**base, "choices": [], "usage": payload["usage"]}))
    events.append((None, "[DONE]"))
    return _sse(events)


# -- the Responses API ------------------------------------------------------------------------------------------
def _responses_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The Responses API input as chat-like messages (for the scenario and the token count)."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    items = body.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "function_call_output":
            messages.append({"role": "tool", "content": str(item.get("output", ""))})
        elif kind == "function_call":
            messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": item.get("name"), "arguments": item.get("arguments")}}]})
        elif kind == "message":
            content = item.get("content")
            text = content if isinstance(content, str) else " ".join(
                str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
            messages.append({"role": item.get("role", "user"), "content": text})
    return messages


def responses_answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON body for one ``POST /v1/responses``."""
    messages = _responses_messages(body)
    status, chat = answer({**body, "messages": messages, "tools": body.get("tools")})
    if status != 200:
        return status, chat
    message = chat["choices"][0]["message"]
    output: list[dict[str, Any]] = [{
        "type": "message", "id": f"msg_{uuid.uuid4().hex[:16]}", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": message["content"], "annotations": [], "logprobs": []}]}]
    for call in message.get("tool_calls") or []:
        output.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:16]}", "call_id": call["id"],
                       "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                       "status": "completed"})
    usage = chat["usage"]
    return 200, {
        "id": f"resp_{uuid.uuid4().hex[:16]}", "object": "response", "created_at": chat["created"],
        "status": "completed", "model": chat["model"], "output": output, "error": None,
        "incomplete_details": None, "instructions": body.get("instructions"), "metadata": {},
        "parallel_tool_calls": True, "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto",
        "tools": body.get("tools") or [], "text": {"format": {"type": "text"}}, "truncation": "disabled",
        "previous_response_id": body.get("previous_response_id"),
        "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                  "total_tokens": usage["total_tokens"], "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }


def responses_events(payload: dict[str, Any]) -> bytes:
    """A response as the server-sent events of ``stream=True`` (the sequence OpenAI sends)."""
    seq = iter(range(1_000_000))
    events: list[tuple[str | None, dict[str, Any] | str]] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": next(seq), **data}))

    started = {**payload, "status": "in_progress", "output": [], "usage": None}
    emit("response.created", response=started)
    emit("response.in_progress", response=started)
    for index, item in enumerate(payload["output"]):
        if item["type"] == "message":
            part = item["content"][0]
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "content": []})
            emit("response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                 part={**part, "text": ""})
            text = part["text"]
            for piece in (text[: len(text) // 2], text[len(text) // 2:]):
                emit("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                     delta=piece, logprobs=[])
            emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                 text=text, logprobs=[])
            emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part)
        else:
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "arguments": ""})
            emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                 delta=item["arguments"])
            emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                 arguments=item["arguments"], name=item["name"])
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=payload)
    return _sse(events)


# -- Anthropic's Messages API ---------------------------------------------------------------------------------
def _anthropic_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        text = system if isinstance(system, str) else " ".join(
            str(b.get("text", "")) for b in system if isinstance(b, dict))
        messages.append({"role": "system", "content": text})
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, str):
            messages.append({"role": m.get("role", "user"), "content": content})
            continue
        texts = []
        for block in content or []:
            if block.get("type") == "tool_result":
                messages.append({"role": "tool", "content": str(block.get("content", ""))})
            elif block.get("type") == "text":
                texts.append(str(block.get("text", "")))
        if texts:
            messages.append({"role": m.get("role", "user"), "content": " ".join(texts)})
    return messages


def anthropic_answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON body for one ``POST /v1/messages`` (errors in Anthropic's shape)."""
    status, chat = answer({**body, "messages": _anthropic_messages(body), "tools": body.get("tools")})
    if status != 200:
        kind = "rate_limit_error" if status == 429 else "api_error"
        return status, {"type": "error", "error": {"type": kind, "message": chat["error"]["message"]}}
    message = chat["choices"][0]["message"]
    content: list[dict[str, Any]] = [{"type": "text", "text": message["content"]}]
    for call in message.get("tool_calls") or []:
        content.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:16]}",
                        "name": call["function"]["name"], "input": json.loads(call["function"]["arguments"])})
    usage = chat["usage"]
    return 200, {
        "id": f"msg_{uuid.uuid4().hex[:16]}", "type": "message", "role": "assistant",
        "model": str(body.get("model", "claude-sonnet-4-5")), "content": content,
        "stop_reason": "tool_use" if len(content) > 1 else "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]},
    }


def anthropic_events(payload: dict[str, Any]) -> bytes:
    """A message as the server-sent events of ``stream=True`` (message_start ... message_stop)."""
    events: list[tuple[str | None, dict[str, Any] | str]] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, **data}))

    emit("message_start", message={**payload, "content": [], "stop_reason": None,
                                   "usage": {**payload["usage"], "output_tokens": 1}})
    for index, block in enumerate(payload["content"]):
        if block["type"] == "text":
            emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
            text = block["text"]
            for piece in (text[: len(text) // 2], text[len(text) // 2:]):
                emit("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
        else:
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            emit("content_block_delta", index=index,
                 delta={"type": "input_json_delta", "partial_json": json.dumps(block["input"])})
        emit("content_block_stop", index=index)
    emit("message_delta", delta={"stop_reason": payload["stop_reason"], "stop_sequence": None},
         usage={"output_tokens": payload["usage"]["output_tokens"]})
    emit("message_stop")
    return _sse(events)


def create_stub_app() -> Starlette:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def reply(body: dict[str, Any], status: int, payload: dict[str, Any], stream: Any) -> Response:
        if status == 200 and body.get("stream"):
            return Response(stream(payload), media_type="text/event-stream")
        return JSONResponse(payload, status_code=status)

    async def chat_completions(request: Request) -> Response:
        body = await request.json()
        request.app.state.requests.append(body)
        status, payload = answer(body)
        return reply(body, status, payload, lambda p: chat_chunks(body, p))

    async def responses(request: Request) -> Response:
        body = await request.json()
        request.app.state.requests.append(body)
        status, payload = responses_answer(body)
        return reply(body, status, payload, responses_events)

    async def messages(request: Request) -> Response:
        body = await request.json()
        request.app.state.requests.append(body)
        status, payload = anthropic_answer(body)
        return reply(body, status, payload, anthropic_events)

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                            Route("/v1/responses", responses, methods=["POST"]),
                            Route("/v1/messages", messages, methods=["POST"]),
                            Route("/healthz", healthz)])
    app.state.requests = []
    return app


@contextmanager
def serve_stub(host: str = "127.0.0.1", port: int = 0, app: Any = None) -> Iterator[str]:
    """Serve the stub (or ``app``, one of :func:`create_stub_app`, whose ``state.requests`` records every request)
    on ``host:port`` (a free port by default) in a background thread; yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app or create_stub_app(), host=host, port=port, log_level="warning",
                                           access_log=False, lifespan="off"))
    thread = threading.Thread(target=lambda: server.run(sockets=[sock]), name=f"openai-stub-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the OpenAI stub did not start")
            time.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    import uvicorn

    print(f"OpenAI stub on http://{args.host}:{args.port}/v1  (OPENAI_BASE_URL; ANTHROPIC_BASE_URL without /v1)")
    uvicorn.run(create_stub_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
