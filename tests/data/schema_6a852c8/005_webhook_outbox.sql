-- The webhook outbox: one row per (endpoint, event), the latest version wins (read with FINAL).
-- The delivery worker (detector/service/webhooks.py) fills it from otel.loop_events, so an event the detector wrote
-- is delivered at least once even across a crash or restart, and writes a new version after every attempt:
-- `pending` until a 2xx, `delivered`, or `dead` (a dead letter) after the configured number of attempts or a
-- 410 Gone. `body` is the exact JSON that is signed and sent on every attempt (keys, levels and signal values:
-- never prompt or response content). `event_id` is the `webhook-id` header: the same on every attempt.
CREATE TABLE IF NOT EXISTS otel.loop_webhook_outbox (
    endpoint String,
    event_id String,
    kind LowCardinality(String),
    body String,
    status LowCardinality(String),
    attempts UInt32,
    next_attempt_at DateTime64(6),
    last_status UInt16,
    last_error String,
    created_at DateTime64(6),
    updated_at DateTime64(6) DEFAULT now64(6),
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (endpoint, event_id);
