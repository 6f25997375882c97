"""The weighted confidence and the dominant signal one at a time, for assertions: both from the production
:func:`detector.core.scoring.confidence_and_dominant`, which gives the two together."""

from __future__ import annotations

from typing import Any

from detector.core.scoring import confidence_and_dominant
from detector.core.signal_values import SignalValues
from detector.settings.loop_settings import Weights


def _values(signals: Any) -> SignalValues:
    """A :class:`SignalValues`, or anything with the seven signals as attributes (the reference's ``Signals``)."""
    if isinstance(signals, SignalValues):
        return signals
    return SignalValues(*(getattr(signals, name) for name in SignalValues._fields))


def weight_items(weights: Weights) -> tuple[tuple[str, float], ...]:
    """The weights as the core reads them: (signal, weight) in ``SIGNAL_NAMES`` order (``ScoringTuning.weights``)."""
    return tuple(weights.as_dict().items())


def weighted_confidence(signals: Any, weights: Weights) -> float:
    """Sum of weight x signal over the seven signals, clamped to [0, 1]."""
    return confidence_and_dominant(_values(signals), weight_items(weights))[0]


def dominant_signal(signals: Any, weights: Weights) -> str:
    """The signal with the largest weighted contribution (ties: first in ``SIGNAL_NAMES``); ``'none'`` when every
    contribution is 0."""
    return confidence_and_dominant(_values(signals), weight_items(weights))[1]
