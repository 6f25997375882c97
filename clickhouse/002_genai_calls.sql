-- otel.genai_calls: one normalized row per GenAI call span, filled on insert into otel.otel_traces by
-- the materialized view below, so the embedded receiver and the OTel Collector feed it alike.
--
-- It holds keys, usage and fingerprints only: no prompt or response text is copied out of the span.
-- The view understands the attribute dialects of the popular instrumentations (the official
-- opentelemetry-instrumentation-openai-v2 / GenAI semantic conventions, OpenLLMetry old and new, OpenLIT,
-- OpenInference); docs/instrumentations.md lists, per column, which attribute supplies it.
-- `inserted_at` is the detector's watermark; the minmax index keeps "rows since the watermark" from
-- scanning history (parts are written in insertion order, so each part covers a narrow range).
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
    INDEX idx_inserted_at inserted_at TYPE minmax GRANULARITY 1,
    INDEX idx_trace_id trace_id TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_virtual_key virtual_key TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(inserted_at)
ORDER BY (session_id, ts, span_id);

CREATE MATERIALIZED VIEW IF NOT EXISTS otel.genai_calls_mv TO otel.genai_calls AS
WITH
    SpanAttributes AS a,
    ResourceAttributes AS r,
    a['openinference.span.kind'] AS oi_kind,
    -- operation: current semconv first, then the OpenLLMetry (legacy), OpenInference and traceloop dialects.
    -- Only this is computed for every span: the rest only for the GenAI spans the WHERE keeps.
    coalesce(
        nullIf(a['gen_ai.operation.name'], ''),
        multiIf(
            a['llm.request.type'] = 'chat', 'chat',
            a['llm.request.type'] = 'completion', 'text_completion',
            a['llm.request.type'] = 'embedding', 'embeddings',
            oi_kind = 'LLM', 'chat',
            oi_kind = 'TOOL', 'execute_tool',
            oi_kind = 'AGENT', 'invoke_agent',
            oi_kind = 'EMBEDDING', 'embeddings',
            a['traceloop.span.kind'] = 'tool', 'execute_tool',
            a['traceloop.span.kind'] = 'agent', 'invoke_agent',
            NULL),
        '') AS op,
    op IN ('chat', 'text_completion', 'generate_content') AS is_llm,
    oi_kind != '' AS oi,
    -- OpenLLMetry before its move to gen_ai.input.messages: indexed gen_ai.prompt.N.* / gen_ai.completion.N.*
    (mapContains(a, 'gen_ai.prompt.0.role') OR mapContains(a, 'gen_ai.completion.0.role')) AS ol,
    -- span events carrying content (semconv <= 1.30 event names; the older gen_ai.content.* events of OpenLIT)
    hasAny(Events.Name, ['gen_ai.system.message', 'gen_ai.user.message', 'gen_ai.assistant.message',
        'gen_ai.tool.message', 'gen_ai.choice', 'gen_ai.content.prompt', 'gen_ai.content.completion']) AS ev,

    -- (1) GenAI semantic conventions: JSON messages of parts (v2, OpenLLMetry >= 0.5x, OpenLIT)
    a['gen_ai.input.messages'] AS in_msgs,
    a['gen_ai.output.messages'] AS out_msgs,
    if(in_msgs != '', JSONExtractRaw(in_msgs, -1), '') AS sc_last_msg,
    -- text of the last input message: its text parts and tool results (an older flat shape: 'content')
    if(sc_last_msg != '', arrayStringConcat(arrayMap(p -> if(JSONExtractString(p, 'type') = 'tool_call_response',
            if(JSONType(p, 'response') = 'String', JSONExtractString(p, 'response'), JSONExtractRaw(p, 'response')),
            JSONExtractString(p, 'content')), JSONExtractArrayRaw(sc_last_msg, 'parts')), ' ')
        || JSONExtractString(sc_last_msg, 'content'), '') AS sc_last,
    if(out_msgs != '', arrayFlatten(arrayMap(m -> JSONExtractArrayRaw(m, 'parts'), JSONExtractArrayRaw(out_msgs))), [])
        AS sc_parts,
    arrayMap(p -> JSONExtractString(p, 'type'), sc_parts) AS sc_types,
    arrayStringConcat(arrayFilter(x -> x != '', arrayMap(p -> JSONExtractString(p, 'content'), sc_parts)), ' ') AS sc_out,
    arrayFilter((p, t) -> t = 'tool_call', sc_parts, sc_types) AS sc_calls,

    -- (2) OpenLLMetry, indexed: gen_ai.prompt.N.{role,content,tool_calls.M.*}, gen_ai.completion.N.*
    if(ol, arrayFilter(k -> startsWith(k, 'gen_ai.prompt.') OR startsWith(k, 'gen_ai.completion.'), mapKeys(a)), [])
        AS ol_keys,
    arraySort(arrayFilter(k -> startsWith(k, 'gen_ai.prompt.'), ol_keys)) AS ol_prompt_keys,
    length(arrayFilter(k -> endsWith(k, '.role'), ol_prompt_keys)) AS ol_n,
    arraySort(arrayFilter(k -> startsWith(k, 'gen_ai.completion.') AND endsWith(k, '.name')
        AND (position(k, '.tool_calls.') > 0 OR position(k, '.function_call.') > 0), ol_keys)) AS ol_call_keys,
    arraySort(arrayFilter(k -> startsWith(k, 'gen_ai.completion.') AND endsWith(k, '.content'), ol_keys))
        AS ol_out_keys,

    -- (3) OpenInference: llm.input_messages.N.message.*, llm.output_messages.N.message.*, input.value
    if(oi, arrayFilter(k -> startsWith(k, 'llm.input_messages.') OR startsWith(k, 'llm.output_messages.'), mapKeys(a)),
        []) AS oi_keys,
    arraySort(arrayFilter(k -> startsWith(k, 'llm.input_messages.'), oi_keys)) AS oi_in_keys,
    concat('llm.input_messages.', toString(length(arrayFilter(k -> endsWith(k, '.message.role'), oi_in_keys)) - 1),
        '.message.') AS oi_last_prefix,
    arraySort(arrayFilter(k -> startsWith(k, 'llm.output_messages.') AND endsWith(k, '.tool_call.function.name'),
        oi_keys)) AS oi_call_keys,
    arraySort(arrayFilter(k -> startsWith(k, 'llm.output_messages.')
        AND (endsWith(k, '.message.content') OR endsWith(k, '.message_content.text')), oi_keys)) AS oi_out_keys,

    -- (4) span events: {system,user,assistant,tool}.message and gen_ai.choice (body in gen_ai.event.content, or
    -- a plain 'content' attribute), gen_ai.content.prompt / .completion (attributes gen_ai.prompt / gen_ai.completion)
    if(ev, arrayFilter((x, n) -> n IN ('gen_ai.system.message', 'gen_ai.user.message', 'gen_ai.assistant.message',
        'gen_ai.tool.message', 'gen_ai.content.prompt'), Events.Attributes, Events.Name), []) AS ev_in,
    if(ev, arrayFilter((x, n) -> n IN ('gen_ai.choice', 'gen_ai.content.completion'), Events.Attributes, Events.Name),
        []) AS ev_out,
    arrayMap(x -> multiIf(x['gen_ai.event.content'] != '', JSONExtractString(x['gen_ai.event.content'], 'content'),
        x['gen_ai.prompt'] != '', arrayElement(splitByChar('\n', x['gen_ai.prompt']), -1), x['content']), ev_in) AS ev_in_text,
    arrayFlatten(arrayMap(x -> JSONExtractArrayRaw(x['gen_ai.event.content'], 'message', 'tool_calls'), ev_out)) AS ev_calls,

    -- the whole input (request fingerprint) and the new content of this call (turn fingerprints)
    multiIf(
        in_msgs != '', in_msgs,
        ol, arrayStringConcat(arrayMap(k -> concat(k, '=', a[k]), ol_prompt_keys), '\x1e'),
        oi, replaceAll(coalesce(nullIf(a['input.value'], ''),
            arrayStringConcat(arrayMap(k -> concat(k, '=', a[k]), oi_in_keys), '\x1e')), '__REDACTED__', ''),
        ev, concat(arrayStringConcat(arrayMap(x -> toString(x), ev_in), '\x1e')),
        '') AS whole_input,
    multiIf(
        in_msgs != '', sc_last,
        ol, a[concat('gen_ai.prompt.', toString(ol_n - 1), '.content')],
        oi, replaceAll(concat(a[concat(oi_last_prefix, 'content')], arrayStringConcat(arrayMap(k -> a[k],
            arrayFilter(k -> startsWith(k, oi_last_prefix) AND endsWith(k, '.message_content.text'), oi_in_keys)), ' ')),
            '__REDACTED__', ''),
        ev, arrayElement(ev_in_text, -1),
        '') AS last_input,
    multiIf(
        out_msgs != '', sc_out,
        ol, arrayStringConcat(arrayMap(k -> a[k], ol_out_keys), ' '),
        oi, replaceAll(if(length(oi_out_keys) > 0, arrayStringConcat(arrayMap(k -> a[k], oi_out_keys), ' '),
            if(a['output.mime_type'] = 'text/plain', a['output.value'], '')), '__REDACTED__', ''),
        ev, arrayStringConcat(arrayMap(x -> multiIf(x['gen_ai.event.content'] != '',
            JSONExtractString(x['gen_ai.event.content'], 'message', 'content'), x['gen_ai.completion'] != '',
            x['gen_ai.completion'], x['content']), ev_out), ' '),
        '') AS output_text,
    (trimBoth(whole_input) != '' OR trimBoth(output_text) != '') AS content,

    -- tool calls the model asked for: (name, arguments) from whichever dialect has them; OpenLIT also puts
    -- them, comma-joined, in gen_ai.tool.name / gen_ai.tool.args on the chat span (with or without content)
    multiIf(
        length(sc_calls) > 0, arrayMap(p -> JSONExtractString(p, 'name'), sc_calls),
        length(ol_call_keys) > 0, arrayMap(k -> a[k], ol_call_keys),
        length(oi_call_keys) > 0, arrayMap(k -> a[k], oi_call_keys),
        length(ev_calls) > 0, arrayMap(c -> JSONExtractString(c, 'function', 'name'), ev_calls),
        is_llm AND a['gen_ai.tool.name'] != '', splitByString(', ', a['gen_ai.tool.name']),
        []) AS out_tools,
    multiIf(
        length(sc_calls) > 0, arrayMap(p -> if(JSONType(p, 'arguments') = 'String', JSONExtractString(p, 'arguments'),
            JSONExtractRaw(p, 'arguments')), sc_calls),
        length(ol_call_keys) > 0, arrayMap(k -> a[concat(substring(k, 1, length(k) - 4), 'arguments')], ol_call_keys),
        length(oi_call_keys) > 0, arrayMap(k -> a[concat(substring(k, 1, length(k) - 4), 'arguments')], oi_call_keys),
        length(ev_calls) > 0, arrayMap(c -> JSONExtractString(c, 'function', 'arguments'), ev_calls),
        length(out_tools) = 1, [a['gen_ai.tool.args']],
        length(out_tools) > 1, arrayResize(JSONExtractArrayRaw(concat('[', a['gen_ai.tool.args'], ']')), length(out_tools), ''),
        []) AS out_tool_args,

    -- execute_tool spans: tool name and argument values (semconv, OpenInference TOOL, traceloop @tool)
    if(op = 'execute_tool', coalesce(nullIf(a['gen_ai.tool.name'], ''), nullIf(a['tool.name'], ''),
        nullIf(a['traceloop.entity.name'], ''), replaceOne(SpanName, 'execute_tool ', '')), '') AS tool,
    if(op = 'execute_tool', coalesce(
        nullIf(a['gen_ai.tool.call.arguments'], ''),
        nullIf(a['tool_call.function.arguments'], ''),
        if(oi_kind = 'TOOL', nullIf(nullIf(a['input.value'], '__REDACTED__'), ''), NULL),
        if(JSONHas(a['traceloop.entity.input'], 'kwargs') AND JSONLength(a['traceloop.entity.input'], 'args') = 0,
            JSONExtractRaw(a['traceloop.entity.input'], 'kwargs'), a['traceloop.entity.input'])), '') AS tool_args,
    -- usage, with deprecated and dialect names mapped onto the current ones
    toUInt64OrZero(coalesce(nullIf(a['gen_ai.usage.input_tokens'], ''), nullIf(a['gen_ai.usage.prompt_tokens'], ''),
        nullIf(a['llm.token_count.prompt'], ''), nullIf(a['llm.usage.prompt_tokens'], ''), '0')) AS in_tok,
    toUInt64OrZero(coalesce(nullIf(a['gen_ai.usage.output_tokens'], ''), nullIf(a['gen_ai.usage.completion_tokens'], ''),
        nullIf(a['llm.token_count.completion'], ''), nullIf(a['llm.usage.completion_tokens'], ''), '0')) AS out_tok,
    -- errors: span status (new and old spellings), error.type, or a recorded exception event; the type as the
    -- exception class's short name whichever way it was written ('<class 'openai.RateLimitError'>' included)
    (StatusCode IN ('Error', 'STATUS_CODE_ERROR') OR a['error.type'] != '') AS err,
    if(err, coalesce(nullIf(a['error.type'], ''), nullIf(arrayElement(arrayMap(x -> x['exception.type'],
        arrayFilter((x, n) -> n = 'exception', Events.Attributes, Events.Name)), 1), ''), '_OTHER'), '') AS err_raw,
    if(err, arrayElement(splitByChar('.', replaceRegexpOne(err_raw, '^<class \'(.*)\'>$', '\\1')), -1), '') AS err_type,
    arrayFilter(x -> x != '', if(a['gen_ai.response.finish_reasons'] LIKE '[%',
        JSONExtract(a['gen_ai.response.finish_reasons'], 'Array(String)'),
        [a['gen_ai.response.finish_reasons'], a['gen_ai.completion.0.finish_reason'], a['llm.finish_reason']])) AS finish,
    coalesce(nullIf(a['gen_ai.response.model'], ''), nullIf(a['gen_ai.request.model'], ''),
        nullIf(a['llm.model_name'], ''), if(oi, JSONExtractString(a['llm.invocation_parameters'], 'model'), ''))
        AS model_name
