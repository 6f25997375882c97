"""Standard Webhooks from the persisted outbox: signed as the `standardwebhooks` library verifies, one id per event,
Retry-After honoured, dead letters in the admin API and /metrics, at least once across a killed process."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest
import yaml
from support.agents import run_agents
from support.servers import serve_app
from support.waiting import wait_until
from support.webhook_receiver import WebhookReceiver

from detector.cli.demo import looping_step
from detector.evaluation.simulate import wait_for_detector
from detector.service.process import free_port, running_service
from detector.service.webhooks import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    WebhookDispatcher,
    event_id,
    legacy_signature,
    retry_after_seconds,
    sign,
    signing_key,
    wants,
)
from detector.settings.config import ConfigError, parse_config
from detector.settings.service_settings import Webhook, WebhookDelivery
from detector.storage.transport import ChdbStore, insert_rows

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
FAST = WebhookDelivery(max_attempts=3, initial_backoff_seconds=0.05, max_backoff_seconds=0.2, timeout_seconds=5)


def escalation(i: int, to_level: str = "hard_stop", from_level: str = "inject") -> dict:
    return {"kind": "escalation", "ts": "2026-11-30 12:00:00.000000000", "scope": "session", "scope_id": f"s{i}",
            "session_id": f"s{i}", "trace_id": "t", "span_id": f"span{i}", "virtual_key": "k", "feature": "f",
            "from_level": from_level, "to_level": to_level, "confidence": 0.93, "detector": "confidence",
            "signals": {"tool_call_repetition": 1.0}, "dominant_signal": "tool_call_repetition", "action": "block"}


def dispatcher_for(store, base, delivery=FAST, secret=SECRET, min_level="inject") -> WebhookDispatcher:
    return WebhookDispatcher(store, [Webhook(url=f"{base}/hook", secret=secret, min_level=min_level)], delivery,
                             dashboard_url="http://grafana:3000")


# --- signatures ----------------------------------------------------------------------------------------------

def test_signatures_verify_with_the_standardwebhooks_library():
    from standardwebhooks import Webhook as Verifier
    from standardwebhooks import WebhookVerificationError

    body = '{"id":"abc","ünï":"😀"}'.encode()
    now = int(time.time())
    headers = {"webhook-id": "abc", "webhook-timestamp": str(now),
               "webhook-signature": sign(signing_key(SECRET), "abc", now, body)}
    assert Verifier(SECRET).verify(body, headers) == {"id": "abc", "ünï": "😀"}
    with pytest.raises(WebhookVerificationError):
        Verifier(SECRET).verify(body + b" ", headers)
    with pytest.raises(WebhookVerificationError):  # a replayed signature with a moved timestamp
        Verifier(SECRET).verify(body, {**headers, "webhook-timestamp": str(now + 1)})
    # a plain (pre-standard) secret is the key's UTF-8 bytes: receivers pass the same bytes
    plain = sign(signing_key("s3cret-for-tests"), "abc", now, body)
    assert Verifier(b"s3cret-for-tests").verify(body, {**headers, "webhook-signature": plain})


def test_whsec_secrets_are_checked_in_the_config():
    with pytest.raises(ConfigError, match="24-64 bytes"):
        parse_config({"webhooks": [{"url": "http://x/h", "secret": "whsec_" + base64.b64encode(b"short").decode()}]})
    with pytest.raises(ConfigError, match="base64"):
        parse_config({"webhooks": [{"url": "http://x/h", "secret": "whsec_***"}]})


def test_retry_after_in_seconds_and_as_an_http_date():
    now = time.time()
    assert retry_after_seconds("120", now) == 120
    later = datetime.fromtimestamp(now, UTC) + timedelta(seconds=600)
    assert 590 <= retry_after_seconds(format_datetime(later, usegmt=True), now) <= 600
    assert retry_after_seconds("soon", now) is None and retry_after_seconds(None, now) is None


# --- the outbox ------------------------------------------------------------------------------------------------

def test_events_are_signed_retried_under_one_id_and_delivered_once(store):
    receiver = WebhookReceiver(secret=SECRET, script=[(503, {}), (502, {})])
    with serve_app(receiver.app) as base:
        dispatcher = dispatcher_for(store, base)
        try:
            insert_rows(store, "otel.loop_events", [escalation(1), escalation(2), escalation(3, to_level="warn",
                                                                                             from_level="none")])
            insert_rows(store, "otel.loop_events", [escalation(1)])  # the same event written again
            dispatcher.notify()
            wait_until(lambda: len(receiver.accepted()) >= 2, what="two deliveries")
            assert dispatcher.flush()
        finally:
            dispatcher.close()
    attempts = receiver.all()
    accepted = receiver.accepted()
    assert [a.payload["session_id"] for a in accepted] == ["s1", "s2"]  # below min_level: not sent; s1 once
    assert len(attempts) == 4 and [a.status for a in attempts[:2]] == [503, 502]
    assert all(a.verified for a in attempts), [a.error for a in attempts]
    ids = {a.payload["session_id"]: a.webhook_id for a in accepted}
    assert ids["s1"] == event_id(escalation(1)) == accepted[0].payload["id"]
    first_event = [a for a in attempts if a.payload["session_id"] == attempts[0].payload["session_id"]]
    assert len({a.webhook_id for a in first_event}) == 1  # retries carry the event's id
    # the deprecated headers, still sent for one release
    a = accepted[0]
    assert a.headers[SIGNATURE_HEADER.lower()] == legacy_signature(SECRET, a.body)
    assert a.headers[EVENT_ID_HEADER.lower()] == a.webhook_id
    assert a.payload["dashboard_url"].endswith("var-session_id=s1")
    rows = store.rows("SELECT event_id, status, attempts FROM otel.loop_webhook_outbox FINAL ORDER BY attempts")
    # both were due at once: each had one failure (503, 502), then its delivery
    assert [(r["status"], r["attempts"]) for r in rows] == [("delivered", 2), ("delivered", 2)]


def test_retry_after_is_honoured_over_the_backoff(store):
    """The receiver asks for an hour: with a 50 ms backoff the delivery would have been retried many times; it is
    not retried, and its next attempt is set an hour after the failed one."""
    receiver = WebhookReceiver(secret=SECRET, script=[(429, {"Retry-After": "3600"})])
    with serve_app(receiver.app) as base:
        dispatcher = dispatcher_for(store, base)
        try:
            insert_rows(store, "otel.loop_events", [escalation(1)])
            dispatcher.notify()
            wait_until(lambda: receiver.all(), what="the first attempt")
            assert dispatcher.flush(pending=False)
            time.sleep(0.5)  # ten backoff periods
            dispatcher.pump()
        finally:
            dispatcher.close()
    assert [a.status for a in receiver.all()] == [429]
    row = store.rows("SELECT status, attempts, last_status, toUnixTimestamp64Micro(next_attempt_at) - "
                     "toUnixTimestamp64Micro(updated_at) AS wait_us FROM otel.loop_webhook_outbox FINAL")[0]
    assert (row["status"], row["attempts"], row["last_status"]) == ("pending", 1, 429)
    assert 3590e6 <= row["wait_us"] <= 3600e6


def test_a_pending_delivery_survives_a_restart_of_the_worker(store):
    receiver = WebhookReceiver(secret=SECRET, default=503)
    with serve_app(receiver.app) as base:
        slow = WebhookDelivery(max_attempts=5, initial_backoff_seconds=3600)
        first = dispatcher_for(store, base, delivery=slow)
        insert_rows(store, "otel.loop_events", [escalation(7)])
        first.notify()
        wait_until(lambda: receiver.all(), what="the first attempt")
        first.close()
        receiver.default = 204
        store.command("ALTER TABLE otel.loop_webhook_outbox UPDATE next_attempt_at = now64(6) WHERE 1 "
                      "SETTINGS mutations_sync = 1")  # due now, rather than in an hour
        second = dispatcher_for(store, base, delivery=slow)
        try:
            wait_until(lambda: receiver.accepted(), what="the delivery after the restart")
        finally:
            second.close()
    attempts = receiver.all()
    assert [a.status for a in attempts] == [503, 204]
    assert attempts[0].webhook_id == attempts[1].webhook_id == event_id(escalation(7))


def test_dead_letters_after_max_attempts_or_410(store):
    receiver = WebhookReceiver(secret=SECRET, script=[(410, {})], default=500)
    with serve_app(receiver.app) as base:
        dispatcher = dispatcher_for(store, base)
        try:
            insert_rows(store, "otel.loop_events", [escalation(1)])
            dispatcher.notify()
            wait_until(lambda: dispatcher.dead_letter_count() == 1, what="the 410 dead letter")
            insert_rows(store, "otel.loop_events", [escalation(2)])
            dispatcher.notify()
            wait_until(lambda: dispatcher.dead_letter_count() == 2, what="the second dead letter")
            dead = {d["event_id"]: d for d in dispatcher.dead_letters()}
            assert dead[event_id(escalation(1))]["attempts"] == 1
            assert "410" in dead[event_id(escalation(1))]["last_error"]
            assert dead[event_id(escalation(2))]["attempts"] == FAST.max_attempts
            assert dead[event_id(escalation(2))]["last_status"] == 500
            receiver.default = 204
            assert dispatcher.retry_dead_letters(event_id(escalation(2))) == 1
            wait_until(lambda: receiver.accepted(), what="the re-queued delivery")
            assert dispatcher.dead_letter_count() == 1
        finally:
            dispatcher.close()
    assert [a.status for a in receiver.all()] == [410, 500, 500, 500, 204]


def test_dead_letters_in_the_admin_api_and_metrics(tmp_path):
    receiver = WebhookReceiver(secret=SECRET, default=500)
    with serve_app(receiver.app) as base:
        config = parse_config({
            "webhooks": [{"url": f"{base}/hook", "secret": SECRET, "min_level": "warn"}],
            "webhook_delivery": {"max_attempts": 2, "initial_backoff_seconds": 0.05},
            "detector": {"interval_seconds": 0.1, "checkpoint_seconds": 0},
        })
        with running_service(config, tmp_path) as (service, eps):
            insert_rows(service.store, "otel.loop_events", [escalation(1, to_level="warn", from_level="none")])
            service.webhooks.notify()
            auth = {"Authorization": f"Bearer {service.admin_token}"}
            wait_until(lambda: service.webhooks.dead_letter_count() == 1, what="a dead letter")
            dead = httpx.get(f"{eps.api}/admin/loop-detection/webhooks/dead-letters", headers=auth).json()
            summary = httpx.get(f"{eps.api}/admin/loop-detection/webhooks", headers=auth).json()
            metrics = httpx.get(f"{eps.api}/metrics").text
            assert httpx.get(f"{eps.api}/admin/loop-detection/webhooks/dead-letters").status_code == 401
            requeued = httpx.post(f"{eps.api}/admin/loop-detection/webhooks/dead-letters/retry", headers=auth).json()
    [letter] = dead["dead_letters"]
    warn = escalation(1, to_level="warn", from_level="none")
    assert letter["event_id"] == event_id(warn) and letter["attempts"] == 2 and letter["status"] == "dead"
    assert summary["dead_letters"] == 1 and summary["endpoints"] == [f"{base}/hook"]
    assert "loop_webhook_dead_letters 1.0" in metrics
    assert 'loop_webhook_attempts_total{outcome="failed"} 2.0' in metrics
    assert requeued == {"requeued": 1}


def test_no_webhook_configured_is_a_404(tmp_path, fast_config):
    with running_service(fast_config, tmp_path) as (service, eps):
        auth = {"Authorization": f"Bearer {service.admin_token}"}
        assert httpx.get(f"{eps.api}/admin/loop-detection/webhooks", headers=auth).status_code == 404
    assert service.webhooks is None


# --- at least once across a killed process ------------------------------------------------------------------

def serve_process(data_dir: Path, config_path: Path, otlp_port: int, api_port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "detector", "serve", "--data-dir", str(data_dir), "--config", str(config_path),
         "--otlp-port", str(otlp_port), "--api-port", str(api_port), "--otlp-grpc-port", "0", "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{api_port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("serve did not become ready")


def test_deliveries_survive_a_killed_service(tmp_path):
    """The receiver is down while a looping agent escalates; the service is killed (SIGKILL: no shutdown code
    runs) with its deliveries pending; restarted on the same data directory, it delivers every one of them, each
    under the id its failed attempts carried."""
    receiver = WebhookReceiver(secret=SECRET, default=503)
    with serve_app(receiver.app) as base:
        config_path = tmp_path / "config.yaml"
        config_path.write_text(yaml.safe_dump({
            "webhooks": [{"url": f"{base}/hook", "secret": SECRET, "min_level": "warn"}],
            "webhook_delivery": {"max_attempts": 50, "initial_backoff_seconds": 0.2, "max_backoff_seconds": 0.5},
            "detector": {"interval_seconds": 0.1, "checkpoint_seconds": 0},
            "loop_detection": {"consecutive_counts": {"warn": 2, "throttle": 3, "inject": 4, "hardstop": 5},
                               "thresholds": {"warn_confidence": 0.2, "throttle_confidence": 0.3,
                                              "inject_confidence": 0.4, "hardstop_confidence": 0.5}},
        }))
        data_dir = tmp_path / "data"
        otlp_port, api_port = free_port(), free_port()
        session = f"kill-{uuid.uuid4().hex[:6]}"
        proc = serve_process(data_dir, config_path, otlp_port, api_port)
        try:
            api = f"http://127.0.0.1:{api_port}"
            timeline = run_agents(f"http://127.0.0.1:{otlp_port}", api, {session: looping_step}, 12)
            assert timeline[session][-1]["level"] in ("throttle", "inject", "hard_stop")
            token = (data_dir / "admin-token").read_text().strip()
            auth = {"Authorization": f"Bearer {token}"}
            wait_until(lambda: httpx.get(f"{api}/admin/loop-detection/webhooks", headers=auth).json()["pending"] >= 2,
                       what="the escalations in the outbox")
            wait_until(lambda: len({a.webhook_id for a in receiver.all()}) >= 2, what="failed attempts")
            assert not receiver.accepted()
            # every span scored and each cycle's events handed to the outbox (a cycle's observers run after its
            # watermark shows, so the one after it is waited for too): the kill lands between cycles, the outbox
            # holds what the events table holds (an event written in the instant before a kill is another test's)
            wait_for_detector(api, time.time_ns() // 1000)
            wait_for_detector(api, time.time_ns() // 1000)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        failed_ids = {a.webhook_id for a in receiver.all()}
        receiver.default = 204
        proc = serve_process(data_dir, config_path, otlp_port, api_port)
        try:
            wait_until(lambda: {a.webhook_id for a in receiver.accepted()} >= failed_ids, what="redelivery")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    accepted = receiver.accepted()
    assert all(a.verified for a in receiver.all())
    # every alert-worthy event the detector wrote, and nothing else, was delivered
    store = ChdbStore(data_dir)
    try:
        events = store.rows("SELECT kind, scope, scope_id, span_id, to_level, from_level, rule_name, detector, action "
                            "FROM otel.loop_events")
    finally:
        store.close()
    hook = Webhook(url=f"{base}/hook", min_level="warn")
    expected = {event_id(e) for e in events if wants(hook, e)}
    assert {a.webhook_id for a in accepted} == expected and len(expected) >= 2
    assert failed_ids <= expected
    assert all(a.payload["session_id"] == session for a in accepted)
