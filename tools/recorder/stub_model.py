"""A scripted, deterministic OpenAI-compatible model for recording agent runs.

It serves ``POST /v1/chat/completions`` and ``POST /v1/responses`` (the Agents SDK's default API) on a free
local port, stdlib only. What the model answers is a pure function of the scenario being recorded (set by the
recorder between runs, never sent by the agent, so no label leaks into the spans) and of the request: the
scenario's policy reads the conversation (system prompt, user turns, tool calls and tool results so far) and
returns the next assistant turn. Ids in the answer (response, tool call) are hashes of the request and of the
call's position in the session: unique per call, as a real API's are, and the same on every re-recording. Usage is reported from message sizes (about 4 characters a token), as the
examples' stub does.

Every request is logged with the policy's own verdict (``wasted``: this call repeats earlier behaviour without
progress), which is how the recorder derives each loop's onset from what actually ran.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL_SUFFIX = "-2024-07-18"


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    name: str
    args: dict[str, Any]
    output: str


@dataclass(frozen=True)
class Reply:
    """One assistant turn: text and/or tool calls. ``wasted`` is the scenario's ground truth for this call."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    wasted: bool = False


@dataclass
class Conversation:
    """The request, read into what a scripted model needs: who is asked, what was said, what tools returned."""

    system: str = ""
    users: list[str] = field(default_factory=list)
    assistant_texts: list[str] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    calls_since_user: int = 0  # assistant turns after the last user message
    tools: list[str] = field(default_factory=list)

    @property
    def turn(self) -> int:
        """The number of user messages (1 for the first question)."""
        return len(self.users)

    def results(self, name: str) -> list[ToolResult]:
        return [r for r in self.tool_results if r.name == name]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
    return "" if content is None else str(content)


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def read_chat(body: dict[str, Any]) -> Conversation:
    conv = Conversation(tools=[t.get("function", {}).get("name", "") for t in body.get("tools") or []])
    pending: dict[str, ToolCall] = {}
    for m in body.get("messages") or []:
        role = m.get("role")
        if role in ("system", "developer"):
            conv.system += _text(m.get("content")) + "\n"
        elif role == "user":
            conv.users.append(_text(m.get("content")))
            conv.calls_since_user = 0
        elif role == "assistant":
            conv.calls_since_user += 1
            if text := _text(m.get("content")):
                conv.assistant_texts.append(text)
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                pending[tc.get("id", "")] = ToolCall(fn.get("name", ""), _args(fn.get("arguments")))
        elif role == "tool":
            call = pending.get(m.get("tool_call_id", ""), ToolCall("", {}))
            conv.tool_results.append(ToolResult(call.name, call.args, _text(m.get("content"))))
    return conv


def read_responses(body: dict[str, Any]) -> Conversation:
    conv = Conversation(system=_text(body.get("instructions")) + "\n",
                        tools=[t.get("name", "") for t in body.get("tools") or []])
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    pending: dict[str, ToolCall] = {}
    last_was_assistant_item = False
    for item in items or []:
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "message" and role in ("system", "developer"):
            conv.system += _text(item.get("content")) + "\n"
        elif kind == "message" and role == "user":
            conv.users.append(_text(item.get("content")))
            conv.calls_since_user = 0
            last_was_assistant_item = False
        elif kind == "message" and role == "assistant":
            if not last_was_assistant_item:
                conv.calls_since_user += 1
            last_was_assistant_item = True
            if text := _text(item.get("content")):
                conv.assistant_texts.append(text)
        elif kind == "function_call":
            if not last_was_assistant_item:
                conv.calls_since_user += 1
            last_was_assistant_item = True
            pending[item.get("call_id", "")] = ToolCall(item.get("name", ""), _args(item.get("arguments")))
        elif kind == "function_call_output":
            last_was_assistant_item = False
            call = pending.get(item.get("call_id", ""), ToolCall("", {}))
            conv.tool_results.append(ToolResult(call.name, call.args, _text(item.get("output"))))
    return conv


