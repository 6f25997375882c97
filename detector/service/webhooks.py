"""Alert webhooks for users without Grafana: enforcement transitions, rule trips, budget exhaustion.

Detection never waits on a webhook: events are queued and a worker thread delivers them, signed with
HMAC-SHA256 (header ``X-Loop-Signature: sha256=<hex of HMAC(secret, body)>``), retried with
exponential backoff, and de-duplicated (the same event is never delivered twice to one URL, even if the
detector produces it again). The queue is bounded: when a receiver is down for long, the oldest
undelivered events are dropped and counted, rather than memory growing without end.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from detector.core.escalation import LEVEL_RANK
from detector.settings.config import Webhook
from detector.settings.vocabulary import EVENT_BUDGET, EVENT_ESCALATION, EVENT_RULE, LEVEL_NONE

__all__ = [
    "DeliveryStats", "EVENT_ID_HEADER", "SIGNATURE_HEADER", "WebhookDispatcher", "event_id", "payload", "sign",
    "wants",
]

log = logging.getLogger("loop_detector.webhooks")

SIGNATURE_HEADER = "X-Loop-Signature"
EVENT_ID_HEADER = "X-Loop-Event-Id"


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def event_id(event: dict[str, Any]) -> str:
    """A stable id: the same transition of the same scope at the same call is the same event."""
    key = "|".join(str(event.get(k, "")) for k in ("kind", "scope", "scope_id", "span_id", "to_level", "rule_name",
                                                   "detector", "action"))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def wants(hook: Webhook, event: dict[str, Any]) -> bool:
    """Whether a webhook subscribes to an event: its kind, and for escalations a rise to ``min_level`` or above."""
    kind = event.get("kind")
    if kind == EVENT_ESCALATION:
        to_level, from_level = event.get("to_level", LEVEL_NONE), event.get("from_level", LEVEL_NONE)
        return (EVENT_ESCALATION in hook.events and LEVEL_RANK[to_level] > LEVEL_RANK[from_level]
                and LEVEL_RANK[to_level] >= LEVEL_RANK[hook.min_level])
    if kind in (EVENT_RULE, EVENT_BUDGET):
        return kind in hook.events
    return False


def payload(event: dict[str, Any], dashboard_url: str | None) -> dict[str, Any]:
    body = {
        "id": event_id(event),
        "kind": event.get("kind"),
        "time": event.get("ts"),
        "session_id": event.get("session_id"),
        "trace_id": event.get("trace_id"),
        "virtual_key": event.get("virtual_key"),
        "feature": event.get("feature"),
        "scope": event.get("scope"),
        "scope_id": event.get("scope_id"),
        "from_level": event.get("from_level"),
        "to_level": event.get("to_level"),
        "confidence": event.get("confidence"),
        "signals": event.get("signals", {}),
        "dominant_signal": event.get("dominant_signal"),
        "detector": event.get("detector"),
        "rule_name": event.get("rule_name"),
        "action": event.get("action"),
        "mode": event.get("mode"),
        "message": event.get("message"),
    }
    if dashboard_url and event.get("session_id"):
        body["dashboard_url"] = (f"{dashboard_url.rstrip('/')}/d/loop-session/session-drill-down"
                                 f"?var-session_id={quote(str(event['session_id']))}")
    return body


@dataclass
class DeliveryStats:
    delivered: int = 0
    failed_attempts: int = 0
    dropped: int = 0
    duplicates: int = 0
    by_url: dict[str, int] = field(default_factory=dict)


class WebhookDispatcher:
    """Queues events and delivers them from one background thread."""

    def __init__(self, hooks: Iterable[Webhook], dashboard_url: str | None = None, max_queue: int = 10_000,
                 max_attempts: int = 6, backoff_seconds: float = 0.5, max_backoff_seconds: float = 30.0,
                 timeout: float = 5.0) -> None:
        self.hooks = list(hooks)
        self.dashboard_url = dashboard_url
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.stats = DeliveryStats()
        self._queue: queue.Queue[tuple[Webhook, str, bytes] | None] = queue.Queue(maxsize=max_queue)
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._seen_lock = threading.Lock()
        self._client = httpx.Client(timeout=timeout)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loop-webhooks", daemon=True)
        self._thread.start()

    def submit(self, events: Iterable[dict[str, Any]]) -> int:
        """Queue the events the webhooks want; returns how many deliveries were queued. Never blocks."""
        queued = 0
        for event in events:
            for hook in self.hooks:
                if not wants(hook, event):
                    continue
                body_dict = payload(event, self.dashboard_url)
                if not self._first_time(hook.url, body_dict["id"]):
                    self.stats.duplicates += 1
                    continue
                body = orjson.dumps(body_dict)
                try:
                    self._queue.put_nowait((hook, body_dict["id"], body))
                    queued += 1
                except queue.Full:
                    self.stats.dropped += 1
                    log.warning("webhook queue full, event dropped", extra={"url": hook.url})
        return queued

    def _first_time(self, url: str, eid: str) -> bool:
        with self._seen_lock:
            if (url, eid) in self._seen:
                return False
            self._seen[(url, eid)] = None
            while len(self._seen) > 100_000:
                self._seen.popitem(last=False)
            return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                if item is None:
                    break
                self._deliver(*item)
            finally:
                self._queue.task_done()

    def _deliver(self, hook: Webhook, eid: str, body: bytes) -> None:
        headers = {"Content-Type": "application/json", EVENT_ID_HEADER: eid}
        if hook.secret:
            headers[SIGNATURE_HEADER] = sign(hook.secret, body)
        delay = self.backoff_seconds
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = self._client.post(hook.url, content=body, headers=headers)
                if response.status_code < 300:
                    self.stats.delivered += 1
                    self.stats.by_url[hook.url] = self.stats.by_url.get(hook.url, 0) + 1
                    return
                retryable = response.status_code >= 500 or response.status_code in (408, 429)
                reason = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                retryable, reason = True, type(exc).__name__
            self.stats.failed_attempts += 1
            log.warning("webhook delivery failed", extra={"url": hook.url, "attempt": attempt, "reason": reason})
            if not retryable or attempt == self.max_attempts or self._stop.wait(delay):
                break
            delay = min(delay * 2, self.max_backoff_seconds)
        self.stats.dropped += 1

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until the queue is empty (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._queue.unfinished_tasks:
            time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout=5)
        self._client.close()
