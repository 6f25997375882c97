"""The messages of a model call, in one neutral form, whichever library holds them: what the fingerprints are
computed from (:mod:`loop_detector_sdk.evidence.fingerprints`).

A :class:`Message` is a role and its parts; a :class:`Part` carries the text the service reads from the same part
of a GenAI semantic-conventions message (``gen_ai.input.messages``: the ``content`` of a text part, the
``response`` of a tool result, raw JSON when that is not a string) or, for a tool call, its name and arguments as
the span would hold them. Converters:

* :func:`from_genai`: ``opentelemetry-util-genai``'s ``InputMessage`` / ``OutputMessage`` (the completion hook);
* :func:`from_openai_chat`: ``openai`` chat completion messages, read the way the openai-v2 instrumentation
  reads them (a user message whose content is a list of parts gives its text parts too);
* :func:`from_responses_input`: the Responses API's ``input`` (also the OpenAI Agents SDK's model input);
* :func:`from_anthropic`: Anthropic Messages (``messages`` and ``system``);
* :func:`from_langchain`: LangChain messages.

Objects are read by duck typing (dicts or the libraries' own types), so nothing here imports them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loop_detector_sdk.evidence.clickhouse_json import document_raw, value_raw

__all__ = [
    "Message", "Part", "arguments_text", "field_of", "from_anthropic", "from_genai", "from_langchain", "from_openai_chat", "from_responses_input",
    "reply_text",
]

TEXT = "text"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_call_response"
ASSISTANT = "assistant"
SYSTEM_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a message. ``kind``: the semantic conventions' part type (``text``, ``tool_call``,
    ``tool_call_response``, ``reasoning``, ``blob``...); ``text``: what the service reads from it (empty for a
    tool call); ``name`` / ``arguments``: a tool call's name and arguments (raw JSON, or the string the model
    wrote when it is not JSON)."""

    kind: str
    text: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    parts: tuple[Part, ...]


def field_of(obj: Any, name: str, default: Any = None) -> Any:
    """A field of a message or part: a dict's key or an object's attribute (the libraries' own types)."""
    if type(obj) is dict:
        return obj.get(name, default)
    value = getattr(obj, name, _MISSING)
    if value is not _MISSING:
        return value
    return obj.get(name, default) if isinstance(obj, Mapping) else default


_MISSING = object()


def _text_of(value: Any) -> str:
    """A part's ``content`` as the service reads it: a string as it is, bytes as the base64 util-genai writes."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    return ""


def _result_text(value: Any) -> str:
    """A tool result: the string, or the raw JSON of anything else."""
    return value if isinstance(value, str) else value_raw(value)


def arguments_text(value: Any) -> str:
    """Tool call arguments as the span holds them: a JSON string as ClickHouse re-serializes it (key order,
    duplicates and long integers kept, as the text has them), any other value's raw JSON; a string that is not
    JSON as it is."""
    if isinstance(value, str):
        raw = document_raw(value)
        return raw if raw is not None else value
    return value_raw(value)


# -- opentelemetry-util-genai -----------------------------------------------------------------------------------


def _genai_part(part: Any) -> Part:
    kind = str(field_of(part, "type", "") or "")
    if kind == TOOL_CALL:
        arguments = field_of(part, "arguments")
        return Part(TOOL_CALL, name=str(field_of(part, "name", "") or ""),
                    arguments=arguments if isinstance(arguments, str) else value_raw(arguments))
    if kind == TOOL_RESULT:
        return Part(TOOL_RESULT, _result_text(field_of(part, "response")))
    return Part(kind, _text_of(field_of(part, "content")))


def from_genai(messages: Iterable[Any], system_instruction: Iterable[Any] = ()) -> list[Message]:
    """util-genai's ``InputMessage`` / ``OutputMessage`` list; ``system_instruction`` parts, when given, as a
    leading system message."""
    out = [Message("system", tuple(_genai_part(p) for p in system_instruction))] if system_instruction else []
    out.extend(Message(str(field_of(m, "role", "") or ""), tuple(_genai_part(p) for p in field_of(m, "parts", None) or ()))
               for m in messages)
    return out


def reply_text(outputs: Iterable[Message]) -> str:
    """The model's own text: every part's content, non-empty ones joined by a space (tool calls have none)."""
    return " ".join(p.text for m in outputs for p in m.parts if p.kind != TOOL_RESULT and p.text)


# -- openai chat completions ------------------------------------------------------------------------------------


def _content_parts(content: Any) -> list[Part]:
    """A message's content: a string, or a list of parts (strings, or dicts / objects with a ``text``)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [Part(TEXT, content)]
    if isinstance(content, Iterable) and not isinstance(content, Mapping | bytes | bytearray):
        items = list(content)
        if all(isinstance(x, str) for x in items):
            return [Part(TEXT, str(content))]  # what openai-v2 records: str() of the list
        return [Part(TEXT, t) for t in (field_of(x, "text") for x in items) if isinstance(t, str)]
    return []


