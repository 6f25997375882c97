"""Progress: a loop is a run of steps that bring nothing new. Progress is a new outcome.

No I/O. The model, in a paragraph (``docs/signals.md``, "Progress"):

Each scope (a trace, a session) remembers its last :data:`MEMORY` steps (:mod:`detector.core.steps`: a tool run, a
reply, a failed call). A step is **wasted** when the same action brings back what it brought back before (exactly,
or near-exactly: SimHashes within :data:`NEAR_BITS`), or the same failure comes back whatever the arguments. A
**change** (a new action that only acknowledges what it did) is judged by the check that follows it: when the check
brings back exactly what it did before, the change took no effect, and inside a loop it is wasted too; when anything
moved, it is progress. Steps that bring nothing of their own neither extend nor end a run: a change awaiting its
check, a note, another question answered with nothing, a result saying the work is still in progress, a repeat after
waits that grew, and the fixed overhead of a cycle (a failure, an acknowledgement) whose check brought back something
of substance. A **loop** is a run of :data:`RUN_TO_WARN` wasted steps. Anything else is progress and ends the run.

Every comparison gives an **evidence level**: ``EXACT``, ``FUZZY`` (near-exactly), ``SIZES`` (content capture off:
the same call again, right after itself, bringing back the same substantive amount, asked for at the same length, to
the token; equal sizes across other steps are no evidence), ``STRUCTURE`` (only the same shape: never counted as
wasted) or ``NONE``. Timing is not evidence: nothing here reads a clock, except to see
that the waits grow (backoff).
"""

from __future__ import annotations

from typing import Any, Final

from detector.core.steps import STEP_FAILED_CALL, STEP_REPLY, STEP_TOOL, ProgressStep
from detector.settings.vocabulary import EVIDENCE

__all__ = [
    "BACKOFF_MIN_WAIT_NS", "BACKOFF_RATIO", "EVIDENCE_NAMES", "EXACT", "FUZZY", "MEMORY", "NEAR_BITS", "NONE",
    "NUDGE_CHARS", "ProgressMemory", "REPLY_BITS", "RULES", "RUN_TO_WARN", "SIZES", "SIZES_SUBSTANCE_TOKENS",
    "STRUCTURE", "SUBSTANCE_CHARS", "backing_off", "backoff", "match", "reworded_nothing", "same_call_near_result",
    "same_call_same_result", "same_failure", "same_reply", "same_sizes", "shifted_call_same_content",
]

# Evidence levels, weakest first (their names are the vocabulary's EVIDENCE_* words, in this order).
NONE: Final = 0
STRUCTURE: Final = 1
SIZES: Final = 2
FUZZY: Final = 3
EXACT: Final = 4
EVIDENCE_NAMES: Final[tuple[str, ...]] = EVIDENCE[:5]  # none, structure, sizes, fuzzy, exact (rate apart)

# How many steps a scope remembers: twice the longest cycles the real runs loop through (6-7 steps, some with noise
# between them). Going back further mostly finds honest re-work, such as edits re-applied after a revert
# (docs/detection-quality.md: the ablation of this horizon).
MEMORY: Final = 10
# Wasted steps in a row that make a loop (the reviewers' rubric: "at least three consecutive wasted steps"). One or two
# are an honest re-read or a retry.
RUN_TO_WARN: Final = 3
# SimHashes (32 significant bits; unrelated texts differ in ~16) this close are nearly the same content: what came
# back, changed by a line. A reply within REPLY_BITS is the same reply reworded (a restated paraphrase differs in 5-7
# bits, another text on the same topic in 9 or more). Arguments are near only when they are the same but for their
# numbers (equal SimHashes of the arguments without numbers): another edit is another action, however alike.
NEAR_BITS: Final = 3
REPLY_BITS: Final = 6
# A new input shorter than this ("go on", "try again") is a nudge: the same reply to it repeats itself. A longer one
# is a new question (the same triage for two documents is not a loop).
NUDGE_CHARS: Final = 64
# What came back is content, rather than an acknowledgement, from this many characters (normalized): read again at
# another offset it is a re-read.
SUBSTANCE_CHARS: Final = 64
# Content capture off: two replies (the one that took the step, or the one that followed a tool run) are the same
# length within this many tokens; two tool runs whose arguments are known to be the same brought back the same amount
# when their sizes are equal to the token.
SIZES_REPLY_SLACK: Final = 2
# Content capture off, arguments unknown: a tool's answer shorter than this many tokens is an acknowledgement or
# nothing ("True", "OK", "File written.", "[]", '{"ok": true}'): every item of a procedure gets the same one, so its
# size is no evidence. From this size up (a two-line file), the same amount back, asked for at the same length to the
# token, in the step right after the same one, is the same call again.
SIZES_SUBSTANCE_TOKENS: Final = 8

