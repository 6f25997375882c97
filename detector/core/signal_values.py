"""The seven signal values of one scored call, as one named record.

A ``NamedTuple``: each value has its name (``values.error_cycling``), and the record stays a tuple, which the
hot path needs. The engine compares it with :data:`NO_SIGNALS` (most calls), a score row carries it as it is,
and the Arrow writer transposes a cycle's records column by column in C (``zip(*records)``).
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ["NO_SIGNALS", "SignalValues"]


class SignalValues(NamedTuple):
    """Each signal in [0, 1], in the spec's order (``detector.settings.vocabulary.SIGNAL_NAMES``: a test checks
    the two agree)."""

    content_similarity: float = 0.0
    tool_call_repetition: float = 0.0
    response_stagnation: float = 0.0
    error_cycling: float = 0.0
    token_velocity: float = 0.0
    context_growth: float = 0.0
    cost_velocity: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """The values by signal name."""
        return dict(zip(self._fields, self, strict=True))


NO_SIGNALS: Final = SignalValues()  # no evidence of any kind: most calls
