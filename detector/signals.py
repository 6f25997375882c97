"""The seven loop signals: pure functions from a scope's recent turns to numbers in [0, 1].

No I/O. ``compute_signals(history, turn, cfg)`` scores one new :class:`~detector.models.Turn` against the
scope's previous turns (oldest first, at most ``cfg.history_depth``). Each signal has its own small
function, in the style of OpenHands' StuckDetector, so each pattern can be reasoned about and tested
alone. ``docs/signals.md`` gives every formula and why.

Where this improves on the published gateway design it was specified from:

- it compares the *new* content of a call (SimHash of the last input message and of the output), never
  the whole, growing conversation, so a long healthy run does not look more and more "similar";
- a tool fingerprint is the tool's name plus its argument *values* (``read_file("a.py")`` and
  ``read_file("b.py")`` differ), taken from the call's own tool calls, not from the message history;
- tokens come from usage and cost from the resolved ``Turn.cost_usd``, never from word counts;
- repetition is measured as a repeating *tail* of the sequence (period 1..3), so an A-B-A-B loop is
  caught and an edit/test/edit/test run whose edits differ is not;
- polling with exponential backoff (the same successful call, each gap >= 1.5x the previous) is
  discounted, and without captured content every signal falls back to structural fingerprints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from detector.config import SIGNAL_NAMES, LoopDetectionConfig
from detector.models import Turn

# SimHash: ClickHouse's wordShingleSimHashUTF8 fills 32 significant bits of its UInt64.
SIMHASH_MASK: Final = 0xFFFF_FFFF
SIMHASH_SAME_BITS: Final = 3  # at most this many differing bits: the same text (similarity 1)
SIMHASH_UNRELATED_BITS: Final = 11  # at least this many: unrelated (similarity 0); random texts differ in ~16

# Token counts: relative difference at or below which two counts are "near-identical", and at or above
# which they are unrelated (linear in between); differences of a couple of tokens always count as equal.
TOKENS_SAME_REL: Final = 0.05
TOKENS_DIFFERENT_REL: Final = 0.25
TOKENS_SAME_ABS: Final = 2

# Cycle scoring: a pair must be at least this similar to continue a repeating tail; periods 1..MAX_PERIOD;
# the score saturates after SATURATING_CYCLES full repetitions of the cycle (A,A or A,B,A,B: the first
# complete repeat; the EMA and the consecutive-calls counts already demand that it goes on).
CYCLE_MATCH_MIN: Final = 0.5
MAX_PERIOD: Final = 4
SATURATING_CYCLES: Final = 1
ERROR_SATURATING_REPEATS: Final = 2  # error_cycling: the same error seen twice before saturates

# In content similarity, an output that repeats counts for this much even when the input is new; the rest
# comes from the input (a repeated input with a new output is an agent making progress on the same data).
OUTPUT_ONLY_WEIGHT: Final = 0.4
INPUT_ONLY_WEIGHT: Final = 0.5  # no output on either side (e.g. both calls failed): the input alone, halved
# Structural fallback: an identical request fingerprint without content (same model, same input token
# count, same parameters) is strong but not certain.
STRUCTURAL_REQUEST_WEIGHT: Final = 0.8
SAME_FAILING_REQUEST: Final = 0.8  # content similarity above which a failed call is "the same request"
# Context growth: the share of its redundancy that comes from repeated token increments (the rest is
# the content repeating, which is required).
INCREMENTS_WEIGHT: Final = 0.5

# Tool calls: when both calls ran the same tools with the same arguments, the words around them count for
# this little (an agent rewording its commentary while repeating the action is still repeating it).
TOOL_TEXT_FLOOR: Final = 0.7

# What a call brought into the context besides the model's previous reply (its input growth minus the
# previous call's output tokens: the tool results and messages added). Without content, "the same step
# again" means the same amount came back, to the token: the same file re-read, the same error, the same
# re-prompt. Equal within INCREMENT_SAME_ABS tokens or INCREMENT_SAME_REL of the larger; 0 from twice that
# apart, linear in between. (Pages of a listing differ by tens of tokens even when their records are
# fixed-width; a re-fetched page does not differ at all.)
INCREMENT_SAME_ABS: Final = 3
INCREMENT_SAME_REL: Final = 0.003

# Polling with backoff: successful calls whose last BACKOFF_RATIOS idle gaps (from the end of the previous step,
# its tools included, to the start of this call) each grew by >= BACKOFF_RATIO (common multipliers: 1.3 to 2).
BACKOFF_RATIO: Final = 1.3
BACKOFF_RATIOS: Final = 2
BACKOFF_DISCOUNT: Final = 0.25

# Velocity: rates are measured over at least one minute, so a single big call is not a "velocity".
MIN_RATE_WINDOW_NS: Final = 60 * 1_000_000_000
NS_PER_MINUTE: Final = 60 * 1_000_000_000


@dataclass(frozen=True, slots=True)
class Signals:
    """The seven signals of one scored call, each in [0, 1]."""

    content_similarity: float = 0.0
    tool_call_repetition: float = 0.0
    response_stagnation: float = 0.0
    error_cycling: float = 0.0
    token_velocity: float = 0.0
    context_growth: float = 0.0
    cost_velocity: float = 0.0
    content_fallback: bool = False  # content was absent: content_similarity used structural fingerprints

    def as_dict(self) -> dict[str, float]:
        """The seven signal values by name, in ``SIGNAL_NAMES`` order (``content_fallback`` excluded)."""
        return {name: float(getattr(self, name)) for name in SIGNAL_NAMES}

    def to_dict(self) -> dict[str, Any]:
        return {**self.as_dict(), "content_fallback": self.content_fallback}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Signals:
        values = {name: clamp_unit(float(data.get(name, 0.0))) for name in SIGNAL_NAMES}
        return cls(**values, content_fallback=bool(data.get("content_fallback", False)))


# --------------------------------------------------------------------------------------------- views


@dataclass(slots=True)
class TurnView:
    """What the signals read from a turn, extracted once per turn (cached on it, shared by its scopes).

    Treated as immutable, but not a frozen dataclass: the engine builds one per scored call, and a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``, several times slower."""

    has_content: bool
    request_fp: int
    input_simhash: int
    output_simhash: int
    tools: frozenset[int]
    response_fp: int
    input_tokens: int
    output_tokens: int
    tokens: int
    cost_usd: float
    is_error: bool
    error_fps: frozenset[int]
    ts_ns: int
    end_ns: int
    call_end_ns: int  # the model call's own end
    ready_ns: int  # when the tools attributed to this turn (run before it) had finished
    tool_names: frozenset[str]
    shape: tuple[Any, ...]  # response structure without the token bucket: finish reasons, text, tool names
    spans_only: bool  # the tool fingerprints come from execute_tool spans (arguments may be missing)

    # Written out, not generated by @dataclass: compiled (detector.native), a dataclass's own __init__ runs as
    # interpreted Python and made building one view ~5x slower.
    def __init__(self, has_content: bool, request_fp: int, input_simhash: int, output_simhash: int,
                 tools: frozenset[int], response_fp: int, input_tokens: int, output_tokens: int, tokens: int,
                 cost_usd: float, is_error: bool, error_fps: frozenset[int], ts_ns: int, end_ns: int,
                 call_end_ns: int, ready_ns: int, tool_names: frozenset[str], shape: tuple[Any, ...],
                 spans_only: bool) -> None:
        self.has_content = has_content
        self.request_fp = request_fp
        self.input_simhash = input_simhash
        self.output_simhash = output_simhash
        self.tools = tools
        self.response_fp = response_fp
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.tokens = tokens
        self.cost_usd = cost_usd
        self.is_error = is_error
        self.error_fps = error_fps
        self.ts_ns = ts_ns
        self.end_ns = end_ns
        self.call_end_ns = call_end_ns
        self.ready_ns = ready_ns
        self.tool_names = tool_names
        self.shape = shape
        self.spans_only = spans_only


_NO_INTS: Final[frozenset[int]] = frozenset()
_NO_NAMES: Final[frozenset[str]] = frozenset()


def turn_view(turn: Turn) -> TurnView:
    """The turn's view, built on first use and cached on the turn."""
    cached = turn.view
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    turn.view = view = _make_view(turn)
    return view


