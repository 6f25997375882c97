"""Rule detectors: exact prompt repeat, per-trace hard caps, failure loop breaker, velocity breaker.

Each rule of the config names one of these detectors, an action (``notify`` | ``block``) and a mode
(``dry_run`` | ``enforce``). Each detector's parameters are validated at config load
(:mod:`detector.settings.rule_params`); this module holds each detector's pure detection function. The engine keeps
the state they need and calls them per call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from detector.core.similarity import finite
from detector.core.tuning import VelocityTuning

__all__ = [
    "FailureStreak", "VELOCITY_CLEAR_FRACTION", "VELOCITY_MULTIPLIER", "VELOCITY_WINDOW_NS", "VelocityState",
    "cap_reached", "failure_kind", "find_repeat",
]

# ============================================================================ pure detection functions
#
# Everything below is I/O-free. State objects (FailureStreak, VelocityState) are small dataclasses that
# round-trip through plain JSON (to_dict / from_dict), because the engine persists them per scope.


def _minimal_period(seq: Sequence[int]) -> int:
    n = len(seq)
    for d in range(1, n + 1):
        if n % d == 0 and all(seq[i] == seq[i % d] for i in range(n)):
            return d
    return n


def find_repeat(fps: Sequence[int], window: int, repeats: tuple[int, ...]) -> tuple[int, int] | None:
    """Exact prompt repeat: does the tail of ``fps`` (request fingerprints of a trace's model calls, oldest
    first) repeat a cycle?

    Only the last ``window`` fingerprints are looked at. For each cycle length L in 1..``len(repeats)``
    (shortest first; ``repeats[L - 1]``: the copies that count as a loop, ``ExactRepeatParams.repeats_for``),
    the last L fingerprints are the cycle; it must be primitive (``[a, a]`` is not a cycle of length 2, it is
    ``a`` twice) and contain no 0 (an unknown fingerprint never matches). Counting back, the number of
    consecutive copies of the cycle at the tail must reach ``repeats[L - 1]``. Returns ``(L, copies)`` for
    the shortest such cycle, else None. Defaults: [a,a,a] -> (1, 3); [a,b,a,b] -> (2, 2); [a,b,c,a,b,c] ->
    (3, 2); [a,b,a] and [a,a] -> None. (Plain values rather than the pydantic model: the engine asks on every
    call, and reading a pydantic attribute costs more than the check.)
    """
    max_cycle_length = len(repeats)
    n = min(len(fps), window)
    # Any match has at least two copies of its cycle, so the newest fingerprint recurs L calls back for
    # some L: most calls are settled here, without copying the window (the engine asks on every call).
    last = fps[-1] if n else 0
    if not last:
        return None
    for length in range(1, min(max_cycle_length, n - 1) + 1):
        if fps[-1 - length] == last:
            break
    else:
        return None
    tail = list(fps)[-window:]
    for length in range(1, max_cycle_length + 1):
        need = repeats[length - 1]
        if length * need > n:
            continue
        if length == 1:  # the same request again and again: count the run of the newest one
            start = n - 1
            while start >= 1 and tail[start - 1] == last:
                start -= 1
            copies = n - start
        else:
            cycle = tail[n - length :]
            if 0 in cycle or _minimal_period(cycle) < length:
                continue
            copies, start = 1, n - length
            while start - length >= 0 and tail[start - length : start] == cycle:
                copies += 1
                start -= length
        if copies >= need:
            return length, copies
    return None


def cap_reached(calls: int, usd: float, tokens: int, unit: str, threshold: float) -> bool:
    """Per-trace hard cap: has the trace *reached* its ceiling (``threshold``, in ``unit``: ``TraceCapParams.unit``
    and ``.limit()``)?

    Boundary: the cap trips when the running total reaches the threshold (``>=``), for every unit. The
    spec's stop lands late by design ("the call that crosses is allowed; we stop a later call"): with
    "a ceiling of 25 model calls", the 25th call is recorded and allowed, the rule trips on it, and a
    blocking rule stops the 26th. The same holds for USD and tokens: the call that reaches or passes
    $5.00 (or 200,000 tokens) went through; later calls are stopped. (Plain values rather than the pydantic
    model: the engine asks on every call.)
    """
    return (calls if unit == "calls" else usd if unit == "usd" else tokens) >= threshold


@dataclass(slots=True)
class FailureStreak:
    """Failure loop breaker state for one trace: back-to-back repeats of the same tool call and of the
    same error. Incremental: :meth:`advance` per scored turn, in order.

    - same tool call: the turn's tool fingerprints (name + argument values) share at least one call with
      every turn of the current streak; a turn without tool calls (or with only new ones) restarts it.
    - same error: the turn failed (the model call or one of its tools) with an error fingerprint shared
      with every failure of the current streak; a turn that did not fail resets it to 0.
    Streaks count occurrences: the same call made 5 times in a row is a streak of 5.
    """

    tool_fps: list[int] = field(default_factory=list)
    tool_streak: int = 0
    error_fps: list[int] = field(default_factory=list)
    error_streak: int = 0

    # Written out, as ScopeState's is (detector.core.engine).
    def __init__(self, tool_fps: list[int] | None = None, tool_streak: int = 0, error_fps: list[int] | None = None,
                 error_streak: int = 0) -> None:
        self.tool_fps = [] if tool_fps is None else tool_fps
        self.tool_streak = tool_streak
        self.error_fps = [] if error_fps is None else error_fps
        self.error_streak = error_streak

    def advance(self, tools: frozenset[int], errors: frozenset[int], waiting: bool = False) -> tuple[int, int]:
        """Account one turn from its (non-zero) tool-call fingerprints and, when it failed, its error fingerprints
        (``TurnView.tools`` and ``TurnView.error_fps``); returns ``(tool_streak, error_streak)``. ``waiting``: the
        agent waited longer before this turn than before the last (backoff): a failure then does not extend the
        error streak (nor ends it)."""
        self.tool_fps, self.tool_streak = _next_streak(tools, self.tool_fps, self.tool_streak)
        if not (waiting and errors):
            self.error_fps, self.error_streak = _next_streak(errors, self.error_fps, self.error_streak)
        return self.tool_streak, self.error_streak

    def succeeded(self) -> None:
        """A tool of the trace succeeded (its span arrived before the next model call): the error streak ends."""
        self.error_fps, self.error_streak = [], 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_fps": list(self.tool_fps),
            "tool_streak": self.tool_streak,
            "error_fps": list(self.error_fps),
            "error_streak": self.error_streak,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FailureStreak:
        return cls(
            tool_fps=[int(x) for x in data.get("tool_fps", [])],
            tool_streak=int(data.get("tool_streak", 0)),
            error_fps=[int(x) for x in data.get("error_fps", [])],
            error_streak=int(data.get("error_streak", 0)),
        )


def _next_streak(fps: frozenset[int], shared: list[int], streak: int) -> tuple[list[int], int]:
    """One streak after a turn with fingerprints ``fps``: continued while they share one with the streak's
    (``shared``), restarted at 1 by new ones, back to 0 without any."""
    if not fps:
        return ([], 0) if shared or streak else (shared, streak)
    if len(fps) == 1 and len(shared) == 1:  # the usual turn: one tool call, after a turn of one
        for fp in fps:
            return (shared, streak + 1) if fp == shared[0] else ([fp], 1)
    common = fps.intersection(shared)
    return (sorted(common), streak + 1) if common else (sorted(fps), 1)


def failure_kind(tool_streak: int, error_streak: int, same_tool_repeats: int, same_error_repeats: int) -> str | None:
    """The failure loop breaker: ``'same_tool_error'`` when the error streak reached ``same_error_repeats``, else
    ``'same_tool_call'`` when the tool streak reached ``same_tool_repeats``, else None. The error wins when both
    trip: it is the more specific diagnosis (the repeated call keeps failing). (``FailureLoopParams``' values as
    plain arguments: the engine asks on every call.)"""
    if error_streak >= same_error_repeats:
        return "same_tool_error"
    if tool_streak >= same_tool_repeats:
        return "same_tool_call"
    return None


VELOCITY_WINDOW_NS: Final = 60 * 1_000_000_000
VELOCITY_MULTIPLIER: Final = 10.0  # fixed by the spec: trips at 10x the key's own baseline, not configurable
VELOCITY_CLEAR_FRACTION: Final = 0.5  # hysteresis: clears when the window rate drops below half the trip level
_NS_PER_SECOND: Final = 1_000_000_000
_NS_PER_MINUTE: Final = 60 * _NS_PER_SECOND


@dataclass(slots=True)
class VelocityState:
    """Velocity circuit breaker state for one key.

    - window: tokens per second bucket over the sliding 60 s window (``[second, tokens]`` pairs, so the
      state stays small however fast a loop runs); the window rate in tokens/min is their sum.
    - baseline: the key's rolling tokens/min, an EMA (span ``baseline_minutes``) over its *active*
      minutes (minutes with traffic; idle minutes do not drag it down), averaged plainly over the first
      minutes so an early minute does not dominate. Minutes during which the breaker was tripped are
      never learned, so a burst cannot raise its own baseline.
    - trip: window rate >= the manual TPM cap (always), or >= 10 x max(baseline, ``min_baseline_tpm``)
      once the key has ``warmup_minutes`` of history.
    - clear: once tripped, the breaker stays tripped until the window rate drops below half of the
      current trip level (hysteresis, so a loop hovering at the limit does not flap). Nothing is learned
      while tripped, so the level is the one that tripped it unless the manual cap changed.
    A blocked key sends no more calls: its trip expires (``RuleTrip.expires_ns``), so the key can come back.
    """

    buckets: list[list[int]] = field(default_factory=list)
    first_ns: int | None = None
    last_ns: int | None = None
    minute: int | None = None
    minute_tokens: int = 0
    minute_tripped: bool = False
    baseline_tpm: float | None = None
    baseline_samples: int = 0
    window_tpm: float = 0.0
    tripped: bool = False
    trip_level: float = 0.0
    trip_reason: str = ""  # 'baseline' | 'manual' while tripped

    def update(self, ts_ns: int, tokens: int, params: VelocityTuning, tpm_limit: float | None = None) -> bool:
        """Record ``tokens`` used at ``ts_ns`` (span time) and return whether the breaker is tripped after it.
        ``tpm_limit`` (the key's override) takes precedence over ``params.tpm_limit``."""
        now = ts_ns if self.last_ns is None else max(ts_ns, self.last_ns)
        self.first_ns = ts_ns if self.first_ns is None else min(self.first_ns, ts_ns)
        self.last_ns = now
        self._roll_minute(now, params)
        tokens = max(0, int(tokens))
        if tokens:
            self.minute_tokens += tokens
            second = ts_ns // _NS_PER_SECOND
            if second > now // _NS_PER_SECOND - VELOCITY_WINDOW_NS // _NS_PER_SECOND:
                self._add(second, tokens)
        self._evict(now)
        self.window_tpm = float(sum(b[1] for b in self.buckets))
        return self._evaluate(now, params, tpm_limit)

    def trip_threshold(self, now_ns: int, params: VelocityTuning, tpm_limit: float | None = None) -> float:
        """The window rate (tokens/min) at which the breaker trips now (inf when nothing can trip it)."""
        manual = tpm_limit if tpm_limit is not None else params.tpm_limit
        level = float(manual) if manual else math.inf
        warm = self.first_ns is not None and now_ns - self.first_ns >= params.warmup_minutes * _NS_PER_MINUTE
        if warm:
            level = min(level, VELOCITY_MULTIPLIER * max(self.baseline_tpm or 0.0, params.min_baseline_tpm))
        return level

    # -- internals

    def _add(self, second: int, tokens: int) -> None:
        if self.buckets and self.buckets[-1][0] == second:
            self.buckets[-1][1] += tokens
            return
        if not self.buckets or self.buckets[-1][0] < second:
            self.buckets.append([second, tokens])
            return
        for bucket in self.buckets:  # out-of-order span: rare, the window is at most 60 buckets
            if bucket[0] == second:
                bucket[1] += tokens
                return
        self.buckets.append([second, tokens])
        self.buckets.sort()

    def _evict(self, now_ns: int) -> None:
        oldest = now_ns // _NS_PER_SECOND - VELOCITY_WINDOW_NS // _NS_PER_SECOND
        self.buckets = [b for b in self.buckets if b[0] > oldest]

    def _roll_minute(self, now_ns: int, params: VelocityTuning) -> None:
        minute = now_ns // _NS_PER_MINUTE
        if self.minute is None:
            self.minute, self.minute_tripped = minute, self.tripped
            return
        if minute <= self.minute:
            return
        if self.minute_tokens > 0 and not self.minute_tripped:
            self.baseline_samples += 1
            alpha = max(1.0 / self.baseline_samples, 2.0 / (params.baseline_minutes + 1))
            base = self.baseline_tpm
            self.baseline_tpm = float(self.minute_tokens) if base is None else base + alpha * (self.minute_tokens - base)
        self.minute, self.minute_tokens, self.minute_tripped = minute, 0, self.tripped

    def _evaluate(self, now_ns: int, params: VelocityTuning, tpm_limit: float | None) -> bool:
        level = self.trip_threshold(now_ns, params, tpm_limit)
        if not self.tripped:
            if self.window_tpm >= level:
                manual = tpm_limit if tpm_limit is not None else params.tpm_limit
                self.tripped, self.trip_level, self.minute_tripped = True, level, True
                self.trip_reason = "manual" if manual and level >= float(manual) else "baseline"
        elif not finite(level) or self.window_tpm < VELOCITY_CLEAR_FRACTION * level:
            self.tripped, self.trip_level, self.trip_reason = False, 0.0, ""
        else:
            self.trip_level = level
        return self.tripped

    # -- persistence

    def to_dict(self) -> dict[str, Any]:
        return {
            "buckets": [list(b) for b in self.buckets],
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "minute": self.minute,
            "minute_tokens": self.minute_tokens,
            "minute_tripped": self.minute_tripped,
            "baseline_tpm": self.baseline_tpm,
            "baseline_samples": self.baseline_samples,
            "window_tpm": self.window_tpm,
            "tripped": self.tripped,
            "trip_level": self.trip_level if finite(self.trip_level) else 0.0,
            "trip_reason": self.trip_reason,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VelocityState:
        def opt_int(key: str) -> int | None:
            value = data.get(key)
            return None if value is None else int(value)

        baseline = data.get("baseline_tpm")
        return cls(
            buckets=[[int(s), int(t)] for s, t in data.get("buckets", [])],
            first_ns=opt_int("first_ns"),
            last_ns=opt_int("last_ns"),
            minute=opt_int("minute"),
            minute_tokens=int(data.get("minute_tokens", 0)),
            minute_tripped=bool(data.get("minute_tripped", False)),
            baseline_tpm=None if baseline is None else float(baseline),
            baseline_samples=int(data.get("baseline_samples", 0)),
            window_tpm=float(data.get("window_tpm", 0.0)),
            tripped=bool(data.get("tripped", False)),
            trip_level=float(data.get("trip_level", 0.0)),
            trip_reason=str(data.get("trip_reason", "")),
        )