# Backoff: an agent that waits longer and longer between the same steps (2 s, 4 s, 8 s) is waiting for the world, not
# looping. Its idle waits (between a result and the next model call: never the model's or a tool's own time, nor the
# detector's own throttle delay) grew by this factor twice in a row, from at least BACKOFF_MIN_WAIT_NS: waits of a
# fraction of a second jitter (an SDK waiting for a detection cycle) and prove nothing, and one longer wait is a
# pause, not a backoff. A constant wait (a fixed poll interval) is no evidence either way.
BACKOFF_RATIO: Final = 1.5
BACKOFF_MIN_WAIT_NS: Final = 1_000_000_000

_UNKNOWN: Final = 0
_DIFFERENT: Final = 1
_NEAR: Final = 2
_SAME: Final = 3


def _popcount32(x: int) -> int:
    x &= 0xFFFF_FFFF
    x = x - ((x >> 1) & 0x5555_5555)
    x = (x & 0x3333_3333) + ((x >> 2) & 0x3333_3333)
    return (((x + (x >> 4)) & 0x0F0F_0F0F) * 0x0101_0101 & 0xFFFF_FFFF) >> 24


def _compare(a: int, b: int, a_sim: int, b_sim: int, bits: int) -> int:
    """Two fingerprints (exact, and SimHash): the same, near, different, or unknown (either lacks both)."""
    if a and b and a == b:
        return _SAME
    if a_sim & 0xFFFF_FFFF and b_sim & 0xFFFF_FFFF:
        return _NEAR if _popcount32(a_sim ^ b_sim) <= bits else _DIFFERENT
    if a and b:
        return _DIFFERENT
    return _UNKNOWN


def _sizes(a: ProgressStep, b: ProgressStep) -> int:
    """Content capture off: the same tools bringing back the same amount to the token, answered at the same length; the
    same reply length to the same amount of new input, or to the same request sent again (``SIZES``); else only the
    same shape (``STRUCTURE``)."""
    if a.kind == STEP_REPLY:
        same_reply = abs(a.out_tokens - b.out_tokens) <= SIZES_REPLY_SLACK
        if a.added < 0 and b.added < 0:  # the context did not grow: a request sent again, or a new conversation
            return SIZES if same_reply and a.request and a.request == b.request else STRUCTURE
        return SIZES if same_reply and a.added >= 0 and a.added == b.added else STRUCTURE
    # a tool always brings something back, answered at the same length too (an acknowledgement such as "File written."
    # has the same size after every write: the model's next move tells them apart). Its arguments unknown, only a
    # substantive answer asked for at the same length to the token (a procedure over items asks for each item at a
    # length near the last one's, and a short answer has one size for every item)
    if a.act and a.act == b.act:
        same = a.added > 0 and a.added == b.added and abs(a.out_tokens - b.out_tokens) <= SIZES_REPLY_SLACK
    else:
        same = a.added >= SIZES_SUBSTANCE_TOKENS and a.added == b.added and a.out_tokens == b.out_tokens
    return SIZES if same else STRUCTURE