def _make_view(turn: Turn) -> TurnView:
    call = turn.call
    tools = turn.tools
    has_content = bool(call.has_content)
    call_end_ns = max(call.ts_ns, call.end_ns)
    out_tool_fps = call.out_tool_fps
    if tools:
        end_ns = max(call_end_ns, max(t.end_ns for t in tools))
        ready_ns = max((t.end_ns for t in tools if t.end_ns <= call.ts_ns), default=0)
        tool_fps, tool_names, error_fps, is_error = turn.tool_fps, turn.tool_names, turn.error_fps, turn.is_error
    else:  # the same as the Turn properties give, without going through them (no tool spans to look at)
        end_ns, ready_ns = call_end_ns, 0
        tool_fps, tool_names, is_error = out_tool_fps, call.out_tool_names, call.is_error
        error_fps = (call.error_fp,) if is_error else ()
    input_tokens = max(0, call.input_tokens)
    output_tokens = max(0, call.output_tokens)
    cost = turn.cost_usd
    return TurnView(
        has_content,
        call.request_fp,
        call.input_simhash & SIMHASH_MASK if has_content else 0,
        call.output_simhash & SIMHASH_MASK if has_content else 0,
        frozenset([fp for fp in tool_fps if fp]) if tool_fps else _NO_INTS,
        call.response_fp,
        input_tokens,
        output_tokens,
        input_tokens + output_tokens,
        cost if cost > 0 and finite(cost) else 0.0,
        is_error,
        frozenset([fp for fp in error_fps if fp]) if error_fps else _NO_INTS,
        call.ts_ns,
        end_ns,
        call_end_ns,
        ready_ns,
        frozenset([n for n in tool_names if n]) if tool_names else _NO_NAMES,
        (tuple(call.finish_reasons), bool(call.output_simhash) if has_content else None,
         call.out_tool_names if len(call.out_tool_names) < 2 else tuple(sorted(call.out_tool_names)), call.is_error),
        not out_tool_fps,
    )


