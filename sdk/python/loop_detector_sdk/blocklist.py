"""A local copy of the service's block list (``GET /v1/blocklist``), refreshed in the background with
``If-None-Match`` (a ``304`` costs no body), so a check for a blocked scope is refused without a network
round trip. Entries expire on their own ``expires_at``.

Staleness is asymmetric. Before a check, the copy is trusted only while it is at most ``max_stale`` seconds
old: a list that old may miss an unblock, and the service can be asked instead. After a check that *failed*
(the service unreachable, slow or answering nonsense), any copy still blocks, however old (``stale_ok``):
a block is lifted by an admin or by its own expiry, never by an outage. Fail open is for the scopes the
service said nothing about, not a way around a block it already announced."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

GROUPS = (("sessions", "session"), ("traces", "trace"), ("keys", "key"), ("features", "feature"))


@dataclass(frozen=True, slots=True)
class BlockEntry:
    scope: str
    id: str
    reason: str
    rule_name: str = ""
    detector: str = ""
    expires_at: float | None = None  # unix seconds


class LocalBlocklist:
    def __init__(self, max_stale: float = 30.0) -> None:
        self.max_stale = max_stale
        self.etag: str | None = None
        self.fetched_at: float | None = None  # time.monotonic() of the last 200 or 304
        self.fetches = 0
        self.not_modified = 0
        self._by_scope: dict[str, dict[str, BlockEntry]] = {scope: {} for _, scope in GROUPS}
        self._lock = threading.Lock()

    @property
    def fresh(self) -> bool:
        return self.fetched_at is not None and time.monotonic() - self.fetched_at <= self.max_stale

    def apply(self, status: int, etag: str | None, body: dict[str, Any] | None) -> bool:
        """Take a ``/v1/blocklist`` answer; returns whether it was usable (200 or 304)."""
        if status == 304:
            self.fetched_at = time.monotonic()
            self.not_modified += 1
            return True
        if status != 200 or body is None:
            return False
        fresh: dict[str, dict[str, BlockEntry]] = {}
        for group, scope in GROUPS:
            fresh[scope] = {
                str(e["id"]): BlockEntry(scope, str(e["id"]), str(e.get("reason", "")), str(e.get("rule_name", "")),
                                         str(e.get("detector", "")), e.get("expires_at"))
                for e in body.get(group, [])
            }
        with self._lock:
            self._by_scope = fresh
            self.etag = etag
            self.fetched_at = time.monotonic()
            self.fetches += 1
        return True

    def match(self, session_id: str | None, trace_id: str | None = None, virtual_key: str | None = None,
              feature: str | None = None, now: float | None = None, stale_ok: bool = False) -> BlockEntry | None:
        """The entry that blocks a call in these scopes (an id, or ``*`` for every id of a scope), if any.
        ``stale_ok``: consult the copy however old it is (the service could not be asked: see the module)."""
        if self.fetched_at is None or not (stale_ok or self.fresh):
            return None
        by_scope = self._by_scope
        now = now if now is not None else time.time()
        for scope, scope_id in (("session", session_id), ("trace", trace_id), ("key", virtual_key),
                                ("feature", feature)):
            if not scope_id:
                continue
            entries = by_scope[scope]
            if not entries:
                continue
            entry = entries.get(scope_id) or entries.get("*")
            if entry is not None and (entry.expires_at is None or entry.expires_at > now):
                return entry
        return None

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_scope.values())
