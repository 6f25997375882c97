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
from typing import Any

from detector.config import SIGNAL_NAMES, LoopDetectionConfig
from detector.models import Turn

# SimHash: ClickHouse's wordShingleSimHashUTF8 fills 32 significant bits of its UInt64.
SIMHASH_MASK = 0xFFFF_FFFF
SIMHASH_SAME_BITS = 3  # at most this many differing bits: the same text (similarity 1)
SIMHASH_UNRELATED_BITS = 11  # at least this many: unrelated (similarity 0); random texts differ in ~16

# Token counts: relative difference at or below which two counts are "near-identical", and at or above
# which they are unrelated (linear in between); differences of a couple of tokens always count as equal.
TOKENS_SAME_REL = 0.05
TOKENS_DIFFERENT_REL = 0.25
TOKENS_SAME_ABS = 2

# Cycle scoring: a pair must be at least this similar to continue a repeating tail; periods 1..MAX_PERIOD;
# the score saturates after SATURATING_CYCLES full repetitions of the cycle (A,A,A or A,B,A,B,A,B).
CYCLE_MATCH_MIN = 0.5
MAX_PERIOD = 3
SATURATING_CYCLES = 2

# In content similarity, an output that repeats counts for this much even when the input is new; the rest
# comes from the input (a repeated input with a new output is an agent making progress on the same data).
OUTPUT_ONLY_WEIGHT = 0.4
INPUT_ONLY_WEIGHT = 0.5  # no output on either side (e.g. both calls failed): the input alone, halved
# Structural fallback: an identical request fingerprint without content (same model, same input token
# count, same parameters) is strong but not certain.
STRUCTURAL_REQUEST_WEIGHT = 0.8
SAME_FAILING_REQUEST = 0.8  # content similarity above which a failed call is "the same request"
# Context growth: the share of its redundancy that comes from repeated token increments (the rest is
# the content repeating, which is required).
INCREMENTS_WEIGHT = 0.5

# Polling with backoff: successful calls whose last BACKOFF_RATIOS gaps each grew by >= BACKOFF_RATIO.
BACKOFF_RATIO = 1.5
BACKOFF_RATIOS = 2
BACKOFF_DISCOUNT = 0.25

# Velocity: rates are measured over at least one minute, so a single big call is not a "velocity".
MIN_RATE_WINDOW_NS = 60 * 1_000_000_000
NS_PER_MINUTE = 60 * 1_000_000_000


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
        values = {name: _clamp(float(data.get(name, 0.0))) for name in SIGNAL_NAMES}
        return cls(**values, content_fallback=bool(data.get("content_fallback", False)))


# --------------------------------------------------------------------------------------------- views


@dataclass(frozen=True, slots=True)
class _View:
    """What the signals read from a turn, extracted once per scoring."""

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


def _view(turn: Turn) -> _View:
    cached = turn.view
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    turn.view = view = _make_view(turn)
    return view


def _make_view(turn: Turn) -> _View:
    call = turn.call
    end_ns = max(call.ts_ns, call.end_ns)
    for tool in turn.tools:
        end_ns = max(end_ns, tool.end_ns)
    return _View(
        has_content=bool(call.has_content),
        request_fp=call.request_fp,
        input_simhash=call.input_simhash & SIMHASH_MASK if call.has_content else 0,
        output_simhash=call.output_simhash & SIMHASH_MASK if call.has_content else 0,
        tools=frozenset(fp for fp in turn.tool_fps if fp),
        response_fp=call.response_fp,
        input_tokens=max(0, call.input_tokens),
        output_tokens=max(0, call.output_tokens),
        tokens=max(0, call.input_tokens) + max(0, call.output_tokens),
        cost_usd=turn.cost_usd if math.isfinite(turn.cost_usd) and turn.cost_usd > 0 else 0.0,
        is_error=turn.is_error,
        error_fps=frozenset(fp for fp in turn.error_fps if fp),
        ts_ns=call.ts_ns,
        end_ns=end_ns,
    )