def _views(history: Sequence[Turn], turn: Turn, depth: int | None = None) -> _Window:
    recent = list(history)[-depth:] if depth else list(history)
    return _Window([turn_view(t) for t in recent] + [turn_view(turn)])


class _Window:
    """The views of a scoring window (history + turn, oldest first) and each call's context increment: how
    much its input grew over the previous call's (unknown for the first call of the window)."""

    __slots__ = ("views", "deltas", "added", "_pairs")

    def __init__(self, views: list[TurnView]) -> None:
        self.views = views
        pairs = list(zip(views, views[1:], strict=False))
        self.deltas: list[int | None] = [None] + [b.input_tokens - a.input_tokens for a, b in pairs]
        # what came back besides the previous reply (tool results, new messages)
        self.added: list[int | None] = [None] + [b.input_tokens - a.input_tokens - a.output_tokens for a, b in pairs]
        self._pairs: dict[tuple[int, int], tuple[float, bool]] = {}

    def __len__(self) -> int:
        return len(self.views)

    def __getitem__(self, i: int) -> TurnView:
        return self.views[i]

    def increment_match(self, i: int, j: int) -> float:
        """Did calls i and j get the same amount back (the same tool result / message appended again)? The
        context must have grown. The oldest call of the window has no known increment: it neither confirms
        nor refutes (1, as long as the other call's context grew)."""
        da, db = self.deltas[i], self.deltas[j]
        if da is None or db is None:
            known = db if da is None else da
            return 1.0 if known is None or known > 0 else 0.0
        if da <= 0 or db <= 0:
            return 0.0
        return increment_closeness(self.added[i], self.added[j])  # type: ignore[arg-type]

    def appended_own_output(self, i: int) -> bool:
        """Call i's input holds the previous call's whole output: the conversation grows by its own replies
        (unknown for the oldest call of the window: assumed)."""
        added = self.added[i]
        return added is None or added >= -TOKENS_SAME_ABS

    def added_share(self, i: int) -> float | None:
        """The share of call i's context growth that came from outside the model (tool results, messages),
        rather than from its own previous reply; None when unknown or when the context did not grow."""
        d, added = self.deltas[i], self.added[i]
        if d is None or added is None or d <= 0:
            return None
        return min(1.0, max(0.0, added / d))

    def content_pair(self, i: int, j: int) -> tuple[float, bool]:
        key = (i, j)
        cached = self._pairs.get(key)
        if cached is None:
            cached = self._pairs[key] = _content_pair(self, i, j)
        return cached

    def content_sim(self, i: int, j: int) -> float:
        return self.content_pair(i, j)[0]


