"""Manual actions by operators: block a session, revoke a virtual key (and lift them again).

They live in memory (the enforcement API reads them on every check) and in ``otel.loop_manual``
(ReplacingMergeTree by ``(scope, scope_id, action)``; ``active = 0`` lifts an action), loaded at start so
they survive a restart. Every change, and every admin reset, is also recorded in ``otel.loop_events``
as ``kind = 'manual'`` (action ``block`` for a block or revoke, ``allow`` when lifted, ``reset``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from detector.core.decisions import REASON_KEY_REVOKED, REASON_SESSION_BLOCKED
from detector.core.events import event_row
from detector.settings.vocabulary import (
    ACTION_ALLOW,
    ACTION_BLOCK,
    DETECTOR_BLOCK_SESSION,
    DETECTOR_REVOKE_KEY,
    MANUAL_BLOCK,
    MANUAL_REVOKE,
    SCOPE_KEY,
    SCOPE_SESSION,
)
from detector.storage.transport import Store, insert_rows

__all__ = ["MANUAL_ACTIONS", "ManualAction", "ManualActions", "manual_event"]

# scope -> (the action stored in loop_manual, the 429 reason)
MANUAL_ACTIONS = {SCOPE_SESSION: (MANUAL_BLOCK, REASON_SESSION_BLOCKED), SCOPE_KEY: (MANUAL_REVOKE, REASON_KEY_REVOKED)}

SELECT_ACTIVE = """
SELECT scope, scope_id, action, reason, toUnixTimestamp64Micro(expires_at) AS expires_us,
       toUnixTimestamp64Micro(updated_at) AS updated_us
FROM otel.loop_manual FINAL
WHERE active = 1
"""


@dataclass(slots=True)
class ManualAction:
    scope: str  # session | key
    scope_id: str
    action: str  # block | revoke
    reason: str = ""  # the operator's note (free text, never shown to the agent)
    expires_at_us: int = 0  # 0: until lifted
    updated_us: int = 0

    def active(self, now_us: int) -> bool:
        return self.expires_at_us == 0 or now_us < self.expires_at_us

    @property
    def refusal_reason(self) -> str:
        return MANUAL_ACTIONS[self.scope][1]


def manual_event(scope: str, scope_id: str, action: str, message: str, *, session_id: str = "",
                 virtual_key: str = "", detector: str = "manual", now_ns: int | None = None) -> dict[str, Any]:
    """A ``kind = 'manual'`` row for ``otel.loop_events``."""
    return event_row(ts_ns=now_ns if now_ns is not None else time.time_ns(), kind="manual", scope=scope,
                     scope_id=scope_id, session_id=session_id, virtual_key=virtual_key, detector=detector,
                     action=action, message=message)


class ManualActions:
    """Blocked sessions and revoked keys, thread-safe; ``generation`` changes with every change."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._by_scope: dict[tuple[str, str], ManualAction] = {}
        self._last_version = 0
        self.generation = 0

    def _version(self) -> int:
        self._last_version = max(self._last_version + 1, time.time_ns() // 1000)
        return self._last_version

    def load(self) -> int:
        rows = self.store.rows(SELECT_ACTIVE)
        with self._lock:
            self._by_scope = {
                (r["scope"], r["scope_id"]): ManualAction(r["scope"], r["scope_id"], r["action"], r["reason"],
                                                          int(r["expires_us"]), int(r["updated_us"]))
                for r in rows if r["scope"] in MANUAL_ACTIONS
            }
            self.generation += 1
            return len(self._by_scope)

    def get(self, scope: str, scope_id: str | None, now_us: int) -> ManualAction | None:
        if not scope_id:
            return None
        action = self._by_scope.get((scope, scope_id))
        return action if action is not None and action.active(now_us) else None

    def all(self, now_us: int | None = None) -> list[ManualAction]:
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        with self._lock:
            return [a for a in self._by_scope.values() if a.active(now_us)]

    def set(self, scope: str, scope_id: str, active: bool, reason: str = "",
            ttl_seconds: float | None = None) -> ManualAction | None:
        """Apply (``active``) or lift a manual action; persisted and recorded as an event. Returns the
        action now in force (None once lifted)."""
        action_name = MANUAL_ACTIONS[scope][0]
        now_us = int(time.time() * 1e6)
        expires_us = now_us + int(ttl_seconds * 1e6) if active and ttl_seconds else 0
        with self._lock:
            version = self._version()
            insert_rows(self.store, "otel.loop_manual", [{
                "scope": scope, "scope_id": scope_id, "action": action_name, "active": int(active),
                "reason": reason, "expires_at": expires_us / 1e6, "version": version,
            }])
            if active:
                current: ManualAction | None = ManualAction(scope, scope_id, action_name, reason, expires_us, now_us)
                self._by_scope[(scope, scope_id)] = current  # type: ignore[assignment]
            else:
                current = None
                self._by_scope.pop((scope, scope_id), None)
            self.generation += 1
        verb = {(SCOPE_SESSION, True): "session blocked", (SCOPE_SESSION, False): "session unblocked",
                (SCOPE_KEY, True): "key revoked", (SCOPE_KEY, False): "key restored"}[(scope, active)]
        detail = f"{verb} by an operator" + (f": {reason}" if reason else "")
        if expires_us:
            detail += f" (for {ttl_seconds:g} s)"
        self.record(scope, scope_id, ACTION_BLOCK if active else ACTION_ALLOW, detail,
                    detector=DETECTOR_BLOCK_SESSION if scope == SCOPE_SESSION else DETECTOR_REVOKE_KEY)
        return current

    def record(self, scope: str, scope_id: str, action: str, message: str, **kw: Any) -> None:
        insert_rows(self.store, "otel.loop_events", [manual_event(scope, scope_id, action, message, **kw)])
