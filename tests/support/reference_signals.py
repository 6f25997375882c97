"""The reference specification of the seven signals: the oracle the production signals are held to.

One small function per signal, in the style of OpenHands' StuckDetector, each building its own window from the
history and comparing its own pairs of turns: slow and plain, so each pattern can be read and reasoned about
alone. ``compute_signals(history, turn, cfg)`` scores one new turn against the scope's previous turns (oldest
first, at most ``cfg.history_depth``). Production scores incrementally (:class:`detector.core.window.SignalWindow`),
from the same primitives (:mod:`detector.core.similarity`); ``tests/core/test_window.py`` checks that both give
the same numbers, bit for bit, on random runs. ``docs/signals.md`` gives every formula and why.

Where this improves on the published gateway design it was specified from:

- it compares the *new* content of a call (SimHash of the last input message and of the output), never
  the whole, growing conversation, so a long healthy run does not look more and more "similar";
- a tool fingerprint is the tool's name plus its argument *values* (``read_file("a.py")`` and
  ``read_file("b.py")`` differ), taken from the call's own tool calls, not from the message history;
- tokens come from usage and cost from the resolved ``Turn.cost_usd``, never from word counts;
- repetition is measured as a repeating *tail* of the sequence (period 1..4), so an A-B-A-B loop is
  caught and an edit/test/edit/test run whose edits differ is not;
- polling with exponential backoff (the same successful call, each gap >= 1.3x the previous) is
  discounted, and without captured content every signal falls back to structural fingerprints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from detector.core.models import Turn
from detector.core.similarity import (
    BACKOFF_DISCOUNT,
    BACKOFF_MIN_GAP_NS,
    BACKOFF_RATIO,
    BACKOFF_RATIOS,
    ERROR_SATURATING_REPEATS,
    INCREMENTS_WEIGHT,
    INPUT_ONLY_WEIGHT,
    MIN_RATE_WINDOW_NS,
    NS_PER_MINUTE,
    OUTPUT_ONLY_WEIGHT,
    SAME_FAILING_REQUEST,
    STRUCTURAL_REQUEST_WEIGHT,
    TOKENS_SAME_ABS,
    TOOL_TEXT_FLOOR,
    clamp_unit,
    cycle_score,
    increment_closeness,
    simhash_similarity,
    token_closeness,
    velocity_score,
)
from detector.core.turn_view import TurnView, empty_output, turn_view
from detector.core.window import SignalWindow
from detector.settings.loop_settings import LoopDetectionConfig
from detector.settings.vocabulary import SIGNAL_NAMES


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
    if any(g <= 0 for g in gaps) or gaps[-1] < BACKOFF_MIN_GAP_NS:
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


def window_signals(history: Iterable[Turn], turn: Turn, cfg: LoopDetectionConfig) -> Signals:
    """What production computes for the same call: :meth:`SignalWindow.score` through a fresh window."""
    values, fallback = SignalWindow.of(history, cfg.history_depth).score(
        turn_view(turn), cfg.token_velocity_threshold, cfg.cost_velocity_threshold)
    return Signals(*values, content_fallback=fallback)