# ------------------------------------------------------------------------------------ pair similarity


def finite(value: float) -> bool:
    """``math.isfinite``, written with ``isinf`` and ``isnan``, which mypyc compiles to C calls (``isfinite``
    it does not: every call would look it up as a module attribute)."""
    return not (math.isinf(value) or math.isnan(value))


def popcount32(x: int) -> int:
    """``x.bit_count()`` for ``0 <= x < 2**32`` (SimHashes are masked to 32 bits), in plain integer operations:
    compiled, they stay in C, where a method call on an int cost ~5x more (one per pair of calls compared)."""
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) & 0xFFFFFFFF) >> 24


def clamp_unit(value: float) -> float:
    if not finite(value):
        return 0.0
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


def simhash_similarity(a: int, b: int) -> float | None:
    """1 for the same text, 0 for unrelated text, linear in the Hamming distance in between; ``None``
    when either side has no SimHash (0 means no text)."""
    a &= SIMHASH_MASK
    b &= SIMHASH_MASK
    if not a or not b:
        return None
    distance = popcount32(a ^ b)
    if distance <= SIMHASH_SAME_BITS:
        return 1.0
    if distance >= SIMHASH_UNRELATED_BITS:
        return 0.0
    return (SIMHASH_UNRELATED_BITS - distance) / (SIMHASH_UNRELATED_BITS - SIMHASH_SAME_BITS)


def token_closeness(a: int, b: int) -> float:
    """1 when two token counts are near-identical, 0 when they clearly differ."""
    diff = abs(a - b)
    if diff <= TOKENS_SAME_ABS:
        return 1.0
    rel = diff / max(a, b)
    if rel <= TOKENS_SAME_REL:
        return 1.0
    if rel >= TOKENS_DIFFERENT_REL:
        return 0.0
    return (TOKENS_DIFFERENT_REL - rel) / (TOKENS_DIFFERENT_REL - TOKENS_SAME_REL)


def increment_closeness(a: int, b: int) -> float:
    """1 when two amounts of added context are the same to the token (within ``INCREMENT_SAME_ABS``, or
    ``INCREMENT_SAME_REL`` of the larger), 0 from twice that apart, linear in between."""
    diff = abs(a - b)
    same = max(INCREMENT_SAME_ABS, INCREMENT_SAME_REL * max(abs(a), abs(b)))
    if diff <= same:
        return 1.0
    if diff >= 2 * same:
        return 0.0
    return (2 * same - diff) / same


def _jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a or not b:
        return 0.0
    if a == b:
        return 1.0
    return len(a & b) / len(a | b)


def _tool_match(a: TurnView, b: TurnView) -> float:
    """How much two calls' tool calls are the same: Jaccard of the fingerprints (name + argument values),
    or 1 when both calls failed with the same error from the same tools (arguments tweaked between
    retries, the same failure each time: the same failing call)."""
    score = _jaccard(a.tools, b.tools)
    if score < 1.0 and a.is_error and b.is_error and a.tool_names and a.tool_names == b.tool_names \
            and not a.error_fps.isdisjoint(b.error_fps):
        return 1.0
    return score


def _same_shape(a: TurnView, b: TurnView) -> bool:
    """Same response structure. ``response_fp`` hashes a token bucket too: two near-identical counts on either
    side of a bucket boundary (40 and 42, 0 and 1) still have the same structure (finish reasons, text or
    not, tools asked for)."""
    if not a.response_fp or not b.response_fp:
        return False
    if a.response_fp == b.response_fp:
        return True
    return a.shape == b.shape and token_closeness(a.output_tokens, b.output_tokens) == 1.0


def empty_output(v: TurnView) -> bool:
    """A successful call whose reply (captured content) was empty: no text, no tool calls, ~no tokens."""
    return v.has_content and not v.is_error and not v.output_simhash and not v.tools \
        and v.output_tokens <= TOKENS_SAME_ABS


def _response_match(a: TurnView, b: TurnView) -> float:
    """Same response structure (parts, finish reason), near-identical output tokens and, where known,
    near-identical output text and the same tool calls."""
    if not _same_shape(a, b):
        return 0.0
    score = token_closeness(a.output_tokens, b.output_tokens)
    text = simhash_similarity(a.output_simhash, b.output_simhash)
    if text is not None:
        score *= text
    if a.tools or b.tools:
        score *= _tool_match(a, b)
    return score


