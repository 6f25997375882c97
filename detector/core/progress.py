"""Progress evidence: what each call brings that its scope has not seen yet. A loop is repetition without it.

No I/O. Every LLM call is one **step** of its scope (a trace, a session): what the agent did since its previous
call and what came back, or, for a call without tools, what it was told and what it answered:

- ``tools``: the tools that ran before the call (its ``execute_tool`` spans), or, without tool spans, the tools the
  previous call of the trace asked for (captured content). The *action* is the tool names with their arguments
  (normalized, exact; and a SimHash of them with every number dropped: the same action at another offset or page);
  the *observation* is what came back: each tool's result (normalized, exact and SimHash), or its error (type and
  normalized status message: known even with content capture off), or, without tool spans, the call's new input
  (the tool results in its last input message).
- ``text``: no tools: the observation is the call's new input (a user message), the action its own reply.
- ``failed``: the model call itself failed: the request and the error.

A step is compared with the scope's previous ``WINDOW`` steps (so cycles of length 1 to ``WINDOW`` are found, not
only back-to-back repeats) and gets an **evidence level**: ``EXACT`` (the same action with the same normalized
result, the same normalized error, the same reply to nothing new), ``FUZZY`` (a reworded or shifted action whose
observation does not change, or a near-identical reply), ``SIZES`` (content capture off: the same tools bringing
back the same amount, answered with the same number of tokens, to the token), ``STRUCTURE`` (the same shape only:
the same tool names, similar token counts), or ``NONE``. A repeated action whose observation changed is
**progress** (a poll that moves, pages that differ, a retry that succeeds), and so is a reply to a new input of
substance. Repeats with a real wait between them are **polling** (the agent or the tool waits for the world): a
successful back-to-back repeat after a wait of ``poll_wait_ns`` that is also twice the model's own time, repeats
whose waits grow by ``BACKOFF_RATIO`` (backoff), and a failed call retried once after a wait (then only while the
waits grow); a run restarted in a new trace is judged by what it brings back, not by how long it waited.

:class:`Progress` keeps a scope's window and streak, and raises the early warning (:meth:`Progress.warning`): on
exact evidence at the first repeat within a run (A,A; A,B,A), on fuzzy evidence at the second wasted call in a row,
on sizes alone at the third in a row, on a repeat of another run (a restart) once the whole of it has repeated;
structure alone never. Everything it keeps is plain data (:meth:`Progress.to_json`), so a restart resumes exactly.
``docs/signals.md`` ("Progress") gives the rules and why.
"""

from __future__ import annotations

from typing import Any, Final

from detector.core.models import Call, Turn
from detector.core.similarity import TOKENS_SAME_ABS, popcount32, token_closeness
from detector.settings.vocabulary import EVIDENCE

__all__ = [
    "EVIDENCE_NAMES", "EXACT", "FUZZY", "NONE", "NUDGE_CHARS", "Outcome", "POLL_WAIT_NS", "Progress", "SIZES",
    "STRUCTURE", "STEP_FAILED", "STEP_TEXT", "STEP_TOOLS", "SUBSTANCE_CHARS", "Step", "WINDOW", "make_step",
    "match",
]

# Evidence levels, weakest first (their names are the vocabulary's EVIDENCE_* words, in this order).
NONE: Final = 0
STRUCTURE: Final = 1
SIZES: Final = 2
FUZZY: Final = 3
EXACT: Final = 4
EVIDENCE_NAMES: Final[tuple[str, ...]] = EVIDENCE[:5]  # none, structure, sizes, fuzzy, exact (rate apart)

STEP_TOOLS: Final = 0
STEP_TEXT: Final = 1
STEP_FAILED: Final = 2