# -- the rules: each says how strongly step ``a`` repeats the earlier step ``b`` without progress (NONE: it does not);
# ``match`` takes the strongest. One small function per pattern, each beside the honest look-alike it leaves alone
# (tests/core/test_progress.py; docs/detection-quality.md measures what each earns on the real runs).


def same_failure(a: ProgressStep, b: ProgressStep) -> int:
    """The same failure again, whatever the arguments: a prose paragraph sent as a shell command and reworded each time,
    with the same bash error back. From another tool it is near enough. Another failure is something new."""
    if not (a.failure and a.failure == b.failure):
        return NONE
    return EXACT if a.names == b.names else FUZZY


def reworded_nothing(a: ProgressStep, b: ProgressStep) -> int:
    """The same question reworded (arguments within ``NEAR_BITS`` but for their numbers), "nothing" again: a search
    rephrased with the same empty answer. Another question answered with nothing (seven names checked, seven ``[]``)
    asked something new."""
    if not (a.nothing and b.nothing) or a.kind != STEP_TOOL or a.names != b.names or (a.act and a.act == b.act):
        return NONE
    return FUZZY if _compare(a.act, b.act, a.act_sim, b.act_sim, NEAR_BITS) == _NEAR else NONE


def same_call_same_result(a: ProgressStep, b: ProgressStep) -> int:
    """The same tool call bringing back the same: ``read_file("a.py")`` twice. The same call bringing back something
    new is what polling and paging are."""
    if a.kind != STEP_TOOL or a.names != b.names or not (a.act and a.act == b.act):
        return NONE
    return EXACT if a.obs and a.obs == b.obs else NONE


def same_call_near_result(a: ProgressStep, b: ProgressStep) -> int:
    """The same tool call bringing back nearly the same (SimHashes within ``NEAR_BITS``): the same edit re-applied, the
    file one line longer each time."""
    if a.kind != STEP_TOOL or a.names != b.names or not (a.act and a.act == b.act) or a.obs == b.obs:
        return NONE
    return FUZZY if _compare(a.obs, b.obs, a.obs_sim, b.obs_sim, NEAR_BITS) == _NEAR else NONE


def shifted_call_same_content(a: ProgressStep, b: ProgressStep) -> int:
    """The same tool call but for its numbers (the same SimHash of the arguments without numbers) bringing back the
    same content, or nearly: ``read_file(offset=120)`` after ``offset=100`` over lines already read. A short
    acknowledgement of another number ("waited 4s" after "waited 2s") is another request answered; arguments that
    were not captured, with the same result, are as near as can be told."""
    if a.kind != STEP_TOOL or a.names != b.names or (a.act and a.act == b.act) or a.ack or a.nothing:
        return NONE
    action = _compare(a.act, b.act, a.act_sim, b.act_sim, 0)
    outcome = _compare(a.obs, b.obs, a.obs_sim, b.obs_sim, NEAR_BITS)
    if action == _NEAR and outcome >= _NEAR and a.obs_chars >= SUBSTANCE_CHARS:
        return FUZZY
    if action == _UNKNOWN and outcome == _SAME:
        return FUZZY
    return NONE


def same_reply(a: ProgressStep, b: ProgressStep) -> int:
    """The same reply (or reworded: within ``REPLY_BITS``) to the same input, or to a nudge ("go on"): the same plan
    restated. The same reply to a new question of substance is one template over many documents."""
    if a.kind != STEP_REPLY or not a.known:
        return NONE
    reply = _compare(a.act, b.act, a.act_sim, b.act_sim, REPLY_BITS)
    if reply <= _DIFFERENT:
        return NONE
    told = _compare(a.obs, b.obs, a.obs_sim, b.obs_sim, NEAR_BITS)
    if told == _DIFFERENT and a.obs_chars >= NUDGE_CHARS:
        return NONE
    return EXACT if reply == _SAME and told == _SAME else FUZZY


