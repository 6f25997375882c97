"""The app's fingerprints of a model call, version 3: what the service computes from content (the columns of
``otel.genai_calls``), computed where the content is, so that loop-detector sees the same evidence whether a span
carries the content or only these numbers. Never the text.

The set (``docs/sdk.md``, "Fingerprints"; span attributes of the completion hook, ``pending.evidence`` of a
guard's check), every hash a ``UInt64`` written in decimal:

=================================== ================================================================ ==================
attribute                           value                                                            column
=================================== ================================================================ ==================
``loop_detector.fp.version``        3 (int; 2: the set without ``input_ack``; 1: also without the three
                                    ``input_`` values that follow ``input_chars``)
``loop_detector.fp.request``        ``cityHash64(model, messages)``: each message                    ``request_fp``
                                    ``cityHash64(role, parts)``, each part ``cityHash64(type, text)``
                                    or, a tool call, its tool fingerprint
``loop_detector.fp.input``          ``cityHash64(normalize(new input))``                             ``observation_fp``
``loop_detector.fp.input_simhash``  ``wordShingleSimHashCaseInsensitiveUTF8(normalize(new input       ``observation_simhash``
                                    without its JSON keys))``
``loop_detector.fp.input_empty``    the new input says "nothing" (bool)                              ``observation_empty``
``loop_detector.fp.input_chars``    bytes of the normalized new input (int)                          ``observation_chars``
``loop_detector.fp.input_failed``   the new input says it failed (bool; an error, a traceback...)    ``observation_failed``
``loop_detector.fp.input_shape``    ``cityHash64(normalize(new input) with digits as #)``, when it   ``observation_shape_fp``
                                    failed or says "nothing" (the only rows that column is read on)
``loop_detector.fp.input_pending``  the new input says the work is in progress (bool; a status of    ``observation_pending``
                                    queued, running..., "still running", "Progress: 45%")
``loop_detector.fp.input_ack``      the new input only acknowledges what was done (bool; "File       ``observation_ack``
                                    created", "True", a command completed with exit code 0)
``loop_detector.fp.output``         ``cityHash64(normalize(reply))``                                 ``output_fp``
``loop_detector.fp.output_simhash`` ``ngramSimHashCaseInsensitiveUTF8(normalize(reply))``            ``output_norm_simhash``
``loop_detector.fp.tool_names``     the tools the model asked for (string array)                     ``out_tool_names``
``loop_detector.fp.tool_calls``     per tool call ``cityHash64(name, arraySort(                      ``out_tool_fps``
                                    JSONExtractKeysAndValuesRaw(args)), if(object, '', args))``
``loop_detector.fp.tool_call_       per tool call ``ngramSimHashCaseInsensitiveUTF8(args with         ``out_tool_arg_simhashes``
simhashes``                         digits as #)``
=================================== ================================================================ ==================

*New input*: the messages after the model's last one (the tool results and the user message since the last call;
system messages left out), each message's parts' text joined by a space, messages joined by a space; none when no
such message has a part. A new input that is empty (a tool's empty response) is an outcome of its own:
``cityHash64('')``, "nothing" (``input_empty``), 0 characters. A hash is absent (0 in :class:`CallEvidence`) where
the service's would be 0.

A pre-flight check of a tool about to run carries what its ``execute_tool`` span's columns would be:
``tool`` (``tool_fp``: the same formula as a requested tool call), ``tool_args`` (``args_fp``:
``cityHash64(name, normalize(args))``) and ``tool_args_simhash`` (``args_simhash``:
``ngramSimHashCaseInsensitiveUTF8(normalize(args) with digits as #)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from loop_detector_sdk.evidence.clickhouse_hash import (
    city_hash64,
    combine,
    hash_pairs,
    hash_strings,
    int_hash,
    ngram_simhash_ci,
    utf8,
    word_shingle_simhash_ci,
)
from loop_detector_sdk.evidence.clickhouse_json import ENCODER, object_pairs
from loop_detector_sdk.evidence.messages import (
    ASSISTANT,
    SYSTEM_ROLES,
    TOOL_CALL,
    TOOL_RESULT,
    Message,
    Part,
    from_genai,
    reply_text,
)
from loop_detector_sdk.evidence.normalize import (
    digits_masked,
    is_ack,
    is_empty_observation,
    is_failed,
    is_pending,
    normalize,
    without_keys,
)

__all__ = [
    "ATTRIBUTES", "CallEvidence", "Observation", "Reply", "ToolCallEvidence", "ToolRunEvidence", "VERSION",
    "call_evidence", "genai_call_evidence", "new_input_text", "observation", "reply", "request_fp", "tool_call",
    "tool_run",
]

VERSION: Final = 3
PREFIX: Final = "loop_detector.fp."
ATTR_VERSION: Final = PREFIX + "version"
ATTR_REQUEST: Final = PREFIX + "request"
ATTR_INPUT: Final = PREFIX + "input"
ATTR_INPUT_SIMHASH: Final = PREFIX + "input_simhash"
ATTR_INPUT_EMPTY: Final = PREFIX + "input_empty"
ATTR_INPUT_CHARS: Final = PREFIX + "input_chars"
ATTR_INPUT_FAILED: Final = PREFIX + "input_failed"
ATTR_INPUT_SHAPE: Final = PREFIX + "input_shape"
ATTR_INPUT_PENDING: Final = PREFIX + "input_pending"
ATTR_INPUT_ACK: Final = PREFIX + "input_ack"
ATTR_OUTPUT: Final = PREFIX + "output"
ATTR_OUTPUT_SIMHASH: Final = PREFIX + "output_simhash"
ATTR_TOOL_NAMES: Final = PREFIX + "tool_names"
ATTR_TOOL_CALLS: Final = PREFIX + "tool_calls"
ATTR_TOOL_CALL_SIMHASHES: Final = PREFIX + "tool_call_simhashes"
ATTRIBUTES: Final = (ATTR_VERSION, ATTR_REQUEST, ATTR_INPUT, ATTR_INPUT_SIMHASH, ATTR_INPUT_EMPTY, ATTR_INPUT_CHARS,
                     ATTR_INPUT_FAILED, ATTR_INPUT_SHAPE, ATTR_INPUT_PENDING, ATTR_INPUT_ACK, ATTR_OUTPUT,
                     ATTR_OUTPUT_SIMHASH, ATTR_TOOL_NAMES, ATTR_TOOL_CALLS, ATTR_TOOL_CALL_SIMHASHES)

# The caches map texts to their fingerprints: a conversation sends its history again with every call, and an agent
# in a loop sends the same texts. Bounded: so many entries per cache (cleared when full), texts up to so many
# characters (a longer one is fingerprinted every time it comes).
_CACHE_SIZE: Final = 2048
_CACHED_TEXT: Final = 16_384


def _text_size(key: Any) -> int:
    if type(key) is str:
        return len(key)
    if type(key) is tuple:
        return sum(_text_size(x) for x in key)
    return 0


def _cached(cache: dict[Any, Any], key: Any, compute: Any) -> Any:
    value = cache.get(key)
    if value is None:
        value = compute(key)
        if _text_size(key) <= _CACHED_TEXT:
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            cache[key] = value
    return value


@dataclass(frozen=True, slots=True)
class Observation:
    """What came back (a call's new input): ``observation_fp``, ``observation_simhash``, ``observation_empty``,
    ``observation_chars``, ``observation_failed``, ``observation_shape_fp``, ``observation_pending``,
    ``observation_ack``."""

    fp: int
    simhash: int
    empty: bool
    chars: int
    failed: bool = False
    shape: int = 0
    pending: bool = False
    ack: bool = False


@dataclass(frozen=True, slots=True)
class Reply:
    """The model's text: ``output_fp``, ``output_norm_simhash``."""

    fp: int
    simhash: int


@dataclass(frozen=True, slots=True)
class ToolCallEvidence:
    """A tool call the model asked for: its name, ``out_tool_fps`` and ``out_tool_arg_simhashes`` entries."""

    name: str
    fp: int
    simhash: int


@dataclass(frozen=True, slots=True)
class ToolRunEvidence:
    """A tool about to run: its ``execute_tool`` span's ``tool_fp``, ``args_fp`` and ``args_simhash``."""

    fp: int
    args_fp: int
    args_simhash: int


def _observation(text: str) -> Observation:
    """What came back, captured (an empty text included: an empty result is an outcome of its own, the same every
    time, and "nothing")."""
    norm = normalize(text)
    keyless = without_keys(text)
    stripped = norm if keyless == text else normalize(keyless)
    empty, failed = norm == "" or is_empty_observation(text), is_failed(text)
    pending = is_pending(text, failed)
    # the shape is a failure's (or "nothing"'s) key, read only for those: computed only for those (a second hash of
    # the whole text costs as much as the first)
    return Observation(fp=city_hash64(utf8(norm)),
                       simhash=word_shingle_simhash_ci(stripped) if stripped else 0,
                       empty=empty, chars=len(utf8(norm)), failed=failed,
                       shape=city_hash64(utf8(digits_masked(norm))) if failed or empty else 0,
                       pending=pending, ack=is_ack(text, pending))


def _reply(text: str) -> Reply:
    norm = normalize(text)
    return Reply(fp=city_hash64(utf8(norm)) if norm else 0, simhash=ngram_simhash_ci(norm) if norm else 0)


def _tool_fp(name: str, arguments: str) -> int:
    """``cityHash64(name, arraySort(JSONExtractKeysAndValuesRaw(args)), if(JSONType(args) = 'Object', '', args))``."""
    pairs = object_pairs(arguments)
    if pairs is None:
        return hash_pairs(utf8(name), [], utf8(arguments))
    return hash_pairs(utf8(name), [(utf8(k), utf8(v)) for k, v in pairs], b"")


def _tool_call(key: tuple[str, str]) -> ToolCallEvidence:
    name, arguments = key
    return ToolCallEvidence(name=name, fp=_tool_fp(name, arguments),
                            simhash=ngram_simhash_ci(digits_masked(arguments)) if arguments else 0)


def _tool_run(key: tuple[str, str]) -> ToolRunEvidence:
    name, arguments = key
    norm = normalize(arguments)
    return ToolRunEvidence(fp=_tool_fp(name, arguments),
                           args_fp=hash_strings(utf8(name), utf8(norm)) if name and norm else 0,
                           args_simhash=ngram_simhash_ci(digits_masked(norm)) if name and norm else 0)


_OBSERVATIONS: dict[str, Observation] = {}
_REPLIES: dict[str, Reply] = {}
_TOOL_CALLS: dict[tuple[str, str], ToolCallEvidence] = {}
_TOOL_RUNS: dict[tuple[str, str], ToolRunEvidence] = {}
_PARTS: dict[Part, int] = {}


def observation(text: str) -> Observation:
    return _cached(_OBSERVATIONS, text, _observation)


def reply(text: str) -> Reply:
    return _cached(_REPLIES, text, _reply)


def tool_call(name: str, arguments: str) -> ToolCallEvidence:
    """``arguments``: as the span holds them (raw JSON, or the model's string when it is not JSON)."""
    return _cached(_TOOL_CALLS, (name, arguments), _tool_call)


def tool_run(name: str, arguments: str) -> ToolRunEvidence:
    return _cached(_TOOL_RUNS, (name, arguments), _tool_run)


def _part_fp(part: Part) -> int:
    if part.kind == TOOL_CALL:
        return tool_call(part.name, part.arguments).fp
    return hash_strings(utf8(part.kind), utf8(part.text))


def _message_hash(message: Message) -> int:
    """``int_hash(cityHash64(role, [part fingerprints]))``: a message as an element of the request's array."""
    h = combine(city_hash64(utf8(message.role)), int_hash(len(message.parts)))
    for part in message.parts:
        fp = _PARTS.get(part)
        if fp is None:
            fp = int_hash(_part_fp(part))
            if len(part.text) + len(part.arguments) <= _CACHED_TEXT:
                if len(_PARTS) >= _CACHE_SIZE:
                    _PARTS.clear()
                _PARTS[part] = fp
        h = combine(h, fp)
    return int_hash(h)


def request_fp(model: str | None, messages: Sequence[Message]) -> int:
    """``cityHash64(model, [cityHash64(role, [part fingerprint, ...]), ...])``."""
    return _request(model, [_message_hash(m) for m in messages])


_MODELS: dict[str, int] = {}


def _request(model: str | None, message_hashes: Sequence[int]) -> int:
    """``cityHash64(model, [message hashes])``: the fold of :func:`combine` written out (it runs per message)."""
    name = model or ""
    h = _MODELS.get(name)
    if h is None:
        if len(_MODELS) >= _CACHE_SIZE:
            _MODELS.clear()
        h = _MODELS[name] = city_hash64(utf8(name))
    h = combine(h, int_hash(len(message_hashes)))
    m, k = 0xFFFFFFFFFFFFFFFF, 0x9DDFEA08EB382D69
    for mh in message_hashes:
        a = ((h ^ mh) * k) & m
        a ^= a >> 47
        b = ((mh ^ a) * k) & m
        b ^= b >> 47
        h = (b * k) & m
    return h


def new_input_text(messages: Sequence[Message]) -> str | None:
    """The text of the messages after the model's last one (system messages left out); None when there are none, or
    none has a part (nothing was captured); "" when what came is empty (a tool's empty response: an outcome)."""
    start = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == ASSISTANT:
            start = i + 1
            break
    new = [m for m in messages[start:] if m.role not in SYSTEM_ROLES]
    if not any(m.parts for m in new):
        return None
    return " ".join([" ".join(p.text for p in m.parts) for m in new])


@dataclass(frozen=True, slots=True)
class CallEvidence:
    """The fingerprints of one model call (the completion hook's span attributes; the model half of a check)."""

    request: int = 0
    observation: Observation | None = None
    reply: Reply | None = None
    tool_calls: tuple[ToolCallEvidence, ...] = field(default_factory=tuple)

    def span_attributes(self) -> dict[str, Any]:
        """The ``loop_detector.fp.*`` attributes (hashes as decimal strings: attribute integers are signed)."""
        attrs: dict[str, Any] = {ATTR_VERSION: VERSION}
        if self.request:
            attrs[ATTR_REQUEST] = str(self.request)
        o = self.observation
        if o is not None:
            if o.fp:
                attrs[ATTR_INPUT] = str(o.fp)
            if o.simhash:
                attrs[ATTR_INPUT_SIMHASH] = str(o.simhash)
            attrs[ATTR_INPUT_EMPTY] = o.empty
            attrs[ATTR_INPUT_CHARS] = o.chars
            attrs[ATTR_INPUT_FAILED] = o.failed
            if o.shape:
                attrs[ATTR_INPUT_SHAPE] = str(o.shape)
            attrs[ATTR_INPUT_PENDING] = o.pending
            attrs[ATTR_INPUT_ACK] = o.ack
        r = self.reply
        if r is not None and r.fp:
            attrs[ATTR_OUTPUT] = str(r.fp)
            attrs[ATTR_OUTPUT_SIMHASH] = str(r.simhash)
        if self.tool_calls:
            attrs[ATTR_TOOL_NAMES] = [c.name for c in self.tool_calls]
            attrs[ATTR_TOOL_CALLS] = [str(c.fp) for c in self.tool_calls]
            attrs[ATTR_TOOL_CALL_SIMHASHES] = [str(c.simhash) for c in self.tool_calls]
        return attrs

    def check_evidence(self) -> dict[str, Any]:
        """``pending.evidence`` of a check before this call (what is known before it: the request, its new input)."""
        out: dict[str, Any] = {"version": VERSION}
        if self.request:
            out["request"] = str(self.request)
        o = self.observation
        if o is not None:
            out.update(input=str(o.fp), input_simhash=str(o.simhash), input_empty=o.empty, input_chars=o.chars,
                       input_failed=o.failed, input_shape=str(o.shape), input_pending=o.pending, input_ack=o.ack)
        return out


def call_evidence(model: str | None, inputs: Sequence[Message], outputs: Sequence[Message] = (),
                  reply_text: str | None = None) -> CallEvidence:
    """The fingerprints of a model call from its messages (``outputs`` empty before the call is made)."""
    text = new_input_text(inputs)
    calls = tuple(tool_call(p.name, p.arguments) for m in outputs for p in m.parts if p.kind == TOOL_CALL)
    return CallEvidence(request=request_fp(model, inputs), observation=observation(text) if text is not None else None,
                        reply=reply(reply_text) if reply_text else None, tool_calls=calls)


def tool_run_evidence(name: str, arguments: str) -> dict[str, Any]:
    """``pending.evidence`` of a check before a tool runs."""
    run = tool_run(name, arguments)
    return {"version": VERSION, "tool": str(run.fp), "tool_args": str(run.args_fp),
            "tool_args_simhash": str(run.args_simhash)}


# -- the completion hook's path: util-genai's messages, the history recognized without being read again ----------

_GENAI: dict[tuple[Any, ...], tuple[Message, int]] = {}


def _genai_key(message: Any) -> tuple[Any, ...] | None:
    """What identifies a util-genai message (its role and its parts' content), cheaply: a conversation sends its
    history again with every call, and strings hash once. None for a part of another kind (read every time)."""
    if type(message) is dict:
        return None  # util-genai's own types only (a dict is read every time)
    parts: list[tuple[Any, ...]] = []
    for part in message.parts:
        kind = part.type
        if kind == "text" or kind == "reasoning":
            content = part.content
            if type(content) is not str:
                return None
            parts.append((kind, content))
        elif kind == TOOL_RESULT:
            response = part.response
            if type(response) is not str:
                return None
            parts.append((kind, response))
        elif kind == TOOL_CALL:
            arguments = part.arguments
            parts.append((kind, part.name, arguments if type(arguments) is str else ENCODER.encode(arguments)))
        else:
            return None
    return (message.role, tuple(parts))


def _genai_messages(items: Sequence[Any]) -> list[tuple[Message, int]]:
    """Each util-genai message in the neutral form, with its hash as an element of the request's array."""
    out = []
    for item in items:
        try:
            key = _genai_key(item)
        except (AttributeError, TypeError, ValueError, RecursionError):
            key = None
        entry = _GENAI.get(key) if key is not None else None
        if entry is None:
            message = from_genai([item])[0]
            entry = (message, _message_hash(message))
            if key is not None and _text_size(key) <= _CACHED_TEXT:
                if len(_GENAI) >= _CACHE_SIZE:
                    _GENAI.clear()
                _GENAI[key] = entry
        out.append(entry)
    return out


def genai_call_evidence(model: str | None, inputs: Sequence[Any], outputs: Sequence[Any],
                        system_instruction: Sequence[Any] = ()) -> CallEvidence:
    """:func:`call_evidence` of util-genai's messages (the completion hook's arguments), the history recognized
    from a cache rather than read again."""
    entries = _genai_messages(inputs)
    if system_instruction:
        system = from_genai((), system_instruction)[0]
        entries.insert(0, (system, _message_hash(system)))
    messages = [m for m, _ in entries]
    replies = from_genai(outputs)
    text = new_input_text(messages)
    calls = tuple(tool_call(p.name, p.arguments) for m in replies for p in m.parts if p.kind == TOOL_CALL)
    said = reply_text(replies)
    return CallEvidence(request=_request(model, [h for _, h in entries]),
                        observation=observation(text) if text is not None else None,
                        reply=reply(said) if said else None, tool_calls=calls)