def _views(history: Sequence[Turn], turn: Turn, depth: int | None = None) -> list[_View]:
    recent = list(history)[-depth:] if depth else list(history)
    return [_view(t) for t in recent] + [_view(turn)]


# ------------------------------------------------------------------------------------ pair similarity


def _clamp(value: float) -> float:
    if not math.isfinite(value):
        return 0.0
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


def simhash_similarity(a: int, b: int) -> float | None:
    """1 for the same text, 0 for unrelated text, linear in the Hamming distance in between; ``None``
    when either side has no SimHash (0 means no text)."""
    a &= SIMHASH_MASK
    b &= SIMHASH_MASK
    if not a or not b:
        return None
    distance = (a ^ b).bit_count()
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


def _jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def _response_match(a: _View, b: _View) -> float:
    """Same response structure (parts, finish reason, token bucket), near-identical output tokens and,
    where known, near-identical output text and the same tool calls."""
    if not a.response_fp or a.response_fp != b.response_fp:
        return 0.0
    score = token_closeness(a.output_tokens, b.output_tokens)
    text = simhash_similarity(a.output_simhash, b.output_simhash)
    if text is not None:
        score *= text
    if a.tools or b.tools:
        score *= _jaccard(a.tools, b.tools)
    return score


def _structural_similarity(a: _View, b: _View) -> float:
    """Content-free similarity: an identical request fingerprint, or the same tool calls with the same
    response structure and output tokens. Without tool calls, a matching response shape alone is left to
    response_stagnation (counting it here too would double the same weak evidence, e.g. outputs all cut
    at max_tokens)."""
    request = STRUCTURAL_REQUEST_WEIGHT if a.request_fp and a.request_fp == b.request_fp else 0.0
    if not (a.tools or b.tools) or not a.response_fp or a.response_fp != b.response_fp:
        return request
    return max(request, token_closeness(a.output_tokens, b.output_tokens) * _jaccard(a.tools, b.tools))


def _content_pair(a: _View, b: _View) -> tuple[float, bool]:
    """Similarity of the new content of two calls, and whether it fell back to structure."""
    if not (a.has_content and b.has_content):
        return _structural_similarity(a, b), True
    if a.request_fp and a.request_fp == b.request_fp:
        return 1.0, False  # the whole input is identical: the same request sent again
    inp = simhash_similarity(a.input_simhash, b.input_simhash)
    text = simhash_similarity(a.output_simhash, b.output_simhash)
    tools = _jaccard(a.tools, b.tools) if (a.tools or b.tools) else None
    parts = [p for p in (text, tools) if p is not None]
    out = math.prod(parts) if parts else None
    if out is None and inp is None:
        return _structural_similarity(a, b), True
    if out is None:
        return INPUT_ONLY_WEIGHT * inp, False  # type: ignore[operator]
    if inp is None:
        return out, False
    return out * (OUTPUT_ONLY_WEIGHT + (1.0 - OUTPUT_ONLY_WEIGHT) * inp), False


def _content_sim(a: _View, b: _View) -> float:
    return _content_pair(a, b)[0]


def _tool_sim(a: _View, b: _View) -> float:
    return _jaccard(a.tools, b.tools)


# ------------------------------------------------------------------------------------------- cycles


def cycle_score(n: int, sim: Callable[[int, int], float], max_period: int = MAX_PERIOD) -> float:
    """How strongly the tail of a sequence of ``n`` items repeats, in [0, 1].

    For each period p in 1..max_period, walk back from the last item while ``sim(j, j - p)`` stays at or
    above ``CYCLE_MATCH_MIN``, summing the similarities: that sum divided by p is the number of full
    repetitions of the cycle at the tail. The score is the best over periods, divided by
    ``SATURATING_CYCLES``: A,A -> 0.5; A,A,A -> 1; A,B,A,B -> 0.5; A,B,A,B,A,B -> 1; A,B,A -> 0.25.
    """
    best = 0.0
    for period in range(1, min(max_period, n - 1) + 1):
        total = 0.0
        j = n - 1
        while j - period >= 0:
            s = sim(j, j - period)
            if s < CYCLE_MATCH_MIN:
                break
            total += s
            j -= 1
        best = max(best, total / period)
    return _clamp(best / SATURATING_CYCLES)


