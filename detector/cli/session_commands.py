"""``loop-detector sessions`` and ``loop-detector session ID``: the admin API, readable in a terminal.

Both talk to a running service over HTTP (the admin endpoints under ``/admin/loop-detection/``), so they
work against the embedded process and against API replicas alike. The bearer token comes from
``--token``, ``$LOOP_DETECTOR_ADMIN_TOKEN`` or ``<data-dir>/admin-token``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import httpx

from detector.settings.vocabulary import (
    EVENT_ESCALATION,
    LEVEL_HARD_STOP,
    LEVEL_INJECT,
    LEVEL_NONE,
    LEVEL_THROTTLE,
    LEVEL_WARN,
    SIGNAL_NAMES,
)

__all__ = [
    "AdminClient", "BAR_WIDTH", "LEVEL_COLORS", "ServiceUnreachable", "print_session", "print_sessions", "resolve_token",
    "run_session", "run_sessions",
]

LEVEL_COLORS = {LEVEL_NONE: "32", LEVEL_WARN: "33", LEVEL_THROTTLE: "35", LEVEL_INJECT: "36", LEVEL_HARD_STOP: "1;31"}
BAR_WIDTH = 20


def resolve_token(token: str | None, data_dir: str) -> str | None:
    if token:
        return token
    if os.environ.get("LOOP_DETECTOR_ADMIN_TOKEN"):
        return os.environ["LOOP_DETECTOR_ADMIN_TOKEN"]
    path = Path(data_dir) / "admin-token"
    return path.read_text().strip() if path.exists() else None


class ServiceUnreachable(Exception):
    """No loop-detector answered at the endpoint; ``str()`` is the one line a person reads."""


class AdminClient:
    def __init__(self, endpoint: str, token: str | None, timeout: float = 5.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.endpoint = endpoint.rstrip("/")
        self._client = httpx.Client(base_url=self.endpoint + "/admin/loop-detection", headers=headers,
                                    timeout=timeout)

    def get(self, path: str, **params: Any) -> Any:
        try:
            response = self._client.get(path, params=params)
        except httpx.TransportError as exc:  # refused, unknown host, timed out: nothing answered
            reason = str(exc).split("] ", 1)[-1] or type(exc).__name__
            raise ServiceUnreachable(f"no loop-detector answers at {self.endpoint} ({reason}): is `loop-detector "
                                     "serve` running there? --endpoint URL points at another") from None
        if response.status_code in (401, 403):
            raise SystemExit(f"admin API refused the token ({response.status_code}): pass --token or set "
                             "LOOP_DETECTOR_ADMIN_TOKEN")
        if response.status_code == 404:
            raise LookupError(path)
        if response.status_code != 200 or "json" not in response.headers.get("content-type", ""):
            raise ServiceUnreachable(f"{self.endpoint} answered {response.status_code} to GET "
                                     f"/admin/loop-detection{path}, not loop-detector's admin API: is --endpoint "
                                     "the service's API (serve's --api-port)?")
        return response.json()


def _paint(text: str, level: str, color: bool) -> str:
    return f"\x1b[{LEVEL_COLORS.get(level, '0')}m{text}\x1b[0m" if color else text


def _bar(value: float) -> str:
    filled = round(max(0.0, min(1.0, value)) * BAR_WIDTH)
    return "#" * filled + "." * (BAR_WIDTH - filled)


def print_sessions(data: dict[str, Any], out: TextIO, color: bool) -> None:
    rows = data["sessions"]
    header = f"{'session':<36} {'key':<16} {'calls':>6} {'confidence':>10}  {'level':<10} {'dominant signal':<22} last activity"
    print(header, file=out)
    print("-" * len(header), file=out)
    for r in rows:
        line = (f"{str(r['session_id'])[:36]:<36} {str(r.get('virtual_key') or '-')[:16]:<16} "
                f"{r['request_count']:>6} {r['confidence']:>10.3f}  {r['level']:<10} "
                f"{r['dominant_signal']:<22} {r['last_activity']}")
        print(_paint(line, r["level"], color), file=out)
    print(f"\n{len(rows)} of {data['total']} session(s)", file=out)


def _scopes(event: dict[str, Any]) -> str:
    """Which scopes a timeline row is about: ``session``, ``session+trace`` (a single-trace session), or a trace."""
    scopes = event.get("scopes") or [event.get("scope", "session")]
    if scopes == ["trace"]:
        return f"trace {str(event.get('trace_id', ''))[:8]}"
    return "+".join(scopes)


def print_session(d: dict[str, Any], out: TextIO, color: bool) -> None:
    print(f"session {d['session_id']}  key={d.get('virtual_key') or '-'}", file=out)
    print(_paint(f"level {d['level']}  confidence {d['current_confidence']:.3f} (peak {d['peak_confidence']:.3f})  "
                 f"dominant {d['dominant_signal']}", d["level"], color), file=out)
    print(f"calls {d['request_count']}  tokens {d['total_tokens']}  est. cost ${d['estimated_cost_usd']:.4f}  "
          f"first {d['first_seen']}  last {d['last_activity']}", file=out)
    print("\nsignals (current)", file=out)
    for name in SIGNAL_NAMES:
        value = float(d["current_signals"].get(name, 0.0))
        print(f"  {name:<22} {_bar(value)} {value:.2f}", file=out)
    print("\nescalation timeline", file=out)
    timeline = d.get("escalation_timeline", [])
    if not timeline:
        print("  (no transitions)", file=out)
    for e in timeline:
        where = _scopes(e)
        evidence = f"  evidence {e['evidence']}" if e.get("evidence", "none") != "none" else ""
        if e["kind"] == EVENT_ESCALATION:
            text = (f"  {e['time']}  {where:<14} {e['from_level']:>9} -> {e['to_level']:<9} conf {e['confidence']:.3f}  "
                    f"{e['dominant_signal']}{evidence}")
            print(_paint(text, e["to_level"], color), file=out)
        else:
            detail = e.get("rule_name") or e.get("detector")
            print(f"  {e['time']}  {where:<14} {e['kind']}: {detail} {e['action']} ({e['mode']}) "
                  f"{e.get('message', '')}{evidence}", file=out)
    history = d.get("signal_history", [])[-15:]
    if history:
        print("\nrecent calls (newest last)", file=out)
        short = {"content_similarity": "cont", "tool_call_repetition": "tool", "response_stagnation": "resp",
                 "error_cycling": "err", "token_velocity": "tokv", "context_growth": "ctx", "cost_velocity": "costv"}
        print("  " + "  ".join(f"{short[n]:>5}" for n in SIGNAL_NAMES) + "   conf  level", file=out)
        for row in history:
            values = "  ".join(f"{float(row[n]):>5.2f}" for n in SIGNAL_NAMES)
            print(_paint(f"  {values}  {float(row['confidence']):.3f}  {row['level']}", row["level"], color), file=out)


def run_sessions(endpoint: str, token: str | None, limit: int, offset: int, color: bool,
                 out: TextIO | None = None) -> int:
    out = out or sys.stdout
    data = AdminClient(endpoint, token).get("/sessions", limit=limit, offset=offset)
    print_sessions(data, out, color and out.isatty())
    return 0


def run_session(endpoint: str, token: str | None, session_id: str, color: bool, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        detail = AdminClient(endpoint, token).get(f"/sessions/{quote(session_id, safe='')}")
    except LookupError:
        print(f"unknown session: {session_id}", file=sys.stderr)
        return 1
    print_session(detail, out, color and out.isatty())
    return 0
