"""What the process is told: the detection cycle's schedule, ingest limits and TLS, the HTTP servers, metrics, the
store, the API, retention, the ClickHouse-compatible endpoint, webhooks."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Literal

from pydantic import Field, field_validator

from detector.settings.strict import StrictModel
from detector.settings.vocabulary import (
    EVENT_BUDGET,
    EVENT_ESCALATION,
    EVENT_RULE,
    LEVEL_HARD_STOP,
    AlertEventKind,
)

__all__ = [
    "ApiSettings", "ClickHouseHttpSettings", "DetectorSettings", "HttpSettings", "IngestSettings",
    "MetricsSettings", "RetentionSettings", "StoreSettings", "TlsSettings", "Webhook", "WebhookDelivery",
    "duration_seconds",
]


class DetectorSettings(StrictModel):
    interval_seconds: float = Field(1.0, gt=0, le=3600)
    min_interval_seconds: float = Field(0.25, ge=0, le=3600, description=(
        "while the embedded receiver commits new spans, a cycle starts this long after the last one rather than "
        "interval_seconds after it (never more often; spans written by a Collector keep interval_seconds)"))
    idle_interval_seconds: float = Field(30.0, gt=0, le=3600, description=(
        "embedded store: when nothing new was committed, each quiet cycle doubles the gap to the next one, from "
        "interval_seconds up to this (a new span brings the next cycle at once); a ClickHouse server keeps "
        "interval_seconds, since a Collector may write to it"))
    watermark_lag_seconds: float = Field(0.0, ge=0, le=600)
    checkpoint_seconds: float = Field(5.0, ge=0, le=3600, description="how often scope state is persisted")
    shard: str = Field("0/1", pattern=r"^\d+/\d+$")
    max_calls_per_cycle: int = Field(200_000, ge=100)

    @field_validator("shard")
    @classmethod
    def _shard_in_range(cls, value: str) -> str:
        index, total = (int(x) for x in value.split("/"))
        if total < 1 or index >= total:
            raise ValueError(f"shard must be I/N with 0 <= I < N, got {value}")
        return value

    @property
    def shard_index(self) -> int:
        return int(self.shard.split("/")[0])

    @property
    def shard_count(self) -> int:
        return int(self.shard.split("/")[1])


class TlsSettings(StrictModel):
    """TLS on the OTLP listener; with ``client_ca_file``, mutual TLS: a client must present a certificate that CA
    signed (the collector's ``tls.client_ca_file``)."""

    cert_file: str = Field(min_length=1)
    key_file: str = Field(min_length=1)
    client_ca_file: str | None = Field(None, min_length=1)


class IngestSettings(StrictModel):
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    max_future_skew_seconds: int = Field(3600, ge=1)
    max_age_days: int = Field(30, ge=1)
    # OTLP authentication, the collector's bearertokenauth convention: "Authorization: Bearer <token>", any of the
    # tokens (these, $LOOP_DETECTOR_OTLP_TOKEN, and the lines of bearer_token_file). None configured: open.
    bearer_tokens: list[str] = Field(default_factory=list, max_length=100)
    bearer_token_file: str | None = Field(None, min_length=1, description="one token per line")
    tls: TlsSettings | None = None
    # Free space the data directory keeps: below it, OTLP requests are refused at once with a retryable status (503 +
    # Retry-After, gRPC UNAVAILABLE + RetryInfo) instead of filling the disk. 256 MiB: one group at most (128 MiB,
    # ingest/group_commit.py) journaled uncompressed, and as much again for its parts, the detection cycles' scores
    # and checkpoints, and merges, so that what was acknowledged can still be scored. 0: no guard.
    min_free_bytes: int = Field(256 * 1024 * 1024, ge=0, description=(
        "below this much free space in the data directory, OTLP requests are refused (retryable) until space is "
        "freed; 0 disables the guard"))
    # Admission control (detector/ingest/admission.py, docs/reliability.md "Overload"): past any bound, new requests
    # are refused at once with HTTP 503 + Retry-After / gRPC RESOURCE_EXHAUSTED + RetryInfo (the exporters retry).
    # 256 MiB: two commit groups' worth of decoded rows (MAX_GROUP_BYTES, 128 MiB, is the most one insert takes; more
    # queued only waits longer than the decision lag allows), a small share of a 2 GB container.
    max_inflight_bytes: int = Field(256 * 1024 * 1024, ge=1024 * 1024, le=64 * 1024 * 1024 * 1024, description=(
        "bytes of OTLP requests in flight (bodies as read, plus their decoded rows, until answered); past it new "
        "requests are refused, retryable"))
    # The lag bounds are loose enough that a machine keeping up never refuses: at 1,000 spans/s over 2,000 sessions
    # the oldest unread commit is 1.3 s old at worst (bench/lag.py), a group waits one insert (under 1 s); they trip
    # when the backlog grows. 50 ms of event-loop delay: /v1/check's latency target, as the API shares the loop.
    max_commit_wait_seconds: float = Field(1.0, ge=0, le=3600, description=(
        "refuse new requests while the oldest decoded request has waited longer than this for its commit (0: off)"))
    max_detector_behind_seconds: float = Field(1.5, ge=0, le=3600, description=(
        "refuse new requests while the detector has not read spans acknowledged longer ago than this (0: off)"))
    max_loop_delay_seconds: float = Field(0.05, ge=0, le=60, description=(
        "refuse new requests while the event loop (shared with the API: /v1/check's latency) runs later than this "
        "(0: off)"))

    @field_validator("bearer_tokens")
    @classmethod
    def _long_enough(cls, tokens: list[str]) -> list[str]:
        if any(len(t.strip()) < 16 for t in tokens):
            raise ValueError("every bearer token must have at least 16 characters")
        return [t.strip() for t in tokens]


class HttpSettings(StrictModel):
    """Connection limits of both listeners (the OTLP receiver and the API): a slow or silent client is cut off."""

    header_timeout_seconds: float = Field(10.0, gt=0, le=3600,
                                          description="a request's header must be complete this long after it began")
    body_timeout_seconds: float = Field(60.0, gt=0, le=3600,
                                        description="a request's body must be complete this long after its header")
    keep_alive_seconds: int = Field(5, ge=1, le=3600, description="an idle keep-alive connection is closed after this")
    graceful_shutdown_seconds: int = Field(10, ge=1, le=600,
                                           description="on SIGTERM / SIGINT, requests in flight get this long to finish")


class MetricsSettings(StrictModel):
    """Prometheus label sets are bounded: a virtual key gets its own ``virtual_key`` label value only when it has an
    override block under ``virtual_keys:`` or is among the first ``max_key_labels`` keys seen since the start; every
    other key is counted under ``other``. (Keys arrive in spans: unbounded, and forgeable by whoever can send OTLP.)"""

    max_key_labels: int = Field(0, ge=0, le=10_000)


class StoreSettings(StrictModel):
    url: str | None = None
    cluster: str | None = None
    # (server store only) A server that takes longer than this to accept a connection is taken as down.
    connect_timeout_seconds: int = Field(3, ge=1, le=300, description="server store: connection timeout")
    # (server store only) The longest a statement may wait for the server's answer: a server that accepts and never
    # answers holds a statement (and every caller queued behind it) this long, once; then the store fails fast
    # (detector.storage.reachability). Longer than the slowest statement a cycle runs at your scale.
    query_timeout_seconds: int = Field(30, ge=1, le=3600, description=(
        "server store: the longest wait for an answer before the server is taken as unreachable"))


class ApiSettings(StrictModel):
    admin_token: str | None = Field(None, min_length=16)
    api_token: str | None = Field(
        None, min_length=16, description="the agents' (non-admin) token for the enforcement reads; else "
        "$LOOP_DETECTOR_API_TOKEN, else <data-dir>/api-token created at first start")
    require_api_token: Literal["auto", "always", "never"] = Field(
        "auto", description="the enforcement reads (/v1/check, /v1/decision, /v1/blocklist, /api/budgets/status, "
        "/metrics) need the API (or admin) token: auto = whenever the API listens beyond loopback")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
                                description="a larger request body is refused with 413 before it is parsed")
    block_seconds: int = Field(60, ge=1, le=86400)