def _tail_cycle(views: Sequence[_View], pair: Callable[[_View, _View], float]) -> float:
    return cycle_score(len(views), lambda i, j: pair(views[i], views[j]))


def _backoff_factor(views: Sequence[_View]) -> float:
    """``BACKOFF_DISCOUNT`` when the turn is a successful call at the end of a backing-off sequence (each of
    the last ``BACKOFF_RATIOS`` gaps >= ``BACKOFF_RATIO`` x the one before): polling, not a loop."""
    if views[-1].is_error or len(views) < BACKOFF_RATIOS + 2:
        return 1.0
    stamps = [v.ts_ns for v in views[-(BACKOFF_RATIOS + 2) :]]
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    if any(g <= 0 for g in gaps):
        return 1.0
    if all(later >= BACKOFF_RATIO * earlier for earlier, later in zip(gaps, gaps[1:], strict=False)):
        return BACKOFF_DISCOUNT
    return 1.0


# ------------------------------------------------------------------------------------------ signals


def _content_cycle(views: Sequence[_View]) -> float:
    return _tail_cycle(views, _content_sim) if len(views) >= 2 else 0.0


def _content_similarity(views: Sequence[_View], backoff: float, content: float | None = None) -> float:
    return _clamp(backoff * (_content_cycle(views) if content is None else content))


def _content_fallback(views: Sequence[_View]) -> bool:
    return not all(v.has_content for v in views)


def _tool_call_repetition(views: Sequence[_View], backoff: float) -> float:
    if len(views) < 2 or not views[-1].tools:
        return 0.0
    return _clamp(backoff * _tail_cycle(views, _tool_sim))


def _response_stagnation(views: Sequence[_View], backoff: float) -> float:
    if len(views) < 2:
        return 0.0
    return _clamp(backoff * _tail_cycle(views, _response_match))


def _error_cycling(views: Sequence[_View]) -> float:
    turn = views[-1]
    if not turn.is_error:
        return 0.0  # this call succeeded: whatever was failing before, the cycle is broken
    repeats = 0.0
    for earlier in views[:-1]:
        if not earlier.is_error:
            continue
        if earlier.error_fps & turn.error_fps:
            repeats += 1.0  # the same error again
        elif _content_sim(earlier, turn) >= SAME_FAILING_REQUEST:
            repeats += 0.5  # the same failing request retried, failing differently
    return _clamp(repeats / SATURATING_CYCLES)


def _context_growth(views: Sequence[_View], backoff: float, content: float | None = None) -> float:
    """``content``: the (undiscounted) content cycle score when the caller already has it."""
    if len(views) < 2:
        return 0.0
    deltas = [b.input_tokens - a.input_tokens for a, b in zip(views, views[1:], strict=False)]
    if deltas[-1] <= 0:
        return 0.0  # the context did not grow on this call
    growing = sum(1 for d in deltas if d > 0) / len(deltas)
    # Redundancy of what was added: the new content repeats the history (content decides; structural
    # fingerprints without content), confirmed by the context growing by the same amount each time
    # (the same tool result / message appended again).
    if content is None:
        content = _tail_cycle(views, _content_sim)
    if content == 0.0:
        return 0.0
    increments = cycle_score(
        len(deltas), lambda i, j: token_closeness(deltas[i], deltas[j]) if deltas[i] > 0 and deltas[j] > 0 else 0.0
    )
    return _clamp(backoff * growing * content * (1.0 - INCREMENTS_WEIGHT + INCREMENTS_WEIGHT * increments))