WINDOW: Final = 5  # steps compared: cycles of length 1..5
# SimHashes (32 significant bits; unrelated texts differ in ~16) at most this many bits apart are the same content:
# an observation or arguments (word shingles; character n-grams without numbers) within FUZZY_BITS, a reply
# (character n-grams: a restated paraphrase differs in 5-7 bits, another text on the same topic in 9 or more) within
# REPLY_BITS.
FUZZY_BITS: Final = 3
REPLY_BITS: Final = 6
# A reply repeated after a new input of fewer characters than this ("go on", "continue", "try again") repeats
# itself: a nudge of a few words brings no new information.
NUDGE_CHARS: Final = 64
# An observation of at least this many characters (normalized) is substance: brought back again by a different
# action (a reworded query re-retrieving the same documents) it is nothing new. A shorter one is an
# acknowledgement ("File written."): the same ack after a different write is progress out, not in.
SUBSTANCE_CHARS: Final = 200
# A real wait between repeats: at least POLL_WAIT_NS (the default of loop_detection.progress.poll_wait_seconds) and
# POLL_THINK_RATIO x the time the model spent on those calls: the agent or the tool waited for the world, rather than
# the agent thinking and acting at once (a stub model answers in milliseconds, a real one in seconds).
POLL_WAIT_NS: Final = 1_000_000_000
POLL_THINK_RATIO: Final = 2.0
BACKOFF_RATIO: Final = 1.3  # waits growing by at least this factor are a backoff
SIZES_SLACK: Final = 0  # "the same amount back, to the token"

_MASK64: Final = 0xFFFF_FFFF_FFFF_FFFF
_NO_INTS: Final[tuple[int, ...]] = ()
_NO_NAMES: Final[tuple[str, ...]] = ()
_TOOL_FINISHES: Final = frozenset({"tool_calls", "tool_call", "function_call", "tool_use"})
_CUT_FINISHES: Final = frozenset({"length", "max_tokens"})
# The reply of a call that answered nothing (content captured: no text, no tool call, no tokens): two empty
# replies are the same reply.
EMPTY_REPLY: Final = 0xE3E7_7E3E_0000_0001

# What a comparison of two values found (action or observation).
_UNKNOWN: Final = 0
_DIFFERENT: Final = 1
_SIMILAR: Final = 2
_SAME: Final = 3


def _mix1(value: int) -> int:
    """:func:`_mix` of one value (without the list)."""
    if not value:
        return 0
    return (((0x9E37_79B9_7F4A_7C15 ^ value) * 0x100_0000_01B3) & _MASK64) or 1


def _mix2(a: int, b: int) -> int:
    """:func:`_mix` of two values (without the list)."""
    if not a or not b:
        return 0
    acc = ((0x9E37_79B9_7F4A_7C15 ^ a) * 0x100_0000_01B3) & _MASK64
    return (((acc ^ b) * 0x100_0000_01B3) & _MASK64) or 1


def _mix(values: list[int]) -> int:
    """A stable 64-bit combination of fingerprints (order matters: callers sort); 0 when any is unknown (0)."""
    acc = 0x9E37_79B9_7F4A_7C15
    for v in values:
        if not v:
            return 0
        acc = ((acc ^ v) * 0x100_0000_01B3) & _MASK64
    return acc or 1


