"""The scheduled detection job: the imperative shell around :class:`detector.core.engine.Engine`.

Each cycle:

0. one statement: the GenAI spans staged since the watermark become ``otel.genai_calls`` rows (normalized,
   fingerprinted, their content logs joined: :mod:`detector.storage.normalization`);
1. windowed SQL: the calls inserted since the watermark (``inserted_at``), never older history;
   scopes the engine does not hold in memory are loaded once from ``otel.loop_state`` (only those
   persisted: :class:`~detector.storage.persisted_scopes.StoredIndex`);
2. the engine scores them call by call in span-time order;
3. scores, events, state, decisions and the new watermark are written back, and the in-memory
   :class:`~detector.core.decisions.DecisionBook` the API reads is updated.

A cycle's writes are idempotent across a crash: before writing it records the range it read (``writing``,
watermark and cutoff) and writes its scores and events with an ``insert_deduplication_token`` naming that range.
Killed before its new watermark was written, the cycle is run again after the restart over the very same range
(the engine, replayed to the old watermark, scores the same calls the same way) with the same tokens, and what it
had already written is stored once (``clickhouse/006_detector_dedup.sql``): no score or event twice, none lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from detector.core.decisions import Decision, DecisionBook
from detector.core.engine import CycleOutput, Engine
from detector.core.models import Call
from detector.core.scope_state import ScopeState
from detector.detection.engine_config import engine_tuning
from detector.detection.gc_policy import CollectorPolicy
from detector.settings.config import AppConfig
from detector.settings.vocabulary import SCOPE_SESSION, SCOPE_TRACE
from detector.storage.budget_totals import load_totals, save_totals
from detector.storage.normalization import SELECT_NOW_US, Normalization
from detector.storage.persisted_scopes import SELECT_STORED_SCOPES, Key, StoredIndex
from detector.storage.tables import decision_table, event_table, score_table, state_table
from detector.storage.transport import Store, insert_rows

__all__ = [
    "CycleStats", "DELETE_CHUNK", "DetectorJob", "OVER_CAPACITY", "UNSAVED_MERGE_AT", "Versioner",
]

log = logging.getLogger("loop_detector.detector")

SELECT_STATES = """
SELECT scope, scope_id, session_id, virtual_key, call_count, total_tokens, cost_usd,
       toUnixTimestamp64Nano(first_seen) AS first_ns, toUnixTimestamp64Nano(last_activity) AS last_ns, state
FROM otel.loop_state FINAL
WHERE scope = {scope:String} AND scope_id IN {ids:Array(String)} AND deleted = 0
"""

SELECT_DECISIONS = """
SELECT scope, scope_id, action, level, confidence, dominant_signal, detector, reason, rule_name, delay_seconds,
       instruction, toUnixTimestamp64Micro(expires_at) AS expires_us, evidence
FROM otel.loop_decisions FINAL
WHERE action != 'allow' OR level != 'none'
"""

SELECT_META = "SELECT value FROM otel.loop_meta FINAL WHERE key = {key:String}"

# Live scopes marked deleted: each keeps its last row. The filter sits in a subquery because in the outer query
# `deleted` would be the REPLACE's alias (always 1), and nothing would be marked.
DELETE_STORED = """
INSERT INTO otel.loop_state SELECT * REPLACE (1 AS deleted, {v:UInt64} AS version)
FROM (SELECT * FROM otel.loop_state FINAL WHERE scope = {scope:String} AND scope_id IN {ids:Array(String)} AND deleted = 0)
"""
DELETE_CHUNK = 10_000  # ids per DELETE_STORED statement
DELETE_ALL_STATES = """
INSERT INTO otel.loop_state SELECT * REPLACE (1 AS deleted, {v:UInt64} AS version)
FROM (SELECT * FROM otel.loop_state FINAL WHERE deleted = 0)
"""
RESET_ALL_DECISIONS = """
INSERT INTO otel.loop_decisions SELECT * REPLACE ('allow' AS action, 'none' AS level, {v:UInt64} AS version)
FROM otel.loop_decisions FINAL
"""

# Ids are passed as one-element arrays: every store quotes array parameters exactly, whatever the characters.
SELECT_SESSION_TRACES = """
SELECT scope_id FROM otel.loop_state FINAL
WHERE scope = 'trace' AND session_id IN {ids:Array(String)} AND deleted = 0
"""
SESSION_EXISTS = """
SELECT count() AS n FROM otel.loop_state FINAL WHERE scope = 'session' AND scope_id IN {ids:Array(String)} AND deleted = 0
"""
# Sessions in memory may exceed max_sessions by this factor between eviction runs; a cycle that leaves more evicts
# at once (the least recently active first), so memory is bounded by the config, not by the rate of new sessions.
OVER_CAPACITY = 1.1
UNSAVED_MERGE_AT = 32  # cycles' lists of changed scopes kept apart before they are merged into one


@dataclass(slots=True)
class CycleStats:
    calls_read: int = 0
    calls_scored: int = 0
    events: int = 0
    seconds: float = 0.0
    watermark_us: int = 0
    lag_seconds: float = 0.0
    # where the cycle's time went: transform (staged spans to calls), read (the new calls, missing scope states),
    # score (the engine), write (scores, events, decisions, watermark), checkpoint (when one was due)
    phases: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _CycleWrites:
    """What a cycle writes once the engine has scored its calls: kept until it is all stored."""

    replay: bool
    start_us: int
    cutoff_us: int
    version: int
    out: CycleOutput
    scores: Any
    events: Any
    announced: list[dict[str, Any]]
    decisions: Any
    rebound: list[str]


class Versioner:
    """Strictly increasing versions for ReplacingMergeTree rows (microseconds, bumped on collision)."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, time.time_ns() // 1000)
            return self._last


