-- The detector's output: per-scope state, per-call scores, the escalation/rule event log (the
-- timeline Grafana draws), current decisions, manual actions and the detector's own bookkeeping.
-- "Current" tables are ReplacingMergeTree keyed by scope: read them with FINAL (or argMax by version).

-- Per-scope state (scope: session | trace | key | feature). `state` is the engine's own JSON snapshot
-- (counters, rule state) so a restart resumes exactly; the typed columns are for dashboards and SQL.
CREATE TABLE IF NOT EXISTS otel.loop_state (
    scope LowCardinality(String),
    scope_id String,
    session_id String,
    virtual_key String,
    level LowCardinality(String),
    confidence Float64,
    peak_confidence Float64,
    dominant_signal LowCardinality(String),
    call_count UInt64,
    total_tokens UInt64,
    cost_usd Float64,
    first_seen DateTime64(9),
    last_activity DateTime64(9),
    state String,
    updated_at DateTime64(6) DEFAULT now64(6),
    version UInt64,
    deleted UInt8 DEFAULT 0
) ENGINE = ReplacingMergeTree(version)
ORDER BY (scope, scope_id);

-- One row per scored call per scope: the seven signals, the raw and smoothed confidence, the level after.
CREATE TABLE IF NOT EXISTS otel.loop_scores (
    ts DateTime64(9),
    scope LowCardinality(String),
    scope_id String,
    session_id String,
    trace_id String,
    span_id String,
    virtual_key String,
    feature String,
    content_similarity Float32,
    tool_call_repetition Float32,
    response_stagnation Float32,
    error_cycling Float32,
    token_velocity Float32,
    context_growth Float32,
    cost_velocity Float32,
    raw_confidence Float32,
    confidence Float32,
    level LowCardinality(String),
    dominant_signal LowCardinality(String),
    tokens UInt64,
    cost_usd Float64,
    inserted_at DateTime64(6) DEFAULT now64(6),
    evidence LowCardinality(String) DEFAULT 'none'
) ENGINE = MergeTree()
PARTITION BY toDate(inserted_at)
ORDER BY (scope, scope_id, ts);

ALTER TABLE otel.loop_scores ADD COLUMN IF NOT EXISTS evidence LowCardinality(String) DEFAULT 'none';

-- The event log: escalation transitions, rule trips, budget and manual actions.
CREATE TABLE IF NOT EXISTS otel.loop_events (
    ts DateTime64(9),
    kind LowCardinality(String),
    scope LowCardinality(String),
    scope_id String,
    session_id String,
    trace_id String,
    span_id String,
    virtual_key String,
    feature String,
    detector LowCardinality(String),
    rule_name String,
    action LowCardinality(String),
    mode LowCardinality(String),
    from_level LowCardinality(String),
    to_level LowCardinality(String),
    confidence Float64,
    signals Map(LowCardinality(String), Float64),
    dominant_signal LowCardinality(String),
    consecutive UInt32,
    message String,
    inserted_at DateTime64(6) DEFAULT now64(6),
    evidence LowCardinality(String) DEFAULT 'none'
) ENGINE = MergeTree()
PARTITION BY toDate(inserted_at)
ORDER BY (scope_id, ts);

-- What an event rests on (exact, fuzzy, sizes, structure, rate: docs/signals.md, "Evidence"); added to event logs
-- created before it.
ALTER TABLE otel.loop_events ADD COLUMN IF NOT EXISTS evidence LowCardinality(String) DEFAULT 'none';

-- Current decision per scope, what the enforcement API serves.
CREATE TABLE IF NOT EXISTS otel.loop_decisions (
    scope LowCardinality(String),
    scope_id String,
    action LowCardinality(String),
    level LowCardinality(String),
    confidence Float64,
    dominant_signal LowCardinality(String),
    detector LowCardinality(String),
    reason LowCardinality(String),
    rule_name String,
    delay_seconds Float64,
    instruction String,
    expires_at DateTime64(6),
    updated_at DateTime64(6) DEFAULT now64(6),
    version UInt64,
    evidence LowCardinality(String) DEFAULT 'none'
) ENGINE = ReplacingMergeTree(version)
ORDER BY (scope, scope_id);

ALTER TABLE otel.loop_decisions ADD COLUMN IF NOT EXISTS evidence LowCardinality(String) DEFAULT 'none';

-- Manual actions: blocked sessions, revoked keys (active = 0 lifts them).
CREATE TABLE IF NOT EXISTS otel.loop_manual (
    scope LowCardinality(String),
    scope_id String,
    action LowCardinality(String),
    active UInt8,
    reason String,
    expires_at DateTime64(6),
    updated_at DateTime64(6) DEFAULT now64(6),
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (scope, scope_id, action);

-- Detector bookkeeping: watermark per shard, evictions, cycle statistics.
CREATE TABLE IF NOT EXISTS otel.loop_meta (
    key String,
    value String,
    updated_at DateTime64(6) DEFAULT now64(6),
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY key;
