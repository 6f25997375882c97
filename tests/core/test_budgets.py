"""Budgets: per feature, session and key; run / UTC day / UTC month; alert or block; $0 blocks at once.

Pure tracker behaviour, the engine's incremental accounting and events, then end to end: real spans priced
by the config's table, the 429 and the ``kind = 'budget'`` event, ``/api/budgets/status``, totals that
survive a restart without double counting, and the first-start seed from ``otel.genai_calls``.
"""

from __future__ import annotations

import calendar
import time

import httpx
import pytest
from support.enforcement import agent, make_config, uid
from support.engines import make_engine

from detector.core.budgets import BudgetTracker, period_end_us, period_key
from detector.core.models import Call
from detector.core.tuning import BudgetSpec
from detector.detection.engine_config import budget_specs, engine_tuning
from detector.service.process import running_service
from detector.settings.config import parse_config
from detector.settings.loop_settings import Budget
from detector.storage.budget_totals import load_totals
from detector.storage.transport import ChdbStore

DAY1 = calendar.timegm((2026, 12, 31, 23, 0, 0)) * 10**6  # unix microseconds
DAY2 = calendar.timegm((2027, 1, 1, 1, 0, 0)) * 10**6


def budget(name: str, scope: str = "feature", match: str = "*", limit: float = 1.0, period: str = "day",
           action: str = "block") -> BudgetSpec:
    return budget_specs([Budget(name=name, scope=scope, match=match, limit_usd=limit, period=period,  # type: ignore[arg-type]
                                action=action)])[0]


def spend(tracker: BudgetTracker, usd: float, ts_us: int = DAY1, session: str = "s1", key: str = "k1",
          feature: str = "search") -> list[dict]:
    return tracker.account(ts_ns=ts_us * 1000, cost_usd=usd, session_id=session, virtual_key=key, feature=feature)


def test_periods_are_calendar_utc():
    assert period_key("run", DAY1) == "run"
    assert period_key("day", DAY1) == "d:2026-12-31" and period_key("month", DAY1) == "m:2026-12"
    assert period_end_us("day", DAY1) == calendar.timegm((2027, 1, 1, 0, 0, 0)) * 10**6
    assert period_end_us("month", DAY1) == calendar.timegm((2027, 1, 1, 0, 0, 0)) * 10**6
    assert period_end_us("month", DAY2) == calendar.timegm((2027, 2, 1, 0, 0, 0)) * 10**6
    assert period_end_us("run", DAY1) == 0


def test_running_totals_per_scope_and_period():
    tracker = BudgetTracker([budget("day", limit=1.0), budget("month", period="month", limit=10, action="alert")])
    assert spend(tracker, 0.4) == []
    events = spend(tracker, 0.6)  # reaches the limit: exhausted (spent >= limit)
    assert [(e["kind"], e["action"], e["rule_name"], e["scope"], e["scope_id"]) for e in events] == [
        ("budget", "block", "day", "feature", "search")]
    assert spend(tracker, 0.5) == []  # announced once per id and period
    assert tracker.totals[("feature", "search")] == {"run": 1.5, "d:2026-12-31": 1.5, "m:2026-12": 1.5}
    assert tracker.totals[("session", "s1")]["run"] == 1.5 and tracker.totals[("key", "k1")]["run"] == 1.5
    ids = {"feature": "search", "session": "s1", "key": "k1"}
    status = {s.name: s for s in tracker.status(ids, DAY1)}
    assert status["day"].exhausted and status["day"].spent_usd == 1.5
    assert not status["month"].exhausted
    # a new UTC day: the daily budget starts again, the monthly one (a new month too) as well
    assert not [s for s in tracker.status(ids, DAY2) if s.exhausted]
    assert spend(tracker, 0.2, DAY2) == []
    assert tracker.spent("feature", "search", "day", DAY2) == pytest.approx(0.2)
    tracker.prune(DAY2)
    assert set(tracker.totals[("feature", "search")]) == {"run", "d:2027-01-01", "m:2027-01"}


