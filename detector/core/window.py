"""A scope's scoring window, kept up to date call by call, and the seven signals of a new turn against it.

No I/O. The specification is ``compute_signals`` in ``tests/support/reference_signals.py``: one small function
per signal, each building its own window from the history and comparing its own pairs of turns. The engine
scores every new call of a cycle in two scopes, and through the specification nearly all of that time went to
generic machinery rather than arithmetic. :class:`SignalWindow` is the one production implementation: it
returns the very same numbers, bit for bit (``tests/core/test_window.py`` checks it against ``compute_signals``
on random runs), with:

- what the window holds maintained as turns are appended (the turns' views, each call's context increment,
  the idle gaps that backoff looks at), instead of rebuilt from the history for every call;
- each pair of turns compared once for the three repetition signals (content similarity, tool-call
  repetition, response stagnation): the parts they share (tool-set match, output SimHash, response structure)
  are computed once, and only for the pairs a cycle walk visits;
- a pair shown to be below ``CYCLE_MATCH_MIN`` in all three (the usual pair of a healthy run: a new request,
  other tool calls, other words) not compared any further, since such a similarity is only ever compared with
  that threshold or a higher one, never used as a number.

The formulas, constants and the order of every floating-point operation are those of ``detector.core.similarity``;
a change there must be made here too (the equivalence tests fail otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from detector.core.models import Turn
from detector.core.signal_values import SignalValues
from detector.core.similarity import (
    BACKOFF_DISCOUNT,
    BACKOFF_MIN_GAP_NS,
    BACKOFF_RATIO,
    BACKOFF_RATIOS,
    CYCLE_MATCH_MIN,
    ERROR_SATURATING_REPEATS,
    INCREMENTS_WEIGHT,
    INPUT_ONLY_WEIGHT,
    MAX_PERIOD,
    MIN_RATE_WINDOW_NS,
    NS_PER_MINUTE,
    OUTPUT_ONLY_WEIGHT,
    SAME_FAILING_REQUEST,
    SATURATING_CYCLES,
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

__all__ = ["CONTENT", "Pair", "Pairs", "RESPONSE", "SignalWindow", "TOOL", "UNRELATED", "compare", "repetition"]

# One pair of turns as the three repetition signals see it: (content, tool-call, response similarity). Typed
# as a tuple of any length: compiled, a fixed-length tuple of floats is unboxed, and boxed again at every store.
Pair = tuple[float, ...]
CONTENT: Final = 0
TOOL: Final = 1
RESPONSE: Final = 2
# Any pair below CYCLE_MATCH_MIN in all three parts: it can neither start nor continue a repeating tail, and
# error_cycling only asks whether a content similarity reaches SAME_FAILING_REQUEST.
UNRELATED: Final[Pair] = (0.0, 0.0, 0.0)
assert CYCLE_MATCH_MIN <= SAME_FAILING_REQUEST



class SignalWindow:
    """The last ``depth`` turns of one scope as the signals read them (oldest first), with each turn's
    context increment over its predecessor and the idle gaps before the latest turns.

    ``score(view)`` gives the signals of a new turn against the window; ``push(view)`` then adds it.
    (Plain lists trimmed by hand rather than bounded deques: compiled, list operations are direct C calls.)"""

    __slots__ = ("depth", "views", "deltas", "added", "gaps")

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.views: list[TurnView] = []
        # input growth over the previous turn, and that minus the previous reply (None: no previous turn)
        self.deltas: list[int | None] = []
        self.added: list[int | None] = []
        # idle time before each of the latest turns (see detector.core.similarity.backoff_factor)
        self.gaps: list[int] = []

    @classmethod
    def of(cls, turns: Iterable[Turn], depth: int) -> SignalWindow:
        """The window of a history (oldest first; only the last ``depth`` turns count)."""
        window = cls(depth)
        for turn in list(turns)[-depth:]:
            window.push(turn_view(turn))
        return window

    def push(self, view: TurnView) -> None:
        views = self.views
        if views:
            last = views[-1]
            delta = view.input_tokens - last.input_tokens
            self.deltas.append(delta)
            self.added.append(delta - last.output_tokens)
            self.gaps.append(view.ts_ns - max(last.call_end_ns, view.ready_ns))
            if len(self.gaps) > BACKOFF_RATIOS:
                del self.gaps[0]
        else:
            self.deltas.append(None)
            self.added.append(None)
        views.append(view)
        if len(views) > self.depth:
            del views[0], self.deltas[0], self.added[0]

    def scores_like(self, other: SignalWindow) -> bool:
        """Whether both windows score any new turn identically: they hold the same turns (a session with a
        single trace), or, after a restart loaded each scope's history on its own, equal copies of them. Equal
        copies are then replaced by the other window's, so that the next check is by identity."""
        mine, theirs = self.views, other.views
        if len(mine) != len(theirs):
            return False
        for i in range(len(mine)):
            a, b = mine[i], theirs[i]
            if a is not b:
                if a != b:
                    return False
                mine[i] = b
        return True

    def score(self, view: TurnView, token_threshold: float, cost_threshold: float) -> tuple[SignalValues, bool]:
        """The seven signals of a new turn (``view``) given the window, in ``SIGNAL_NAMES`` order, and
        whether content fell back to structure: :func:`detector.core.similarity.compute_signals`."""
        views = self.views + [view]
        n = len(views)
        # velocity: from the first call's start to the latest end, over at least a minute
        fallback = False
        start, end, tokens, cost = view.ts_ns, view.end_ns, 0, 0.0
        for v in views:
            fallback = fallback or not v.has_content
            start = min(start, v.ts_ns)
            end = max(end, v.end_ns)
            tokens += v.tokens
            cost += v.cost_usd
        minutes = max(end - start, MIN_RATE_WINDOW_NS) / NS_PER_MINUTE
        token_velocity = velocity_score(tokens / minutes, token_threshold)
        cost_velocity = velocity_score(cost / minutes, cost_threshold)
        if n < 2:
            return SignalValues(0.0, 0.0, 0.0, 0.0, token_velocity, 0.0, cost_velocity), fallback

        previous = views[-2]
        delta = view.input_tokens - previous.input_tokens
        deltas = self.deltas + [delta]
        added = self.added + [delta - previous.output_tokens]
        deltas[0] = added[0] = None  # the oldest call of the window has no known increment
        backoff = self._backoff(view, previous, n)
        pairs = Pairs(views, deltas, added)
        content, tool, response = repetition(n, pairs, bool(view.tools))
        error = _error_cycling(views, pairs) if view.is_error else 0.0
        if not (content or tool or response):  # nothing repeats (and context growth needs content)
            return SignalValues(0.0, 0.0, 0.0, error, token_velocity, 0.0, cost_velocity), fallback
        growth = _context_growth(deltas, backoff, content)
        return SignalValues(clamp_unit(backoff * content), clamp_unit(backoff * tool) if view.tools else 0.0,
                            clamp_unit(backoff * response), error, token_velocity, growth, cost_velocity), fallback

    def _backoff(self, view: TurnView, previous: TurnView, n: int) -> float:
        """:func:`detector.core.similarity.backoff_factor` from the gaps kept as turns were pushed."""
        if view.is_error or n < BACKOFF_RATIOS + 2:
            return 1.0
        gaps = self.gaps + [view.ts_ns - max(previous.call_end_ns, view.ready_ns)]
        if gaps[-1] < BACKOFF_MIN_GAP_NS:  # waits of milliseconds are jitter, not a backoff
            return 1.0
        # every gap positive, and each at least BACKOFF_RATIO x the one before (the first failure decides)
        for i in range(len(gaps)):
            if gaps[i] <= 0 or (i > 0 and not gaps[i] >= BACKOFF_RATIO * gaps[i - 1]):
                return 1.0
        return BACKOFF_DISCOUNT


