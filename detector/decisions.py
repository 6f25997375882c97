"""Decisions: what the enforcement API tells an agent, and how scopes combine.

A decision exists per scope (trace, session, key, feature, plus manual actions and budgets); the
decision for one call combines every scope it belongs to and the strongest action wins:
block > inject > throttle > warn > allow. Pure data and pure functions; :class:`DecisionBook` is the
in-memory index the API reads (filled by the detector cycle, or loaded from ``otel.loop_decisions``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from detector.escalation import ACTION_RANK

SCOPES = ("trace", "session", "key", "feature")

# Why a call is refused, as the 429 body's ``reason`` says it. A blocking rule in enforce mode gives its
# detector's name (``exact_prompt_repeat``, ``trace_cap``, ``failure_loop``, ``velocity``).
REASON_LOOP = "loop_detected"
REASON_SESSION_BLOCKED = "session_blocked"
REASON_KEY_REVOKED = "key_revoked"
REASON_BUDGET = "budget_exhausted"

RETRY_AFTER_SECONDS = 60


@dataclass(slots=True)
class Decision:
    scope: str
    scope_id: str
    action: str = "allow"
    level: str = "none"
    confidence: float = 0.0
    dominant_signal: str = "none"
    detector: str = "none"
    reason: str = ""
    rule_name: str = ""
    delay_seconds: float = 0.0
    instruction: str = ""
    expires_at_us: int = 0  # 0: no expiry
    session_id: str = ""
    updated_us: int = field(default_factory=lambda: int(time.time() * 1e6))

    @property
    def rank(self) -> int:
        return ACTION_RANK[self.action]

    def active(self, now_us: int) -> bool:
        return self.expires_at_us == 0 or now_us < self.expires_at_us

    def to_row(self, version: int) -> dict[str, object]:
        return {
            "scope": self.scope,
            "scope_id": self.scope_id,
            "action": self.action,
            "level": self.level,
            "confidence": self.confidence,
            "dominant_signal": self.dominant_signal,
            "detector": self.detector,
            "reason": self.reason,
            "rule_name": self.rule_name,
            "delay_seconds": self.delay_seconds,
            "instruction": self.instruction,
            "expires_at": self.expires_at_us / 1e6,
            "version": version,
        }

    @classmethod
    def from_row(cls, row: dict[str, object]) -> Decision:
        return cls(
            scope=str(row["scope"]),
            scope_id=str(row["scope_id"]),
            action=str(row["action"]),
            level=str(row["level"]),
            confidence=float(row["confidence"]),  # type: ignore[arg-type]
            dominant_signal=str(row["dominant_signal"]),
            detector=str(row["detector"]),
            reason=str(row["reason"]),
            rule_name=str(row["rule_name"]),
            delay_seconds=float(row["delay_seconds"]),  # type: ignore[arg-type]
            instruction=str(row["instruction"]),
            expires_at_us=int(row.get("expires_us", 0) or 0),  # type: ignore[call-overload]
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def warning_header(d: Decision) -> str:
    """The ``x-loop-warning`` header value: ``{confidence:.3}; dominant_signal={name}`` (e.g. ``0.672; ...``)."""
    return f"{d.confidence:.3f}; dominant_signal={d.dominant_signal}"


def block_body(d: Decision, session_id: str) -> dict[str, object]:
    """The HTTP 429 body of the spec for a refused call; ``reason`` says which detector or action refused it."""
    return {"error": {
        "reason": d.reason or REASON_LOOP,
        "session_id": session_id,
        "confidence": round(d.confidence, 6),
        "dominant_signal": d.dominant_signal,
        "enforcement_level": "hard_stop",
        "scope": d.scope,
        "rule_name": d.rule_name,
    }}


def strongest(decisions: Iterable[Decision]) -> Decision | None:
    """The decision with the strongest action; on a tie, the higher confidence, then the first given."""
    best: Decision | None = None
    for d in decisions:
        if best is None or (d.rank, d.confidence) > (best.rank, best.confidence):
            best = d
    return best


class DecisionBook:
    """Current decisions by (scope, id), thread-safe; what ``GET /v1/decision`` reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_scope: dict[tuple[str, str], Decision] = {}
        self.generation = 0

    def put(self, decisions: Iterable[Decision]) -> None:
        with self._lock:
            for d in decisions:
                # kept even when it is allow: the current confidence of a calm session is worth serving
                # (entries leave with their scope, on expiry or eviction)
                self._by_scope[(d.scope, d.scope_id)] = d
            self.generation += 1

    def drop(self, scope: str, scope_id: str) -> None:
        with self._lock:
            self._by_scope.pop((scope, scope_id), None)
            self.generation += 1

    def clear(self) -> None:
        with self._lock:
            self._by_scope.clear()
            self.generation += 1

    def get(self, scope: str, scope_id: str) -> Decision | None:
        return self._by_scope.get((scope, scope_id))

    def all(self) -> list[Decision]:
        with self._lock:
            return list(self._by_scope.values())

    def blocked(self, now_us: int | None = None) -> list[Decision]:
        """Every scope whose current decision is ``block`` (and not expired)."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        return [d for d in self.all() if d.action == "block" and d.active(now_us)]

    def lookup(
        self,
        session_id: str | None,
        trace_id: str | None = None,
        virtual_key: str | None = None,
        feature: str | None = None,
        now_us: int | None = None,
    ) -> Decision:
        """The combined decision for a call in these scopes (allow when nothing applies)."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        found = []
        for scope, scope_id in (("trace", trace_id), ("session", session_id), ("key", virtual_key), ("feature", feature)):
            if scope_id:
                d = self._by_scope.get((scope, scope_id))
                if d is not None and d.active(now_us):
                    found.append(d)
        best = strongest(found)
        if best is None:
            return Decision(scope="session", scope_id=session_id or "", session_id=session_id or "")
        return best