_DURATION = re.compile(r"^(\d+)\s*([smhd]?)$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(value: Any) -> int | None:
    """A retention period: ``7d``, ``36h``, ``90m``, ``3600s`` or a number of seconds; ``0``, ``off`` or null keep
    data forever (None)."""
    if value is None or value is False:
        return None
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 7d, 36h or 90m")
    if isinstance(value, int):
        seconds = value
    else:
        text = str(value).strip().lower()
        if text in ("", "off", "none", "never", "forever"):
            return None
        m = _DURATION.match(text)
        if not m:
            raise ValueError(f"expected a duration such as 7d, 36h, 90m or 3600s, got {value!r}")
        seconds = int(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if seconds < 0:
        raise ValueError("a retention period cannot be negative")
    if seconds > 100 * 365 * 86400:
        raise ValueError("a retention period must be under 100 years")
    return seconds or None


class RetentionSettings(StrictModel):
    """How long each group of tables keeps its rows (``detector/storage/retention.py`` says which tables are in
    which group). Applied as a ClickHouse TTL at start and on every config change, on chDB and on a server."""

    spans: int | None = Field(7 * 86400, description="raw spans (they can carry prompts): otel_traces, its trace-id "
                              "lookup table, otel_logs, the staged GenAI spans (genai_spans); default 7d; 0/off keeps "
                              "them forever")
    detector: int | None = Field(30 * 86400, description="the detector's own rows: genai_calls, scores, events, the "
                                 "webhook outbox; default 30d; 0/off keeps them forever")

    @field_validator("spans", "detector", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int | None:
        return duration_seconds(value)


class ClickHouseHttpSettings(StrictModel):
    """The read-only ClickHouse-compatible HTTP endpoint over the embedded store (off unless ``port`` is set)."""

    port: int | None = Field(None, ge=0, le=65535, description="e.g. 8123; off when not set")
    password: str | None = Field(None, min_length=1, description="password of user `default` (else "
                                 "$LOOP_DETECTOR_CLICKHOUSE_PASSWORD, else <data-dir>/clickhouse-password)")
    allow_writes: bool = Field(False, description="TESTS ONLY: also accept INSERT and DDL (never on in production)")
    max_result_bytes: int = Field(256 * 1024 * 1024, ge=1024, description="refuse results larger than this")


class WebhookDelivery(StrictModel):
    """How the outbox delivers: attempts before a delivery is a dead letter, the backoff between attempts."""

    max_attempts: int = Field(8, ge=1, le=100)
    initial_backoff_seconds: float = Field(5.0, gt=0, le=86400)
    max_backoff_seconds: float = Field(3600.0, gt=0, le=7 * 86400)
    max_retry_after_seconds: float = Field(86400.0, gt=0, le=7 * 86400,
                                           description="the longest Retry-After honoured")
    timeout_seconds: float = Field(15.0, gt=0, le=300)


class Webhook(StrictModel):
    url: str = Field(pattern=r"^https?://")
    secret: str | None = Field(None, min_length=1, description="whsec_<base64 of 24-64 random bytes> (Standard "
                               "Webhooks); any other string is used as the key's UTF-8 bytes")
    min_level: Literal["warn", "throttle", "inject", "hard_stop"] = LEVEL_HARD_STOP
    events: list[AlertEventKind] = Field(default_factory=lambda: [EVENT_ESCALATION, EVENT_RULE, EVENT_BUDGET])

    @field_validator("secret")
    @classmethod
    def _standard_secret(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("whsec_"):
            try:
                key = base64.b64decode(value.removeprefix("whsec_"), validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("a whsec_ secret must be base64 after the prefix") from None
            if not 24 <= len(key) <= 64:
                raise ValueError(f"a whsec_ secret must decode to 24-64 bytes, got {len(key)}")
        return value