class Pairs:
    """The pairs of calls of one scoring window, each compared (:func:`compare`) on first use, then kept."""

    __slots__ = ("views", "deltas", "added", "n", "found")

    def __init__(self, views: list[TurnView], deltas: list[int | None], added: list[int | None]) -> None:
        self.views, self.deltas, self.added = views, deltas, added
        self.n = len(views)
        self.found: list[Pair | None] = [None] * (self.n * self.n)  # by i * n + j (a window has a few calls)

    def get(self, i: int, j: int) -> Pair:
        key = i * self.n + j
        pair = self.found[key]
        if pair is None:
            pair = compare(self.views, self.deltas, self.added, i, j)
            self.found[key] = pair
        return pair


def repetition(n: int, pairs: Pairs, tools: bool) -> tuple[float, float, float]:
    """The cycle scores (:func:`detector.core.similarity.cycle_score`) of the three repetition signals over a window
    of ``n`` calls, walked together: for each period, the newest call's pair decides whether any of them has
    a repeating tail to walk. ``tools``: whether the newest call made tool calls (else tool-call repetition
    is not walked, and is 0)."""
    best = [0.0, 0.0, 0.0]
    walking = [True, tools, True]
    newest = n - 1
    for period in range(1, min(MAX_PERIOD, n - 1) + 1):
        first = pairs.get(newest, newest - period)
        if first[CONTENT] < CYCLE_MATCH_MIN and first[TOOL] < CYCLE_MATCH_MIN and first[RESPONSE] < CYCLE_MATCH_MIN:
            continue  # no tail to walk at this period (the usual case: an UNRELATED pair)
        enough = period * SATURATING_CYCLES
        for part in range(CONTENT, RESPONSE + 1):  # CONTENT, TOOL, RESPONSE (a range: a plain C loop, compiled)
            if not walking[part] or first[part] < CYCLE_MATCH_MIN:
                continue
            total, j = first[part], newest - 1
            while j - period >= 0 and total < enough:
                s = pairs.get(j, j - period)[part]
                if s < CYCLE_MATCH_MIN:
                    break
                total += s
                j -= 1
            best[part] = max(best[part], total / period)
            if best[part] >= SATURATING_CYCLES:
                walking[part] = False
        if not (walking[CONTENT] or walking[TOOL] or walking[RESPONSE]):
            break
    return (clamp_unit(best[CONTENT] / SATURATING_CYCLES), clamp_unit(best[TOOL] / SATURATING_CYCLES),
            clamp_unit(best[RESPONSE] / SATURATING_CYCLES))


