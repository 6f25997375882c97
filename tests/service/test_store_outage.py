"""A scaled deployment's ClickHouse server going away and coming back (issue 32, part 2), for real: a whole service
on the server store (clickhouse-connect over HTTP, the stand-in server of tests/conftest.py) behind a TCP proxy that
stops listening (the server stopped: connection refused) or accepts and never answers (a hung server).

While the server is away: the receivers answer 503 with Retry-After (gRPC: UNAVAILABLE) (never a hang, never a success), ``/v1/check``
keeps answering from memory and says how old its decisions are (``stale_seconds``, growing; ``/metrics``,
``/healthz``), the detection cycles fail and back off, logged once, and the receivers' refusals are logged once. When it is back: every request the senders
retried is acknowledged, and every span acknowledged is stored once and every call scored once (no gap, nothing
twice); ``stale_seconds`` drops.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit

import grpc
import httpx
import pytest
from support.otlp_load import Senders, audit_store
from support.otlp_senders import PROTOBUF, chat_spans, encode, new_conversation
from support.tcp_fault import FaultProxy, Mode

from detector.ingest.grpc_receiver import TRACES_METHOD
from detector.service.process import running_service
from detector.settings.config import parse_config

pytestmark = pytest.mark.server

OUTAGE_SECONDS = 8.0  # long enough for many failed cycles (0.1 s interval) and the backoff to reach its bound
QUERY_TIMEOUT = 3  # store.query_timeout_seconds: how long a hung server holds the first statement that meets it
ANSWERED_WITHIN = 15.0  # "not hung": every request answered within this (a hung server: once the query timeout)
# "Current": decisions at most this old (cycles every 0.1 s; generous for a loaded machine, far below the outage's age).
CURRENT_SECONDS = 3.0


def _metric(text: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def _check(client: httpx.Client) -> tuple[float, float]:
    """One /v1/check: (stale_seconds, seconds it took)."""
    started = time.monotonic()
    response = client.post("/v1/check", json={"session_id": "outage-probe"})
    took = time.monotonic() - started
    assert response.status_code == 200, response.text
    return response.json()["stale_seconds"], took


def _outage(clickhouse_url: str, tmp_path, caplog, mode: Mode) -> None:
    caplog.set_level(logging.INFO, logger="loop_detector")
    upstream = urlsplit(clickhouse_url)
    with FaultProxy(upstream.port or 8123, upstream.hostname or "127.0.0.1") as proxy:
        url = clickhouse_url.replace(f"@{upstream.hostname}:{upstream.port}", f"@127.0.0.1:{proxy.port}")
        config = parse_config({"store": {"url": url, "query_timeout_seconds": QUERY_TIMEOUT},
                               "detector": {"interval_seconds": 0.1, "checkpoint_seconds": 0}})
        with running_service(config, tmp_path) as (service, eps), httpx.Client(
                base_url=eps.api, timeout=ANSWERED_WITHIN) as api:
            senders = Senders(lambda: eps.otlp, threads=2, requests=6, spans=40).start()
            senders.wait_acknowledged(2, timeout=30)
            fresh_before, _ = _check(api)

            proxy.set_mode(mode)
            down_at = time.monotonic()
            body = encode(chat_spans(10, new_conversation()))
            with httpx.Client(base_url=eps.otlp, timeout=ANSWERED_WITHIN) as otlp:
                started = time.monotonic()
                refused = otlp.post("/v1/traces", content=body, headers={"Content-Type": PROTOBUF})
                refused_after = time.monotonic() - started
            with grpc.insecure_channel(eps.otlp_grpc) as channel:
                export = channel.unary_unary(TRACES_METHOD, request_serializer=None, response_deserializer=None)
                started = time.monotonic()
                with pytest.raises(grpc.RpcError) as grpc_refused:
                    export(body, timeout=ANSWERED_WITHIN)
                grpc_after = time.monotonic() - started
            stale, slowest = [], 0.0
            while time.monotonic() - down_at < OUTAGE_SECONDS:
                value, took = _check(api)
                stale.append(value)
                slowest = max(slowest, took)
                time.sleep(0.2)
            metrics = api.get("/metrics").text
            health = api.get("/healthz").json()

            proxy.set_mode("pass")
            senders.wait_acknowledged(len(senders.all), timeout=60)  # their retries, acknowledged once it is back
            senders.stop()
            with httpx.Client(base_url=eps.otlp, timeout=ANSWERED_WITHIN) as otlp:  # the exporter's retry
                assert otlp.post("/v1/traces", content=body, headers={"Content-Type": PROTOBUF}).status_code == 200
            deadline = time.monotonic() + 30
            while True:
                audit = audit_store(service.store, senders.all)
                fresh_after, _ = _check(api)
                if (audit.scored_once and fresh_after < CURRENT_SECONDS) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)

    # the receiver: refused, retryable, at once (or within the hung server's query timeout), never a success
    assert refused.status_code == 503 and refused.headers.get("Retry-After"), refused.text
    assert refused_after < QUERY_TIMEOUT + 5
    assert grpc_refused.value.code() == grpc.StatusCode.UNAVAILABLE, grpc_refused.value
    assert grpc_after < QUERY_TIMEOUT + 5
    assert senders.statuses.get(503, 0) > 0, senders.statuses
    assert set(senders.statuses) <= {200, 503}, senders.statuses
    # /v1/check: answered throughout, from memory, saying its decisions are getting older, then fresh again
    assert fresh_before < CURRENT_SECONDS
    assert slowest < CURRENT_SECONDS, f"a /v1/check took {slowest:.2f} s while the store was away"
    assert stale[-1] > OUTAGE_SECONDS - 2 and stale[-1] > stale[0], stale
    assert _metric(metrics, "loop_detector_decisions_stale_seconds") > OUTAGE_SECONDS - 2
    assert _metric(metrics, "loop_detector_cycle_failures_total") > 1
    assert health["status"] == "ok" and health["stale_seconds"] > OUTAGE_SECONDS - 2
    assert "detector behind" in health["detector_behind"], health
    assert fresh_after < CURRENT_SECONDS
    # nothing acknowledged lost, nothing twice: stored once, normalized once, scored once
    assert audit.exact, audit
    assert audit.scored_once, audit
    # the log: once when cycles began failing, once when they resumed (not a line per failed cycle)
    messages = [r.getMessage() for r in caplog.records if r.name == "loop_detector"]
    assert sum("detection cycles failing" in m for m in messages) == 1, messages
    assert sum("detection cycles resumed" in m for m in messages) == 1, messages
    assert not any("detection cycle failed" in m for m in messages)
    # and the receivers: the first refusal of the run in full, the others counted, one line when acknowledged again
    ingest = [r.getMessage() for r in caplog.records if r.name.startswith("loop_detector.ingest")]
    assert sum("not acknowledged" in m for m in ingest) == 1, ingest
    assert sum("acknowledged again after" in m for m in ingest) == 1, ingest


def test_server_stopped_then_back(clickhouse_url, tmp_path, caplog):
    """The server stopped (its port closed) for 8 s, then back on the same port with the same data."""
    _outage(clickhouse_url, tmp_path, caplog, "refuse")


def test_server_hung_then_back(clickhouse_url, tmp_path, caplog):
    """The nastier case: the server accepts connections and never answers, for 8 s; no call hangs on it."""
    _outage(clickhouse_url, tmp_path, caplog, "blackhole")
