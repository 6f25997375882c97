"""The SDK's plain data: a decision, the error a refused call raises. No dependencies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ACTIONS = ("allow", "warn", "throttle", "inject", "block")

# Where a decision came from.
SOURCE_SERVER = "server"  # the enforcement API answered
SOURCE_CACHE = "cache"  # refused locally: the scope is on the cached block list
SOURCE_FAIL_OPEN = "fail_open"  # the API could not be reached in time; fail_open=True lets the call proceed
SOURCE_FAIL_CLOSED = "fail_closed"  # ... fail_open=False refuses it

REASON_UNAVAILABLE = "enforcement_unavailable"


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do before the next call: ``allow``, ``warn``, ``throttle`` (wait ``delay_seconds``),
    ``inject`` (add ``instruction`` to the system prompt) or ``block`` (do not make the call)."""

    action: str = "allow"
    level: str = "none"
    confidence: float = 0.0
    dominant_signal: str = "none"
    detector: str = "none"
    scope: str = "session"
    reason: str = ""
    rule_name: str = ""
    delay_seconds: float = 0.0
    instruction: str = ""
    session_id: str = ""
    source: str = SOURCE_SERVER
    warning: str | None = None  # the x-loop-warning header, from warn up
    retry_after: float | None = None  # for block
    error: dict[str, Any] | None = field(default=None, compare=False)  # for block: the 429 body
    # the service's answer only: how old its decisions were (seconds since its last detection cycle that succeeded;
    # growing while its store is unreachable). The answer is applied whatever it is (docs/sdk.md, "Fail safe").
    stale_seconds: float = 0.0

    @property
    def blocked(self) -> bool:
        return self.action == "block"

    @classmethod
    def from_json(cls, data: dict[str, Any], warning: str | None = None) -> Decision:
        return cls(
            action=str(data.get("action", "allow")), level=str(data.get("level", "none")),
            confidence=float(data.get("confidence", 0.0)), dominant_signal=str(data.get("dominant_signal", "none")),
            detector=str(data.get("detector", "none")), scope=str(data.get("scope", "session")),
            reason=str(data.get("reason", "")), rule_name=str(data.get("rule_name", "")),
            delay_seconds=float(data.get("delay_seconds", 0.0)), instruction=str(data.get("instruction", "")),
            session_id=str(data.get("session_id", "")), warning=warning,
            stale_seconds=float(data.get("stale_seconds", 0.0)),
        )

    @classmethod
    def refused(cls, body: dict[str, Any], *, source: str = SOURCE_SERVER, retry_after: float | None = 60.0,
                warning: str | None = None) -> Decision:
        """A ``block`` from a 429 body (``{"error": {...}}``)."""
        err = body.get("error", {}) if isinstance(body, dict) else {}
        return cls(
            action="block", level="hard_stop" if err.get("reason") == "loop_detected" else "none",
            confidence=float(err.get("confidence", 0.0)), dominant_signal=str(err.get("dominant_signal", "none")),
            detector=str(err.get("detector", "")), scope=str(err.get("scope", "session")),
            reason=str(err.get("reason", "")), rule_name=str(err.get("rule_name", "")),
            session_id=str(err.get("session_id", "")), source=source, warning=warning, retry_after=retry_after,
            error=body, stale_seconds=float(err.get("stale_seconds", 0.0)),
        )


def block_body(session_id: str, reason: str, *, scope: str = "session", rule_name: str = "",
               confidence: float = 0.0, dominant_signal: str = "none") -> dict[str, Any]:
    """A 429-shaped body for a call refused on the client side (cached block list, fail closed)."""
    return {"error": {"reason": reason, "session_id": session_id, "confidence": confidence,
                      "dominant_signal": dominant_signal, "enforcement_level": "hard_stop", "scope": scope,
                      "rule_name": rule_name}}


class LoopBlockedError(Exception):
    """The call must not proceed. ``body`` is the HTTP 429 body (``{"error": {"reason": ...}}``)."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.body: dict[str, Any] = decision.error or block_body(decision.session_id, decision.reason or "blocked")
        self.reason = decision.reason
        self.retry_after = decision.retry_after
        super().__init__(f"loop-detector refused the call: {self.reason or 'blocked'}"
                         + (f" ({decision.rule_name})" if decision.rule_name else "")
                         + (f" [session {decision.session_id}]" if decision.session_id else ""))
