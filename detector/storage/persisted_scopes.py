"""The scopes persisted in ``otel.loop_state`` that the engine does not hold in memory.

After a restart the engine starts empty and loads a scope's state from the store when a call needs it. Two
things need to know, without asking the store, which persisted scopes are still out there:

- the detection cycle: when nothing persisted is missing from memory (a detector that has run a while, or
  a fresh data directory), it need not look for scopes to load at all; otherwise it asks the store only for
  those persisted, never for the new scopes every cycle brings;
- the eviction job: a session idle past ``session_timeout_minutes`` that never came back after the restart
  must still expire, like the ones in memory (:meth:`detector.core.engine.Engine.evict`), or it would be listed,
  counted and served its last decision forever.

The index is read once when the detector resumes (:data:`SELECT_STORED_SCOPES`); a scope leaves it when it
is loaded into memory or expires. Plain data, no I/O: the job reads and writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from detector.settings.vocabulary import SCOPE_SESSION, SCOPE_TRACE

__all__ = ["Key", "StoredIndex", "StoredScope"]

Key = tuple[str, str]  # (scope, scope_id)

# Live scopes of this shard (sessions and their traces by the session's hash, keys and features on every shard,
# as in the cycle's query) with the last time their state was written: a checkpoint writes a scope's state
# within ``checkpoint_seconds`` of its last call, so this is the engine's ``last_seen_us`` (what it evicts by)
# give or take that, and a column: the state JSON, kilobytes a scope, is not read.
SELECT_STORED_SCOPES = """
SELECT scope, scope_id, session_id, toUnixTimestamp64Micro(updated_at) AS last_seen_us
FROM otel.loop_state FINAL
WHERE deleted = 0
  AND (scope IN ('key', 'feature') OR cityHash64(session_id) % {shards:UInt32} = {shard:UInt32})
"""


@dataclass(frozen=True, slots=True)
class StoredScope:
    session_id: str
    last_seen_us: int


class StoredIndex:
    """Persisted scopes not in memory, by ``(scope, scope_id)``."""

    def __init__(self) -> None:
        self.scopes: dict[Key, StoredScope] = {}

    def __len__(self) -> int:
        return len(self.scopes)

    def __contains__(self, key: object) -> bool:
        return key in self.scopes

    def load(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Replace the index with :data:`SELECT_STORED_SCOPES` rows (the detector resumes with nothing in memory)."""
        self.scopes = {(r["scope"], r["scope_id"]): StoredScope(r["session_id"], int(r["last_seen_us"])) for r in rows}

    def discard(self, keys: Iterable[Key]) -> None:
        """These scopes are in memory now (or no longer stored)."""
        for key in keys:
            self.scopes.pop(key, None)

    def clear(self) -> None:
        self.scopes.clear()

    def expired(self, now_us: int, timeout_us: int, max_sessions: int, sessions_in_memory: int,
                evicted_sessions: Iterable[str] = ()) -> list[Key]:
        """What the eviction job drops, removed from the index: as :meth:`detector.core.engine.Engine.evict` does in
        memory, sessions idle past the timeout with their traces, keys and features idle as long, and, while the
        tracked sessions (``sessions_in_memory`` plus these) exceed ``max_sessions``, the least recently active.
        A persisted session has been idle at least since the restart, longer than any in memory: it goes first.
        ``evicted_sessions``: sessions the engine dropped from memory this time, whose persisted traces go too."""
        cutoff = now_us - timeout_us
        sessions = sorted((st.last_seen_us, key[1]) for key, st in self.scopes.items() if key[0] == SCOPE_SESSION)
        excess = max(0, len(sessions) + sessions_in_memory - max_sessions)
        dropped = {sid for i, (seen, sid) in enumerate(sessions) if seen < cutoff or i < excess}
        dropped.update(evicted_sessions)
        gone: list[Key] = []
        for key, st in self.scopes.items():
            scope = key[0]
            if scope == SCOPE_SESSION:
                drop = key[1] in dropped
            elif scope == SCOPE_TRACE:
                drop = st.session_id in dropped or (not st.session_id and st.last_seen_us < cutoff)
            else:
                drop = st.last_seen_us < cutoff
            if drop:
                gone.append(key)
        self.discard(gone)
        return gone
