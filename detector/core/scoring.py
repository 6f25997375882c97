"""Confidence from signals: the weighted sum, its EMA smoothing, and the dominant signal. Pure functions.

EMA start: a scope's first score is smoothed from 0 (``ema(None, v, a) == a * v``), not taken as is.
The spec smooths "to prevent single-request spikes from triggering enforcement"; starting at the first
raw value would let the very first call of a scope count at full weight towards the consecutive-calls
counters, which is exactly such a spike. Starting at 0 treats a new scope
as "no evidence of a loop yet". The cost is small: a scope's first call has no history, so its raw score
is near 0 anyway (only the velocity signals can be non-zero). docs/detection-quality.md derives the minimum
delay to warn that this smoothing and the consecutive counts impose.
"""

from __future__ import annotations

import math

from detector.core.signal_values import SignalValues
from detector.core.similarity import finite

__all__ = ["confidence_and_dominant", "ema"]


def _clamp(value: float) -> float:
    """Into [0, 1]; NaN and infinities count as 0."""
    if 0.0 <= value <= 1.0:
        return value
    return 1.0 if value > 1.0 and value != math.inf else 0.0


def ema(previous: float | None, value: float, alpha: float) -> float:
    """Exponential moving average: ``previous + alpha * (value - previous)``.

    ``previous is None`` (a new scope) starts from 0, so the first result is ``alpha * value``: see the
    module docstring for why. ``alpha`` is clamped to [0, 1] and non-finite inputs count as 0.
    """
    prev = 0.0 if previous is None or not finite(previous) else previous
    a = min(1.0, max(0.0, alpha)) if finite(alpha) else 0.0
    return prev + a * ((value if finite(value) else 0.0) - prev)


def confidence_and_dominant(values: SignalValues, items: tuple[tuple[str, float], ...]) -> tuple[float, str]:
    """The weighted confidence (the sum of weight x signal, clamped to [0, 1]) and the dominant signal (the largest
    weighted contribution; ties: the first in ``SIGNAL_NAMES``; ``'none'`` when every contribution is 0), in one
    pass. ``items``: the weights as ``(name, weight)`` pairs in ``SIGNAL_NAMES`` order (``ScoringTuning.weights``)."""
    if len(values) != len(items):
        raise ValueError(f"{len(values)} signal values for {len(items)} weights")
    best_name, best, total, evidence = "none", 0.0, 0.0, False
    for i in range(len(values)):  # by index: compiled, a zip of tuples is a generic iteration
        name, weight = items[i]
        value = values[i]
        evidence = evidence or value != 0.0
        contribution = weight * _clamp(value)
        total += contribution  # in order from 0, as sum() adds on Python 3.11
        if contribution > best:
            best_name, best = name, contribution
    if not evidence:
        return 0.0, "none"  # no evidence at all (most calls): every contribution is 0
    return _clamp(total), best_name
