"""A cycle's per-call scores: one named row per scored call and scope, kept column by column.

Pure data. :class:`ScoreRow` names a row of ``otel.loop_scores`` (``ts`` in unix nanoseconds, the seven signal
values nested as one :class:`~detector.core.signal_values.SignalValues`); :class:`ScoreColumns` holds a cycle's
rows as one list per field, in that order, which is what the Arrow writer (:func:`detector.storage.tables.score_table`)
hands over as it is. Tests check that the two field lists and the table's columns agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from detector.core.models import ns_to_ch
from detector.core.signal_values import SignalValues

__all__ = ["ScoreColumns", "ScoreRow", "score_dict"]


class ScoreRow(NamedTuple):
    """One call scored in one scope."""

    ts_ns: int
    scope: str
    scope_id: str
    session_id: str
    trace_id: str
    span_id: str
    virtual_key: str
    feature: str
    signals: SignalValues
    raw_confidence: float
    confidence: float
    level: str
    dominant_signal: str
    tokens: int
    cost_usd: float
    evidence: str = "none"  # what the call's score rests on (detector.core.progress)


class ScoreColumns:
    """A cycle's score rows, one list per :class:`ScoreRow` field (20,000 rows a cycle: appending to columns
    costs less than building, transposing and freeing row tuples; the signal records stay one per row)."""

    __slots__ = ("ts_ns", "scope", "scope_id", "session_id", "trace_id", "span_id", "virtual_key", "feature",
                 "signals", "raw_confidence", "confidence", "level", "dominant_signal", "tokens", "cost_usd",
                 "evidence")

    def __init__(self) -> None:
        self.ts_ns: list[int] = []
        self.scope: list[str] = []
        self.scope_id: list[str] = []
        self.session_id: list[str] = []
        self.trace_id: list[str] = []
        self.span_id: list[str] = []
        self.virtual_key: list[str] = []
        self.feature: list[str] = []
        self.signals: list[SignalValues] = []
        self.raw_confidence: list[float] = []
        self.confidence: list[float] = []
        self.level: list[str] = []
        self.dominant_signal: list[str] = []
        self.tokens: list[int] = []
        self.cost_usd: list[float] = []
        self.evidence: list[str] = []

    def append(self, ts_ns: int, scope: str, scope_id: str, session_id: str, trace_id: str, span_id: str,
               virtual_key: str, feature: str, signals: SignalValues, raw_confidence: float, confidence: float,
               level: str, dominant_signal: str, tokens: int, cost_usd: float, evidence: str = "none") -> None:
        """Add one row, its fields in :class:`ScoreRow` order (spelled out: compiled, a direct call)."""
        self.ts_ns.append(ts_ns)
        self.scope.append(scope)
        self.scope_id.append(scope_id)
        self.session_id.append(session_id)
        self.trace_id.append(trace_id)
        self.span_id.append(span_id)
        self.virtual_key.append(virtual_key)
        self.feature.append(feature)
        self.signals.append(signals)
        self.raw_confidence.append(raw_confidence)
        self.confidence.append(confidence)
        self.level.append(level)
        self.dominant_signal.append(dominant_signal)
        self.tokens.append(tokens)
        self.cost_usd.append(cost_usd)
        self.evidence.append(evidence)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def row(self, i: int) -> ScoreRow:
        return ScoreRow(self.ts_ns[i], self.scope[i], self.scope_id[i], self.session_id[i], self.trace_id[i],
                        self.span_id[i], self.virtual_key[i], self.feature[i], self.signals[i],
                        self.raw_confidence[i], self.confidence[i], self.level[i], self.dominant_signal[i],
                        self.tokens[i], self.cost_usd[i], self.evidence[i])

    def rows(self) -> list[ScoreRow]:
        """The rows one by one (tests, and consumers that want a row at a time)."""
        return [self.row(i) for i in range(len(self))]

    @classmethod
    def of(cls, rows: Iterable[ScoreRow]) -> ScoreColumns:
        columns = cls()
        for r in rows:
            columns.append(*r)
        return columns


def score_dict(row: ScoreRow) -> dict[str, Any]:
    """A row as ``otel.loop_scores`` column values (``ts`` as a DateTime64 literal, one column per signal)."""
    fields = row._asdict()
    ts_ns, signals = fields.pop("ts_ns"), fields.pop("signals")
    return {"ts": ns_to_ch(ts_ns), **fields, **signals.as_dict()}
