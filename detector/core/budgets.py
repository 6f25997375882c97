"""Budgets: spend per feature, per session and per virtual key, over a run, a UTC day or a UTC month.

Spend is the sum of the calls' cost (the span's cost attribute, else the configured price table: see
:func:`detector.core.pricing.resolve_cost`). The detector cycle accounts every scored LLM call incrementally
(:meth:`BudgetTracker.account`): running totals per ``(scope, id, period key)`` where the period key is
``run`` (the scope's lifetime: for a session its life until it is evicted, for a feature or key all time),
``d:YYYY-MM-DD`` or ``m:YYYY-MM`` (calendar UTC, by the call's span time). Totals are kept for every
scope and period whatever the configured budgets, so a budget added at run time (admin API) sees the
spend of its current period at once. Nothing rescans history: totals are persisted in ``otel.loop_meta``
with each detector checkpoint (and replayed with it), and on the very first start a windowed aggregate
over ``otel.genai_calls`` (the current UTC month only) seeds them (:mod:`detector.storage.budget_totals`).

A budget is exhausted when its spend reaches its limit (``spent >= limit``), so a $0 budget is
exhausted at once, before any spend. The first time a budget is seen exhausted for an id and period
(by the detector, or by the API refusing a call for a $0 budget) a ``loop_events`` row is written:
``kind = 'budget'``, ``action = 'block'`` (blocking budget) or ``'alert'``, ``rule_name`` = the budget.
"""

from __future__ import annotations

import calendar
import functools
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from detector.core.events import event_row
from detector.core.tuning import BudgetSpec
from detector.settings.vocabulary import (
    ACTION_BLOCK,
    BUDGET_ALERT,
    BUDGET_BLOCK,
    DETECTOR_BUDGET,
    EVENT_BUDGET,
    SCOPE_FEATURE,
    SCOPE_SESSION,
)
from detector.settings.vocabulary import BUDGET_SCOPES as _BUDGET_SCOPES

__all__ = [
    "BUDGET_SCOPES", "BudgetStatus", "BudgetTracker", "META_PREFIX", "budget_event", "period_end_us", "period_key",
]

BUDGET_SCOPES: Final[tuple[str, ...]] = _BUDGET_SCOPES  # this compiled module's own constant
META_PREFIX = "budget:"


def period_key(period: str, ts_us: int) -> str:
    if period == "run":
        return "run"
    t = time.gmtime(ts_us // 1_000_000)
    if period == "day":
        return f"d:{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
    return f"m:{t.tm_year:04d}-{t.tm_mon:02d}"


def period_end_us(period: str, now_us: int) -> int:
    """When the current period ends (unix microseconds, UTC); 0 for ``run`` (it never rolls over)."""
    if period == "run":
        return 0
    t = time.gmtime(now_us // 1_000_000)
    if period == "day":
        start = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0))
        return (start + 86_400) * 1_000_000
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return calendar.timegm((year, month, 1, 0, 0, 0)) * 1_000_000


def _current_keys(ts_us: int) -> tuple[str, str, str]:
    return _day_keys(ts_us // _US_PER_DAY)


_US_PER_DAY: Final = 86_400 * 1_000_000


@functools.lru_cache(maxsize=64)
def _day_keys(day: int) -> tuple[str, str, str]:
    """The period keys of a UTC day (every call of a cycle falls on one or two days: formatted once)."""
    ts_us = day * _US_PER_DAY
    return "run", period_key("day", ts_us), period_key("month", ts_us)


@dataclass(slots=True)
class BudgetStatus:
    name: str
    scope: str
    id: str
    period: str
    spent_usd: float
    limit_usd: float
    action: str
    exhausted: bool
    resets_at_us: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "scope": self.scope, "id": self.id, "period": self.period,
                "spent_usd": round(self.spent_usd, 6), "limit_usd": self.limit_usd, "action": self.action,
                "exhausted": self.exhausted, "resets_at": self.resets_at_us / 1e6 if self.resets_at_us else None}


def budget_event(budget: BudgetSpec, scope_id: str, spent: float, pk: str, ts_ns: int, *, session_id: str = "",
                 trace_id: str = "", span_id: str = "", virtual_key: str = "", feature: str = "") -> dict[str, Any]:
    """The ``kind = 'budget'`` row of ``otel.loop_events`` for one exhaustion."""
    return event_row(
        ts_ns=ts_ns, kind=EVENT_BUDGET, scope=budget.scope, scope_id=scope_id, session_id=session_id, trace_id=trace_id,
        span_id=span_id, virtual_key=virtual_key, feature=feature, detector=DETECTOR_BUDGET, rule_name=budget.name,
        action=ACTION_BLOCK if budget.action == BUDGET_BLOCK else BUDGET_ALERT,
        message=f"budget exhausted: spent ${spent:.4f} of ${budget.limit_usd:.2f} ({budget.period} {pk.split(':', 1)[-1]})",
    )


