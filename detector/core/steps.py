"""Steps: what the agent did and what came back, read from its spans. The progress memory compares them.

No I/O. A step is one of:

- a **tool run**: an ``execute_tool`` span, read as soon as it arrives when it tells what came back (its result, or a
  failure: error type and status message, known with content capture off too); else completed by the next model call,
  whose new input holds what came back (with the span's arguments, or what the previous call asked for: without any
  tool span, the tool run is known from the model calls alone);
- a **reply**: a model call that asked for no tool: what it said, to what it was told (its new input);
- a **failed call**: the model call itself failed: the request, and the error.

With content capture off, a tool run is known only by its name and by how much it brought back: the tokens the next
call's context grew by besides the previous reply (its *sizes*).

Every fingerprint comes from ``otel.genai_calls`` (``clickhouse/002_genai_calls.sql``): normalized before hashing
(UUIDs, timestamps, timings, hex runs, ids that mix letters and digits, JSON key order, whitespace), 0 when unknown.
"""

from __future__ import annotations

from typing import Any, Final

from detector.core.models import Call

__all__ = [
    "EMPTY_REPLY", "ProgressStep", "STEP_FAILED_CALL", "STEP_REPLY", "STEP_TOOL", "answered_tool_step",
    "failed_call_step", "has_outcome", "mix_fingerprints", "reply_step", "tool_step", "with_outcome",
]

STEP_TOOL: Final = 0
STEP_REPLY: Final = 1
STEP_FAILED_CALL: Final = 2

# The reply of a call that answered nothing (content captured: no text, no tool call): two empty replies are the
# same reply.
EMPTY_REPLY: Final = 0xE3E7_7E3E_0000_0001
_MASK64: Final = 0xFFFF_FFFF_FFFF_FFFF
_NO_NAMES: Final[tuple[str, ...]] = ()


def mix_fingerprints(values: list[int]) -> int:
    """A stable 64-bit combination of fingerprints, in the order given; 0 (unknown) when any of them is."""
    acc = 0x9E37_79B9_7F4A_7C15
    for v in values:
        if not v:
            return 0
        acc = ((acc ^ v) * 0x100_0000_01B3) & _MASK64
    return acc or 1


class ProgressStep:
    """One step, as the progress memory compares it. Every fingerprint is 0 when unknown."""

    __slots__ = ("kind", "names", "act", "act_sim", "obs", "obs_sim", "obs_chars", "failure", "added", "out_tokens",
                 "wait_ns", "request", "pending", "nothing", "ack", "fresh")

    def __init__(self, kind: int, names: tuple[str, ...], act: int, act_sim: int, obs: int, obs_sim: int,
                 obs_chars: int, failure: int, added: int = -1, out_tokens: int = 0, wait_ns: int = 0) -> None:
        self.kind = kind
        self.names = names  # the tools' names, sorted (tool runs); () otherwise
        self.act = act  # what it did, exactly: the normalized arguments; a reply's normalized text; the request
        self.act_sim = act_sim  # what it did, as a SimHash: the arguments without numbers; the reply
        self.obs = obs  # what came back, exactly: the normalized result; for a reply, its new input
        self.obs_sim = obs_sim  # what came back, as a SimHash of its words
        self.obs_chars = obs_chars  # how long what came back is, normalized
        self.failure = failure  # a failure came back: its key, numbers aside (0: it did not fail)
        self.added = added  # sizes: tokens the next context grew by besides the previous reply (-1: unknown)
        self.out_tokens = out_tokens  # sizes: the reply's tokens
        self.wait_ns = wait_ns  # how long the agent waited, idle, before the model call that took this step
        self.request = 0  # sizes: a reply's request fingerprint (content capture off: model, context size, parameters)
        self.pending = False  # what came back says the work is still in progress (a status of running, queued...)
        self.nothing = False  # what came back is "nothing": empty, no results, not found
        self.ack = False  # what came back only acknowledges what was done ("File created", True)
        self.fresh = False  # (set by the memory) this step brought a new outcome: it made progress

    @property
    def outcome_known(self) -> bool:
        """Content tells what came back (a result, a reply, or a failure)."""
        return bool(self.obs or self.failure) if self.kind != STEP_REPLY else bool(self.act)

    @property
    def substantive(self) -> bool:
        """What came back is an outcome of substance: a result of the tool's own (not a failure, "nothing", an
        acknowledgement or a status in progress), a reply; or, content capture off, not known (sizes)."""
        return not (self.failure or self.nothing or self.ack or self.pending)

    @property
    def known(self) -> bool:
        """Content tells what the step did or what came back (else only its sizes are known)."""
        return bool(self.act or self.obs or self.failure)

    def to_list(self) -> list[Any]:
        return [self.kind, list(self.names), self.act, self.act_sim, self.obs, self.obs_sim, self.obs_chars,
                self.failure, self.added, self.out_tokens, self.wait_ns, self.request, self.pending, self.nothing,
                self.ack, self.fresh]

    def copy(self) -> ProgressStep:
        """The same step, not yet judged: for another scope's memory (each memory marks its own steps ``fresh``)."""
        step = ProgressStep(self.kind, self.names, self.act, self.act_sim, self.obs, self.obs_sim, self.obs_chars,
                            self.failure, self.added, self.out_tokens, self.wait_ns)
        step.request, step.pending, step.nothing, step.ack = self.request, self.pending, self.nothing, self.ack
        return step

    @classmethod
    def from_list(cls, data: list[Any]) -> ProgressStep:
        step = cls(int(data[0]), tuple(str(x) for x in data[1]), int(data[2]), int(data[3]), int(data[4]),
                   int(data[5]), int(data[6]), int(data[7]), int(data[8]), int(data[9]), int(data[10]))
        step.request = int(data[11])
        step.pending = bool(data[12])
        if len(data) > 13:  # (a state saved before these three were kept reads them as False)
            step.nothing, step.ack, step.fresh = bool(data[13]), bool(data[14]), bool(data[15])
        return step