def same_sizes(a: ProgressStep, b: ProgressStep) -> int:
    """What came back is not known (content capture off: the result is not recorded, though the arguments may be):
    the same tools (with the same arguments, when they are known) bringing back the same amount to the token,
    answered at the same length; the same reply length to the same amount of new input, or to the same request sent
    again (``SIZES``). Only the same shape is ``STRUCTURE``, which never counts as wasted."""
    if a.kind == STEP_FAILED_CALL or a.names != b.names:
        return NONE
    if a.outcome_known and b.outcome_known:
        return NONE  # the rules above compared what came back
    if a.act and b.act and a.act != b.act and (a.act_sim == 0 or a.act_sim != b.act_sim):
        return NONE  # another action, the arguments say so
    return _sizes(a, b)


RULES: Final = (same_failure, reworded_nothing, same_call_same_result, same_call_near_result,
                shifted_call_same_content, same_reply, same_sizes)


def match(a: ProgressStep, b: ProgressStep) -> int:
    """How strongly step ``a`` repeats the earlier step ``b`` without progress: the strongest rule's evidence level
    (``NONE``: it does not, or something new came back)."""
    if a.kind != b.kind:
        return NONE
    best = NONE
    for rule in RULES:
        level = rule(a, b)
        if level > best:
            best = level
    return best


def _same_outcome(step: ProgressStep, earlier: ProgressStep | None) -> bool:
    """The same action brought back exactly what it brought back before: a check whose outcome did not move."""
    return (earlier is not None and step.names == earlier.names and bool(step.act) and step.act == earlier.act
            and step.obs == earlier.obs and step.failure == earlier.failure)


def _overhead(step: ProgressStep, steps: list[ProgressStep], prior: int) -> bool:
    """Whether a repeat of the step at ``prior`` is the fixed overhead of a cycle: it brings back no outcome of its own
    (an acknowledgement, "nothing", or the same failure as another action's), and a step since brought back something
    of substance, or something new. The same action failing the same way is the outcome itself (a check that fails)."""
    if step.substantive or (step.failure and prior >= 0 and steps[prior].act == step.act != 0):
        return False
    for i in range(max(prior + 1, 0), len(steps) - 1):
        earlier = steps[i]
        if earlier.fresh or (earlier.substantive and earlier.known):
            return True
    return False


def backoff(first_ns: int, second_ns: int, third_ns: int) -> bool:
    """Whether three waits in a row grew by ``BACKOFF_RATIO`` twice, from at least ``BACKOFF_MIN_WAIT_NS``."""
    return first_ns >= BACKOFF_MIN_WAIT_NS and second_ns >= BACKOFF_RATIO * first_ns and third_ns >= BACKOFF_RATIO * second_ns


def backing_off(steps: list[ProgressStep]) -> bool:
    """Whether the waits before the last three steps grew (:func:`backoff`)."""
    n = len(steps)
    return n >= 3 and backoff(steps[n - 3].wait_ns, steps[n - 2].wait_ns, steps[n - 1].wait_ns)