class Step:
    """One call of a scope as progress reads it (see the module docstring). Built once per call, shared by its
    scopes; ``level``, ``period``, ``waited`` and ``polling`` are what the scope found (each scope its own copy of
    those: :meth:`Progress.observe` writes them on a copy only when the two scopes disagree)."""

    __slots__ = ("kind", "names", "act", "act_sims", "obs", "obs_sims", "obs_chars", "negative", "errors", "ok",
                 "known", "added", "out_tokens", "wait_ns", "think_ns", "run", "level", "period", "waited", "polling",
                 "cross", "request", "cut", "idle_ns", "stored")

    def __init__(self, kind: int, names: tuple[str, ...], act: int, act_sims: tuple[int, ...], obs: int,
                 obs_sims: tuple[int, ...], obs_chars: int, negative: bool, errors: int, ok: bool, known: bool,
                 added: int, out_tokens: int, wait_ns: int, think_ns: int, run: str = "", level: int = NONE,
                 period: int = 0, waited: int = 0, polling: bool = False, cross: bool = False) -> None:
        self.kind = kind
        self.names = names  # the tools' names, sorted (tools); () otherwise
        self.act = act  # exact action: tools' normalized arguments (0: unknown); text: the reply; failed: request
        self.act_sims = act_sims  # fuzzy action: per tool, its arguments' SimHash (0: unknown); text: the reply's
        self.obs = obs  # exact observation: results and errors (0: unknown); text: the new input; failed: the error
        self.obs_sims = obs_sims
        self.obs_chars = obs_chars  # the observation's normalized length
        self.negative = negative  # the observation is "nothing": every tool failed or came back empty
        self.errors = errors  # the failures' error fingerprints (0: nothing failed)
        self.ok = ok  # nothing failed
        self.known = known  # content of this step was captured (else only sizes and structure are known)
        self.added = added  # tokens the call's context grew by besides the previous reply (-1: unknown)
        self.out_tokens = out_tokens
        self.wait_ns = wait_ns  # from the end of the trace's previous call to this one: tools and idle time
        self.think_ns = think_ns  # how long the trace's previous call took (the model thinking)
        self.run = run  # which trace (agent run) it belongs to
        self.level = level
        self.period = period  # how many steps back the repeated step was (0: none)
        self.waited = waited  # the waits since that step, this one's included
        self.polling = polling
        self.cross = cross  # the repeated step was in another run (a restart of the run, in a new trace)
        self.request = 0  # the call's request fingerprint (without content: model, input tokens, parameters)
        self.cut = False  # the reply was cut at the token limit (a long answer continued over several calls)
        self.idle_ns = 0  # of wait_ns, the time after the tools had finished (the agent idle, or sleeping)
        self.stored = False  # in a scope's window already (another scope then records on a copy)

    def copy(self) -> Step:
        step = Step(self.kind, self.names, self.act, self.act_sims, self.obs, self.obs_sims, self.obs_chars,
                    self.negative, self.errors, self.ok, self.known, self.added, self.out_tokens, self.wait_ns,
                    self.think_ns, self.run, self.level, self.period, self.waited, self.polling, self.cross)
        step.request, step.cut, step.idle_ns = self.request, self.cut, self.idle_ns
        return step

    def to_list(self) -> list[Any]:
        return [self.kind, list(self.names), self.act, list(self.act_sims), self.obs, list(self.obs_sims),
                self.obs_chars, self.negative, self.errors, self.ok, self.known, self.added, self.out_tokens,
                self.wait_ns, self.think_ns, self.run, self.level, self.period, self.waited, self.polling, self.cross,
                self.request, self.cut, self.idle_ns]

    @classmethod
    def from_list(cls, data: list[Any]) -> Step:
        step = cls(int(data[0]), tuple(str(x) for x in data[1]), int(data[2]), tuple(int(x) for x in data[3]),
                   int(data[4]), tuple(int(x) for x in data[5]), int(data[6]), bool(data[7]), int(data[8]),
                   bool(data[9]), bool(data[10]), int(data[11]), int(data[12]), int(data[13]), int(data[14]),
                   str(data[15]), int(data[16]), int(data[17]), int(data[18]), bool(data[19]), bool(data[20]))
        step.request, step.cut, step.idle_ns = int(data[21]), bool(data[22]), int(data[23])
        return step


def make_step(turn: Turn, previous: Call | None) -> Step:
    """The step of ``turn``; ``previous``: the previous LLM call of the same trace (None for a trace's first)."""
    call = turn.call
    step = _step(turn, previous)
    step.run = call.trace_id
    step.request = call.request_fp
    step.cut = not _CUT_FINISHES.isdisjoint(call.finish_reasons)
    step.idle_ns = step.wait_ns
    if turn.tools and step.wait_ns:
        tools_end = max(t.end_ns for t in turn.tools)
        if tools_end > 0:
            step.idle_ns = max(0, min(step.wait_ns, call.ts_ns - tools_end))
    if not step.known and call.has_content and (call.input_simhash or call.output_simhash):
        step.known = True  # the signals compare its content (a record without the progress fingerprints)
    return step