class BudgetTracker:
    """Running spend totals and the configured budgets. Written by the detector cycle (one thread), read by
    the API (many): every access takes the lock, held for dictionary operations only."""

    def __init__(self, budgets: Iterable[BudgetSpec] = ()) -> None:
        self._lock = threading.Lock()
        self.budgets: list[BudgetSpec] = list(budgets)
        self.totals: dict[tuple[str, str], dict[str, float]] = {}  # (scope, id) -> period key -> usd
        self.announced: dict[tuple[str, str], set[tuple[str, str]]] = {}  # (scope, id) -> {(budget, period key)}
        self.dirty: set[tuple[str, str]] = set()
        self.pending_events: list[dict[str, Any]] = []  # announced by the API, written by the next cycle
        self.generation = 0
        self._pruned_for = ""
        self._day, self._keys = -1, ("", "", "")  # the period keys of the last call's day

    # -- configuration -----------------------------------------------------------------------------------
    def set_budgets(self, budgets: Iterable[BudgetSpec]) -> None:
        with self._lock:
            self.budgets = list(budgets)
            self.generation += 1

    def account(self, *, ts_ns: int, cost_usd: float, session_id: str, virtual_key: str, feature: str,
                trace_id: str = "", span_id: str = "") -> list[dict[str, Any]]:
        """Add one call's cost to every total it belongs to; returns the events of budgets it exhausted."""
        ts_us = ts_ns // 1000
        day = ts_us // _US_PER_DAY
        if day != self._day:  # every call of a cycle falls on one or two days
            self._day, self._keys = day, _day_keys(day)
        keys = self._keys
        events: list[dict[str, Any]] = []
        with self._lock:
            for scope in BUDGET_SCOPES:
                scope_id = feature if scope == SCOPE_FEATURE else session_id if scope == SCOPE_SESSION else virtual_key
                if not scope_id:
                    continue
                key = (scope, scope_id)
                totals = self.totals.get(key)
                if totals is None:
                    totals = self.totals[key] = {}
                if cost_usd > 0:
                    for pk in keys:
                        totals[pk] = totals.get(pk, 0.0) + cost_usd
                    self.dirty.add(key)
                    self.generation += 1
                for budget in self.budgets:
                    if budget.scope != scope or budget.match not in ("*", scope_id):
                        continue
                    pk = period_key(budget.period, ts_us)
                    spent = totals.get(pk, 0.0)
                    if spent >= budget.limit_usd and self._announce(budget, scope, scope_id, pk):
                        events.append(budget_event(budget, scope_id, spent, pk, ts_ns, session_id=session_id,
                                                   trace_id=trace_id, span_id=span_id, virtual_key=virtual_key,
                                                   feature=feature))
        return events

    def _announce(self, budget: BudgetSpec, scope: str, scope_id: str, pk: str) -> bool:
        """Mark (budget, id, period) announced; False when it already was. Caller holds the lock."""
        seen = self.announced.setdefault((scope, scope_id), set())
        if (budget.name, pk) in seen:
            return False
        seen.add((budget.name, pk))
        self.dirty.add((scope, scope_id))
        return True

    def forget(self, scope: str, ids: Iterable[str]) -> None:
        """Drop the totals of scopes that ended (evicted sessions: their run is over)."""
        with self._lock:
            for scope_id in ids:
                if self.totals.pop((scope, scope_id), None) is not None or (scope, scope_id) in self.announced:
                    self.announced.pop((scope, scope_id), None)
                    self.dirty.add((scope, scope_id))
            self.generation += 1

    def prune(self, now_us: int) -> None:
        """Drop totals of past days and months (once per new day)."""
        _, day, month = _current_keys(now_us)
        if day == self._pruned_for:
            return
        with self._lock:
            for key, totals in self.totals.items():
                old = [pk for pk in totals if (pk.startswith("d:") and pk < day) or (pk.startswith("m:") and pk < month)]
                for pk in old:
                    del totals[pk]
                seen = self.announced.get(key)
                if seen:
                    stale = {x for x in seen if x[1] != "run" and x[1] < (day if x[1].startswith("d:") else month)}
                    seen -= stale
                if old:
                    self.dirty.add(key)
            self._pruned_for = day

    # -- reads (API) ---------------------------------------------------------------------------------------
    def spent(self, scope: str, scope_id: str, period: str, now_us: int) -> float:
        totals = self.totals.get((scope, scope_id))
        return totals.get(period_key(period, now_us), 0.0) if totals else 0.0

    def status(self, ids: dict[str, str | None], now_us: int | None = None) -> list[BudgetStatus]:
        """Every budget that applies to these ids (``{"feature": ..., "session": ..., "key": ...}``)."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        out = []
        with self._lock:
            for budget in self.budgets:
                scope_id = ids.get(budget.scope)
                if not scope_id or budget.match not in ("*", scope_id):
                    continue
                spent = self.spent(budget.scope, scope_id, budget.period, now_us)
                out.append(BudgetStatus(budget.name, budget.scope, scope_id, budget.period, spent, budget.limit_usd,
                                        budget.action, spent >= budget.limit_usd,
                                        period_end_us(budget.period, now_us)))
        return out

    def exhausted(self, ids: dict[str, str | None], now_us: int | None = None,
                  session_id: str = "") -> list[BudgetStatus]:
        """The exhausted budgets among those that apply; announces (as an event for the next detector cycle)
        any exhaustion not announced yet, e.g. a $0 budget refusing a scope the detector has never seen."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        found = [s for s in self.status(ids, now_us) if s.exhausted]
        if not found:
            return found
        with self._lock:
            by_name = {b.name: b for b in self.budgets}
            for s in found:
                budget = by_name.get(s.name)
                pk = period_key(s.period, now_us)
                if budget is not None and self._announce(budget, s.scope, s.id, pk):
                    self.pending_events.append(budget_event(
                        budget, s.id, s.spent_usd, pk, now_us * 1000, session_id=session_id,
                        virtual_key=ids.get("key") or "", feature=ids.get("feature") or ""))
        return found

    def blocked(self, now_us: int | None = None) -> list[BudgetStatus]:
        """Every (blocking budget, id) exhausted now; a $0 budget matching ``*`` is listed once, id ``*``."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        out = []
        with self._lock:
            for budget in self.budgets:
                if budget.action != BUDGET_BLOCK:
                    continue
                ends = period_end_us(budget.period, now_us)
                if budget.match != "*":
                    spent = self.spent(budget.scope, budget.match, budget.period, now_us)
                    if spent >= budget.limit_usd:
                        out.append(BudgetStatus(budget.name, budget.scope, budget.match, budget.period, spent,
                                                budget.limit_usd, budget.action, True, ends))
                elif budget.limit_usd <= 0:
                    out.append(BudgetStatus(budget.name, budget.scope, "*", budget.period, 0.0, 0.0, budget.action,
                                            True, ends))
                else:
                    pk = period_key(budget.period, now_us)
                    for (scope, scope_id), totals in self.totals.items():
                        if scope == budget.scope and totals.get(pk, 0.0) >= budget.limit_usd:
                            out.append(BudgetStatus(budget.name, scope, scope_id, budget.period, totals[pk],
                                                    budget.limit_usd, budget.action, True, ends))
        return out

    def drain_events(self) -> list[dict[str, Any]]:
        with self._lock:
            events, self.pending_events = self.pending_events, []
        return events

    # -- persistence ---------------------------------------------------------------------------------------
    def snapshot_rows(self, shard_key: str, version: int) -> list[dict[str, Any]]:
        """``loop_meta`` rows for every scope changed since the last snapshot (empty value: forgotten)."""
        with self._lock:
            rows = []
            for scope, scope_id in self.dirty:
                totals = self.totals.get((scope, scope_id))
                seen = self.announced.get((scope, scope_id))
                value = "" if totals is None and not seen else orjson.dumps(
                    {"t": totals or {}, "a": sorted(seen or ())}).decode()
                rows.append({"key": f"{META_PREFIX}{shard_key}:{scope}:{scope_id}", "value": value,
                             "version": version})
            self.dirty.clear()
        return rows

    def restore(self, rows: Iterable[dict[str, Any]], shard_key: str) -> int:
        prefix = f"{META_PREFIX}{shard_key}:"
        n = 0
        with self._lock:
            for row in rows:
                if not row["value"]:
                    continue
                scope, scope_id = row["key"][len(prefix):].split(":", 1)
                data = orjson.loads(row["value"])
                self.totals[(scope, scope_id)] = {k: float(v) for k, v in data.get("t", {}).items()}
                if data.get("a"):
                    self.announced[(scope, scope_id)] = {(str(a), str(b)) for a, b in data["a"]}
                n += 1
            self.generation += 1
        return n

    def add_totals(self, totals: dict[tuple[str, str, str], float]) -> None:
        """Seed totals (the first-start backfill)."""
        with self._lock:
            for (scope, scope_id, pk), usd in totals.items():
                bucket = self.totals.setdefault((scope, scope_id), {})
                bucket[pk] = bucket.get(pk, 0.0) + usd
                self.dirty.add((scope, scope_id))
            self.generation += 1