def test_star_budgets_apply_to_each_id_and_specific_ones_to_theirs():
    tracker = BudgetTracker([budget("each", match="*", limit=1), budget("only-b", match="b", limit=0.1)])
    spend(tracker, 2.0, feature="a")
    spend(tracker, 0.5, feature="b")
    blocked = {(s.name, s.id) for s in tracker.blocked(DAY1)}
    assert blocked == {("each", "a"), ("only-b", "b")}
    assert [s.name for s in tracker.exhausted({"feature": "c"}, DAY1)] == []


def test_zero_budget_blocks_at_once_and_is_announced_once():
    tracker = BudgetTracker([budget("zero", scope="key", match="k9", limit=0, period="month")])
    found = tracker.exhausted({"key": "k9"}, DAY1, session_id="s")
    assert [s.name for s in found] == ["zero"] and found[0].spent_usd == 0
    assert tracker.exhausted({"key": "k9"}, DAY1)  # still exhausted...
    events = tracker.drain_events()  # ...but announced once, for the next detector cycle to write
    assert [(e["kind"], e["action"], e["rule_name"], e["scope_id"]) for e in events] == [
        ("budget", "block", "zero", "k9")]
    assert tracker.drain_events() == []
    star = BudgetTracker([budget("all-features", match="*", limit=0)])
    assert [(s.scope, s.id) for s in star.blocked(DAY1)] == [("feature", "*")]


def test_snapshot_restore_and_forget():
    tracker = BudgetTracker([budget("day", limit=1)])
    spend(tracker, 1.5)
    rows = tracker.snapshot_rows("0/1", version=1)
    assert {r["key"] for r in rows} == {"budget:0/1:feature:search", "budget:0/1:session:s1", "budget:0/1:key:k1"}
    assert tracker.snapshot_rows("0/1", version=2) == []  # only what changed
    restored = BudgetTracker([budget("day", limit=1)])
    restored.restore(rows, "0/1")
    assert restored.totals == tracker.totals
    assert spend(restored, 0.1) == []  # the exhaustion was already announced before the restart
    tracker.forget("session", ["s1"])
    rows = tracker.snapshot_rows("0/1", version=3)
    assert rows == [{"key": "budget:0/1:session:s1", "value": "", "version": 3}]


def call(i: int, *, feature: str = "search", session: str = "s1", key: str = "k1", cost: float = 0.0,
         tokens: tuple[int, int] = (1000, 0)) -> Call:
    return Call(ts_ns=DAY1 * 1000 + i * 10**9, trace_id=f"t-{session}", span_id=f"sp{i}", session_id=session,
                feature=feature, virtual_key=key, model="gpt-4o-mini", input_tokens=tokens[0], output_tokens=tokens[1],
                cost_usd=cost, request_fp=100 + i)


def test_engine_accounts_each_call_once_and_emits_budget_events():
    config = parse_config({
        "prices": {"gpt-4o-mini": {"input_per_million": 250.0, "output_per_million": 0}},  # $0.25 a call
        "budgets": [{"name": "search daily", "scope": "feature", "match": "search", "limit_usd": 0.5,
                     "period": "day", "action": "block"},
                    {"name": "run alert", "scope": "session", "limit_usd": 0.7, "period": "run", "action": "alert"},
                    {"name": "free key", "scope": "key", "match": "free", "limit_usd": 0, "action": "block"}]})
    engine = make_engine(config)
    out = engine.process([call(0), call(1, cost=0.3)])  # the span's own cost wins over the price table
    assert [(e["rule_name"], e["action"], e["scope_id"]) for e in out.events if e["kind"] == "budget"] == [
        ("search daily", "block", "search")]
    out = engine.process([call(2), call(3, key="free")])
    budget_events = [(e["rule_name"], e["action"], e["scope_id"]) for e in out.events if e["kind"] == "budget"]
    assert budget_events == [("run alert", "alert", "s1"), ("free key", "block", "free")]
    assert engine.budgets.totals[("session", "s1")]["run"] == pytest.approx(1.05)
    engine.reconfigure(engine_tuning(config))  # a reload clears session state, never the money spent
    assert engine.budgets.totals[("session", "s1")]["run"] == pytest.approx(1.05)


