"""Fingerprints of the call about to be made: stable hashes, never the content itself.

``request_fingerprint(model, messages)`` is sha256 over the canonical JSON of the model and the messages
(sorted keys, no whitespace), so the same request always gives the same fingerprint and any change in
it gives another. The API only compares fingerprints for equality; they are opaque to it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # pydantic objects (e.g. the openai SDK's message types)
    if callable(dump):
        return dump(exclude_none=True)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, bytes):
        return value.hex()
    return repr(value)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_jsonable)


def request_fingerprint(model: str | None, messages: Any, **extra: Any) -> str:
    """sha256 (hex) of the canonical ``{"model", "messages", **extra}`` (e.g. ``tools=...``)."""
    payload = {"model": model, "messages": messages, **extra}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def pending_request(model: str | None, messages: Any, **extra: Any) -> dict[str, Any]:
    """The ``pending`` of a check for a model call."""
    return {"request_fingerprint": request_fingerprint(model, messages, **extra)}


def pending_tool(name: str, arguments: Any = None) -> dict[str, Any]:
    """The ``pending`` of a check for a tool call (the server compares name + canonical arguments)."""
    if arguments is not None and not isinstance(arguments, (dict, list, str)):
        arguments = json.loads(canonical_json(arguments))
    out: dict[str, Any] = {"tool_name": name}
    if arguments is not None:
        out["tool_arguments"] = arguments
    return out