def _step(turn: Turn, previous: Call | None) -> Step:
    call = turn.call
    out_tokens = max(0, call.output_tokens)
    if previous is None:
        added, wait_ns, think_ns = -1, 0, 0
    else:
        think_ns = max(0, previous.end_ns - previous.ts_ns)
        added = call.input_tokens - previous.input_tokens - previous.output_tokens
        if call.input_tokens <= previous.input_tokens:
            added = -1  # a new conversation in the same trace (a stateless request): nothing to compare
        # unknown when the previous call's duration is (a record without it): never polling then
        wait_ns = max(0, call.ts_ns - previous.end_ns) if previous.end_ns > previous.ts_ns else 0
    if call.is_error:
        return Step(STEP_FAILED, _NO_NAMES, call.request_fp, _NO_INTS, call.error_fp, _NO_INTS, 0, True,
                    call.error_fp or 1, False, bool(call.request_fp and call.has_content), added, out_tokens, wait_ns,
                    think_ns)
    tools = turn.tools
    if len(tools) == 1:  # the usual tool step: one tool (no sorting, no lists)
        t = tools[0]
        failed = t.is_error
        return Step(STEP_TOOLS, (t.tool_name,), _mix1(t.args_fp or t.tool_fp), (t.args_simhash,),
                    _mix1(t.error_fp if failed else t.observation_fp), (0 if failed else t.observation_simhash,),
                    t.observation_chars, failed or t.observation_empty, _mix1(t.error_fp or 1) if failed else 0,
                    not failed, bool(t.observation_fp or t.args_fp), added, out_tokens, wait_ns, think_ns)
    if tools:
        ordered = sorted(tools, key=_tool_order)
        names = tuple([t.tool_name for t in ordered])
        # the normalized arguments; without them (capture off, or a record that predates them) the tool fingerprint
        # (its name and raw argument values, or its name alone)
        acts = [t.args_fp or t.tool_fp for t in ordered]
        obs = [t.error_fp if t.is_error else t.observation_fp for t in ordered]
        errors = sorted([t.error_fp or 1 for t in ordered if t.is_error])
        negative = True
        chars = 0
        known = False
        for t in ordered:
            chars += t.observation_chars
            known = known or bool(t.observation_fp or t.args_fp)
            if not (t.is_error or t.observation_empty):
                negative = False
        return Step(STEP_TOOLS, names, _mix(acts), tuple([t.args_simhash for t in ordered]), _mix(obs),
                    tuple([0 if t.is_error else t.observation_simhash for t in ordered]), chars, negative,
                    _mix(errors) if errors else 0, not errors, known, added, out_tokens, wait_ns, think_ns)
    if previous is not None and len(previous.out_tool_names) == 1:
        # no tool spans: the tool the previous call asked for, and its result in this call's new input
        sims = previous.out_tool_arg_simhashes
        return Step(STEP_TOOLS, previous.out_tool_names, _mix1(previous.out_tool_fps[0] if previous.out_tool_fps else 0),
                    (sims[0] if sims else 0,), call.observation_fp,
                    (call.observation_simhash,) if call.observation_fp else _NO_INTS, call.observation_chars,
                    call.observation_empty, 0, True, bool(call.observation_fp), added, out_tokens, wait_ns, think_ns)
    if previous is not None and previous.out_tool_names:
        # no tool spans: the tools the previous call asked for, and their results in this call's new input
        pairs = sorted(zip(previous.out_tool_names, previous.out_tool_fps, _padded(previous.out_tool_arg_simhashes,
                                                                                   len(previous.out_tool_names)),
                           strict=False))
        names = tuple([p[0] for p in pairs])
        return Step(STEP_TOOLS, names, _mix([p[1] for p in pairs]), tuple([p[2] for p in pairs]), call.observation_fp,
                    (call.observation_simhash,) if call.observation_fp else _NO_INTS, call.observation_chars,
                    call.observation_empty, 0, True, bool(call.observation_fp), added, out_tokens, wait_ns, think_ns)
    if previous is not None and not call.has_content and _asked_for_tools(previous):
        # no tool spans and no content (openai-v2's default): tools ran, which ones is unknown
        return Step(STEP_TOOLS, _NO_NAMES, 0, _NO_INTS, 0, _NO_INTS, 0, False, 0, True, False, added, out_tokens,
                    wait_ns, think_ns)
    out_tools = call.out_tool_fps
    if not out_tools:
        reply = _mix1(call.output_fp)
    elif len(out_tools) == 1:
        reply = _mix2(call.output_fp or 1, out_tools[0])
    else:
        reply = _mix([call.output_fp or 1] + sorted(out_tools))
    told, told_chars = call.observation_fp, call.observation_chars
    if not told and call.has_content and call.request_fp:
        # the new input is not known apart (an empty last message), the whole input is: the same request again
        told, told_chars = call.request_fp, NUDGE_CHARS
    if not reply and told and call.output_tokens <= TOKENS_SAME_ABS:
        reply = EMPTY_REPLY  # content was captured and the reply was empty
    return Step(STEP_TEXT, _NO_NAMES, reply, (call.output_norm_simhash,) if call.output_norm_simhash else _NO_INTS,
                told, (call.observation_simhash,) if call.observation_fp else _NO_INTS, told_chars,
                call.observation_empty, 0, True, bool(reply or told), added, out_tokens, wait_ns, think_ns)


