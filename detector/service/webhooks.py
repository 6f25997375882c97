"""Alert webhooks for users without Grafana, delivered the Standard Webhooks way from a persisted outbox.

* **Signed** with Standard Webhooks 1.0: ``webhook-id`` (the event's id: the same on every attempt, the receiver's
  idempotency key), ``webhook-timestamp`` (Unix seconds of the attempt) and ``webhook-signature``
  (``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``). A ``whsec_`` secret is base64 after its prefix (the
  standard's form); any other secret is used as its UTF-8 bytes. For one release the old ``X-Loop-Signature:
  sha256=<hex HMAC of the body>`` and ``X-Loop-Event-Id`` headers are sent beside them (docs/webhooks.md).
* **At least once, across restarts.** Deliveries live in ``otel.loop_webhook_outbox``
  (:mod:`detector.storage.webhook_outbox`), filled from ``otel.loop_events`` (what the detector already wrote)
  past a persisted cursor: an event the detector wrote is delivered even if the process dies right after. The
  cursor moves only once the deliveries are in the outbox; an event found again is recognised by its id.
* **Retries** with exponential backoff, ``Retry-After`` (seconds or an HTTP date) honoured; 2xx is success, any
  other answer (redirects included: they are not followed) or a network error is a failed attempt; ``410 Gone``
  or ``max_attempts`` failures make a **dead letter**, listed by the admin API and counted in ``/metrics``, and
  re-queued by the operator.

Detection never waits on a webhook: the detector's cycle only wakes the worker thread.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from detector.core.escalation import LEVEL_RANK
from detector.settings.service_settings import Webhook, WebhookDelivery
from detector.settings.vocabulary import EVENT_BUDGET, EVENT_ESCALATION, EVENT_RULE, LEVEL_NONE
from detector.storage.transport import Store
from detector.storage.webhook_outbox import DEAD, DELIVERED, PENDING, Delivery, OutboxStore

__all__ = [
    "EVENT_ID_HEADER", "SIGNATURE_HEADER", "WEBHOOK_ID", "WEBHOOK_SIGNATURE", "WEBHOOK_TIMESTAMP", "AttemptOutcome",
    "WebhookDispatcher", "WebhookMetrics", "event_id", "legacy_signature", "payload", "retry_after_seconds",
    "sign", "signing_key", "wants",
]

log = logging.getLogger("loop_detector.webhooks")

WEBHOOK_ID = "webhook-id"
WEBHOOK_TIMESTAMP = "webhook-timestamp"
WEBHOOK_SIGNATURE = "webhook-signature"
# Deprecated: sent beside the standard headers for one release (0.1.x), then removed.
SIGNATURE_HEADER = "X-Loop-Signature"
EVENT_ID_HEADER = "X-Loop-Event-Id"


def signing_key(secret: str) -> bytes:
    """The HMAC key of a secret: ``whsec_<base64>`` is the standard form; anything else is its UTF-8 bytes."""
    if secret.startswith("whsec_"):
        return base64.b64decode(secret.removeprefix("whsec_"))
    return secret.encode()


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks v1 signature of one attempt."""
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def legacy_signature(secret: str, body: bytes) -> str:
    """The pre-standard ``X-Loop-Signature`` value (deprecated)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def event_id(event: Mapping[str, Any]) -> str:
    """A stable id: the same transition of the same scope at the same call is the same event."""
    key = "|".join(str(event.get(k, "")) for k in ("kind", "scope", "scope_id", "span_id", "to_level", "rule_name",
                                                   "detector", "action"))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def wants(hook: Webhook, event: Mapping[str, Any]) -> bool:
    """Whether a webhook subscribes to an event: its kind, and for escalations a rise to ``min_level`` or above."""
    kind = event.get("kind")
    if kind == EVENT_ESCALATION:
        to_level, from_level = event.get("to_level") or LEVEL_NONE, event.get("from_level") or LEVEL_NONE
        return (EVENT_ESCALATION in hook.events and LEVEL_RANK[to_level] > LEVEL_RANK[from_level]
                and LEVEL_RANK[to_level] >= LEVEL_RANK[hook.min_level])
    if kind in (EVENT_RULE, EVENT_BUDGET):
        return kind in hook.events
    return False


def payload(event: Mapping[str, Any], dashboard_url: str | None) -> dict[str, Any]:
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


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """A ``Retry-After`` header: delay-seconds or an HTTP-date (RFC 9110 10.2.3); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """What one POST gave: 2xx, or why not, and when the receiver asked to be called again."""

    ok: bool
    status: int
    error: str
    retry_after: float | None
    gone: bool