SELECT
    Timestamp AS ts,
    Timestamp + toIntervalNanosecond(Duration) AS end_ts,
    TraceId AS trace_id,
    SpanId AS span_id,
    ParentSpanId AS parent_span_id,
    multiIf(
        a['gen_ai.conversation.id'] != '', a['gen_ai.conversation.id'],
        a['session.id'] != '', a['session.id'],
        a['traceloop.association.properties.session_id'] != '', a['traceloop.association.properties.session_id'],
        a['langfuse.session.id'] != '', a['langfuse.session.id'],
        a['loop_detector.session_id'] != '', a['loop_detector.session_id'],
        r['gen_ai.conversation.id'] != '', r['gen_ai.conversation.id'],
        r['session.id'] != '', r['session.id'],
        r['loop_detector.session_id'] != '', r['loop_detector.session_id'],
        TraceId) AS session_id,
    multiIf(
        a['gen_ai.conversation.id'] != '', 'gen_ai.conversation.id',
        a['session.id'] != '', 'session.id',
        a['traceloop.association.properties.session_id'] != '', 'traceloop.association.properties.session_id',
        a['langfuse.session.id'] != '', 'langfuse.session.id',
        a['loop_detector.session_id'] != '', 'loop_detector.session_id',
        r['gen_ai.conversation.id'] != '', 'resource:gen_ai.conversation.id',
        r['session.id'] != '', 'resource:session.id',
        r['loop_detector.session_id'] != '', 'resource:loop_detector.session_id',
        'trace') AS session_source,
    coalesce(nullIf(a['loop_detector.virtual_key'], ''), nullIf(r['loop_detector.virtual_key'], ''),
        nullIf(a['traceloop.association.properties.virtual_key'], ''), '') AS virtual_key,
    coalesce(nullIf(a['loop_detector.feature'], ''), nullIf(r['loop_detector.feature'], ''),
        nullIf(a['traceloop.association.properties.feature'], ''), '') AS feature,
    ServiceName AS service_name,
    op AS operation,
    multiIf(is_llm, 'llm', op = 'execute_tool', 'tool', op = 'invoke_agent', 'agent', op = 'embeddings', 'embeddings',
        'other') AS call_kind,
    lower(coalesce(nullIf(a['gen_ai.provider.name'], ''), nullIf(a['gen_ai.system'], ''), nullIf(a['llm.provider'], ''),
        nullIf(a['llm.system'], ''), '')) AS provider,
    model_name AS model,
    coalesce(nullIf(a['gen_ai.agent.name'], ''), '') AS agent_name,
    tool AS tool_name,
    coalesce(nullIf(a['gen_ai.tool.call.id'], ''), nullIf(a['tool_call.id'], ''), '') AS tool_call_id,
    in_tok AS input_tokens,
    out_tok AS output_tokens,
    toFloat64OrZero(coalesce(nullIf(a['gen_ai.usage.cost'], ''), nullIf(a['llm.cost.total'], ''),
        nullIf(a['llm.usage.cost'], ''), '0')) AS cost_usd,
    err AS is_error,
    err_type AS error_type,
    finish AS finish_reasons,
    content AS has_content,
    if(content AND whole_input != '', cityHash64(model_name, whole_input),
        cityHash64(model_name, op, in_tok, tool, a['gen_ai.request.max_tokens'], a['gen_ai.request.temperature']))
        AS request_fp,
    if(content, cityHash64(last_input, output_text), 0) AS turn_fp,
    if(trimBoth(last_input) != '', wordShingleSimHashUTF8(last_input), 0) AS input_simhash,
    if(trimBoth(output_text) != '', wordShingleSimHashUTF8(output_text), 0) AS output_simhash,
    -- tool fingerprints, the same for every dialect: name + the argument values with top-level keys sorted
    -- (JSONExtract*Raw re-serializes values, so whitespace and key order in the source do not matter)
    if(tool != '', cityHash64(tool, arraySort(JSONExtractKeysAndValuesRaw(tool_args)),
        if(JSONType(tool_args) = 'Object', '', tool_args)), 0) AS tool_fp,
    if(tool != '', cityHash64(tool, arraySort(JSONExtractKeys(tool_args))), 0) AS tool_shape_fp,
    out_tools AS out_tool_names,
    arrayMap((n, x) -> cityHash64(n, arraySort(JSONExtractKeysAndValuesRaw(x)), if(JSONType(x) = 'Object', '', x)),
        out_tools, out_tool_args) AS out_tool_fps,
    -- response structure: finish reasons ('tool_calls' and 'tool_call' alike), part types, whether tools were
    -- asked for, output-token bucket
    cityHash64(arrayMap(x -> if(x IN ('tool_calls', 'function_call'), 'tool_call', x), finish), arraySort(sc_types),
        length(out_tools) > 0, toUInt32(round(log2(out_tok + 1) * 4))) AS response_fp,
    if(err, cityHash64(err_type, replaceRegexpAll(StatusMessage, '0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}|\\d+', '#')), 0) AS error_fp
FROM otel.otel_traces
WHERE op != '';
