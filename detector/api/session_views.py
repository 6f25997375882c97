"""Read-only views of sessions for operators: the admin list, one session's detail, the stats.

They read the detector's tables (``loop_state``, ``loop_events``, ``loop_scores``), so they work the
same for the embedded process and for API replicas in front of a ClickHouse server. The structured
hard-stop log uses :func:`session_detail` for its state dump.
"""

from __future__ import annotations

from typing import Any

import orjson

from detector.core.escalation import LEVELS
from detector.settings.vocabulary import SIGNAL_NAMES
from detector.storage.transport import Store

__all__ = ["list_sessions", "session_detail", "stats"]

LIST_SESSIONS = """
SELECT scope_id AS session_id, virtual_key, call_count AS request_count, confidence, level, dominant_signal,
       toString(last_activity) AS last_activity
FROM otel.loop_state FINAL
WHERE scope = 'session' AND deleted = 0
ORDER BY last_activity DESC, scope_id
LIMIT {limit:UInt32} OFFSET {offset:UInt32}
"""

COUNT_SESSIONS = "SELECT count() AS n FROM otel.loop_state FINAL WHERE scope = 'session' AND deleted = 0"

SESSION_STATE = """
SELECT scope_id AS session_id, virtual_key, call_count AS request_count, confidence, peak_confidence, level,
       dominant_signal, total_tokens, cost_usd, toString(first_seen) AS first_seen,
       toString(last_activity) AS last_activity, state
FROM otel.loop_state FINAL
WHERE scope = 'session' AND scope_id = {session_id:String} AND deleted = 0
"""

# One row per transition: the session and its trace both move when a session has a single trace (the same
# transition, at the same call), so the scopes a transition happened in are listed together, the session first;
# a trace's own transitions (a session of several traces) keep their own row, with the trace named.
SESSION_TIMELINE = """
SELECT toString(ts) AS time, kind, detector, rule_name, action, mode, from_level, to_level, scopes, scopes[1] AS scope,
       trace_id, confidence, dominant_signal, consecutive, signals, message, evidence
FROM (
    SELECT ts, kind, detector, rule_name, action, mode, from_level, to_level,
           arraySort(x -> x != 'session', groupUniqArray(e.scope)) AS scopes, any(e.trace_id) AS trace_id,
           max(e.confidence) AS confidence, any(e.dominant_signal) AS dominant_signal,
           max(e.consecutive) AS consecutive, any(e.signals) AS signals, any(e.message) AS message,
           any(e.evidence) AS evidence, min(e.inserted_at) AS first_inserted
    FROM otel.loop_events AS e
    WHERE e.session_id = {session_id:String} AND e.scope IN ('session', 'trace')
    GROUP BY ts, kind, detector, rule_name, action, mode, from_level, to_level, e.span_id
)
ORDER BY ts, first_inserted, scope
LIMIT 1000
"""

SESSION_SCORES = """
SELECT toString(ts) AS time, span_id, trace_id, content_similarity, tool_call_repetition, response_stagnation,
       error_cycling, token_velocity, context_growth, cost_velocity, raw_confidence, confidence, level,
       dominant_signal, tokens, cost_usd, evidence
FROM otel.loop_scores
WHERE scope = 'session' AND scope_id = {session_id:String}
ORDER BY ts DESC
LIMIT {limit:UInt32}
"""

# Where the session's evidence came from, per model or tool call (otel.genai_calls.evidence_source): its content, the app's
# fingerprints, or sizes alone (an exact or fuzzy decision rests on the first two alike).
SESSION_EVIDENCE_SOURCES = """
SELECT evidence_source, count() AS n FROM otel.genai_calls
WHERE session_id = {session_id:String} AND call_kind IN ('llm', 'tool')
GROUP BY evidence_source ORDER BY evidence_source
"""

STATS = """
SELECT level, dominant_signal, count() AS n, avg(confidence) AS avg_confidence
FROM otel.loop_state FINAL
WHERE scope = 'session' AND deleted = 0
GROUP BY level, dominant_signal
"""

TOP_SESSIONS = """
SELECT scope_id AS session_id, virtual_key, confidence, level, dominant_signal
FROM otel.loop_state FINAL
WHERE scope = 'session' AND deleted = 0
ORDER BY confidence DESC, scope_id
LIMIT 10
"""


def list_sessions(store: Store, limit: int = 50, offset: int = 0) -> dict[str, Any]:
    rows = store.rows(LIST_SESSIONS, {"limit": limit, "offset": offset})
    total = store.rows(COUNT_SESSIONS)[0]["n"]
    return {"total": total, "limit": limit, "offset": offset, "sessions": rows}


def session_detail(store: Store, session_id: str, history_limit: int = 50) -> dict[str, Any] | None:
    """Everything known about one session, or None when it is unknown."""
    rows = store.rows(SESSION_STATE, {"session_id": session_id})
    if not rows:
        return None
    row = rows[0]
    state = orjson.loads(row.pop("state")) if row.get("state") else {}
    history = state.get("history", [])
    detail: dict[str, Any] = dict(row)
    detail["current_confidence"] = detail.pop("confidence")
    detail["escalation_timeline"] = store.rows(SESSION_TIMELINE, {"session_id": session_id})
    detail["signal_history"] = list(reversed(store.rows(SESSION_SCORES, {"session_id": session_id,
                                                                         "limit": history_limit})))
    detail["current_signals"] = {name: state.get("signals", {}).get(name, 0.0) for name in SIGNAL_NAMES}
    detail["evidence_sources"] = {r["evidence_source"]: r["n"] for r in store.rows(SESSION_EVIDENCE_SOURCES,
                                                                                  {"session_id": session_id})}
    detail["recent_request_hashes"] = [format(t["c"].get("request_fp", 0), "016x") for t in history]
    detail["recent_tool_fingerprints"] = [
        [format(fp, "016x") for fp in (t["c"].get("out_tool_fps") or [x.get("tool_fp", 0) for x in t["t"]])]
        for t in history
    ]
    detail["response_descriptors"] = [
        {"output_tokens": t["c"].get("output_tokens", 0), "structure_hash": format(t["c"].get("response_fp", 0), "016x"),
         "error": bool(t["c"].get("is_error", False)) or any(x.get("is_error") for x in t["t"])}
        for t in history
    ]
    detail["total_tokens"] = row["total_tokens"]
    detail["estimated_cost_usd"] = row["cost_usd"]
    return detail


def stats(store: Store, evicted_total: int, uptime_seconds: float, memory_bytes: int) -> dict[str, Any]:
    rows = store.rows(STATS)
    levels = dict.fromkeys(LEVELS, 0)
    signals: dict[str, int] = {}
    total, weighted = 0, 0.0
    for r in rows:
        levels[r["level"]] = levels.get(r["level"], 0) + r["n"]
        signals[r["dominant_signal"]] = signals.get(r["dominant_signal"], 0) + r["n"]
        total += r["n"]
        weighted += r["avg_confidence"] * r["n"]
    return {
        "active_sessions": total,
        "level_distribution": levels,
        "dominant_signal_distribution": signals,
        "average_confidence": weighted / total if total else 0.0,
        "top_sessions": store.rows(TOP_SESSIONS),
        "estimated_memory_bytes": memory_bytes,
        "evictions_total": evicted_total,
        "evictions_per_minute": evicted_total / (uptime_seconds / 60) if uptime_seconds > 0 else 0.0,
    }