def _error_cycling(views: list[TurnView], pairs: Pairs) -> float:
    n = len(views)
    errors = views[-1].error_fps
    repeats = 0.0
    for i in range(n - 1):
        earlier = views[i]
        if not earlier.is_error:
            continue
        if earlier.error_fps & errors:
            repeats += 1.0
        elif pairs.get(n - 1, i)[CONTENT] >= SAME_FAILING_REQUEST:
            repeats += 0.5
    return clamp_unit(repeats / ERROR_SATURATING_REPEATS)


def _context_growth(window_deltas: list[int | None], backoff: float, content: float) -> float:
    deltas: list[int] = window_deltas[1:]  # type: ignore[assignment]  # only the oldest call's is unknown
    if deltas[-1] <= 0 or content == 0.0:
        return 0.0
    growing = sum(1 for d in deltas if d > 0) / len(deltas)
    increments = cycle_score(
        len(deltas), lambda i, j: token_closeness(deltas[i], deltas[j]) if deltas[i] > 0 and deltas[j] > 0 else 0.0
    )
    return clamp_unit(backoff * growing * content * (1.0 - INCREMENTS_WEIGHT + INCREMENTS_WEIGHT * increments))


def _increment_match(deltas: list[int | None], added: list[int | None], i: int, j: int) -> float:
    da, db = deltas[i], deltas[j]
    if da is None or db is None:
        known = db if da is None else da
        return 1.0 if known is None or known > 0 else 0.0
    if da <= 0 or db <= 0:
        return 0.0
    return increment_closeness(added[i], added[j])  # type: ignore[arg-type]


def _added_share(deltas: list[int | None], added: list[int | None], i: int) -> float | None:
    d, a = deltas[i], added[i]
    if d is None or a is None or d <= 0:
        return None
    return min(1.0, max(0.0, a / d))