def _structural_similarity(w: _Window, i: int, j: int) -> float:
    """Content-free similarity of calls i and j of the window.

    - An identical request fingerprint (without content: the same model, input size and parameters):
      ``STRUCTURAL_REQUEST_WEIGHT``.
    - The same step again: the same response structure and output size, the context grown by the same
      amount (the same tool result / reply appended again), and the same tool calls; without tools, the
      conversation must be growing by its own replies (a model talking to itself, re-prompted). Equal
      response shapes alone (e.g. every output cut at ``max_tokens``) are response_stagnation's evidence,
      counted once.
    """
    a, b = w.views[i], w.views[j]
    request = STRUCTURAL_REQUEST_WEIGHT if a.request_fp and a.request_fp == b.request_fp else 0.0
    if not _same_shape(a, b):
        return request
    if a.tools or b.tools:
        same_calls = _tool_match(a, b)
    else:
        same_calls = 1.0 if w.appended_own_output(i) and w.appended_own_output(j) else 0.0
    step = token_closeness(a.output_tokens, b.output_tokens) * w.increment_match(i, j) * same_calls
    return max(request, step)


def _content_pair(w: _Window, i: int, j: int) -> tuple[float, bool]:
    """Similarity of the new content of calls i and j, and whether it fell back to structure."""
    a, b = w.views[i], w.views[j]
    if not (a.has_content and b.has_content):
        return _structural_similarity(w, i, j), True
    if a.request_fp and a.request_fp == b.request_fp:
        return 1.0, False  # the whole input is identical: the same request sent again
    inp = simhash_similarity(a.input_simhash, b.input_simhash)
    text = simhash_similarity(a.output_simhash, b.output_simhash)
    if text is None and empty_output(a) and empty_output(b):
        text = 1.0  # both replies were empty: the same (non-)answer
    if a.tools or b.tools or (a.is_error and b.is_error and a.tool_names):
        tools = _tool_match(a, b)
        out: float | None = tools * (TOOL_TEXT_FLOOR + (1.0 - TOOL_TEXT_FLOOR) * text) if text is not None else tools
    else:
        out = text
    if out is None and inp is None:
        return _structural_similarity(w, i, j), True
    if out is None:
        return INPUT_ONLY_WEIGHT * inp, False  # type: ignore[operator]
    if inp is None:
        return out, False
    score = out * (OUTPUT_ONLY_WEIGHT + (1.0 - OUTPUT_ONLY_WEIGHT) * inp)
    return max(score, _redundant_input(w, i, j, inp, text)), False


def _redundant_input(w: _Window, i: int, j: int, inp: float, text: float | None) -> float:
    """The same new input again (the same documents re-retrieved) making up most of what the context
    gained, and the model reacting to it the same way (the same tool, reworded arguments, the same words):
    nothing new came in. A short repeated input next to a long new reply ("File written." after writing
    another file) is not redundancy, nor is similar-looking input the model answers differently (test
    output whose failure count went down, followed by a different fix)."""
    a, b = w[i], w[j]
    if not a.tool_names or a.tool_names != b.tool_names or text is None:
        return 0.0
    shares = [x for x in (w.added_share(i), w.added_share(j)) if x is not None]
    if not shares:
        return 0.0
    return inp * min(shares) * text


def _tool_sim(w: _Window, i: int, j: int) -> float:
    """The same tool calls. Fingerprints taken from execute_tool spans may lack the arguments (their
    capture is opt-in): there the same call must also have brought back the same amount (increments)."""
    a, b = w.views[i], w.views[j]
    score = _tool_match(a, b)
    if score and (a.spans_only or b.spans_only):
        score *= w.increment_match(i, j)
    return score


def _response_sim(w: _Window, i: int, j: int) -> float:
    return _response_match(w.views[i], w.views[j])


# ------------------------------------------------------------------------------------------- cycles