def _failure(call: Call) -> int:
    """The key of a failure that came back, numbers aside; 0 when it did not fail."""
    if call.is_error:
        return call.error_fp or 1
    if call.observation_failed and not call.observation_ack:  # an acknowledgement's snippet may say "error"
        return call.observation_shape_fp or 1
    return 0


def _outcome(step: ProgressStep, call: Call) -> ProgressStep:
    """What else ``call`` (its result, or its new input) says came back."""
    return with_outcome(step, call.observation_empty, call.observation_ack, call.observation_pending)


def with_outcome(step: ProgressStep, nothing: bool, ack: bool, pending: bool) -> ProgressStep:
    """What else came back, unless it failed: "nothing", an acknowledgement of what was done, a status in progress."""
    if not step.failure:
        step.nothing = nothing
        step.ack = ack and not nothing
        step.pending = pending
    return step


def has_outcome(tool: Call) -> bool:
    """Whether an ``execute_tool`` span tells what came back (its result, or a failure): its step is made as it
    arrives. A span that does not (content capture off; an instrumentation that records the arguments only) is
    completed by the next model call's new input (:func:`answered_tool_step`)."""
    return bool(tool.observation_fp or tool.is_error or tool.observation_shape_fp)


def tool_step(tool: Call, wait_ns: int = 0) -> ProgressStep:
    """An ``execute_tool`` span that tells what came back (:func:`has_outcome`); ``wait_ns``: how long the agent waited
    before the model call that asked for it."""
    step = ProgressStep(STEP_TOOL, (tool.tool_name,), tool.args_fp, tool.args_simhash,
                        0 if tool.is_error else tool.observation_fp, 0 if tool.is_error else tool.observation_simhash,
                        tool.observation_chars, _failure(tool), -1, 0, wait_ns)
    return _outcome(step, tool)


def answered_tool_step(tools: list[Call], previous: Call | None, call: Call) -> ProgressStep:
    """Tools whose spans did not tell what came back (``tools``), or, without tool spans, the tools ``previous`` asked
    for: what they did is their spans' arguments, else what ``previous`` asked for; what came back is ``call``'s new
    input (the tool results in its last message). With content capture off, only their names and their sizes are
    known."""
    if tools:
        ordered = sorted(tools, key=lambda t: t.tool_name)
        names = tuple([t.tool_name for t in ordered])
        fps = [t.args_fp for t in ordered]
        sims = [t.args_simhash for t in ordered]
    elif previous is not None:
        order = sorted(range(len(previous.out_tool_names)), key=lambda i: previous.out_tool_names[i])
        names = tuple([previous.out_tool_names[i] for i in order])
        known = len(previous.out_tool_fps) == len(order)
        sims = [previous.out_tool_arg_simhashes[i] if len(previous.out_tool_arg_simhashes) == len(order) else 0
                for i in order]
        # (a call asked for by name only, its arguments not captured, is not a known action: no SimHash of them)
        fps = [previous.out_tool_fps[i] if known and sims[k] else 0 for k, i in enumerate(order)]
    else:
        names, fps, sims = _NO_NAMES, [], []
    if len(fps) == 1:
        act, act_sim = fps[0], sims[0]
    else:
        act, act_sim = (mix_fingerprints(fps) if fps else 0), 0  # (no tool known at all: no action known)
    if not act and previous is not None and len(previous.out_tool_fps) == len(names) == 1 \
            and previous.out_tool_arg_simhashes and previous.out_tool_arg_simhashes[0]:
        act, act_sim = previous.out_tool_fps[0], previous.out_tool_arg_simhashes[0]  # spans without args
    step = ProgressStep(STEP_TOOL, names, act, act_sim, call.observation_fp, call.observation_simhash,
                        call.observation_chars, _failure(call), _added(call, previous), max(0, call.output_tokens))
    return _outcome(step, call)


def reply_step(call: Call, previous: Call | None) -> ProgressStep:
    """A model call that asked for no tool: its reply (normalized text), to its new input."""
    reply = call.output_fp
    if not reply and call.has_content and not call.output_simhash and call.output_tokens <= 1:
        reply = EMPTY_REPLY  # content captured, nothing said
    step = ProgressStep(STEP_REPLY, _NO_NAMES, reply, call.output_norm_simhash, call.observation_fp,
                        call.observation_simhash, call.observation_chars, 0, _added(call, previous),
                        max(0, call.output_tokens))
    step.request = call.request_fp
    return step


def failed_call_step(call: Call) -> ProgressStep:
    """The model call failed: the request, and the error (known with content capture off too)."""
    return ProgressStep(STEP_FAILED_CALL, _NO_NAMES, call.request_fp, 0, 0, 0, 0, call.error_fp or 1)


def _added(call: Call, previous: Call | None) -> int:
    """What came back into ``call``'s context besides the previous reply (tool results, messages), in tokens; -1 when
    unknown (the first call, or a context that did not grow: a new conversation)."""
    if previous is None or call.input_tokens <= previous.input_tokens:
        return -1
    return call.input_tokens - previous.input_tokens - previous.output_tokens