def compare(views: list[TurnView], deltas: list[int | None], added: list[int | None], i: int, j: int) -> Pair:
    """Calls i and j of the window compared once for the three repetition signals (see ``Pair``)."""
    a, b = views[i], views[j]
    a_tools, b_tools = a.tools, b.tools
    any_tools = bool(a_tools or b_tools)

    # the same tool calls: Jaccard of the fingerprints, or the same failing call
    if not a_tools or not b_tools or a_tools.isdisjoint(b_tools):
        tools = 0.0
    elif a_tools == b_tools:
        tools = 1.0
    else:
        tools = len(a_tools & b_tools) / len(a_tools | b_tools)
    if tools < 1.0 and a.is_error and b.is_error and a.tool_names and a.tool_names == b.tool_names \
            and not a.error_fps.isdisjoint(b.error_fps):
        tools = 1.0

    # output text similarity
    text = simhash_similarity(a.output_simhash, b.output_simhash)

    # The usual pair of a healthy run: a new request, other tool calls, other words. Tool-call and response
    # similarity are then at most ``tools``, content similarity at most ``tools`` or (redundant input) ``text``.
    if any_tools and tools < CYCLE_MATCH_MIN and (text is None or text < CYCLE_MATCH_MIN) and a.has_content \
            and b.has_content and not (a.request_fp and a.request_fp == b.request_fp):
        return UNRELATED

    # the same response structure, and output-token closeness (needed whenever the structure may match)
    if a.response_fp and b.response_fp:
        closeness = token_closeness(a.output_tokens, b.output_tokens)
        same_shape = a.response_fp == b.response_fp or (a.shape == b.shape and closeness == 1.0)
    else:
        closeness, same_shape = 0.0, False

    # response stagnation
    response = 0.0
    if same_shape:
        response = closeness
        if text is not None:
            response *= text
        if any_tools:
            response *= tools

    # tool-call repetition: span fingerprints may lack arguments, so they need the same amount back too
    tool = tools
    if tool and (a.spans_only or b.spans_only):
        tool *= _increment_match(deltas, added, i, j)

    # content similarity
    if not (a.has_content and b.has_content):
        return _structural(a, b, deltas, added, i, j, any_tools, tools, closeness, same_shape), tool, response
    if a.request_fp and a.request_fp == b.request_fp:
        return 1.0, tool, response
    inp = simhash_similarity(a.input_simhash, b.input_simhash)
    reply = text
    if reply is None and empty_output(a) and empty_output(b):
        reply = 1.0
    out: float | None
    if any_tools or (a.is_error and b.is_error and a.tool_names):
        out = tools * (TOOL_TEXT_FLOOR + (1.0 - TOOL_TEXT_FLOOR) * reply) if reply is not None else tools
    else:
        out = reply
    if out is None:
        if inp is None:
            return _structural(a, b, deltas, added, i, j, any_tools, tools, closeness, same_shape), tool, response
        return INPUT_ONLY_WEIGHT * inp, tool, response
    if inp is None:
        return out, tool, response
    score = out * (OUTPUT_ONLY_WEIGHT + (1.0 - OUTPUT_ONLY_WEIGHT) * inp)
    # redundant input (the same documents again, answered the same way); 0 unless both input and reply repeat
    if inp and reply and a.tool_names and a.tool_names == b.tool_names:
        shares = [x for x in (_added_share(deltas, added, i), _added_share(deltas, added, j)) if x is not None]
        if shares:
            score = max(score, inp * min(shares) * reply)
    return score, tool, response


def _structural(a: TurnView, b: TurnView, deltas: list[int | None], added: list[int | None], i: int, j: int,
                any_tools: bool, tools: float, closeness: float, same_shape: bool) -> float:
    """Content-free similarity (``detector.core.similarity._structural_similarity``)."""
    request = STRUCTURAL_REQUEST_WEIGHT if a.request_fp and a.request_fp == b.request_fp else 0.0
    if not same_shape:
        return request
    if any_tools:
        same_calls = tools
    else:
        own_i, own_j = added[i], added[j]
        same_calls = 1.0 if (own_i is None or own_i >= -TOKENS_SAME_ABS) and (own_j is None or own_j >= -TOKENS_SAME_ABS) \
            else 0.0
    step = closeness * _increment_match(deltas, added, i, j) * same_calls
    return max(request, step)
