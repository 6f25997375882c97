"""The Grafana side of the tests, shared: the committed dashboards' panel queries and the alert rules' queries
(what Grafana sends, before macro expansion), and a store seeded with GenAI spans and detector output on which
every one of them must return rows. Used by tests/stack/test_grafana.py (on chDB directly) and
tests/api/test_clickhouse_http.py (through the ClickHouse-compatible HTTP endpoint, as the plugin would)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from detector.core.escalation import LEVELS
from detector.settings.vocabulary import SIGNAL_NAMES
from detector.storage.normalization import normalize_staged
from detector.storage.transport import insert_rows
from support.grafana_macros import QueryContext

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "grafana"
DASHBOARD_DIR = GRAFANA / "dashboards"
PROVISIONING = GRAFANA / "provisioning"

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
LOOP_SESSION = "sess-loop"
OK_SESSION = "sess-ok"
LOOP_KEY = "vk-loop"
LOOP_FEATURE = "support-bot"


def ch_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def all_panels(board: dict) -> list[dict]:
    out = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def panel_targets() -> list[tuple[str, dict, dict]]:
    return [(name, panel, target)
            for name, board in dashboards().items()
            for panel in all_panels(board)
            for target in panel.get("targets", [])]


def span_row(i: int, session: str, key: str, feature: str, *, tokens: tuple[int, int], cost: float,
             error: bool = False, tool: str | None = None) -> dict[str, Any]:
    attrs = {
        "gen_ai.operation.name": "execute_tool" if tool else "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": str(tokens[0]),
        "gen_ai.usage.output_tokens": str(tokens[1]),
        "gen_ai.usage.cost": str(cost),
        "gen_ai.conversation.id": session,
        "loop_detector.virtual_key": key,
        "loop_detector.feature": feature,
    }
    if tool:
        attrs["gen_ai.tool.name"] = tool
        attrs["gen_ai.tool.call.arguments"] = '{"path": "a.py"}'
    if error:
        attrs["error.type"] = "RateLimitError"
    return {
        "Timestamp": ch_time(T0 + timedelta(seconds=10 * i)),
        "TraceId": f"trace-{session}",
        "SpanId": f"{session}-{i:04d}",
        "ParentSpanId": "",
        "SpanName": f"execute_tool {tool}" if tool else "chat gpt-4o-mini",
        "SpanKind": "Client",
        "ServiceName": "agent-app",
        "ResourceAttributes": {"service.name": "agent-app"},
        "SpanAttributes": attrs,
        "Duration": 1_500_000_000,
        "StatusCode": "Error" if error else "Ok",
        "StatusMessage": "rate limited after 3 tries" if error else "",
    }


LOOP_LEVELS = ["none"] * 3 + ["warn"] * 3 + ["throttle"] * 2 + ["inject"] * 2 + ["hard_stop"] * 2


def seed(store) -> None:
    spans = [span_row(i, LOOP_SESSION, LOOP_KEY, LOOP_FEATURE, tokens=(4000 + 500 * i, 200), cost=0.02,
                      error=i % 4 == 3, tool="read_file" if i % 2 else None) for i in range(len(LOOP_LEVELS))]
    spans += [span_row(i, OK_SESSION, "vk-ok", "search", tokens=(300, 50), cost=0.001) for i in range(3)]
    insert_rows(store, "otel.otel_traces", spans)
    normalize_staged(store)  # the calls, as the detection cycle would have written them

    scores = []
    for i, level in enumerate(LOOP_LEVELS):
        confidence = min(0.05 + 0.08 * i, 0.99)
        signals = {name: round(min(1.0, confidence + 0.02 * k), 3) for k, name in enumerate(SIGNAL_NAMES)}
        scores.append({
            "ts": ch_time(T0 + timedelta(seconds=10 * i)), "scope": "session", "scope_id": LOOP_SESSION,
            "session_id": LOOP_SESSION, "trace_id": f"trace-{LOOP_SESSION}", "span_id": f"{LOOP_SESSION}-{i:04d}",
            "virtual_key": LOOP_KEY, "feature": LOOP_FEATURE, **signals, "raw_confidence": confidence + 0.05,
            "confidence": confidence, "level": level, "dominant_signal": "tool_call_repetition",
            "tokens": 4200 + 500 * i, "cost_usd": 0.02,
        })
    for i in range(3):
        scores.append({
            "ts": ch_time(T0 + timedelta(seconds=10 * i)), "scope": "session", "scope_id": OK_SESSION,
            "session_id": OK_SESSION, "trace_id": f"trace-{OK_SESSION}", "span_id": f"{OK_SESSION}-{i:04d}",
            "virtual_key": "vk-ok", "feature": "search", **dict.fromkeys(SIGNAL_NAMES, 0.01),
            "raw_confidence": 0.02, "confidence": 0.02, "level": "none", "dominant_signal": "none",
            "tokens": 350, "cost_usd": 0.001,
        })
    insert_rows(store, "otel.loop_scores", scores)

    events = []
    inserted = T0 + timedelta(minutes=3)
    for i, (a, b) in enumerate(zip(LEVELS, LEVELS[1:], strict=False)):
        events.append(event(T0 + timedelta(seconds=30 + 20 * i), inserted, kind="escalation", detector="confidence",
                            action={"warn": "warn", "throttle": "throttle", "inject": "inject",
                                    "hard_stop": "block"}[b], from_level=a, to_level=b))
    events.append(event(T0 + timedelta(seconds=90), inserted, kind="rule", detector="velocity", action="block",
                        scope="key", scope_id=LOOP_KEY, rule_name="Velocity breaker",
                        message="tokens per minute over the key's limit"))
    events.append(event(T0 + timedelta(seconds=100), inserted, kind="budget", detector="budget", action="block",
                        scope="feature", scope_id=LOOP_FEATURE, rule_name="support-bot daily",
                        message="budget exhausted"))
    events.append(event(T0 + timedelta(seconds=100), inserted, kind="budget", detector="budget", action="notify",
                        scope="feature", scope_id="search", rule_name="search daily", message="80% of budget"))
    events.append(event(T0 + timedelta(seconds=110), inserted, kind="rule", detector="exact_prompt_repeat",
                        action="block", mode="dry_run", rule_name="Loop: Exact prompt repeat", scope="trace",
                        scope_id=f"trace-{LOOP_SESSION}"))
    insert_rows(store, "otel.loop_events", events)

    state = [
        {"scope": "session", "scope_id": LOOP_SESSION, "session_id": LOOP_SESSION, "virtual_key": LOOP_KEY,
         "level": "hard_stop", "confidence": 0.93, "peak_confidence": 0.95, "dominant_signal": "tool_call_repetition",
         "call_count": len(LOOP_LEVELS), "total_tokens": 80_000, "cost_usd": 0.24,
         "first_seen": ch_time(T0), "last_activity": ch_time(T0 + timedelta(seconds=110)), "state": "{}",
         "version": 2},
        {"scope": "session", "scope_id": OK_SESSION, "session_id": OK_SESSION, "virtual_key": "vk-ok",
         "level": "none", "confidence": 0.02, "peak_confidence": 0.03, "dominant_signal": "none",
         "call_count": 3, "total_tokens": 1050, "cost_usd": 0.003,
         "first_seen": ch_time(T0), "last_activity": ch_time(T0 + timedelta(seconds=20)), "state": "{}",
         "version": 1},
        {"scope": "key", "scope_id": LOOP_KEY, "session_id": "", "virtual_key": LOOP_KEY, "level": "none",
         "confidence": 0.0, "peak_confidence": 0.0, "dominant_signal": "none", "call_count": 12,
         "total_tokens": 80_000, "cost_usd": 0.24, "first_seen": ch_time(T0),
         "last_activity": ch_time(T0 + timedelta(seconds=110)), "state": "{}", "version": 1},
    ]
    insert_rows(store, "otel.loop_state", state)

    newest = store.rows("SELECT toUnixTimestamp64Micro(max(inserted_at)) AS us FROM otel.genai_calls")[0]["us"]
    insert_rows(store, "otel.loop_meta", [
        {"key": "watermark:0/2", "value": str(newest - 300_000_000), "version": 1},
        {"key": "watermark:1/2", "value": str(newest), "version": 1},
        {"key": "cycles", "value": "7", "version": 1},
    ])


def event(ts: datetime, inserted: datetime, *, kind: str, detector: str, action: str, scope: str = "session",
          scope_id: str = LOOP_SESSION, from_level: str = "", to_level: str = "", rule_name: str = "",
          mode: str = "enforce", message: str = "") -> dict[str, Any]:
    return {
        "ts": ch_time(ts), "kind": kind, "scope": scope, "scope_id": scope_id, "session_id": LOOP_SESSION,
        "trace_id": f"trace-{LOOP_SESSION}", "span_id": "", "virtual_key": LOOP_KEY, "feature": LOOP_FEATURE,
        "detector": detector, "rule_name": rule_name, "action": action, "mode": mode, "from_level": from_level,
        "to_level": to_level, "confidence": 0.91, "signals": dict.fromkeys(SIGNAL_NAMES, 0.5),
        "dominant_signal": "tool_call_repetition", "consecutive": 10, "message": message,
        "inserted_at": ch_time(inserted),
    }


DASHBOARD_CTX = QueryContext(T0 - timedelta(hours=1), T0 + timedelta(hours=1), interval=timedelta(seconds=60),
                             variables={"session_id": LOOP_SESSION})
def alerting() -> dict:
    return yaml.safe_load((PROVISIONING / "alerting" / "alerts.yaml").read_text())


def rules() -> list[dict]:
    return [rule for group in alerting()["groups"] for rule in group["rules"]]


def datasource_uids() -> set[str]:
    doc = yaml.safe_load((PROVISIONING / "datasources" / "clickhouse.yaml").read_text())
    return {ds["uid"] for ds in doc["datasources"]}


def alert_ctx(query: dict) -> QueryContext:
    # Grafana evaluates a rule at "now" over [now - from, now - to]; "now" here is a fixed moment
    # after the seeded events were written (their inserted_at is T0 + 3 min).
    now = T0 + timedelta(minutes=5)
    rng = query["relativeTimeRange"]
    return QueryContext(now - timedelta(seconds=rng["from"]), now - timedelta(seconds=rng["to"]),
                        interval=timedelta(milliseconds=query["model"].get("intervalMs", 1000)))