def count_tokens(body: dict[str, Any]) -> int:
    """A deterministic stand-in for a tokenizer: ~4 characters a token plus a per-message overhead."""
    parts = body.get("messages") or body.get("input") or []
    if isinstance(parts, str):
        parts = [parts]
    total = len(_text(body.get("instructions"))) // 4
    for p in parts:
        total += 4 + len(json.dumps(p, sort_keys=True)) // 4
    total += sum(12 + len(json.dumps(t, sort_keys=True)) // 8 for t in body.get("tools") or [])
    return total


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _model(body: dict[str, Any]) -> str:
    model = str(body.get("model") or "gpt-4o-mini")
    return model if model.endswith(MODEL_SUFFIX) else model + MODEL_SUFFIX


def _completion_tokens(reply: Reply) -> int:
    return 6 + len(reply.text or "") // 4 + sum(10 + len(json.dumps(c.args)) // 4 for c in reply.tool_calls)


def latency(reply: Reply) -> float:
    """Seconds the stub takes to answer: a fixed time to first token plus a deterministic time per token."""
    return 0.15 + 0.005 * _completion_tokens(reply)


def chat_answer(body: dict[str, Any], reply: Reply, seq: int) -> dict[str, Any]:
    key = _digest(body.get("messages"), seq)
    message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{_digest(key, i)[:24]}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.args)}}
            for i, c in enumerate(reply.tool_calls)]
    prompt, completion = count_tokens(body), _completion_tokens(reply)
    return {
        "id": f"chatcmpl-{key[:29]}", "object": "chat.completion", "created": int(time.time()),
        "model": _model(body), "system_fingerprint": "fp_0ba0d124f1", "service_tier": "default",
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0,
                                                "rejected_prediction_tokens": 0}},
    }


def responses_answer(body: dict[str, Any], reply: Reply, seq: int) -> dict[str, Any]:
    key = _digest(body.get("input"), body.get("instructions"), seq)
    output: list[dict[str, Any]] = []
    if reply.text:
        output.append({"type": "message", "id": f"msg_{key[:40]}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}]})
    for i, c in enumerate(reply.tool_calls):
        output.append({"type": "function_call", "id": f"fc_{_digest(key, 'fc', i)[:40]}",
                       "call_id": f"call_{_digest(key, i)[:24]}", "name": c.name, "arguments": json.dumps(c.args),
                       "status": "completed"})
    prompt, completion = count_tokens(body), _completion_tokens(reply)
    return {
        "id": f"resp_{key[:48]}", "object": "response", "created_at": int(time.time()), "status": "completed",
        "background": False, "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": _model(body), "output": output, "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": None, "reasoning": {"effort": None, "summary": None}, "service_tier": "default",
        "store": body.get("store", True), "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice") or "auto", "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0), "truncation": "disabled", "user": None, "metadata": {},
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": prompt + completion},
    }


Policy = Callable[[Conversation], Reply]


@dataclass
class LoggedCall:
    api: str
    wasted: bool
    tool_calls: list[str]


class StubModel:
    """The HTTP server; ``policy`` is swapped by the recorder before each scenario, ``log`` cleared with it."""

    def __init__(self) -> None:
        self.policy: Policy | None = None
        self.log: list[LoggedCall] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (stdlib name)
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.rstrip("/")
                if path.endswith("/chat/completions"):
                    status, payload = stub.answer("chat", body)
                elif path.endswith("/responses"):
                    status, payload = stub.answer("responses", body)
                else:
                    status, payload = 404, {"error": {"message": f"unknown path {self.path}", "type": "not_found"}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("x-request-id", "req_" + _digest(payload)[:32])
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="stub-model", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, api: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if body.get("stream"):
            return 400, {"error": {"message": "streaming is not supported by the stub",
                                   "type": "invalid_request_error", "param": "stream", "code": None}}
        conv = read_chat(body) if api == "chat" else read_responses(body)
        with self._lock:
            assert self.policy is not None, "no scenario set"
            reply = self.policy(conv)
            seq = len(self.log)
            self.log.append(LoggedCall(api, reply.wasted, [c.name for c in reply.tool_calls]))
        time.sleep(latency(reply))
        return 200, chat_answer(body, reply, seq) if api == "chat" else responses_answer(body, reply, seq)

    def __enter__(self) -> StubModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