def from_openai_chat(messages: Iterable[Any] | None) -> list[Message]:
    out = []
    for message in messages or ():
        role = str(field_of(message, "role", "") or "")
        content = field_of(message, "content")
        if role == ASSISTANT:
            parts = [Part(TOOL_CALL, name=str(field_of(field_of(c, "function"), "name", "") or ""),
                          arguments=arguments_text(field_of(field_of(c, "function"), "arguments")))
                     for c in field_of(message, "tool_calls", None) or ()]
            parts.extend(_content_parts(content))
        elif role == "tool":
            parts = [Part(TOOL_RESULT, _result_text(content))]
        else:
            parts = _content_parts(content)
        out.append(Message(role, tuple(parts)))
    return out


# -- the Responses API (and the OpenAI Agents SDK's model input) ------------------------------------------------


def from_responses_input(items: Any, instructions: Any = None) -> list[Message]:
    out = [Message("system", (Part(TEXT, instructions),))] if isinstance(instructions, str) and instructions else []
    if isinstance(items, str):
        return [*out, Message("user", (Part(TEXT, items),))]
    for item in items or ():
        kind = field_of(item, "type")
        if kind == "function_call":
            out.append(Message(ASSISTANT, (Part(TOOL_CALL, name=str(field_of(item, "name", "") or ""),
                                                arguments=arguments_text(field_of(item, "arguments"))),)))
        elif kind in ("function_call_output", "custom_tool_call_output", "computer_call_output"):
            out.append(Message("tool", (Part(TOOL_RESULT, _result_text(field_of(item, "output"))),)))
        elif kind == "reasoning":
            out.append(Message(ASSISTANT, ()))
        elif kind in (None, "message"):
            out.append(Message(str(field_of(item, "role", "") or ""), tuple(_content_parts(field_of(item, "content")))))
    return out


# -- Anthropic Messages -----------------------------------------------------------------------------------------


def _anthropic_block(block: Any) -> Part | None:
    if isinstance(block, str):
        return Part(TEXT, block)
    kind = field_of(block, "type")
    if kind == "text":
        return Part(TEXT, str(field_of(block, "text", "") or ""))
    if kind == "tool_use":
        return Part(TOOL_CALL, name=str(field_of(block, "name", "") or ""), arguments=value_raw(field_of(block, "input")))
    if kind == "tool_result":
        content = field_of(block, "content")
        if isinstance(content, str) or content is None:
            return Part(TOOL_RESULT, content or "")
        return Part(TOOL_RESULT, " ".join(p.text for p in _content_parts(content)))
    return None


def from_anthropic(messages: Iterable[Any] | None, system: Any = None) -> list[Message]:
    out = []
    if system:
        out.append(Message("system", tuple(_content_parts(system))))
    for message in messages or ():
        content = field_of(message, "content")
        blocks = [content] if isinstance(content, str) else list(content or ())
        parts = tuple(p for p in (_anthropic_block(b) for b in blocks) if p is not None)
        out.append(Message(str(field_of(message, "role", "") or ""), parts))
    return out


# -- LangChain --------------------------------------------------------------------------------------------------

_LANGCHAIN_ROLES = {"human": "user", "ai": ASSISTANT, "tool": "tool", "system": "system"}


def from_langchain(messages: Iterable[Any] | None, system: Any = None) -> list[Message]:
    out = [Message("system", tuple(_content_parts(system)))] if system else []
    for message in messages or ():
        kind = str(field_of(message, "type", "") or "")
        role = _LANGCHAIN_ROLES.get(kind, kind)
        content = field_of(message, "content")
        if role == ASSISTANT:
            parts = [Part(TOOL_CALL, name=str(field_of(c, "name", "") or ""), arguments=value_raw(field_of(c, "args")))
                     for c in field_of(message, "tool_calls", None) or ()]
            parts.extend(_content_parts(content))
        elif role == "tool":
            parts = [Part(TOOL_RESULT, content if isinstance(content, str)
                          else " ".join(p.text for p in _content_parts(content)))]
        else:
            parts = _content_parts(content)
        out.append(Message(role, tuple(parts)))
    return out
