"""``loop-detector sessions`` and ``loop-detector session ID``: the admin API, readable in a terminal.

Both talk to a running service over HTTP (the admin endpoints under ``/admin/loop-detection/``), so they
work against the embedded process and against API replicas alike. The bearer token comes from
``--token``, ``$LOOP_DETECTOR_ADMIN_TOKEN`` or ``<data-dir>/admin-token``; a refusal says which was used, or
where the token file was looked for. Whatever else answers at the endpoint (another web service on :8080) is
named as such in one line.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
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
    "AdminClient", "AdminCommandError", "BAR_WIDTH", "LEVEL_COLORS", "ServiceUnreachable", "Token", "TokenRefused",
    "find_token", "print_session", "print_sessions", "resolve_token", "run_session", "run_sessions",
]

LEVEL_COLORS = {LEVEL_NONE: "32", LEVEL_WARN: "33", LEVEL_THROTTLE: "35", LEVEL_INJECT: "36", LEVEL_HARD_STOP: "1;31"}
BAR_WIDTH = 20


ADMIN_TOKEN_ENV = "LOOP_DETECTOR_ADMIN_TOKEN"


@dataclass(frozen=True, slots=True)
class Token:
    """The admin token the command sends (None: none found) and where it came from, or where it was looked for."""

    value: str | None
    source: str


def find_token(token: str | None, data_dir: str) -> Token:
    if token:
        return Token(token, "--token")
    if os.environ.get(ADMIN_TOKEN_ENV):
        return Token(os.environ[ADMIN_TOKEN_ENV], f"${ADMIN_TOKEN_ENV}")
    path = (Path(data_dir) / "admin-token").absolute()
    if path.exists():
        return Token(path.read_text().strip(), str(path))
    return Token(None, f"no token: not in --token, ${ADMIN_TOKEN_ENV} nor {path}")


def resolve_token(token: str | None, data_dir: str) -> str | None:
    return find_token(token, data_dir).value


class AdminCommandError(Exception):
    """The command cannot show what was asked; ``str()`` is the one line a person reads."""


class ServiceUnreachable(AdminCommandError):
    """No loop-detector answered at the endpoint (nothing did, or something else did)."""


class TokenRefused(AdminCommandError):
    """loop-detector answered, and refused the token sent (or its absence)."""


def _refused(endpoint: str, status: int, token: Token) -> TokenRefused:
    remedy = ("point --data-dir at the service's data directory (serve's --data-dir: it holds admin-token), or "
              f"pass --token or set ${ADMIN_TOKEN_ENV}")
    if token.value is None:
        return TokenRefused(f"the admin API at {endpoint} needs the admin token ({status}) and none was found ("
                            f"{token.source.removeprefix('no token: ')}): {remedy}")
    return TokenRefused(f"the admin API at {endpoint} refused the token from {token.source} ({status}): {remedy}")


def _unknown_session(response: httpx.Response) -> bool:
    """loop-detector's own 404 for a session it does not know (anything else answering 404 is not loop-detector)."""
    try:
        return bool(response.json().get("detail") == "unknown session")
    except (ValueError, AttributeError):
        return False


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return ""
    if isinstance(detail, list):  # FastAPI's validation errors
        detail = "; ".join(f"{'.'.join(map(str, d.get('loc', [])[1:]))}: {d.get('msg')}" for d in detail
                           if isinstance(d, dict))
    return str(detail or "")


class AdminClient:
    def __init__(self, endpoint: str, token: Token | str | None, timeout: float = 5.0) -> None:
        self.token = token if isinstance(token, Token) else Token(token, "--token" if token else "no token")
        headers = {"Authorization": f"Bearer {self.token.value}"} if self.token.value else {}
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
        url = f"/admin/loop-detection{path}"
        if response.status_code in (401, 403):
            raise _refused(self.endpoint, response.status_code, self.token)
        if response.status_code == 404:
            if _unknown_session(response):
                raise LookupError(path)
            raise ServiceUnreachable(f"what answers at {self.endpoint} is not loop-detector (404 to GET {url}): "
                                     "point --endpoint at the service's API (serve's --api-port)")
        if response.status_code == 422 and _detail(response):
            raise AdminCommandError(f"the admin API at {self.endpoint} refused GET {url}: {_detail(response)}")
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


_FRACTION = re.compile(r"(\d{2}:\d{2}:\d{2})\.(\d{1,3})\d*")


def when(value: Any) -> str:
    """A timestamp as the store gives it (nanoseconds), to the millisecond at most."""
    return _FRACTION.sub(r"\1.\2", str(value))


def dominant(signal: Any, confidence: Any) -> str:
    """The dominant signal, or ``-`` where there is no confidence for any signal to dominate."""
    try:
        idle = round(float(confidence), 3) <= 0.0  # as printed: 0.000
    except (TypeError, ValueError):
        idle = False
    return "-" if idle or not signal else str(signal)


def print_sessions(data: dict[str, Any], out: TextIO, color: bool) -> None:
    rows = data["sessions"]
    header = f"{'session':<36} {'key':<16} {'calls':>6} {'confidence':>10}  {'level':<10} {'dominant signal':<22} last activity"
    print(header, file=out)
    print("-" * len(header), file=out)
    for r in rows:
        line = (f"{str(r['session_id'])[:36]:<36} {str(r.get('virtual_key') or '-')[:16]:<16} "
                f"{r['request_count']:>6} {r['confidence']:>10.3f}  {r['level']:<10} "
                f"{dominant(r['dominant_signal'], r['confidence']):<22} {when(r['last_activity'])}")
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
                 f"dominant {dominant(d['dominant_signal'], d['current_confidence'])}", d["level"], color), file=out)
    print(f"calls {d['request_count']}  tokens {d['total_tokens']}  est. cost ${d['estimated_cost_usd']:.4f}  "
          f"first {when(d['first_seen'])}  last {when(d['last_activity'])}", file=out)
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
            text = (f"  {when(e['time'])}  {where:<14} {e['from_level']:>9} -> {e['to_level']:<9} "
                    f"conf {e['confidence']:.3f}  {dominant(e['dominant_signal'], e['confidence'])}{evidence}")
            print(_paint(text, e["to_level"], color), file=out)
        else:
            detail = e.get("rule_name") or e.get("detector")
            print(f"  {when(e['time'])}  {where:<14} {e['kind']}: {detail} {e['action']} ({e['mode']}) "
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


def run_sessions(endpoint: str, token: Token | str | None, limit: int, offset: int, color: bool,
                 out: TextIO | None = None) -> int:
    out = out or sys.stdout
    data = AdminClient(endpoint, token).get("/sessions", limit=limit, offset=offset)
    print_sessions(data, out, color and out.isatty())
    return 0


def run_session(endpoint: str, token: Token | str | None, session_id: str, color: bool, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        detail = AdminClient(endpoint, token).get(f"/sessions/{quote(session_id, safe='')}")
    except LookupError:
        print(f"unknown session: {session_id}", file=sys.stderr)
        return 1
    print_session(detail, out, color and out.isatty())
    return 0
