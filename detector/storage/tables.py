"""The detector's bulk writes as Arrow tables: per-call scores, events, changed decisions and scope states.

A cycle of 10,000 new calls writes 20,000 score rows and, while loops escalate, thousands of events and
decisions. chDB reads an Arrow table much faster than it parses the same rows as JSONEachRow
(:meth:`detector.storage.transport.Store.insert_arrow`), and building the table column by column, with the column types
given, costs less than building one dict per row. Everything here is plain data in, ``pyarrow.Table`` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from detector.core.decisions import Decision
from detector.core.score_rows import ScoreRow
from detector.settings.vocabulary import SIGNAL_NAMES

if TYPE_CHECKING:
    import pyarrow as pa

    from detector.core.scope_state import ScopeState
    from detector.core.score_rows import ScoreColumns

__all__ = ["EVENT_TYPES", "decision_table", "event_table", "score_table", "state_table"]


# The Arrow type of each ScoreRow field that is not text (ts_ns becomes the ``ts`` column; signals, one column each).
_SCORE_TYPES = {"raw_confidence": "float64", "confidence": "float64", "tokens": "uint64", "cost_usd": "float64"}


def score_table(scores: ScoreColumns) -> pa.Table:
    """The engine's score rows, already column by column, as ``otel.loop_scores`` columns: one per
    :class:`~detector.core.score_rows.ScoreRow` field, in its order."""
    import pyarrow as pa

    columns: dict[str, pa.Array] = {}
    for name in ScoreRow._fields:
        values = getattr(scores, name)
        if name == "ts_ns":
            columns["ts"] = pa.array(values, pa.int64()).view(pa.timestamp("ns", tz="UTC"))
        elif name == "signals":
            for signal, column in zip(SIGNAL_NAMES, zip(*values, strict=True), strict=True):  # transposed in C
                columns[signal] = pa.array(column, pa.float64())
        else:
            columns[name] = pa.array(values, getattr(pa, _SCORE_TYPES.get(name, "string"))())
    return pa.table(columns)


EVENT_TYPES = {"confidence": "float64", "consecutive": "uint32"}  # every other column but signals is text


def event_table(events: Sequence[dict[str, Any]]) -> pa.Table:
    """``otel.loop_events`` rows as built by :func:`detector.core.events.event_row` (``ts`` as a DateTime64 literal,
    ``signals`` with the seven names, in ``SIGNAL_NAMES`` order)."""
    import pyarrow as pa

    columns = {}
    for name in events[0]:
        if name == "signals":
            continue
        values = [e[name] for e in events]
        columns[name] = pa.array(values, getattr(pa, EVENT_TYPES.get(name, "string"))())
    width = len(SIGNAL_NAMES)
    columns["signals"] = pa.MapArray.from_arrays(
        pa.array(range(0, width * len(events) + 1, width), pa.int32()),
        pa.array(SIGNAL_NAMES * len(events), pa.string()),
        pa.array([e["signals"][name] for e in events for name in SIGNAL_NAMES], pa.float64()),
    )
    return pa.table(columns)


def decision_table(decisions: Sequence[Decision], version: int) -> pa.Table:
    """``otel.loop_decisions`` rows of :meth:`detector.core.decisions.Decision.to_row`, all with one version."""
    import pyarrow as pa

    text, real = pa.string(), pa.float64()
    n = len(decisions)
    return pa.table({
        "scope": pa.array([d.scope for d in decisions], text),
        "scope_id": pa.array([d.scope_id for d in decisions], text),
        "action": pa.array([d.action for d in decisions], text),
        "level": pa.array([d.level for d in decisions], text),
        "confidence": pa.array([d.confidence for d in decisions], real),
        "dominant_signal": pa.array([d.dominant_signal for d in decisions], text),
        "detector": pa.array([d.detector for d in decisions], text),
        "reason": pa.array([d.reason for d in decisions], text),
        "rule_name": pa.array([d.rule_name for d in decisions], text),
        "delay_seconds": pa.array([d.delay_seconds for d in decisions], real),
        "instruction": pa.array([d.instruction for d in decisions], text),
        "expires_at": pa.array([d.expires_at_us for d in decisions], pa.timestamp("us", tz="UTC")),
        "version": pa.array([version] * n, pa.uint64()),
        "evidence": pa.array([d.evidence for d in decisions], text),
    })


def state_table(states: Sequence[ScopeState], version: int, deleted: bool = False) -> pa.Table:
    """``otel.loop_state`` rows of :meth:`detector.core.scope_state.ScopeState.to_row`, all with one version (a
    checkpoint writes every changed scope, kilobytes each, which chDB reads much faster as Arrow than as JSON rows)."""
    import pyarrow as pa

    text, real, count = pa.string(), pa.float64(), pa.uint64()
    at = pa.timestamp("ns", tz="UTC")
    n = len(states)
    return pa.table({
        "scope": pa.array([st.scope for st in states], text),
        "scope_id": pa.array([st.scope_id for st in states], text),
        "session_id": pa.array([st.session_id for st in states], text),
        "virtual_key": pa.array([st.virtual_key for st in states], text),
        "level": pa.array([st.level for st in states], text),
        "confidence": pa.array([st.confidence for st in states], real),
        "peak_confidence": pa.array([st.peak for st in states], real),
        "dominant_signal": pa.array([st.dominant for st in states], text),
        "call_count": pa.array([st.calls for st in states], count),
        "total_tokens": pa.array([st.tokens for st in states], count),
        "cost_usd": pa.array([st.cost_usd for st in states], real),
        "first_seen": pa.array([st.first_ns for st in states], pa.int64()).view(at),
        "last_activity": pa.array([st.last_ns for st in states], pa.int64()).view(at),
        "state": pa.array([st.state_json() for st in states], text),
        "version": pa.array([version] * n, count),
        "deleted": pa.array([1 if deleted else 0] * n, pa.uint8()),
    })
