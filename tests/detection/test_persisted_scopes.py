"""Persisted scopes not in memory: found without a query per cycle, and expired like the ones in memory.

The index is pure (:class:`detector.storage.persisted_scopes.StoredIndex`); the job tests run real cycles on chDB and restart
the detector on the same store, as a restart of ``serve`` does.
"""

from __future__ import annotations

import time

from support.calls import genai_rows, healthy, looping

from detector.api.session_views import COUNT_SESSIONS
from detector.core.decisions import DecisionBook
from detector.detection.job import SELECT_STATES, DetectorJob
from detector.settings.config import AppConfig, parse_config
from detector.storage.persisted_scopes import StoredIndex
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore, insert_rows

MINUTE_US = 60 * 10**6


def index(**scopes: tuple[str, int]) -> StoredIndex:
    """``index(session__s1=("s1", seen_us), trace__t1=("s1", seen_us))``: scope and id joined by ``__``."""
    idx = StoredIndex()
    idx.load({"scope": k.split("__")[0], "scope_id": k.split("__")[1], "session_id": sid, "last_seen_us": seen}
             for k, (sid, seen) in scopes.items())
    return idx


def test_idle_sessions_expire_with_their_traces_and_idle_keys():
    now = 100 * MINUTE_US
    idx = index(session__old=("old", now - 40 * MINUTE_US), trace__t_old=("old", now),
                session__new=("new", now - 5 * MINUTE_US), trace__t_new=("new", now - 50 * MINUTE_US),
                trace__orphan=("", now - 40 * MINUTE_US), key__k_idle=("", now - 31 * MINUTE_US),
                key__k_busy=("", now - MINUTE_US))
    gone = idx.expired(now, 30 * MINUTE_US, max_sessions=100, sessions_in_memory=0)
    assert sorted(gone) == [("key", "k_idle"), ("session", "old"), ("trace", "orphan"), ("trace", "t_old")]
    assert sorted(idx.scopes) == [("key", "k_busy"), ("session", "new"), ("trace", "t_new")]
    assert idx.expired(now, 30 * MINUTE_US, 100, 0) == []  # nothing twice


def test_cap_drops_least_recently_active_persisted_sessions_first():
    now = 100 * MINUTE_US
    idx = index(**{f"session__s{i}": (f"s{i}", now - i * 1000) for i in range(5)})
    # 3 in memory + 5 persisted, cap 6: the two persisted sessions idle longest go
    gone = idx.expired(now, 30 * MINUTE_US, max_sessions=6, sessions_in_memory=3)
    assert sorted(gone) == [("session", "s3"), ("session", "s4")]
    assert len(idx) == 3


def test_traces_of_sessions_evicted_from_memory_go_too():
    now = 100 * MINUTE_US
    idx = index(trace__t1=("s1", now), trace__t2=("s2", now))
    assert idx.expired(now, 30 * MINUTE_US, 100, 1, evicted_sessions=["s1"]) == [("trace", "t1")]


class RecordingStore(ChdbStore):
    """The real chDB store, noting which statements ran (to see that a cycle did not look for states)."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self.statements: list[str] = []

    def rows(self, sql, params=None):
        self.statements.append(sql)
        return super().rows(sql, params)


def _job(store, config: AppConfig | None = None) -> DetectorJob:
    job = DetectorJob(store, config or AppConfig(), DecisionBook())
    job.load()
    return job


def _live_sessions(store) -> int:
    return store.rows(COUNT_SESSIONS)[0]["n"]


def test_restart_resumes_returning_sessions_and_expires_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr("detector.detection.job.DELETE_CHUNK", 2)  # three sessions and three traces expire: in chunks
    config = parse_config({"loop_detection": {"session_timeout_minutes": 30}})
    store = RecordingStore(tmp_path)
    apply_schema(store)
    calls = []
    for i in range(4):
        calls += looping(8, session=f"s{i}", trace=f"t{i}")
    insert_rows(store, "otel.genai_calls", genai_rows(calls))
    first = _job(store, config)
    first.run_cycle()
    first.checkpoint()  # (the first cycle took one already: a checkpoint is due at start)
    assert _live_sessions(store) == 4
    assert first.book.lookup("s1").action != "allow"

    job = _job(store, config)  # a restart: nothing in memory, four sessions (and their traces) persisted
    assert len(job.stored) == 8 and not job.engine.states
    assert job.book.lookup("s1").action != "allow"  # decisions are served from the start
    insert_rows(store, "otel.genai_calls", genai_rows(looping(10, session="s0", trace="t0")[16:]))
    job.run_cycle()
    assert job.engine.states[("session", "s0")].calls == 10  # resumed from the persisted state, not from zero
    assert ("session", "s0") not in job.stored and len(job.stored) == 6

    # the three sessions that never came back expire after the timeout, as if they had been in memory
    later = int(time.time() * 1e6) + 31 * MINUTE_US
    assert job.evict(now_us=later) == 4  # s0 from memory, s1-s3 from the store
    assert not job.stored and _live_sessions(store) == 0
    assert job.evicted_total == 4
    for sid in ("s0", "s1", "s2", "s3"):
        assert job.book.lookup(sid).action == "allow"
    decided = store.rows("SELECT scope_id, action FROM otel.loop_decisions FINAL WHERE scope = 'session'")
    assert {r["action"] for r in decided} == {"allow"}
    assert _job(store, config).book.lookup("s1").action == "allow"  # and stay expired after another restart
    assert not _job(store, config).stored


def test_a_cycle_looks_for_states_only_when_some_are_persisted(tmp_path):
    store = RecordingStore(tmp_path)
    apply_schema(store)
    job = _job(store)
    insert_rows(store, "otel.genai_calls", genai_rows(healthy(3, session="a", trace="ta")))
    job.run_cycle()
    assert SELECT_STATES not in store.statements  # a fresh store: nothing to load, not even asked
    job.checkpoint()

    job = _job(store)
    assert len(job.stored) == 2
    store.statements.clear()
    insert_rows(store, "otel.genai_calls", genai_rows(healthy(6, session="b", trace="tb")))
    job.run_cycle()
    assert SELECT_STATES not in store.statements  # only new scopes: none of them is persisted
    insert_rows(store, "otel.genai_calls", genai_rows(healthy(6, session="a", trace="ta")[3:]))
    job.run_cycle()
    assert store.statements.count(SELECT_STATES) == 2  # the session and its trace, once
    assert job.engine.states[("session", "a")].calls == 6 and not job.stored
    store.statements.clear()
    insert_rows(store, "otel.genai_calls", genai_rows(healthy(9, session="a", trace="ta")[6:]))
    job.run_cycle()
    assert SELECT_STATES not in store.statements


def test_reconfigure_forgets_the_persisted_scopes(tmp_path):
    store = ChdbStore(tmp_path)
    apply_schema(store)
    insert_rows(store, "otel.genai_calls", genai_rows(looping(4, session="s", trace="t")))
    first = _job(store)
    first.run_cycle()
    first.checkpoint()
    job = _job(store)
    assert len(job.stored) == 2
    job.reconfigure(AppConfig())
    assert not job.stored and _live_sessions(store) == 0