def _tool_order(t: Call) -> tuple[str, int]:
    return t.tool_name, t.args_fp


def _padded(values: tuple[int, ...], n: int) -> tuple[int, ...]:
    return values if len(values) >= n else values + (0,) * (n - len(values))


def _asked_for_tools(call: Call) -> bool:
    return not _TOOL_FINISHES.isdisjoint(call.finish_reasons)


def _sims(a: tuple[int, ...], b: tuple[int, ...], bits: int) -> int:
    """Per-element SimHash comparison of two tuples (``_UNKNOWN`` when either lacks one)."""
    if not a or len(a) != len(b):
        return _UNKNOWN
    for i in range(len(a)):
        x, y = a[i] & 0xFFFF_FFFF, b[i] & 0xFFFF_FFFF
        if not x or not y:
            return _UNKNOWN
        if popcount32(x ^ y) > bits:
            return _DIFFERENT
    return _SIMILAR


def _compare(a_fp: int, b_fp: int, a_sims: tuple[int, ...], b_sims: tuple[int, ...], bits: int = FUZZY_BITS) -> int:
    if a_fp and b_fp:
        if a_fp == b_fp:
            return _SAME
        return _SIMILAR if _sims(a_sims, b_sims, bits) == _SIMILAR else _DIFFERENT
    found = _sims(a_sims, b_sims, bits)
    return _DIFFERENT if found == _DIFFERENT else _UNKNOWN


def _sized(a: Step, b: Step) -> int:
    """Content capture off: the same amount back and the same number of tokens out, to the token (``SIZES``), or
    only similar (``STRUCTURE``), or clearly not the same step (``NONE``)."""
    out_close = token_closeness(a.out_tokens, b.out_tokens)
    if out_close == 0.0:
        return NONE
    same_out = abs(a.out_tokens - b.out_tokens) <= TOKENS_SAME_ABS
    if a.added >= 0 and b.added >= 0:
        # a tool always brings something back; a text call may bring nothing (a model talking to itself), unless
        # it is a long answer continued past the token limit
        grew = a.added > 0 or (a.kind == STEP_TEXT and not a.cut and not b.cut)
        if grew and abs(a.added - b.added) <= SIZES_SLACK and same_out:
            return SIZES
        if token_closeness(a.added, b.added) == 0.0:
            return NONE
    elif a.added < 0 and b.added < 0 and a.request and a.request == b.request and same_out:
        return SIZES  # the context did not grow (the same request sent again): the same request, the same reply size
    return STRUCTURE