def _rate_per_minute(views: Sequence[_View], amounts: Sequence[float]) -> float:
    start = min(v.ts_ns for v in views)
    end = max(v.end_ns for v in views)
    duration = max(end - start, MIN_RATE_WINDOW_NS)
    return sum(amounts) / (duration / NS_PER_MINUTE)


def velocity_score(rate: float, threshold: float) -> float:
    """0 at or below the threshold, then ``1 - threshold / rate``: 0.5 at twice it, 0.9 at ten times."""
    if not math.isfinite(rate) or rate <= 0.0:
        return 0.0
    if threshold <= 0.0:
        return 1.0
    if rate <= threshold:
        return 0.0
    return _clamp(1.0 - threshold / rate)


def _token_velocity(views: Sequence[_View], threshold: float) -> float:
    return velocity_score(_rate_per_minute(views, [v.tokens for v in views]), threshold)


def _cost_velocity(views: Sequence[_View], threshold: float) -> float:
    return velocity_score(_rate_per_minute(views, [v.cost_usd for v in views]), threshold)


# --------------------------------------------------------------------------------- public functions


def content_similarity(history: Sequence[Turn], turn: Turn) -> float:
    """The new content of this call (SimHash of its last input message and of its output, plus its tool
    calls) repeats the tail of the history; structural fingerprints when content is absent."""
    views = _views(history, turn)
    return _content_similarity(views, _backoff_factor(views))


def content_fallback(history: Sequence[Turn], turn: Turn) -> bool:
    """True when the turn or a turn of its history has no captured content, so content similarity used
    (at least partly) structural fingerprints."""
    return _content_fallback(_views(history, turn))


def tool_call_repetition(history: Sequence[Turn], turn: Turn) -> float:
    """The call's own tool calls (name + argument values) repeat the previous turns' (period 1..3)."""
    views = _views(history, turn)
    return _tool_call_repetition(views, _backoff_factor(views))


def response_stagnation(history: Sequence[Turn], turn: Turn) -> float:
    """Responses repeat: same structure hash, near-identical output tokens (and text / tool calls)."""
    views = _views(history, turn)
    return _response_stagnation(views, _backoff_factor(views))


def error_cycling(history: Sequence[Turn], turn: Turn) -> float:
    """This call failed with an error already seen in the history, or as a retry of a failed request."""
    return _error_cycling(_views(history, turn))


def context_growth(history: Sequence[Turn], turn: Turn) -> float:
    """Input tokens keep growing while what is added is not new (repeated content, repeated increments)."""
    views = _views(history, turn)
    return _context_growth(views, _backoff_factor(views))


def token_velocity(history: Sequence[Turn], turn: Turn, threshold: float) -> float:
    """Tokens per minute over the window (history + turn) relative to ``threshold`` tokens/min."""
    return _token_velocity(_views(history, turn), threshold)


def cost_velocity(history: Sequence[Turn], turn: Turn, threshold: float) -> float:
    """USD per minute over the window (history + turn) relative to ``threshold`` USD/min."""
    return _cost_velocity(_views(history, turn), threshold)


def compute_signals(history: Sequence[Turn], turn: Turn, cfg: LoopDetectionConfig) -> Signals:
    """All seven signals of ``turn`` given the scope's previous turns (oldest first; only the last
    ``cfg.history_depth`` are used)."""
    views = _views(history, turn, cfg.history_depth)
    backoff = _backoff_factor(views)
    content = _content_cycle(views)
    return Signals(
        content_similarity=_content_similarity(views, backoff, content),
        tool_call_repetition=_tool_call_repetition(views, backoff),
        response_stagnation=_response_stagnation(views, backoff),
        error_cycling=_error_cycling(views),
        token_velocity=_token_velocity(views, cfg.token_velocity_threshold),
        context_growth=_context_growth(views, backoff, content),
        cost_velocity=_cost_velocity(views, cfg.cost_velocity_threshold),
        content_fallback=_content_fallback(views),
    )
