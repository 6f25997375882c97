"""The webhook outbox in ClickHouse (``otel.loop_webhook_outbox``): its rows, and every statement that reads or
writes it.

A delivery is one (endpoint, event) pair; each attempt writes a new version of its row (ReplacingMergeTree), so
the table always says what is pending, delivered or dead, and a restarted service resumes from it. Events come
from ``otel.loop_events`` (what the detector wrote), read past a cursor kept in ``otel.loop_meta``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from detector.settings.vocabulary import EVENT_BUDGET, EVENT_ESCALATION, EVENT_RULE
from detector.storage.transport import Store, insert_rows

__all__ = ["DELIVERED", "DEAD", "Delivery", "DeliveryStatus", "OUTBOX_TABLE", "PENDING", "OutboxStore"]

OUTBOX_TABLE = "otel.loop_webhook_outbox"
DeliveryStatus = Literal["pending", "delivered", "dead"]
PENDING: DeliveryStatus = "pending"
DELIVERED: DeliveryStatus = "delivered"
DEAD: DeliveryStatus = "dead"

CURSOR_KEY = "webhooks:cursor"
_ALERT_KINDS = (EVENT_ESCALATION, EVENT_RULE, EVENT_BUDGET)

_COLUMNS = ("endpoint, event_id, kind, body, status, attempts, toUnixTimestamp64Micro(next_attempt_at) AS next_us, "
            "last_status, last_error, toUnixTimestamp64Micro(created_at) AS created_us, "
            "toUnixTimestamp64Micro(updated_at) AS updated_us")
SELECT_PENDING = f"SELECT {_COLUMNS} FROM {OUTBOX_TABLE} FINAL WHERE status = 'pending' ORDER BY created_at"
SELECT_DEAD = (f"SELECT {_COLUMNS} FROM {OUTBOX_TABLE} FINAL WHERE status = 'dead' "
               "ORDER BY updated_at DESC LIMIT {limit:UInt32}")
SELECT_DEAD_BY_ID = f"SELECT {_COLUMNS} FROM {OUTBOX_TABLE} FINAL WHERE status = 'dead' AND event_id = {{id:String}}"
SELECT_ALL_DEAD = f"SELECT {_COLUMNS} FROM {OUTBOX_TABLE} FINAL WHERE status = 'dead'"
SELECT_KNOWN = (f"SELECT endpoint, event_id FROM {OUTBOX_TABLE} FINAL "
                "WHERE event_id IN {ids:Array(String)}")
COUNT_BY_STATUS = f"SELECT status, count() AS n FROM {OUTBOX_TABLE} FINAL GROUP BY status"
SELECT_CURSOR = "SELECT value FROM otel.loop_meta FINAL WHERE key = {key:String}"
SELECT_NOW_US = "SELECT toUnixTimestamp64Micro(now64(6)) AS now_us"
# The alert-worthy events the detector wrote after the cursor, oldest first (the columns webhooks.payload reads).
SELECT_NEW_EVENTS = """
SELECT toUnixTimestamp64Micro(inserted_at) AS inserted_us, toString(ts) AS ts, kind, scope, scope_id, session_id,
       trace_id, span_id, virtual_key, feature, detector, rule_name, action, mode, from_level, to_level, confidence,
       signals, dominant_signal, consecutive, message
FROM otel.loop_events
WHERE inserted_at > fromUnixTimestamp64Micro({cursor:Int64}) AND inserted_at <= fromUnixTimestamp64Micro({upto:Int64})
  AND kind IN {kinds:Array(String)}
ORDER BY inserted_at
LIMIT {limit:UInt32}
"""


@dataclass(slots=True)
class Delivery:
    """One event for one endpoint, as its latest row says."""

    endpoint: str
    event_id: str
    kind: str
    body: str  # the exact JSON sent (and signed) on every attempt
    status: DeliveryStatus = PENDING
    attempts: int = 0
    next_us: int = 0
    last_status: int = 0
    last_error: str = ""
    created_us: int = 0
    updated_us: int = 0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Delivery:
        return cls(endpoint=row["endpoint"], event_id=row["event_id"], kind=row["kind"], body=row["body"],
                   status=row["status"], attempts=int(row["attempts"]), next_us=int(row["next_us"]),
                   last_status=int(row["last_status"]), last_error=row["last_error"],
                   created_us=int(row["created_us"]), updated_us=int(row.get("updated_us", 0)))

    def public(self) -> dict[str, Any]:
        """What the admin API shows of a delivery."""
        return asdict(self)


class OutboxStore:
    """Reads and writes of the outbox and its cursor; strictly increasing row versions."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._last_version = 0
        self._lock = threading.Lock()

    def _version(self) -> int:
        with self._lock:
            self._last_version = max(self._last_version + 1, time.time_ns() // 1000)
            return self._last_version

    def now_us(self) -> int:
        return int(self.store.rows(SELECT_NOW_US)[0]["now_us"])

    def write(self, deliveries: Sequence[Delivery]) -> None:
        rows = []
        for d in deliveries:
            rows.append({"endpoint": d.endpoint, "event_id": d.event_id, "kind": d.kind, "body": d.body,
                         "status": d.status, "attempts": d.attempts, "next_attempt_at": _ch_time(d.next_us),
                         "last_status": d.last_status, "last_error": d.last_error[:1000],
                         "created_at": _ch_time(d.created_us), "version": self._version()})
        insert_rows(self.store, OUTBOX_TABLE, rows)

    def pending(self) -> list[Delivery]:
        return [Delivery.from_row(r) for r in self.store.rows(SELECT_PENDING)]

    def dead(self, limit: int = 100) -> list[Delivery]:
        return [Delivery.from_row(r) for r in self.store.rows(SELECT_DEAD, {"limit": limit})]

    def dead_for(self, event_id: str | None) -> list[Delivery]:
        if event_id is None:
            return [Delivery.from_row(r) for r in self.store.rows(SELECT_ALL_DEAD)]
        return [Delivery.from_row(r) for r in self.store.rows(SELECT_DEAD_BY_ID, {"id": event_id})]

    def known(self, event_ids: Iterable[str]) -> set[tuple[str, str]]:
        ids = sorted(set(event_ids))
        if not ids:
            return set()
        return {(r["endpoint"], r["event_id"]) for r in self.store.rows(SELECT_KNOWN, {"ids": ids})}

    def counts(self) -> dict[str, int]:
        return {r["status"]: int(r["n"]) for r in self.store.rows(COUNT_BY_STATUS)}

    def cursor(self) -> int | None:
        rows = self.store.rows(SELECT_CURSOR, {"key": CURSOR_KEY})
        return int(rows[0]["value"]) if rows else None

    def save_cursor(self, cursor_us: int) -> None:
        insert_rows(self.store, "otel.loop_meta", [{"key": CURSOR_KEY, "value": str(cursor_us),
                                                    "version": self._version()}])

    def new_events(self, cursor_us: int, upto_us: int, limit: int = 10_000) -> list[dict[str, Any]]:
        return self.store.rows(SELECT_NEW_EVENTS, {"cursor": cursor_us, "upto": upto_us, "kinds": list(_ALERT_KINDS),
                                                   "limit": limit})


def _ch_time(us: int) -> str:
    """Unix microseconds as a DateTime64(6) literal (UTC)."""
    seconds, micros = divmod(max(us, 0), 10**6)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}"
