"""Webhook deliveries through a full disk: the outbox cannot record an attempt's outcome for a while (ClickHouse
answers its inserts with NOT_ENOUGH_SPACE, for real: ``min_free_disk_bytes_to_perform_insert`` on the outbox table).
A delivered event is not posted again every round meanwhile (before, the unrecorded delivery stayed due and was
posted to the endpoint on every round of the worker), and its outcome is recorded once the store accepts writes."""

from __future__ import annotations

import base64
import time

from support.full_table import refuse_inserts
from support.servers import serve_app
from support.waiting import wait_until
from support.webhook_receiver import WebhookReceiver

from detector.service.webhooks import WebhookDispatcher
from detector.settings.service_settings import Webhook, WebhookDelivery
from detector.storage.transport import insert_rows

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
ESCALATION = {"kind": "escalation", "ts": "2026-11-30 12:00:00.000000000", "scope": "session", "scope_id": "s1",
              "session_id": "s1", "trace_id": "t", "span_id": "span1", "virtual_key": "k", "feature": "f",
              "from_level": "inject", "to_level": "hard_stop", "confidence": 0.93, "detector": "confidence",
              "signals": {"tool_call_repetition": 1.0}, "dominant_signal": "tool_call_repetition", "action": "block"}

# the first attempt fails (503); the retry comes a second later, once the outbox refuses writes
DELIVERY = WebhookDelivery(max_attempts=5, initial_backoff_seconds=1.0, max_backoff_seconds=1.0, timeout_seconds=5)


def test_a_delivery_whose_outcome_cannot_be_recorded_is_not_posted_again(store):
    receiver = WebhookReceiver(secret=SECRET, script=[(503, {})])
    with serve_app(receiver.app) as base:
        dispatcher = WebhookDispatcher(store, [Webhook(url=f"{base}/hook", secret=SECRET, min_level="inject")],
                                       DELIVERY, poll_seconds=0.05)
        try:
            insert_rows(store, "otel.loop_events", [ESCALATION])
            dispatcher.notify()
            wait_until(lambda: receiver.all(), what="the first attempt")
            refuse_inserts(store, "otel.loop_webhook_outbox")  # the disk is full from here
            wait_until(lambda: receiver.accepted(), what="the delivery")
            time.sleep(1.0)  # twenty rounds of the worker
            assert len(receiver.accepted()) == 1
            row = store.rows("SELECT status FROM otel.loop_webhook_outbox FINAL")[0]
            assert row["status"] == "pending"  # not recorded yet
            refuse_inserts(store, "otel.loop_webhook_outbox", refused=False)  # space is back
            wait_until(lambda: store.rows("SELECT status FROM otel.loop_webhook_outbox FINAL")[0]["status"]
                       == "delivered", what="the outcome recorded")
        finally:
            dispatcher.close()
    assert [a.status for a in receiver.all()] == [503, 204]
    row = store.rows("SELECT status, attempts FROM otel.loop_webhook_outbox FINAL")[0]
    assert (row["status"], row["attempts"]) == ("delivered", 2)