def cycle_score(n: int, sim: Callable[[int, int], float], max_period: int | None = None) -> float:
    """How strongly the tail of a sequence of ``n`` items repeats, in [0, 1].

    For each period p in 1..max_period, walk back from the last item while ``sim(j, j - p)`` stays at or
    above ``CYCLE_MATCH_MIN``, summing the similarities: that sum divided by p is the number of full
    repetitions of the cycle at the tail. The score is the best over periods, divided by
    ``SATURATING_CYCLES``: A,A -> 1; A,B,A,B -> 1; A,B,A -> 0.5; A,B,C,A,B -> 0.67; A,B,C,D,A,B -> 0.5.
    """
    best = 0.0
    for period in range(1, min(max_period or MAX_PERIOD, n - 1) + 1):
        total, enough = 0.0, period * SATURATING_CYCLES
        j = n - 1
        while j - period >= 0 and total < enough:  # past saturation, further repeats change nothing
            s = sim(j, j - period)
            if s < CYCLE_MATCH_MIN:
                break
            total += s
            j -= 1
        best = max(best, total / period)
        if best >= SATURATING_CYCLES:
            break
    return clamp_unit(best / SATURATING_CYCLES)


def _tail_cycle(w: _Window, pair: Callable[[_Window, int, int], float]) -> float:
    return cycle_score(len(w), lambda i, j: pair(w, i, j))


def backoff_factor(views: Sequence[TurnView]) -> float:
    """``BACKOFF_DISCOUNT`` when the turn is a successful call at the end of a backing-off sequence (each of
    the last ``BACKOFF_RATIOS`` idle gaps >= ``BACKOFF_RATIO`` x the one before): polling, not a loop. An
    idle gap is the wait before a call: from the end of the previous step (the previous call and the tools
    it ran) to the start of this call, so neither the calls' latency nor a slow tool looks like a wait. ``views``: the
    window, oldest first."""
    if views[-1].is_error or len(views) < BACKOFF_RATIOS + 2:
        return 1.0
    recent = views[-(BACKOFF_RATIOS + 2) :]
    gaps = [b.ts_ns - max(a.call_end_ns, b.ready_ns) for a, b in zip(recent, recent[1:], strict=False)]
    if any(g <= 0 for g in gaps):
        return 1.0
    if all(later >= BACKOFF_RATIO * earlier for earlier, later in zip(gaps, gaps[1:], strict=False)):
        return BACKOFF_DISCOUNT
    return 1.0


# ------------------------------------------------------------------------------------------ signals


def _content_cycle(w: _Window) -> float:
    return cycle_score(len(w), w.content_sim) if len(w) >= 2 else 0.0


def _content_similarity(w: _Window, backoff: float, content: float | None = None) -> float:
    return clamp_unit(backoff * (_content_cycle(w) if content is None else content))


def _content_fallback(w: _Window) -> bool:
    return not all(v.has_content for v in w.views)


def _tool_call_repetition(w: _Window, backoff: float) -> float:
    if len(w) < 2 or not w[-1].tools:
        return 0.0
    return clamp_unit(backoff * _tail_cycle(w, _tool_sim))


def _response_stagnation(w: _Window, backoff: float) -> float:
    if len(w) < 2:
        return 0.0
    return clamp_unit(backoff * _tail_cycle(w, _response_sim))


def _error_cycling(w: _Window) -> float:
    n = len(w)
    turn = w[-1]
    if not turn.is_error:
        return 0.0  # this call succeeded: whatever was failing before, the cycle is broken
    repeats = 0.0
    for i in range(n - 1):
        earlier = w[i]
        if not earlier.is_error:
            continue
        if earlier.error_fps & turn.error_fps:
            repeats += 1.0  # the same error again
        elif w.content_sim(n - 1, i) >= SAME_FAILING_REQUEST:
            repeats += 0.5  # the same failing request retried, failing differently
    return clamp_unit(repeats / ERROR_SATURATING_REPEATS)


def _context_growth(w: _Window, backoff: float, content: float | None = None) -> float:
    """``content``: the (undiscounted) content cycle score when the caller already has it."""
    if len(w) < 2:
        return 0.0
    deltas = [d for d in w.deltas[1:] if d is not None]
    if deltas[-1] <= 0:
        return 0.0  # the context did not grow on this call
    growing = sum(1 for d in deltas if d > 0) / len(deltas)
    # Redundancy of what was added: the new content repeats the history (content decides; structural
    # fingerprints without content), confirmed by the context growing by the same amount each time
    # (the same tool result / message appended again).
    if content is None:
        content = _content_cycle(w)
    if content == 0.0:
        return 0.0
    increments = cycle_score(
        len(deltas), lambda i, j: token_closeness(deltas[i], deltas[j]) if deltas[i] > 0 and deltas[j] > 0 else 0.0
    )
    return clamp_unit(backoff * growing * content * (1.0 - INCREMENTS_WEIGHT + INCREMENTS_WEIGHT * increments))