class ProgressMemory:
    """A scope's memory of its last :data:`MEMORY` steps, and its current run of wasted steps."""

    __slots__ = ("steps", "run", "exact", "strong", "top", "last", "changes")

    def __init__(self, steps: list[ProgressStep] | None = None, run: int = 0, exact: int = 0, strong: int = 0,
                 top: int = NONE, last: int = NONE, changes: int = 0) -> None:
        self.steps: list[ProgressStep] = [] if steps is None else steps
        self.run = run  # consecutive wasted steps (sizes evidence or better)
        self.exact = exact  # of which with exact evidence
        self.strong = strong  # of which with fuzzy evidence or better
        self.top = top  # the strongest evidence in the run
        self.last = last  # the latest step's evidence
        self.changes = changes  # changes made since the last outcome (new actions only acknowledged)

    def observe(self, step: ProgressStep) -> int:
        """Compare a new step with the memory, remember it, and extend, leave or end the run; returns its evidence
        (``NONE`` for a step that made progress or was neutral).

        - A repeat (:func:`match`) is wasted, but: after a change, only a check that brought back exactly what it
          did before is (anything that moved, if only by its numbers, shows the change took effect: progress); and a
          repeat that brings back no outcome of its own after steps that brought back something of substance is the
          fixed overhead of a cycle judged by that substance (:func:`_overhead`): neutral. Inside a loop, a wasted
          check wastes the changes made since it last ran too.
        - A step waiting for the world (it says the work is in progress; the waits grew) is neutral.
        - A new action that only acknowledges what it did is a change, neutral until its check; one that brings back
          "nothing" (a note, another question with no answer) is neutral.
        - Anything else is progress and ends the run."""
        steps = self.steps
        best = NONE
        prior = -1  # the latest step it repeats
        unknown = False  # equal sizes further back: no evidence either way
        for i in range(len(steps) - 1, -1, -1):
            level = match(step, steps[i])
            if level == SIZES and step.kind == STEP_TOOL and not step.act and i < len(steps) - 1:
                level, unknown = STRUCTURE, True  # sizes alone, arguments unknown: only the same call right again
            if level > best:
                best = level
            if prior < 0 and level >= SIZES:
                prior = i
        steps.append(step)
        if len(steps) > MEMORY:
            del steps[0]
            prior -= 1
        if best < SIZES:
            if step.ack:
                self.changes += 1
            elif not (step.nothing or (unknown and self.strong)):  # equal sizes further back: no outcome seen,
                self._progress(step, fresh=not unknown)  # and no end of a run that stronger evidence made
            return NONE
        if step.pending or backing_off(steps):
            return NONE
        if self.changes and not _same_outcome(step, steps[prior] if prior >= 0 else None):
            self._progress(step)
            return NONE
        if _overhead(step, steps, prior):
            return NONE
        wasted = 2 if self.run and self.changes else 1
        self.changes = 0
        self.last = best
        self.run += wasted
        if best == EXACT:
            self.exact += 1  # (the changes' waste is inferred from the check: not exact evidence of their own)
        if best >= FUZZY:
            self.strong += wasted
        if best > self.top:
            self.top = best
        return best

    def _progress(self, step: ProgressStep, fresh: bool = True) -> None:
        step.fresh = fresh
        self.last = NONE
        self.run = self.exact = self.strong = self.changes = 0
        self.top = NONE

    def absorb(self, other: ProgressMemory) -> None:
        """Take the steps of another memory of the same scope (a trace's calls, scored under the trace id before its
        session became known), before this memory's own; the current run stays this memory's."""
        steps = other.steps + self.steps
        self.steps = steps[len(steps) - MEMORY:] if len(steps) > MEMORY else steps

    @property
    def flag(self) -> int:
        """The early warning's evidence: the run's strongest, once the run makes a loop; else ``NONE``."""
        return self.top if self.run >= RUN_TO_WARN else NONE

    def wasted(self, min_level: int) -> int:
        """Wasted steps in the current run with at least ``min_level`` evidence (``EXACT`` or ``FUZZY``)."""
        return self.exact if min_level >= EXACT else self.strong

    def to_json(self) -> dict[str, Any]:
        return {"steps": [s.to_list() for s in self.steps], "run": self.run, "exact": self.exact,
                "strong": self.strong, "top": self.top, "last": self.last, "changes": self.changes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgressMemory:
        return cls([ProgressStep.from_list(s) for s in data.get("steps", [])], int(data.get("run", 0)),
                   int(data.get("exact", 0)), int(data.get("strong", 0)), int(data.get("top", 0)),
                   int(data.get("last", 0)), int(data.get("changes", 0)))

