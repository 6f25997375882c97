"""Rows of ``otel.loop_events``: the one place that knows the event log's columns.

Escalation transitions, rule trips, budget exhaustion and manual actions all land in the same table
(the timeline Grafana draws and the webhooks send); every writer builds its row here.
"""

from __future__ import annotations

from typing import Any, Final

from detector.core.models import ns_to_ch
from detector.settings.vocabulary import (
    EVIDENCE_NONE,
    LEVEL_NONE,
    MODE_ENFORCE,
    SCOPE_FEATURE,
    SCOPE_KEY,
    SCOPE_SESSION,
    SCOPE_TRACE,
    SIGNAL_NAMES,
)

__all__ = ["event_row"]

_NO_SIGNALS: Final[dict[str, float]] = {}
_SIGNAL_NAMES: Final[tuple[str, ...]] = SIGNAL_NAMES  # a compiled constant (see detector.core.engine)


def event_row(*, ts_ns: int, kind: str, scope: str, scope_id: str, action: str, detector: str,
              session_id: str = "", trace_id: str = "", span_id: str = "", virtual_key: str = "", feature: str = "",
              rule_name: str = "", mode: str = MODE_ENFORCE, from_level: str = LEVEL_NONE, to_level: str = LEVEL_NONE,
              confidence: float = 0.0, signals: dict[str, float] | None = None, dominant_signal: str = "none",
              consecutive: int = 0, message: str = "", evidence: str = EVIDENCE_NONE) -> dict[str, Any]:
    """One event row; ids of the scope's own kind default to the scope id (a session event names its
    session, a key event its key, a feature event its feature)."""
    named = _NO_SIGNALS if signals is None else signals
    return {
        "ts": ns_to_ch(ts_ns),
        "kind": kind,
        "scope": scope,
        "scope_id": scope_id,
        "session_id": session_id or (scope_id if scope == SCOPE_SESSION else ""),
        "trace_id": trace_id or (scope_id if scope == SCOPE_TRACE else ""),
        "span_id": span_id,
        "virtual_key": virtual_key or (scope_id if scope == SCOPE_KEY else ""),
        "feature": feature or (scope_id if scope == SCOPE_FEATURE else ""),
        "detector": detector,
        "rule_name": rule_name,
        "action": action,
        "mode": mode,
        "from_level": from_level,
        "to_level": to_level,
        "confidence": confidence,
        "signals": {name: float(named.get(name, 0.0)) for name in _SIGNAL_NAMES},
        "dominant_signal": dominant_signal,
        "consecutive": consecutive,
        "message": message,
        "evidence": evidence,
    }