def _rate_per_minute(w: _Window, amounts: Sequence[float]) -> float:
    start = min(v.ts_ns for v in w.views)
    end = max(v.end_ns for v in w.views)
    duration = max(end - start, MIN_RATE_WINDOW_NS)
    return sum(amounts) / (duration / NS_PER_MINUTE)


def velocity_score(rate: float, threshold: float) -> float:
    """0 at or below the threshold, then ``1 - threshold / rate``: 0.5 at twice it, 0.9 at ten times."""
    if not finite(rate) or rate <= 0.0:
        return 0.0
    if threshold <= 0.0:
        return 1.0
    if rate <= threshold:
        return 0.0
    return clamp_unit(1.0 - threshold / rate)


def _token_velocity(w: _Window, threshold: float) -> float:
    return velocity_score(_rate_per_minute(w, [v.tokens for v in w.views]), threshold)


def _cost_velocity(w: _Window, threshold: float) -> float:
    return velocity_score(_rate_per_minute(w, [v.cost_usd for v in w.views]), threshold)


# --------------------------------------------------------------------------------- public functions


def content_similarity(history: Sequence[Turn], turn: Turn) -> float:
    """The new content of this call (SimHash of its last input message and of its output, plus its tool
    calls) repeats the tail of the history; structural fingerprints when content is absent."""
    w = _views(history, turn)
    return _content_similarity(w, backoff_factor(w.views))


def content_fallback(history: Sequence[Turn], turn: Turn) -> bool:
    """True when the turn or a turn of its history has no captured content, so content similarity used
    (at least partly) structural fingerprints."""
    return _content_fallback(_views(history, turn))


def tool_call_repetition(history: Sequence[Turn], turn: Turn) -> float:
    """The call's own tool calls (name + argument values) repeat the previous turns' (period 1..3)."""
    w = _views(history, turn)
    return _tool_call_repetition(w, backoff_factor(w.views))


def response_stagnation(history: Sequence[Turn], turn: Turn) -> float:
    """Responses repeat: same structure, near-identical output tokens (and text / tool calls)."""
    w = _views(history, turn)
    return _response_stagnation(w, backoff_factor(w.views))


def error_cycling(history: Sequence[Turn], turn: Turn) -> float:
    """This call failed with an error already seen in the history, or as a retry of a failed request."""
    return _error_cycling(_views(history, turn))


def context_growth(history: Sequence[Turn], turn: Turn) -> float:
    """Input tokens keep growing while what is added is not new (repeated content, repeated increments)."""
    w = _views(history, turn)
    return _context_growth(w, backoff_factor(w.views))


def token_velocity(history: Sequence[Turn], turn: Turn, threshold: float) -> float:
    """Tokens per minute over the window (history + turn) relative to ``threshold`` tokens/min."""
    return _token_velocity(_views(history, turn), threshold)


def cost_velocity(history: Sequence[Turn], turn: Turn, threshold: float) -> float:
    """USD per minute over the window (history + turn) relative to ``threshold`` USD/min."""
    return _cost_velocity(_views(history, turn), threshold)


def compute_signals(history: Sequence[Turn], turn: Turn, cfg: LoopDetectionConfig) -> Signals:
    """All seven signals of ``turn`` given the scope's previous turns (oldest first; only the last
    ``cfg.history_depth`` are used)."""
    w = _views(history, turn, cfg.history_depth)
    backoff = backoff_factor(w.views)
    content = _content_cycle(w)
    return Signals(
        content_similarity=_content_similarity(w, backoff, content),
        tool_call_repetition=_tool_call_repetition(w, backoff),
        response_stagnation=_response_stagnation(w, backoff),
        error_cycling=_error_cycling(w),
        token_velocity=_token_velocity(w, cfg.token_velocity_threshold),
        context_growth=_context_growth(w, backoff, content),
        cost_velocity=_cost_velocity(w, cfg.cost_velocity_threshold),
        content_fallback=_content_fallback(w),
    )