def test_budgets_end_to_end_with_restart(tmp_path):
    prices = {"gpt-4o-mini": {"input_per_million": 1000.0, "output_per_million": 0.0}}  # 500 tokens: $0.50 a call
    budgets = [
        {"name": "search daily", "scope": "feature", "match": "search", "limit_usd": 1.0, "period": "day",
         "action": "block"},
        {"name": "run watch", "scope": "session", "match": "*", "limit_usd": 0.5, "period": "run",
         "action": "alert"},
        {"name": "key monthly", "scope": "key", "match": "*", "limit_usd": 100, "period": "month", "action": "block"},
    ]
    config = make_config(prices=prices, budgets=budgets, rules=[])
    session, key = uid("b"), uid("vk")
    from detector.cli.demo import healthy_step
    from detector.evaluation.simulate import SimulatedStep

    def step(i: int) -> SimulatedStep:
        s = healthy_step(i)
        s.input_tokens, s.output_tokens = 500, 0
        return s

    with running_service(config, tmp_path) as (service, eps):
        with agent(eps.otlp, eps.api, session, virtual_key=key, feature="search", step=step) as a:
            a.call()
            assert httpx.post(f"{eps.api}/v1/check", json={"session_id": session, "feature": "search"}).json()[
                "action"] == "warn"  # the run alert budget ($0.50) is exhausted: warn, not block
            a.call()
        r = httpx.post(f"{eps.api}/v1/check", json={"session_id": uid("other"), "feature": "search"})
        assert r.status_code == 429 and r.json()["error"]["reason"] == "budget_exhausted"
        assert r.json()["error"]["rule_name"] == "search daily"
        status = httpx.get(f"{eps.api}/api/budgets/status",
                           headers={"X-Cost-Feature": "search", "X-Cost-Session": session, "X-Cost-Key": key}).json()
        assert status["can_proceed"] is False
        by_name = {b["name"]: b for b in status["budgets"]}
        assert by_name["search daily"]["spent_usd"] == pytest.approx(1.0) and by_name["search daily"]["exhausted"]
        assert by_name["key monthly"]["spent_usd"] == pytest.approx(1.0) and not by_name["key monthly"]["exhausted"]
        assert by_name["run watch"]["exhausted"] and by_name["run watch"]["action"] == "alert"
        events = service.store.rows(
            "SELECT scope, scope_id, action, rule_name FROM otel.loop_events WHERE kind = 'budget' ORDER BY ts")
        assert {(e["scope"], e["scope_id"], e["action"], e["rule_name"]) for e in events} == {
            ("feature", "search", "block", "search daily"), ("session", session, "alert", "run watch")}
        assert len(events) == 2
        blocklist = httpx.get(f"{eps.api}/v1/blocklist").json()
        assert [e["id"] for e in blocklist["features"]] == ["search"]
        assert blocklist["features"][0]["expires_at"] > time.time()

    with running_service(config, tmp_path) as (service, eps):  # totals persisted, nothing counted twice
        status = httpx.get(f"{eps.api}/api/budgets/status", headers={"X-Cost-Feature": "search"}).json()
        assert status["budgets"][0]["spent_usd"] == pytest.approx(1.0) and status["can_proceed"] is False
        assert service.store.rows("SELECT count() AS n FROM otel.loop_events WHERE kind = 'budget'")[0]["n"] == 2
        watermark = service.job.checkpoint_us

    # the very first start on a store that already has calls (no totals persisted): seeded from the month
    store = ChdbStore(tmp_path)
    try:
        store.command("ALTER TABLE otel.loop_meta DELETE WHERE startsWith(key, 'budget:') SETTINGS mutations_sync = 1")
        tracker = BudgetTracker(budget_specs(config.budgets))
        assert load_totals(store, tracker, config, "0/1", watermark) > 0
        assert tracker.spent("feature", "search", "day", int(time.time() * 1e6)) == pytest.approx(1.0)
        assert tracker.spent("key", key, "month", int(time.time() * 1e6)) == pytest.approx(1.0)
    finally:
        store.close()