def match(a: Step, b: Step) -> int:
    """How strongly step ``a`` repeats the earlier step ``b`` without progress: an evidence level (``NONE``: it does
    not, or it made progress)."""
    if a.kind != b.kind:
        return NONE
    if a.kind == STEP_FAILED:
        return EXACT if a.obs and a.obs == b.obs else NONE
    if a.kind == STEP_TEXT:
        return _match_text(a, b)
    if a.names != b.names:
        return NONE
    if a.ok != b.ok:
        return NONE  # a failure then a success (or the reverse): the outcome changed
    if not a.names:
        return _sized(a, b)  # tools ran, which ones is unknown: sizes are all there is
    if a.errors and a.errors == b.errors:
        return EXACT  # the same tools failing with the same normalized error
    action = _compare(a.act, b.act, a.act_sims, b.act_sims)
    seen = _compare(a.obs, b.obs, a.obs_sims, b.obs_sims)
    if action == _SAME:
        if seen == _SAME:
            return EXACT
        return _sized(a, b) if seen == _UNKNOWN else NONE  # the same call, another result: the world moved
    if action == _SIMILAR:
        if seen >= _SIMILAR:
            return FUZZY
        return _sized(a, b) if seen == _UNKNOWN else NONE
    if action == _DIFFERENT:
        # another action bringing back what was already seen: nothing (no results, an error), or substance
        # re-retrieved; the same short acknowledgement after another write is progress out
        if seen >= _SIMILAR and (a.negative or a.obs_chars >= SUBSTANCE_CHARS):
            return FUZZY
        return NONE
    if seen == _SAME:
        return FUZZY  # arguments unknown, the same result
    return _sized(a, b) if seen == _UNKNOWN else NONE


def _progressed(a: Step, b: Step) -> bool:
    """Whether ``a`` repeats the action of ``b`` (exactly, or reworded) and brought back something known to be new: a
    poll that moved, the next page, a retry that succeeded. (Sizes that differ, content capture off, prove nothing.)"""
    if a.kind != STEP_TOOLS or b.kind != STEP_TOOLS or not a.names or a.names != b.names:
        return False
    if a.ok != b.ok:
        return True
    if not (a.obs and b.obs) or a.obs == b.obs:
        return False
    return _compare(a.act, b.act, a.act_sims, b.act_sims) >= _SIMILAR \
        and _compare(a.obs, b.obs, a.obs_sims, b.obs_sims) == _DIFFERENT


def _match_text(a: Step, b: Step) -> int:
    reply = _compare(a.act, b.act, a.act_sims, b.act_sims, REPLY_BITS)
    if reply == _DIFFERENT:
        return NONE
    if reply == _UNKNOWN:
        return _sized(a, b)
    told = _compare(a.obs, b.obs, a.obs_sims, b.obs_sims)
    if told == _DIFFERENT and a.obs_chars >= NUDGE_CHARS:
        return NONE  # the same reply to a new input of substance (one template over many documents)
    level = EXACT if reply == _SAME else FUZZY
    return level if told != _UNKNOWN else FUZZY


class Outcome:
    """What one call was, in one scope: its evidence level, and whether it was polling or progress."""

    __slots__ = ("level", "period", "polling", "progress", "confirmed")

    def __init__(self, level: int, period: int, polling: bool, progress: bool, confirmed: bool) -> None:
        self.level = level
        self.period = period
        self.polling = polling
        self.progress = progress  # it repeated an earlier action, and something changed
        # a repeat within its run, or of a whole earlier run (a restart that has repeated all of it): what the
        # score's floors and the warning count (a restarted run's first steps alone may yet go another way)
        self.confirmed = confirmed


