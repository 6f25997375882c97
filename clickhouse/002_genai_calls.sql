-- otel.genai_calls: one normalized row per GenAI call span, written by the detection cycle from the spans staged in
-- otel.genai_spans since its watermark, in one statement per cycle (the SELECT of genai_calls_normalized.sql.tmpl:
-- detector/detection/transform.py), so the embedded receiver's spans and an OTel Collector's are treated alike.
--
-- It holds keys, usage and fingerprints only: no prompt or response text is copied out of the span.
-- The normalization understands the attribute dialects of the popular instrumentations (the official
-- opentelemetry-instrumentation-openai-v2 / GenAI semantic conventions, OpenLLMetry old and new, OpenLIT,
-- OpenInference) and of agent frameworks that trace themselves (the Vercel AI SDK's ai.* spans, Google ADK's legacy
-- call_llm spans, pydantic-ai, Strands' span events); docs/instrumentations.md lists, per column, which attribute
-- supplies it. Spans that are not GenAI calls but name a session (an agent framework's root or graph spans) give a
-- row too (call_kind 'other'), so that the detector knows the session of their trace.
-- `inserted_at` is the span's insertion (its staged row's), the detector's watermark; the minmax index keeps "rows
-- since the watermark" from scanning history (parts are written in insertion order, so each part covers a narrow
-- range).
CREATE TABLE IF NOT EXISTS otel.genai_calls (
    inserted_at DateTime64(6) DEFAULT now64(6),
    ts DateTime64(9),
    end_ts DateTime64(9),
    trace_id String,
    span_id String,
    parent_span_id String,
    session_id String,
    session_source LowCardinality(String),
    virtual_key String,
    feature String,
    service_name LowCardinality(String),
    operation LowCardinality(String),
    call_kind LowCardinality(String),
    provider LowCardinality(String),
    model LowCardinality(String),
    agent_name String,
    tool_name String,
    tool_call_id String,
    input_tokens UInt64,
    output_tokens UInt64,
    cost_usd Float64,
    is_error UInt8,
    error_type String,
    finish_reasons Array(String),
    has_content UInt8,
    request_fp UInt64,
    turn_fp UInt64,
    input_simhash UInt64,
    output_simhash UInt64,
    tool_fp UInt64,
    tool_shape_fp UInt64,
    out_tool_names Array(String),
    out_tool_fps Array(UInt64),
    response_fp UInt64,
    error_fp UInt64,
    observation_fp UInt64,
    observation_simhash UInt64,
    observation_empty UInt8,
    observation_chars UInt32,
    args_fp UInt64,
    args_simhash UInt64,
    output_fp UInt64,
    output_norm_simhash UInt64,
    out_tool_arg_simhashes Array(UInt64),
    observation_failed UInt8,
    observation_shape_fp UInt64,
    observation_pending UInt8,
    observation_ack UInt8,
    -- where a call's evidence came from (docs/api.md, "Decisions"), computed as it is read, never stored: 'content'
    -- (the span's content: messages, a tool's arguments or result), 'fingerprints' (a model call without content whose
    -- observation or reply came from the app's loop_detector.fp.* attributes: genai_calls_normalized.sql.tmpl, step
    -- 4), 'sizes' (neither: token counts, tool names, timings)
    evidence_source LowCardinality(String) ALIAS multiIf(
        has_content OR (call_kind = 'tool' AND (observation_fp != 0 OR args_fp != 0)), 'content',
        call_kind = 'llm' AND (observation_fp != 0 OR output_fp != 0 OR observation_shape_fp != 0), 'fingerprints',
        'sizes'),
    INDEX idx_inserted_at inserted_at TYPE minmax GRANULARITY 1,
    INDEX idx_trace_id trace_id TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_virtual_key virtual_key TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(inserted_at)
ORDER BY (session_id, ts, span_id);

-- Upgrades: a data directory created before the progress columns gets them here. A new column goes into the table
-- above, into this list, into the normalization's SELECT (genai_calls_normalized.sql.tmpl) and, for the detector to
-- read it, into detector.core.models.Call (its __init__ and from_columns): the detection cycle writes every column
-- of this table from the normalization's column of that name, and reads the fields of Call.
ALTER TABLE otel.genai_calls
    ADD COLUMN IF NOT EXISTS observation_fp UInt64,
    ADD COLUMN IF NOT EXISTS observation_simhash UInt64,
    ADD COLUMN IF NOT EXISTS observation_empty UInt8,
    ADD COLUMN IF NOT EXISTS observation_chars UInt32,
    ADD COLUMN IF NOT EXISTS args_fp UInt64,
    ADD COLUMN IF NOT EXISTS args_simhash UInt64,
    ADD COLUMN IF NOT EXISTS output_fp UInt64,
    ADD COLUMN IF NOT EXISTS output_norm_simhash UInt64,
    ADD COLUMN IF NOT EXISTS out_tool_arg_simhashes Array(UInt64),
    ADD COLUMN IF NOT EXISTS observation_failed UInt8,
    ADD COLUMN IF NOT EXISTS observation_shape_fp UInt64,
    ADD COLUMN IF NOT EXISTS observation_pending UInt8,
    ADD COLUMN IF NOT EXISTS observation_ack UInt8,
    ADD COLUMN IF NOT EXISTS evidence_source LowCardinality(String) ALIAS multiIf(
        has_content OR (call_kind = 'tool' AND (observation_fp != 0 OR args_fp != 0)), 'content',
        call_kind = 'llm' AND (observation_fp != 0 OR output_fp != 0 OR observation_shape_fp != 0), 'fingerprints',
        'sizes');

-- otel.genai_spans: the staging table. On every insert into otel.otel_traces (by loop-detector's receivers or by a
-- collector) the view below copies into it the spans the detector may read: their attributes and events as they are,
-- the five resource attributes it reads, and the insertion time. A view is analysed and planned on every insert that
-- brings rows, so its cost is a fixed cost of every insert (docs/benchmarks.md, "The staging view"): this one looks
-- attributes up and filters, nothing else (no JSON, no regular expression, no hash, no arithmetic that a value could
-- make fail). Its filter is a superset: a span is staged when it carries any attribute that can make it a GenAI call
-- (an operation, a span kind of a dialect, a tool name, ADK's request) or name its session; which staged spans are
-- calls, and of which session, is decided with the rest of the normalization (genai_calls_normalized.sql.tmpl).
CREATE TABLE IF NOT EXISTS otel.genai_spans (
    inserted_at DateTime64(6) DEFAULT now64(6),
    ts DateTime64(9),
    duration_ns UInt64,
    trace_id String,
    span_id String,
    parent_span_id String,
    service_name LowCardinality(String),
    span_name LowCardinality(String),
    status_code LowCardinality(String),
    status_message String,
    attributes Map(LowCardinality(String), String),
    resource_attributes Map(LowCardinality(String), String),
    event_names Array(LowCardinality(String)),
    event_attributes Array(Map(LowCardinality(String), String))
) ENGINE = MergeTree()
PARTITION BY toDate(inserted_at)
ORDER BY inserted_at;

CREATE MATERIALIZED VIEW IF NOT EXISTS otel.genai_spans_mv TO otel.genai_spans AS
SELECT
    Timestamp AS ts, Duration AS duration_ns, TraceId AS trace_id, SpanId AS span_id, ParentSpanId AS parent_span_id,
    ServiceName AS service_name, SpanName AS span_name, StatusCode AS status_code, StatusMessage AS status_message,
    SpanAttributes AS attributes,
    mapFilter((k, v) -> k IN ('gen_ai.conversation.id', 'session.id', 'loop_detector.session_id',
        'loop_detector.virtual_key', 'loop_detector.feature'), ResourceAttributes) AS resource_attributes,
    Events.Name AS event_names, Events.Attributes AS event_attributes
FROM otel.otel_traces
WHERE hasAny(mapKeys(SpanAttributes), ['gen_ai.operation.name', 'openinference.span.kind', 'llm.request.type',
        'traceloop.span.kind', 'ai.operationId', 'gen_ai.tool.name', 'gcp.vertex.agent.llm_request',
        'gen_ai.conversation.id', 'session.id', 'traceloop.association.properties.session_id', 'langfuse.session.id',
        'loop_detector.session_id', 'ai.telemetry.metadata.sessionId', 'ai.telemetry.metadata.session_id',
        'gcp.vertex.agent.session_id'])
    OR hasAny(mapKeys(ResourceAttributes), ['gen_ai.conversation.id', 'session.id', 'loop_detector.session_id']);

-- The view of the previous releases, which normalized and fingerprinted every span on insert (the detection cycle does
-- it now); dropped after the staging view exists, so that a collector writing meanwhile loses no span.
DROP VIEW IF EXISTS otel.genai_calls_mv;
