"""The decision for one call: every scope it belongs to and every source of a decision, combined.

Sources, all in memory (a check costs dictionary lookups, never a query):

* the detector's decisions per scope (:class:`~detector.core.decisions.DecisionBook`): escalation levels and
  enforced blocking rules on the trace, session, key;
* manual actions (:class:`~detector.enforcement.manual.ManualActions`): a blocked session, a revoked key;
* budgets (:class:`~detector.core.budgets.BudgetTracker`): an exhausted blocking budget blocks, an exhausted
  alert budget warns;
* with ``pending``, the pre-flight detectors over the pending call (:mod:`detector.enforcement.preflight`).

The strongest action wins (block > inject > throttle > warn > allow); among blocks, a manual action is
reported first, then the detector's decision, then budgets, then the pre-flight rules.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from detector.core.budgets import BudgetTracker
from detector.core.decisions import REASON_BUDGET, REASON_LOOP, Decision, DecisionBook, strongest
from detector.core.tuning import PlannedRule
from detector.enforcement.manual import ManualAction, ManualActions
from detector.enforcement.preflight import PendingWindows
from detector.settings.vocabulary import (
    ACTION_BLOCK,
    ACTION_WARN,
    BUDGET_BLOCK,
    DETECTOR_BUDGET,
    DETECTOR_MANUAL,
    SCOPE_FEATURE,
    SCOPE_KEY,
    SCOPE_SESSION,
    SCOPE_TRACE,
)

__all__ = ["BLOCKLIST_GROUPS", "Enforcer", "etag_matches"]

BLOCKLIST_GROUPS = {SCOPE_SESSION: "sessions", SCOPE_TRACE: "traces", SCOPE_KEY: "keys", SCOPE_FEATURE: "features"}


def _manual_decision(action: ManualAction, base: Decision) -> Decision:
    return Decision(scope=action.scope, scope_id=action.scope_id, action=ACTION_BLOCK, level=base.level,
                    confidence=base.confidence, dominant_signal=base.dominant_signal, detector=DETECTOR_MANUAL,
                    reason=action.refusal_reason, expires_at_us=action.expires_at_us)


class Enforcer:
    def __init__(self, book: DecisionBook, manual: ManualActions, budgets: Callable[[], BudgetTracker],
                 preflight: PendingWindows, rules: Callable[[], Sequence[PlannedRule]],
                 early_warning: Callable[[], bool] = lambda: True) -> None:
        self.book = book
        self._early_warning = early_warning
        self.manual = manual
        self._budgets = budgets
        self.preflight = preflight
        self._rules = rules
        self._blocklist_cache: tuple[tuple[int, ...], bytes, str] | None = None

    @property
    def budgets(self) -> BudgetTracker:
        return self._budgets()

    def session_of(self, trace_id: str) -> str:
        """The session a trace belongs to, as the detector last published it (its trace decision names it); a trace
        without a known session is its own session (the detector's fallback scope, keyed by the trace id)."""
        d = self.book.get(SCOPE_TRACE, trace_id)
        return d.session_id if d is not None and d.session_id else trace_id

    def decide(self, session_id: str | None, trace_id: str | None = None, virtual_key: str | None = None,
               feature: str | None = None, pending: dict[str, Any] | None = None,
               now_us: int | None = None) -> Decision:
        """The decision for a call in these scopes; with ``pending``, the pending call is recorded and checked.
        A trace id alone is enough: the trace's session is the one the detector knows for it (:meth:`session_of`)."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        if not session_id:
            if not trace_id:
                raise ValueError("a session id or a trace id is required")
            session_id = self.session_of(trace_id)
        base = self.book.lookup(session_id, trace_id, virtual_key, feature, now_us)
        candidates: list[Decision] = []
        for scope, scope_id in ((SCOPE_SESSION, session_id), (SCOPE_KEY, virtual_key)):
            action = self.manual.get(scope, scope_id, now_us)
            if action is not None:
                candidates.append(_manual_decision(action, base))
        candidates.append(base)
        ids = {SCOPE_FEATURE: feature, SCOPE_SESSION: session_id, SCOPE_KEY: virtual_key}
        budgets = self.budgets
        if budgets.budgets:
            for s in budgets.exhausted(ids, now_us, session_id=session_id):
                block = s.action == BUDGET_BLOCK
                candidates.append(Decision(
                    scope=s.scope, scope_id=s.id, action=ACTION_BLOCK if block else ACTION_WARN, level=base.level,
                    confidence=base.confidence, dominant_signal=base.dominant_signal, detector=DETECTOR_BUDGET,
                    reason=REASON_BUDGET if block else "", rule_name=s.name, expires_at_us=s.resets_at_us))
        if pending:
            candidates.extend(self.preflight.evaluate(
                session_id=session_id, trace_id=trace_id, rules=self._rules(), now_us=now_us, base=base,
                request_fingerprint=pending.get("request_fingerprint"), tool_name=pending.get("tool_name"),
                tool_arguments=pending.get("tool_arguments"), tool_evidence=_tool_evidence(pending),
                evidence=pending.get("evidence"), early_warning=self._early_warning()))
        best = strongest(candidates)
        assert best is not None
        return best

    # -- the block list ---------------------------------------------------------------------------------
    def blocked_entries(self, now_us: int) -> dict[str, list[dict[str, Any]]]:
        groups: dict[str, list[dict[str, Any]]] = {name: [] for name in BLOCKLIST_GROUPS.values()}

        def add(scope: str, scope_id: str, reason: str, detector: str, rule_name: str, expires_us: int) -> None:
            groups[BLOCKLIST_GROUPS[scope]].append({
                "id": scope_id, "reason": reason, "detector": detector, "rule_name": rule_name,
                "expires_at": expires_us / 1e6 if expires_us else None})

        for a in self.manual.all(now_us):
            add(a.scope, a.scope_id, a.refusal_reason, DETECTOR_MANUAL, "", a.expires_at_us)
        for d in self.book.blocked(now_us):
            add(d.scope, d.scope_id, d.reason or REASON_LOOP, d.detector, d.rule_name, d.expires_at_us)
        for s in self.budgets.blocked(now_us):
            add(s.scope, s.id, REASON_BUDGET, DETECTOR_BUDGET, s.name, s.resets_at_us)
        for entries in groups.values():
            entries.sort(key=lambda e: (e["id"], e["reason"], e["rule_name"]))
        return groups

    def blocklist(self, now_us: int | None = None) -> tuple[bytes, str]:
        """The block list as JSON and its ETag; rebuilt when something changed, at most once a second."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        budgets = self.budgets
        key = (self.book.generation, self.manual.generation, budgets.generation, id(budgets), now_us // 1_000_000)
        cached = self._blocklist_cache
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        groups = self.blocked_entries(now_us)
        body = orjson.dumps({**groups, "count": sum(len(v) for v in groups.values())})
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        self._blocklist_cache = (key, body, etag)
        return body, etag


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """``If-None-Match`` (weak comparison, lists and ``*``) against our ETag."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False


def _tool_evidence(pending: dict[str, Any]) -> int | None:
    """The app's fingerprint of the tool about to run (``evidence.tool``), if the check carries one."""
    evidence = pending.get("evidence")
    tool = evidence.get("tool") if isinstance(evidence, dict) else None
    return int(tool) if tool is not None else None