class DetectorJob:
    """Owns the engine, the watermark and the writes. ``lock`` serialises cycles and admin actions."""

    def __init__(
        self,
        store: Store,
        config: AppConfig,
        book: DecisionBook,
        on_cycle: list[Callable[[CycleOutput, CycleStats], None]] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.book = book
        self.engine = Engine(engine_tuning(config))
        self.lock = threading.RLock()
        self.version = Versioner()
        self.on_cycle = on_cycle if on_cycle is not None else []
        # told the (scope, scope_id) of what expires, e.g. to drop the API's pending-call windows
        self.on_evict: list[Callable[[list[Key]], None]] = []
        self.watermark_us = 0  # calls up to here are in the engine
        self.processed_us = 0  # calls up to here have had their scores and events written
        self.checkpoint_us = 0  # the engine state persisted in loop_state is as of here
        self.last_checkpoint_us = 0
        # Scopes changed since the last checkpoint: each cycle's own list, merged only when a checkpoint needs
        # them (merging every cycle's scopes into one dict would cost each cycle; see _remember_unsaved).
        self.unsaved: list[list[ScopeState]] = []
        self.stored = StoredIndex()  # persisted scopes not in memory (read at load)
        self.evicted_total = 0
        self.last_stats = CycleStats()
        self.cycles = 0
        self.collector = CollectorPolicy()  # garbage collection around cycles (see detector.detection.gc_policy)
        index, count = self.shard
        self.normalization = Normalization(store, index, count)  # staged spans to calls, and the calls read
        self.rerun_cutoff_us = 0  # a cycle killed while writing: run again over (watermark, this] after a restart
        self.unwritten: _CycleWrites | None = None  # a cycle scored in memory whose writes failed: retried first

    @property
    def shard(self) -> tuple[int, int]:
        return self.config.detector.shard_index, self.config.detector.shard_count

    def _meta_key(self, name: str) -> str:
        index, count = self.shard
        return f"{name}:{index}/{count}"

    @property
    def _shard_key(self) -> str:
        index, count = self.shard
        return f"{index}/{count}"

    @property
    def _sole_writer(self) -> bool:
        """One detector owns the detector tables: every persisted scope it lacks in memory is in ``stored``.
        With shards, another detector may persist a trace or key scope this one needs as well."""
        return self.shard[1] == 1

    def _meta(self, name: str) -> int:
        rows = self.store.rows(SELECT_META, {"key": self._meta_key(name)})
        return int(rows[0]["value"]) if rows else 0

    def load(self) -> None:
        """Resume after a restart from the last checkpoint: the engine's persisted state matches the
        checkpoint watermark; calls read after it are replayed (deterministically, without writing their
        scores and events a second time) up to the last processed watermark."""
        self.checkpoint_us = self._meta("checkpoint")
        self.processed_us = max(self._meta("watermark"), self.checkpoint_us)
        self.watermark_us = self.checkpoint_us
        decisions = [Decision.from_row(r) for r in self.store.rows(SELECT_DECISIONS)]
        self.book.put(decisions)
        load_totals(self.store, self.engine.budgets, self.config, self._shard_key, self.checkpoint_us)
        index, count = self.shard
        self.stored.load(self.store.rows(SELECT_STORED_SCOPES, {"shards": count, "shard": index}))
        self.stored.discard(list(self.engine.states))
        rows = self.store.rows(SELECT_META, {"key": self._meta_key("writing")})
        if rows:
            start, _, end = str(rows[0]["value"]).partition(":")
            if int(start) == self.processed_us and int(end or 0) > self.processed_us:
                self.rerun_cutoff_us = int(end)
        log.info("detector resumed", extra={"checkpoint_us": self.checkpoint_us, "processed_us": self.processed_us,
                                            "rerun_cutoff_us": self.rerun_cutoff_us,
                                            "decisions": len(decisions), "stored_scopes": len(self.stored)})

    # -- one cycle ------------------------------------------------------------------------------
    def run_cycle(self) -> CycleStats:
        with self.lock, self.collector.cycle():
            self._retry_unwritten()
            if self.processed_us > self.watermark_us:
                self._cycle(self.processed_us, replay=True)
            if self.rerun_cutoff_us:  # the cycle a crash interrupted, over the same range, with the same tokens
                cutoff, self.rerun_cutoff_us = self.rerun_cutoff_us, 0
                self._cycle(cutoff, replay=False)
            stats = self._cycle(None, replay=False)
            if self.active_sessions() > self.config.loop_detection.max_sessions * OVER_CAPACITY:
                self.evict()  # a burst of new sessions: bounded now, not at the next eviction run
            return stats

    def _cycle(self, upto_us: int | None, replay: bool) -> CycleStats:
        started = time.perf_counter()
        # The store is held for the read's statements and for the writes' (each would otherwise wait behind an
        # ingest insert: Store.exclusive), never for Python work: rows are turned into calls, and calls into tables,
        # outside it, since an insert that waits behind them is a request that waits (docs/benchmarks.md).
        with self.store.exclusive():
            now_us = int(self.store.rows(SELECT_NOW_US)[0]["now_us"])
            cutoff = upto_us if upto_us is not None else now_us - int(self.config.detector.watermark_lag_seconds * 1e6)
            new_calls = None
            if cutoff > self.watermark_us:
                # (a replay re-reads what its cycles transformed before the restart)
                staged = replay or self.normalization.transform(self.watermark_us, cutoff)
                transformed = time.perf_counter()
                new_calls = self.normalization.read(self.watermark_us, cutoff, staged)
        if new_calls is None:  # nothing can be new (the checkpoint still runs outside the store's hold)
            self._maybe_checkpoint(now_us)
            return CycleStats(watermark_us=self.watermark_us)
        calls = Call.from_columns(new_calls.to_pydict())
        self._load_missing(calls)
        read = time.perf_counter()
        out = self.engine.process(calls, now_us=now_us)
        scored = time.perf_counter()
        self._remember_unsaved(out.dirty)
        version = self.version()
        writes = _CycleWrites(
            replay=replay, start_us=self.watermark_us, cutoff_us=cutoff, version=version, out=out,
            scores=score_table(out.scores) if not replay and len(out.scores) else None,
            events=event_table(out.events) if not replay and out.events else None,
            # exhaustions the API announced: not replayable, so kept with the writes until they are stored
            announced=self.engine.budgets.drain_events() if not replay else [],
            decisions=decision_table(out.decisions, version) if out.decisions else None,
            rebound=[trace_id for trace_id, _ in out.rebound])
        # From here the engine holds these calls: until the writes are stored, every later cycle first retries them
        # (the same range, the same deduplication tokens), never reads the calls again (_retry_unwritten).
        self.unwritten = writes
        self._write(writes)
        written = time.perf_counter()
        try:
            self._maybe_checkpoint(now_us)
        except Exception:  # the cycle's writes are stored: its observers (webhooks, metrics) still see it
            if not replay:
                self._observe(out, CycleStats(calls_read=len(calls), calls_scored=out.calls_scored,
                                              events=len(out.events), watermark_us=cutoff))
            raise
        newest = max((c.inserted_us for c in calls), default=cutoff)
        ended = time.perf_counter()
        stats = CycleStats(
            calls_read=len(calls), calls_scored=out.calls_scored, events=len(out.events),
            seconds=ended - started, watermark_us=cutoff, lag_seconds=max(0.0, (now_us - newest) / 1e6),
            phases={"transform": transformed - started, "read": read - transformed, "score": scored - read,
                    "write": written - scored, "checkpoint": ended - written},
        )
        if replay:
            return stats
        self.last_stats = stats
        self._observe(out, stats)
        return stats

    def _write(self, w: _CycleWrites) -> None:
        """A cycle's writes, then its watermark; idempotent, so that a cycle whose writes failed part-way (the store
        went away) retries them all: scores and events carry a token naming the range (stored once), decisions and
        meta rows are versioned replacements. Their timings go to the debug log (``bench/lag.py`` reads them)."""
        token = f"{self._shard_key}:{w.start_us}:{w.cutoff_us}"
        marks: dict[str, float] = {"started_at": time.time()}
        with self.store.exclusive():
            marks["held_at"] = time.time()
            if not w.replay:
                insert_rows(self.store, "otel.loop_meta", [{"key": self._meta_key("writing"),
                                                            "value": f"{w.start_us}:{w.cutoff_us}",
                                                            "version": self.version()}])
                marks["writing_at"] = time.time()
            # Served once the range is recorded (the engine holds these calls; whatever happens to the writes below,
            # the same range gives the same decisions: retried by _retry_unwritten, rerun after a restart by load()),
            # not after the inserts: /v1/check has them that much sooner. Before the watermark moves, as ever.
            self.book.put(w.out.decisions)
            marks["decided_at"] = time.time()
            if not w.replay:
                if w.scores is not None:
                    self.store.insert_arrow("otel.loop_scores", w.scores,
                                            {"insert_deduplication_token": "scores:" + token})
                    marks["scores_at"] = time.time()
                if w.events is not None:
                    self.store.insert_arrow("otel.loop_events", w.events,
                                            {"insert_deduplication_token": "events:" + token})
                    marks["events_at"] = time.time()
                if w.announced:
                    self.store.insert_arrow("otel.loop_events", event_table(w.announced),
                                            {"insert_deduplication_token": "announced:" + token})
                    w.out.events.extend(w.announced)
                    w.announced = []
            if w.decisions is not None:
                self.store.insert_arrow("otel.loop_decisions", w.decisions)
                marks["decisions_at"] = time.time()
            if w.rebound:
                self._withdraw_fallback_sessions(w.rebound, w.version)
                self.book.put(w.out.decisions)  # after the withdrawal (it drops scopes from the book), as before
            # What the API serves and reads (decisions, scores, events) is stored: the watermark it shows moves now,
            # not after the row that only a restart reads (the engine holds these calls already: a failed row is
            # written again with the rest by _retry_unwritten, and a restart before it reruns the range: load()).
            self.watermark_us = w.cutoff_us
            marks["watermark_at"] = time.time()
            if not w.replay:
                insert_rows(self.store, "otel.loop_meta",
                            [{"key": self._meta_key("watermark"), "value": str(w.cutoff_us), "version": self.version()}])
                self.processed_us = w.cutoff_us
        self.unwritten = None
        if log.isEnabledFor(logging.DEBUG):
            log.debug("cycle written", extra={"cutoff_us": w.cutoff_us, "replay": w.replay, **marks})

    def _retry_unwritten(self) -> None:
        """The writes of a cycle that failed after the engine had scored its calls, retried before anything else
        (the engine must not read those calls twice: a call scored twice would count as its own repeat)."""
        w = self.unwritten
        if w is None:
            return
        self._write(w)
        if not w.replay:
            self._observe(w.out, CycleStats(calls_scored=w.out.calls_scored, events=len(w.out.events),
                                            watermark_us=w.cutoff_us))

    def _observe(self, out: CycleOutput, stats: CycleStats) -> None:
        if not stats.seconds:
            stats.seconds = self.last_stats.seconds
        self.cycles += 1
        for observer in self.on_cycle:
            try:
                observer(out, stats)
            except Exception:  # an observer (metrics, logs, webhooks) must never break detection
                log.exception("cycle observer failed")

    def _withdraw_fallback_sessions(self, trace_ids: list[str], version: int) -> None:
        """Traces whose session became known late: the session scopes they were scored under until then (keyed by
        the trace id) now live in their sessions' (:meth:`detector.core.scope_table.ScopeTable.bind_late_session`); their decisions and stored
        states go."""
        for trace_id in trace_ids:
            self.book.drop(SCOPE_SESSION, trace_id)
        insert_rows(self.store, "otel.loop_decisions",
                    (Decision(scope=SCOPE_SESSION, scope_id=t).to_row(version) for t in trace_ids))
        for start in range(0, len(trace_ids), DELETE_CHUNK):
            self.store.command(DELETE_STORED, {"scope": SCOPE_SESSION, "ids": trace_ids[start:start + DELETE_CHUNK],
                                               "v": version})
        self.stored.discard([(SCOPE_SESSION, t) for t in trace_ids])

    def _maybe_checkpoint(self, now_us: int, force: bool = False) -> None:
        if not force and now_us - self.last_checkpoint_us < self.config.detector.checkpoint_seconds * 1e6:
            return
        self.checkpoint()
        self.last_checkpoint_us = now_us

    def checkpoint(self) -> int:
        """Persist the state of every scope changed since the last checkpoint, with its watermark."""
        with self.lock:
            if self.watermark_us <= self.checkpoint_us and not self.unsaved:
                return 0
            version = self.version()
            live = [st for key, st in self._unsaved_scopes().items() if self.engine.states.get(key) is st]
            states = state_table(live, version) if live else None  # kilobytes a scope: built before the store is held
            self.engine.budgets.prune(self.watermark_us)
            with self.store.exclusive():
                if states is not None:
                    self.store.insert_arrow("otel.loop_state", states)
                save_totals(self.store, self.engine.budgets, self._shard_key, version)
                insert_rows(self.store, "otel.loop_meta", [{"key": self._meta_key("checkpoint"),
                                                            "value": str(self.watermark_us), "version": self.version()}])
            self.checkpoint_us = self.watermark_us
            self.unsaved.clear()
            return len(live)

    def _remember_unsaved(self, dirty: list[ScopeState]) -> None:
        if not dirty:
            return
        self.unsaved.append(dirty)
        if len(self.unsaved) > UNSAVED_MERGE_AT:  # a long checkpoint interval: bounded, merged as it goes
            self.unsaved = [list(self._unsaved_scopes().values())]

    def _unsaved_scopes(self) -> dict[tuple[str, str], ScopeState]:
        merged: dict[tuple[str, str], ScopeState] = {}
        for dirty in self.unsaved:
            for st in dirty:
                merged[(st.scope, st.scope_id)] = st
        return merged

    def _load_missing(self, calls: list[Call]) -> None:
        if self._sole_writer and not self.stored:
            return  # nothing persisted is missing from memory (finding that out call by call is not free)
        wanted = self.engine.needed_scopes(calls)
        self._load([k for k in wanted if k in self.stored] if self._sole_writer else list(wanted))

    def _load(self, keys: list[Key]) -> None:
        depth = self.config.loop_detection.history_depth
        for scope, ids in _ids_by_scope(keys).items():
            rows = self.store.rows(SELECT_STATES, {"scope": scope, "ids": ids})
            self.engine.adopt(ScopeState.from_row(r, depth) for r in rows)
        self.stored.discard(keys)

    # -- lifecycle and admin --------------------------------------------------------------------
    def evict(self, now_us: int | None = None) -> int:
        """Expire idle sessions and cap tracked sessions (the eviction job), in memory and among those persisted
        and not loaded since a restart; now and then, collect garbage in full
        (:meth:`detector.detection.gc_policy.CollectorPolicy.collect_if_due`). Returns the sessions dropped."""
        with self.lock:
            self.collector.collect_if_due()
            now_us = int(time.time() * 1e6) if now_us is None else now_us
            cfg = self.config.loop_detection
            removed = self.engine.evict(now_us)
            in_memory = sum(1 for key in self.engine.states if key[0] == SCOPE_SESSION)
            stale = self.stored.expired(now_us, cfg.session_timeout_minutes * 60 * 10**6, cfg.max_sessions, in_memory,
                                        [st.scope_id for st in removed if st.scope == SCOPE_SESSION])
            gone = [(st.scope, st.scope_id) for st in removed] + stale
            if not gone:
                return 0
            for observer in self.on_evict:
                try:
                    observer(gone)
                except Exception:
                    log.exception("eviction observer failed")
            version = self.version()
            if removed:
                self.store.insert_arrow("otel.loop_state", state_table(removed, version, deleted=True))
            for scope, ids in _ids_by_scope(stale).items():  # (after a long downtime, maybe most sessions: in chunks)
                for start in range(0, len(ids), DELETE_CHUNK):
                    self.store.command(DELETE_STORED, {"scope": scope, "ids": ids[start:start + DELETE_CHUNK],
                                                       "v": version})
            for scope, scope_id in gone:
                self.book.drop(scope, scope_id)
            insert_rows(self.store, "otel.loop_decisions",
                        (Decision(scope=scope, scope_id=scope_id).to_row(version) for scope, scope_id in gone))
            if stale:
                self.engine.budgets.forget(SCOPE_SESSION, [scope_id for scope, scope_id in stale if scope == SCOPE_SESSION])
            sessions = sum(1 for key in gone if key[0] == SCOPE_SESSION)
            self.evicted_total += sessions
            return sessions

    def reset_session(self, session_id: str) -> list[str] | None:
        """Fresh state for a session and every trace of it (the admin reset): level, confidence, history, rule
        trips. Returns the traces reset, or None when the session is unknown (neither in memory nor persisted)."""
        with self.lock:
            known = (SCOPE_SESSION, session_id) in self.engine.states or self.store.rows(
                SESSION_EXISTS, {"ids": [session_id]})[0]["n"] > 0
            if not known:
                return None
            traces = {st.scope_id for st in self.engine.states.values()
                      if st.scope == SCOPE_TRACE and st.session_id == session_id}
            traces |= {r["scope_id"] for r in self.store.rows(SELECT_SESSION_TRACES, {"ids": [session_id]})}
            self.reset_scope(SCOPE_SESSION, session_id)
            for trace_id in sorted(traces):
                self.reset_scope(SCOPE_TRACE, trace_id)
            return sorted(traces)

    @property
    def last_cycle_seconds(self) -> float:
        return self.last_stats.seconds

    def active_sessions(self) -> int:
        """Sessions held in memory now."""
        return sum(1 for (scope, _) in list(self.engine.states) if scope == SCOPE_SESSION)

    def memory_groups(self) -> list[list[Any]]:
        """What the detector holds in memory, by kind (scope states, budget totals): snapshots, for estimates."""
        with self.lock:
            return [list(self.engine.states.values()), list(self.engine.budgets.totals.items())]

    def reset_scope(self, scope: str, scope_id: str) -> ScopeState:
        """Fresh state for one scope; it keeps existing (admin reset)."""
        with self.lock:
            self._load_missing_scope(scope, scope_id)
            st = self.engine.reset(scope, scope_id)
            version = self.version()
            self.store.insert_arrow("otel.loop_state", state_table([st], version))
            decision = self.engine.decision_for(st)
            insert_rows(self.store, "otel.loop_decisions", [decision.to_row(version)])
            self.book.put([decision])
            return st

    def _load_missing_scope(self, scope: str, scope_id: str) -> None:
        if (scope, scope_id) not in self.engine.states:
            self._load([(scope, scope_id)])

    def update_budgets(self, config: AppConfig) -> None:
        """Swap the budgets (nothing else changed): no state is cleared, spend totals stay."""
        with self.lock:
            self.config = config
            self.engine.retune(engine_tuning(config))

    def reconfigure(self, config: AppConfig) -> None:
        """Apply a new config and clear session state (as specified for hot reload)."""
        with self.lock:
            self.config = config
            self.engine.reconfigure(engine_tuning(config))
            self.stored.clear()
            self.book.clear()
            version = self.version()
            self.store.command(DELETE_ALL_STATES, {"v": version})
            self.store.command(RESET_ALL_DECISIONS, {"v": version})


def _ids_by_scope(keys: list[Key]) -> dict[str, list[str]]:
    """``(scope, scope_id)`` keys as the ids of each scope (the statements take one scope's ids at a time)."""
    by_scope: dict[str, list[str]] = defaultdict(list)
    for scope, scope_id in keys:
        by_scope[scope].append(scope_id)
    return by_scope