class Progress:
    """A scope's progress window: its last ``WINDOW`` steps, the current run of wasted steps, the early warning."""

    __slots__ = ("steps", "streak", "strong", "top", "flag", "exacts", "sized", "mirror")

    def __init__(self, steps: list[Step] | None = None, streak: int = 0, strong: int = 0, top: int = NONE,
                 flag: int = NONE, exacts: int = 0, sized: int = 0) -> None:
        self.steps: list[Step] = [] if steps is None else steps
        self.streak = streak  # consecutive wasted steps (any evidence, structure included)
        self.strong = strong  # of which with exact or fuzzy evidence
        self.top = top  # the strongest evidence in the streak
        self.flag = flag  # the early warning's evidence (NONE: no warning)
        self.exacts = exacts  # wasted steps in the streak with exact evidence
        self.sized = sized  # with sizes evidence or better
        self.mirror: Progress | None = None  # the session whose steps this trace's window holds (not persisted)

    def observe(self, step: Step, poll_wait_ns: int) -> Outcome:
        """Compare a new step with the window, record it, update the streak and the warning."""
        steps = self.steps
        n = len(steps)
        best, period = NONE, 0
        repeated = False
        age = n
        for earlier in steps:  # oldest first (a plain list walk, compiled); the newest of the strongest wins
            level = match(step, earlier)
            if level >= best and level > NONE:
                best, period = level, age
            elif level == NONE and not repeated and _progressed(step, earlier):
                repeated = True  # the same action again, and something new came back: progress
            age -= 1
        polling = False
        waited = 0
        if best >= SIZES:  # the same call and result (or amount): a poll, when waited for (structure proves nothing)
            # the waits since the repeated step: a successful call's tools and idle time (a blocking poll waits in
            # its tool); a failed call's retry, only the time the agent waited, not the time the failing attempt took;
            # and the steps in between, whole (a `wait` tool's backoff), or their idle time only when they repeated
            # earlier ones exactly (a restarted run going through the same steps again is not waiting)
            waited = step.wait_ns if step.ok else step.idle_ns
            thought = step.think_ns
            for i in range(n - period + 1, n):
                between = steps[i]
                waited += between.idle_ns if between.level == EXACT else between.wait_ns
                thought += between.think_ns
            earlier = steps[n - period]
            real_wait = waited >= poll_wait_ns and waited >= POLL_THINK_RATIO * thought
            grew = earlier.period == period and earlier.waited > 0 and waited >= BACKOFF_RATIO * earlier.waited
            if step.kind == STEP_TEXT:
                polling = False  # a new message after a pause: a person's time, not a poll
            elif step.ok:
                polling = real_wait and (period == 1 or grew)
            elif steps[n - period].run == step.run:
                # a retry after a real wait (a backoff): the first one, and then while the waits grow (a run restarted
                # in a new trace is judged by what it brings, not by how long it waited)
                first_retry = not (earlier.period == period and earlier.waited >= poll_wait_ns)
                polling = waited >= poll_wait_ns and (first_retry or grew)
        level = NONE if polling else best
        cross = best > NONE and steps[n - period].run != step.run
        if step.stored and (step.level != level or step.period != period or step.waited != waited
                            or step.polling != polling or step.cross != cross):
            step = step.copy()  # the other scope found something else: each keeps its own record
        step.level = level
        step.period = period
        step.waited = waited
        step.polling = polling
        step.cross = cross
        step.stored = True
        steps.append(step)
        if len(steps) > WINDOW:
            del steps[0]
        if level == NONE:
            self.streak = self.strong = self.exacts = self.sized = 0
            self.top = self.flag = NONE
            return Outcome(NONE, period, polling, repeated or polling, False)
        self.streak += 1
        if level >= FUZZY:
            self.strong += 1
        if level == EXACT:
            self.exacts += 1
        if level > self.top:
            self.top = level
        self.sized = self.sized + 1 if level >= SIZES else 0  # sizes count in an unbroken run
        # the early warning: exact evidence at the first repeat within a run (A,A; A,B,A), fuzzy evidence on the
        # second wasted call in a row, sizes alone (content off) on three in a row; a repeat of another run's
        # steps (a run restarted in a new trace) once the whole of it has repeated: a restarted run may well go
        # another way after its first steps (a transient failure that is gone)
        warn = NONE
        cycle = self.streak >= period
        if level == EXACT and (cycle or not step.cross):
            warn = EXACT
        elif level >= FUZZY and self.streak >= 2 and (cycle or not step.cross):
            warn = FUZZY
        elif level >= SIZES and self.sized >= 3 and self.sized >= period:
            warn = SIZES
        if warn > self.flag:
            self.flag = warn
        # what a blocking detector may count: the streak's calls with fuzzy or exact evidence, or, once a whole cycle
        # has repeated and a call of it had such evidence (a restarted run failing with the same normalized error,
        # its other steps known only by their sizes), the whole streak
        if cycle and period >= 2:
            anchored = 0
            for i in range(len(steps) - min(period, len(steps)), len(steps)):
                if steps[i].level > anchored:
                    anchored = steps[i].level
            if anchored >= FUZZY and self.streak > self.strong:
                self.strong = self.streak
                if anchored == EXACT:
                    self.exacts = self.streak
        return Outcome(level, period, False, False, cycle or not step.cross)

    def follow(self, other: Progress, step: Step, outcome: Outcome) -> bool:
        """When this window holds the very steps of ``other`` (a trace that is its session's only one), take the
        step ``other`` just observed, with its outcome, rather than compare it again; False when they differ."""
        mine, theirs = self.steps, other.steps
        n = len(theirs)
        if len(mine) + 1 != n and not (len(mine) == WINDOW and n == WINDOW):
            self.mirror = None
            return False
        if not n or theirs[n - 1] is not step:
            self.mirror = None
            return False
        if self.mirror is not other or (n >= 2 and theirs[n - 2] is not mine[len(mine) - 1]):
            # not known to mirror it (or it took another trace's step since): compare the windows whole
            offset = len(mine) - n + 1  # 1 when the window is full (its oldest step goes), else 0
            for i in range(n - 1):
                if mine[i + offset] is not theirs[i]:
                    self.mirror = None
                    return False
            if outcome.level > NONE and self.streak != other.streak - 1:
                self.mirror = None
                return False
            self.mirror = other
        mine.append(step)
        if len(mine) > WINDOW:
            del mine[0]
        self.streak, self.strong, self.top = other.streak, other.strong, other.top
        self.flag, self.exacts, self.sized = other.flag, other.exacts, other.sized
        return True

    def warning(self) -> int:
        """The early warning's evidence: ``NONE`` unless the latest calls repeat without progress (see the module
        docstring); it lifts with the first call that makes progress."""
        return self.flag

    def to_json(self) -> dict[str, Any]:
        return {"steps": [s.to_list() for s in self.steps], "streak": self.streak, "strong": self.strong,
                "top": self.top, "flag": self.flag, "exacts": self.exacts, "sized": self.sized}

    def wasted(self, min_level: int) -> int:
        """Wasted calls in the current streak with at least ``min_level`` evidence (``EXACT`` or ``FUZZY``)."""
        return self.exacts if min_level >= EXACT else self.strong

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Progress:
        steps = [Step.from_list(s) for s in data.get("steps", [])]
        for step in steps:
            step.stored = True
        return cls(steps, int(data.get("streak", 0)), int(data.get("strong", 0)), int(data.get("top", 0)),
                   int(data.get("flag", 0)), int(data.get("exacts", 0)), int(data.get("sized", 0)))
