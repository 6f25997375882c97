"""Fingerprints of the call about to be made: stable hashes, never the content itself.

``request_fingerprint(model, messages)`` is sha256 (hex) over the canonical JSON of
``{"model": ..., "messages": ..., **extra}``, so the same request always gives the same fingerprint and any
change in it gives another. The API only compares fingerprints for equality; they are opaque to it.

The canonical form is the one the TypeScript SDK (``sdk/typescript``) computes too, byte for byte, so a
request gives the same fingerprint in either language (``sdk/test-vectors/fingerprints.json`` is read by
both test suites). It is JSON as ``JSON.stringify`` writes it, with object keys sorted by code point:

* no whitespace; strings as ``json.dumps(ensure_ascii=False)`` and ``JSON.stringify`` agree on (``"``,
  ``\\``, control characters escaped, everything else raw UTF-8); a lone surrogate is escaped ``\\udxxx``;
* numbers are IEEE doubles, as ``JSON.parse`` reads them, written as ECMAScript's ``Number.toString``
  does: ``1.0`` is ``1``, ``1e-07`` is ``1e-7``, an integer beyond 2**53 is rounded to the nearest double;
  NaN and infinities are ``null``;
* keys are strings (``1`` -> ``"1"``, as ``json`` converts them), sorted by code point (Python's ``str``
  order; the TypeScript side sorts the same way, not by UTF-16 units);
* objects that are not JSON: pydantic models by ``model_dump(exclude_none=True)`` (the ``openai`` /
  ``anthropic`` SDKs' message types), tuples as lists, sets sorted, bytes as hex, anything else by ``repr``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

from loop_detector_sdk.evidence.messages import from_openai_chat
from loop_detector_sdk.evidence.numbers import js_number
from loop_detector_sdk.evidence.pending import model_evidence, tool_evidence

__all__ = ["canonical_json", "js_number", "pending_request", "pending_tool", "request_fingerprint"]

_encode_string: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C, raw UTF-8
_SURROGATE = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")
_MAX_SAFE = 2**53
_FIRST = itemgetter(0)


def _int(v: int) -> str:
    v = int(v)  # an IntEnum or other int subclass: its value
    if -_MAX_SAFE <= v <= _MAX_SAFE:
        return str(v)
    try:
        return js_number(float(v))
    except OverflowError:  # JSON.parse reads it as Infinity, which JSON.stringify writes as null
        return "null"


def _key(k: Any) -> str:
    if isinstance(k, str):
        return k
    if k is None or isinstance(k, bool):
        return "null" if k is None else ("true" if k else "false")
    if isinstance(k, int):
        return _int(k)
    if isinstance(k, float):
        return js_number(k)
    return str(k)


def _write(v: Any, out: list[str]) -> None:
    """Append the canonical text of ``v`` to ``out``. Strings and small ints inside containers are written in
    place (no call per leaf): a fingerprint runs before every model call."""
    t = type(v)
    if t is dict:
        if all(type(k) is str for k in v):
            items = sorted(v.items(), key=_FIRST)
        else:
            items = sorted(((_key(k), val) for k, val in v.items()), key=_FIRST)
        out.append("{")
        sep = ""
        for k, val in items:
            out.append(sep)
            out.append(_encode_string(k))
            out.append(":")
            vt = type(val)
            if vt is str:
                out.append(_encode_string(val))
            elif val is None:
                out.append("null")
            else:
                _write(val, out)
            sep = ","
        out.append("}")
    elif t is list or t is tuple:
        out.append("[")
        sep = ""
        for item in v:
            out.append(sep)
            if type(item) is str:
                out.append(_encode_string(item))
            else:
                _write(item, out)
            sep = ","
        out.append("]")
    elif t is str:
        out.append(_encode_string(v))
    elif v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif t is int:
        out.append(str(v) if -_MAX_SAFE <= v <= _MAX_SAFE else _int(v))
    elif t is float:
        out.append(js_number(v))
    elif isinstance(v, Mapping):
        _write(dict(v), out)
    elif isinstance(v, int):
        out.append(_int(v))
    elif isinstance(v, float):
        out.append(js_number(v))
    elif isinstance(v, str):  # a str subclass (StrEnum...): its characters, as json writes it
        out.append(_encode_string(v))
    elif isinstance(v, list | tuple):
        _write(list(v), out)
    else:
        _write(_jsonable(v), out)


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # pydantic objects (e.g. the openai SDK's message types)
    if callable(dump):
        return dump(exclude_none=True)
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    return repr(value)


def _escape_surrogates(match: re.Match[str]) -> str:
    s = match.group()
    if len(s) == 2:  # a pair left as two code points: the character they encode, as JavaScript reads them
        return chr(0x10000 + ((ord(s[0]) - 0xD800) << 10) + (ord(s[1]) - 0xDC00))
    return f"\\u{ord(s):04x}"


def _canonical(value: Any) -> tuple[str, bytes]:
    out: list[str] = []
    _write(value, out)
    text = "".join(out)
    try:  # UTF-8 has no lone surrogates: encoding finds them, at C speed (a regex scan costs 30x more)
        return text, text.encode()
    except UnicodeEncodeError:
        text = _SURROGATE.sub(_escape_surrogates, text)
        return text, text.encode()


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value`` (see the module's docstring); the same in the TypeScript SDK."""
    return _canonical(value)[0]


def request_fingerprint(model: str | None, messages: Any, **extra: Any) -> str:
    """sha256 (hex) of the canonical ``{"model", "messages", **extra}`` (e.g. ``tools=...``); extras that are
    None are left out, so ``request_fingerprint(m, msgs, system=None)`` is ``request_fingerprint(m, msgs)``."""
    payload = {"model": model, "messages": messages}
    payload.update((k, v) for k, v in extra.items() if v is not None)
    return hashlib.sha256(_canonical(payload)[1]).hexdigest()


def pending_request(model: str | None, messages: Any, **extra: Any) -> dict[str, Any]:
    """The ``pending`` of a check for a model call: the request fingerprint, and the app's fingerprints of the call
    (``evidence``: its request and new input, read as chat messages, ``{"role", "content"}`` dicts or the
    ``openai`` SDK's types; :mod:`loop_detector_sdk.evidence`)."""
    pending: dict[str, Any] = {"request_fingerprint": request_fingerprint(model, messages, **extra)}
    evidence = model_evidence(model, from_openai_chat, messages if isinstance(messages, list) else [])
    if evidence:
        pending["evidence"] = evidence
    return pending


def pending_tool(name: str, arguments: Any = None) -> dict[str, Any]:
    """The ``pending`` of a check for a tool call: its name and the app's fingerprints of it (``evidence``: name +
    canonical argument values, and the normalized arguments), never the arguments themselves. A JSON string is
    parsed first, so ``'{"path": "a.py"}'`` and ``{"path": "a.py"}`` are the same call (in either SDK)."""
    pending: dict[str, Any] = {"tool_name": name}
    evidence = tool_evidence(name, arguments)
    if evidence:
        pending["evidence"] = evidence
    return pending
