"""A tiny OpenAI-compatible server for the examples and tests: ``POST /v1/chat/completions``.

No model behind it: each answer is a pure function of the request, so an agent run against it is
reproducible. The scenario is picked by a marker in the conversation's first user (or system) message:

- ``[loop]``: the model always asks for the same tool call, ``read_file({"path": "config.yaml"})``, with
  the same text: an agent stuck in a loop; ``[loop N]`` gives up with a final answer once the conversation
  holds N tool results (for frameworks that run until the model stops);
- ``[healthy]`` (the default): one different tool call per step (list, read, grep, edit, test...), then a
  final answer once the conversation holds ``HEALTHY_STEPS`` tool results;
- ``[error]``: every call fails with HTTP 500 (an OpenAI-style error body); ``[ratelimit]``: HTTP 429.

Usage is reported like OpenAI's (``prompt_tokens`` from the size of the messages, ``completion_tokens``
from the size of the answer). The response ``model`` is the requested one with a date suffix, as OpenAI
answers (``gpt-4o-mini`` -> ``gpt-4o-mini-2024-07-18``). ``stream: true`` is answered as OpenAI streams: server-sent
``chat.completion.chunk`` events (the text, then the tool calls, then the finish reason and, when
``stream_options.include_usage``, the usage), ended by ``data: [DONE]``.

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
            for name in ("loop", "error", "ratelimit", "healthy"):
                if f"[{name}]" in text or (name == "loop" and re.search(r"\[loop \d+\]", text)):
                    return name
    return "healthy"


def loop_limit(messages: list[dict[str, Any]]) -> int | None:
    """N of a ``[loop N]`` marker: the looping model gives up after N tool results."""
    for m in messages:
        if m.get("role") in ("system", "developer", "user"):
            found = re.search(r"\[loop (\d+)\]", _text_of(m))
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


def stream_chunks(payload: dict[str, Any], include_usage: bool) -> list[str]:
    """A completion as the server-sent events OpenAI streams: role and text, each tool call, the finish reason,
    the usage (when asked for), ``[DONE]``."""
    choice = payload["choices"][0]
    message = choice["message"]
    base = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
            "model": payload["model"], "system_fingerprint": payload["system_fingerprint"]}

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None,
              choices: bool = True) -> str:
        body = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
                if choices else []}
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body)}\n\n"

    events = [chunk({"role": "assistant", "content": ""}), chunk({"content": message["content"]})]
    for i, call in enumerate(message.get("tool_calls") or []):
        events.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"],
                                                          "arguments": call["function"]["arguments"]}}]}))
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        events.append(chunk({}, usage=payload["usage"], choices=False))
    events.append("data: [DONE]\n\n")
    return events


def create_stub_app() -> Starlette:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def chat_completions(request: Request) -> Response:
        body = await request.json()
        request.app.state.requests.append(body)
        status, payload = answer(body)
        if body.get("stream") and status == 200:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(iter(stream_chunks(payload, include_usage)), media_type="text/event-stream")
        return JSONResponse(payload, status_code=status)

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                            Route("/healthz", healthz)])
    app.state.requests = []
    return app


@contextmanager
def serve_stub(host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve the stub on ``host:port`` (a free port by default) in a background thread; yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_stub_app(), host=host, port=port, log_level="warning",
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

    print(f"OpenAI stub on http://{args.host}:{args.port}/v1  (OPENAI_BASE_URL)")
    uvicorn.run(create_stub_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
