"""Similarity primitives and the constants of the seven signals: pure functions over numbers.

No I/O. The production signals (:mod:`detector.core.window`) are built from these, and so is the reference
specification the tests hold them to (``tests/support/reference_signals.py``: one small function per signal,
in the style of OpenHands' StuckDetector). ``docs/signals.md`` gives every formula and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

__all__ = [
    "BACKOFF_DISCOUNT", "BACKOFF_MIN_GAP_NS", "BACKOFF_RATIO", "BACKOFF_RATIOS", "CYCLE_MATCH_MIN", "ERROR_SATURATING_REPEATS",
    "INCREMENTS_WEIGHT", "INCREMENT_SAME_ABS", "INCREMENT_SAME_REL", "INPUT_ONLY_WEIGHT", "MAX_PERIOD",
    "MIN_RATE_WINDOW_NS", "NS_PER_MINUTE", "OUTPUT_ONLY_WEIGHT", "SAME_FAILING_REQUEST", "SATURATING_CYCLES",
    "SIMHASH_MASK", "SIMHASH_SAME_BITS", "SIMHASH_UNRELATED_BITS", "STRUCTURAL_REQUEST_WEIGHT", "TOKENS_DIFFERENT_REL",
    "TOKENS_SAME_ABS", "TOKENS_SAME_REL", "TOOL_TEXT_FLOOR", "clamp_unit", "cycle_score", "finite",
    "increment_closeness", "popcount32", "simhash_similarity", "token_closeness", "velocity_score",
]

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
# ... to at least a second: gaps of milliseconds jitter (1.6, 14, 21 ms between a tool's end and the next call) and are
# no wait (the progress model's backoff reads the same floor: detector.core.progress.BACKOFF_MIN_WAIT_NS)
BACKOFF_MIN_GAP_NS: Final = 1_000_000_000
BACKOFF_DISCOUNT: Final = 0.25

# Velocity: rates are measured over at least one minute, so a single big call is not a "velocity".
MIN_RATE_WINDOW_NS: Final = 60 * 1_000_000_000
NS_PER_MINUTE: Final = 60 * 1_000_000_000


def finite(value: float) -> bool:
    """``math.isfinite``, written with ``isinf`` and ``isnan``, which mypyc compiles to C calls (``isfinite``
    it does not: every call would look it up as a module attribute)."""
    return not (math.isinf(value) or math.isnan(value))


def popcount32(x: int) -> int:
    """``x.bit_count()`` for ``0 <= x < 2**32`` (SimHashes are masked to 32 bits), in plain integer operations:
    compiled, they stay in C, where a method call on an int costs several times more (one per pair of calls
    compared)."""
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


def velocity_score(rate: float, threshold: float) -> float:
    """0 at or below the threshold, then ``1 - threshold / rate``: 0.5 at twice it, 0.9 at ten times."""
    if not finite(rate) or rate <= 0.0:
        return 0.0
    if threshold <= 0.0:
        return 1.0
    if rate <= threshold:
        return 0.0
    return clamp_unit(1.0 - threshold / rate)