def backoff_seconds(attempts: int, settings: WebhookDelivery) -> float:
    """The wait after the ``attempts``-th failure: initial, doubled each time, capped."""
    return float(min(settings.initial_backoff_seconds * 2 ** (attempts - 1), settings.max_backoff_seconds))


class WebhookDispatcher:
    """The outbox's worker: fills it from the event log, delivers what is due, records every attempt."""

    def __init__(self, store: Store, hooks: Iterable[Webhook], delivery: WebhookDelivery,
                 dashboard_url: str | None = None, lag_seconds: float = 0.0, poll_seconds: float = 1.0) -> None:
        self.outbox = OutboxStore(store)
        self.hooks = list(hooks)
        self.delivery = delivery
        self.dashboard_url = dashboard_url
        self.lag_us = int(lag_seconds * 1e6)
        self.poll_seconds = poll_seconds
        self.delivered = 0
        self.failed_attempts = 0
        self.dead_total = 0
        self._lock = threading.Lock()  # guards _pending and the hooks
        self._pending: dict[tuple[str, str], Delivery] = {(d.endpoint, d.event_id): d for d in self.outbox.pending()}
        # attempts made whose outcome the outbox could not record (a full disk): recorded at the next round that can;
        # meanwhile memory says what happened (a delivered event is not posted again every round)
        self._unrecorded: dict[tuple[str, str], Delivery] = {}
        self._dead_now = self.outbox.counts().get(DEAD, 0)
        cursor = self.outbox.cursor()
        if cursor is None:  # webhooks configured for the first time: announce what happens from now on
            cursor = self.outbox.now_us()
            self.outbox.save_cursor(cursor)
        self.cursor_us = cursor
        self._client = httpx.Client(timeout=delivery.timeout_seconds, follow_redirects=False)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loop-webhooks", daemon=True)
        self._thread.start()

    # -- what the service and the API call ------------------------------------------------------------------
    def notify(self, *_: Any) -> None:
        """A detection cycle wrote events: look now rather than at the next poll (a cycle observer)."""
        self._idle.clear()
        self._wake.set()

    def update(self, hooks: Iterable[Webhook], delivery: WebhookDelivery, dashboard_url: str | None) -> None:
        """A new config: deliveries to endpoints no longer configured stay in the outbox, unattempted."""
        with self._lock:
            self.hooks, self.delivery, self.dashboard_url = list(hooks), delivery, dashboard_url
        self.notify()

    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)

    def dead_letter_count(self) -> int:
        return self._dead_now

    def dead_letters(self, limit: int = 100) -> list[dict[str, Any]]:
        return [d.public() for d in self.outbox.dead(limit)]

    def retry_dead_letters(self, event_id: str | None = None) -> int:
        """Queue dead letters again (all, or one event's), with a fresh count of attempts."""
        dead = self.outbox.dead_for(event_id)
        now = _now_us()
        for d in dead:
            d.status, d.attempts, d.next_us, d.last_error = PENDING, 0, now, f"re-queued by an operator ({d.last_error})"
        if dead:
            self.outbox.write(dead)
            with self._lock:
                self._pending.update({(d.endpoint, d.event_id): d for d in dead})
            self._dead_now = max(0, self._dead_now - len(dead))
            self.notify()
        return len(dead)

    def summary(self) -> dict[str, Any]:
        return {"pending": self.pending_count(), "dead_letters": self._dead_now, "delivered": self.delivered,
                "failed_attempts": self.failed_attempts, "endpoints": [h.url for h in self.hooks]}

    def flush(self, timeout: float = 30.0, pending: bool = True) -> bool:
        """Wait until the worker has taken in the events written so far and has delivered (or given up on) every
        delivery, or with ``pending=False`` until nothing is due now (tests, shutdown). False on timeout."""
        deadline = time.monotonic() + timeout
        self.notify()
        while time.monotonic() < deadline:
            if self._idle.wait(0.05) and not self._wake.is_set():
                left = self.pending_count() if pending else len(self._due(_now_us()))
                if not left:
                    return True
        return False

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=self.delivery.timeout_seconds + 5)
        self._client.close()

    # -- the worker --------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.pump()
            except Exception:  # the store or an endpoint misbehaving must not end deliveries for good
                log.exception("webhook delivery round failed")
            if self._stop.is_set():
                break
            self._idle.set()
            self._wake.wait(self._sleep_seconds())

    def _sleep_seconds(self) -> float:
        with self._lock:
            nexts = [d.next_us for d in self._pending.values() if self._configured(d.endpoint)]
        if not nexts:
            return self.poll_seconds
        wait = (min(nexts) - time.time_ns() // 1000) / 1e6
        return max(0.01, min(self.poll_seconds, wait))

    def _configured(self, endpoint: str) -> bool:
        return any(h.url == endpoint for h in self.hooks)

    def _due(self, now_us: int) -> list[Delivery]:
        with self._lock:
            return sorted((d for d in self._pending.values() if d.next_us <= now_us and self._configured(d.endpoint)),
                          key=lambda d: (d.next_us, d.created_us))

    def pump(self) -> None:
        """One round: record what earlier rounds could not, take in new events, then attempt every delivery that is
        due."""
        with self._lock:
            unrecorded = list(self._unrecorded.values())
        if unrecorded and self._record(unrecorded):
            with self._lock:
                for d in unrecorded:
                    if self._unrecorded.get((d.endpoint, d.event_id)) is d:
                        del self._unrecorded[(d.endpoint, d.event_id)]
        self._take_in()
        for delivery in self._due(_now_us()):
            if self._stop.is_set():
                return
            self._attempt(delivery)

    def _record(self, deliveries: list[Delivery]) -> bool:
        """Write the deliveries' rows; False when the store refuses (kept in memory by the caller)."""
        try:
            self.outbox.write(deliveries)
        except Exception as exc:
            log.error("webhook outbox write failed (%s); %d outcome(s) recorded once the store can",
                      type(exc).__name__, len(deliveries))
            return False
        return True

    def _take_in(self) -> None:
        upto = _now_us() - self.lag_us
        while upto > self.cursor_us:
            events = self.outbox.new_events(self.cursor_us, upto)
            if not events:
                break
            with self._lock:
                hooks, dashboard_url = list(self.hooks), self.dashboard_url
            created = _now_us()
            fresh: list[Delivery] = []
            for event in events:
                eid = event_id(event)
                body = orjson.dumps(payload(event, dashboard_url)).decode()
                fresh.extend(Delivery(endpoint=h.url, event_id=eid, kind=str(event["kind"]), body=body,
                                      next_us=created, created_us=created) for h in hooks if wants(h, event))
            known = self.outbox.known(d.event_id for d in fresh)
            fresh = list({(d.endpoint, d.event_id): d for d in fresh
                          if (d.endpoint, d.event_id) not in known}.values())
            if fresh:
                self.outbox.write(fresh)  # first the deliveries, then the cursor: a crash between repeats, never loses
                with self._lock:
                    self._pending.update({(d.endpoint, d.event_id): d for d in fresh})
            self.cursor_us = int(events[-1]["inserted_us"])
            self.outbox.save_cursor(self.cursor_us)
            if len(events) < 10_000:
                break

    def _hook(self, endpoint: str) -> Webhook | None:
        with self._lock:
            return next((h for h in self.hooks if h.url == endpoint), None)

    def _post(self, hook: Webhook, delivery: Delivery) -> AttemptOutcome:
        body = delivery.body.encode()
        timestamp = int(time.time())
        headers = {"Content-Type": "application/json", WEBHOOK_ID: delivery.event_id,
                   WEBHOOK_TIMESTAMP: str(timestamp), EVENT_ID_HEADER: delivery.event_id,
                   "User-Agent": "loop-detector-webhooks"}
        if hook.secret:
            headers[WEBHOOK_SIGNATURE] = sign(signing_key(hook.secret), delivery.event_id, timestamp, body)
            headers[SIGNATURE_HEADER] = legacy_signature(hook.secret, body)
        try:
            response = self._client.post(hook.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return AttemptOutcome(False, 0, type(exc).__name__, None, False)
        if 200 <= response.status_code < 300:
            return AttemptOutcome(True, response.status_code, "", None, False)
        return AttemptOutcome(False, response.status_code, f"HTTP {response.status_code}",
                              retry_after_seconds(response.headers.get("retry-after"), time.time()),
                              response.status_code == 410)

    def _attempt(self, delivery: Delivery) -> None:
        hook = self._hook(delivery.endpoint)
        if hook is None:
            return
        outcome = self._post(hook, delivery)
        delivery.attempts += 1
        delivery.last_status, delivery.last_error = outcome.status, outcome.error
        settings = self.delivery
        if outcome.ok:
            delivery.status = DELIVERED
            self.delivered += 1
        else:
            self.failed_attempts += 1
            if outcome.gone or delivery.attempts >= settings.max_attempts:
                delivery.status = DEAD
                if outcome.gone:
                    delivery.last_error = "HTTP 410 Gone: the endpoint asked not to be called again"
            else:
                wait = backoff_seconds(delivery.attempts, settings)
                if outcome.retry_after is not None:
                    wait = min(outcome.retry_after, settings.max_retry_after_seconds)
                delivery.next_us = time.time_ns() // 1000 + int(wait * 1e6)
            log.warning("webhook delivery failed", extra={"url": hook.url, "event_id": delivery.event_id,
                                                          "attempt": delivery.attempts, "reason": outcome.error,
                                                          "dead": delivery.status == DEAD})
        if not self._record([delivery]):
            with self._lock:
                self._unrecorded[(delivery.endpoint, delivery.event_id)] = delivery
        if delivery.status != PENDING:
            with self._lock:
                self._pending.pop((delivery.endpoint, delivery.event_id), None)
            if delivery.status == DEAD:
                self.dead_total += 1
                self._dead_now += 1


def _now_us() -> int:
    """This host's clock: the cursor is compared with ``inserted_at`` (the store's clock; the same host for chDB,
    and ``lag_seconds`` covers a server's skew), the schedule is this worker's own."""
    return time.time_ns() // 1000


class WebhookMetrics(Collector):
    """``loop_webhook_*`` for ``/metrics``, read at scrape time."""

    def __init__(self, dispatcher: WebhookDispatcher) -> None:
        self.dispatcher = dispatcher

    def collect(self) -> Iterator[Metric]:
        d = self.dispatcher
        yield GaugeMetricFamily("loop_webhook_pending", "Webhook deliveries waiting in the outbox",
                                value=d.pending_count())
        yield GaugeMetricFamily("loop_webhook_dead_letters", "Webhook deliveries that gave up (in the outbox)",
                                value=d.dead_letter_count())
        attempts = CounterMetricFamily("loop_webhook_attempts", "Webhook delivery attempts", labels=["outcome"])
        attempts.add_metric(["delivered"], d.delivered)
        attempts.add_metric(["failed"], d.failed_attempts)
        yield attempts
        dead = CounterMetricFamily("loop_webhook_dead_lettered", "Deliveries that became dead letters")
        dead.add_metric([], d.dead_total)
        yield dead
