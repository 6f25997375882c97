-- otel.genai_calls: one normalized row per GenAI call span, filled on insert into otel.otel_traces by
-- the materialized view below, so the embedded receiver and the OTel Collector feed it alike.
--
-- It holds keys, usage and fingerprints only: no prompt or response text is copied out of the span.
-- The view understands the attribute dialects of the popular instrumentations (the official
-- opentelemetry-instrumentation-openai-v2 / GenAI semantic conventions, OpenLLMetry old and new, OpenLIT,
-- OpenInference) and of agent frameworks that trace themselves (the Vercel AI SDK's ai.* spans, Google ADK's legacy
-- call_llm spans, pydantic-ai, Strands' span events); docs/instrumentations.md lists, per column, which attribute
-- supplies it. Spans that are not GenAI calls but name a session (an agent framework's root or graph spans) give a
-- row too (call_kind 'other'), so that the detector knows the session of their trace.
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
    INDEX idx_inserted_at inserted_at TYPE minmax GRANULARITY 1,
    INDEX idx_trace_id trace_id TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_virtual_key virtual_key TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(inserted_at)
ORDER BY (session_id, ts, span_id);

-- Upgrades: a data directory created before the progress columns gets them here (the view below is replaced
-- when its definition changed: detector/storage/schema.py keeps a hash of it in otel.loop_meta).
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
    ADD COLUMN IF NOT EXISTS observation_pending UInt8;

CREATE MATERIALIZED VIEW IF NOT EXISTS otel.genai_calls_mv TO otel.genai_calls AS
-- Nested steps, so that each attribute is looked up once and each expression is analysed once: the view's SQL is
-- analysed on every INSERT that brings rows, so its size is a fixed cost per insert, and an alias used by another
-- expression of its own SELECT is analysed again there (a step per such alias halved the analysis). (3)
-- fingerprints, from (2c) the content normalized, from (2b) what came back, from (2) the dialects normalized, from
-- (2a) each dialect's building blocks, from (1) the attributes the view reads, for GenAI spans only.
SELECT
    ts, end_ts, trace_id, span_id, parent_span_id, session_id, session_source, virtual_key, feature, service_name,
    op AS operation,
    multiIf(is_llm, 'llm', op = 'execute_tool', 'tool', op = 'invoke_agent', 'agent', op = 'embeddings', 'embeddings',
        'other') AS call_kind,
    provider, model, agent_name, tool AS tool_name, tool_call_id, in_tok AS input_tokens, out_tok AS output_tokens,
    cost_usd, err AS is_error, err_type AS error_type, finish AS finish_reasons,
    (trimBoth(whole_input) != '' OR trimBoth(output_text) != '') AS has_content,
    if(has_content AND whole_input != '', cityHash64(model, whole_input),
        cityHash64(model, op, in_tok, tool, max_tokens, temperature)) AS request_fp,
    if(has_content, cityHash64(last_input, output_text), 0) AS turn_fp,
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
    cityHash64(arrayMap(x -> if(x IN ('tool_calls', 'function_call', 'tool-calls', 'tool_use'), 'tool_call', x), finish),
        arraySort(arrayMap(p -> JSONExtractString(p, 'type'), sc_parts)), length(out_tools) > 0,
        toUInt32(round(log2(out_tok + 1) * 4))) AS response_fp,
    if(err, cityHash64(err_type, replaceRegexpAll(StatusMessage, '0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}|\\d+', '#')), 0)
        AS error_fp,
    -- progress evidence (docs/signals.md, "Progress"): what came back (a tool's result; for a model call its new
    -- input), the tool's arguments and the model's own text, each with incidental variation normalized (UUIDs,
    -- timestamps, dates, times, timings, hex runs, ids that mix letters and digits, JSON key order, whitespace;
    -- plain numbers are kept: a count or a page number is information). Exact: a hash of that; fuzzy: a SimHash of
    -- it, case-insensitive: of an observation, over word shingles and without its JSON keys, so that pages of
    -- records differ by what the records say (0 for a text of a few words: only exact evidence then); of the
    -- arguments and the reply, over character n-grams, for arguments with every number also dropped, so a shifted
    -- offset is the same action reworded. `observation_empty`: the observation is "nothing" (no results, not found, empty).
    if(normalized[1] != '', cityHash64(normalized[1]), 0) AS observation_fp,
    if(normalized[4] != '', wordShingleSimHashCaseInsensitiveUTF8(normalized[4]), 0) AS observation_simhash,
    observed != '' AND match(lower(observed), '"(results|items|hits|matches|documents|records|entries|rows|data)"\\s*:\\s*\\[\\s*\\]|"(total|count|hits|total_count|num_results)"\\s*:\\s*0\\b|\\bno (results?|matches|documents?|items?|records?|entries|hits|data)\\b|\\bnot found\\b|\\bnothing (found|matched)\\b|^\\s*(null|none|\\[\\s*\\]|\\{\\s*\\})?\\s*$')
        AS observation_empty,
    length(normalized[1]) AS observation_chars,
    if(tool != '' AND normalized[2] != '', cityHash64(tool, normalized[2]), 0) AS args_fp,
    if(tool != '' AND normalized[2] != '', ngramSimHashCaseInsensitiveUTF8(replaceRegexpAll(normalized[2], '\\d+', '#')), 0)
        AS args_simhash,
    if(normalized[3] != '', cityHash64(normalized[3]), 0) AS output_fp,
    if(normalized[3] != '', ngramSimHashCaseInsensitiveUTF8(normalized[3]), 0) AS output_norm_simhash,
    arrayMap(x -> if(x != '', ngramSimHashCaseInsensitiveUTF8(replaceRegexpAll(x, '\\d+', '#')), 0), out_tool_args)
        AS out_tool_arg_simhashes,
    -- what came back says it failed (an error, a traceback, a refusal, a non-zero return code): the same failure again
    -- is the same outcome whatever its numbers (a shell's line counter, a retry-after) and whatever the arguments
    -- (docs/signals.md, "Progress")
    observed != '' AND match(observed, '(?i)\\b(error|exception|traceback|fatal|failed|failure|denied|not found|no such|cannot|can\'t|could not|unable to|invalid|unexpected|refused|timed out|not recognized)\\b|\\busage:|<returncode>[1-9]')
        AS observation_failed,
    -- the observation with every number replaced: a failure's key (compared for failures and "nothing" only)
    if(normalized[1] != '', cityHash64(replaceRegexpAll(normalized[1], '\\d+', '#')), 0) AS observation_shape_fp,
    -- what came back says the work is still in progress (a status of queued, running, in progress...): asking again
    -- is polling, the world has to move
    observed != '' AND match(observed, '(?i)\\b(status|state|phase)\\\\?"?\\s*[:=]\\s*\\\\?"?(queued|pending|running|in[ _-]?progress|processing|started|scheduled|waiting|not[ _-]?ready|building|deploying|provisioning|creating|initializing)\\b')
        AS observation_pending
FROM (
-- (2c) what came back, the arguments and the reply, each with incidental variation normalized (see the top of
-- this SELECT)
SELECT *,
    arrayMap(t -> trimBoth(replaceRegexpAll(replaceRegexpAll(replaceRegexpAll(replaceRegexpAll(
        replaceRegexpAll(if(JSONType(t) = 'Object', toString(arraySort(JSONExtractKeysAndValuesRaw(t))), t),
        '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>'),
        '\\d{4}-\\d{2}-\\d{2}([T ]\\d{2}:\\d{2}(:\\d{2}(\\.\\d+)?)?(Z|[+-]\\d{2}:?\\d{2})?)?|\\b\\d{1,2}:\\d{2}(:\\d{2}(\\.\\d+)?)?\\b',
        '<ts>'),
        '(took|elapsed|duration|latency)(_ms|_s|_us)?([\'"]*\\s*[:=,]\\s*[\'"]*)\\d+(\\.\\d+)?|\\b\\d+(\\.\\d+)?\\s?(ms|us|ns|s|secs?|seconds|minutes)\\b',
        '\\1\\2\\3<dur>'),
        '(0x)?[0-9a-fA-F]{8,}|[A-Za-z_][\\w\\-]*\\d[\\w\\-]*|\\d+[A-Za-z_][\\w\\-]*', '<id>'),
        '\\s+', ' ')), [observed, tool_args, output_text,
        replaceRegexpAll(observed, '\\\\?"[\\w .\\-]{1,64}\\\\?"\\s*:\\s*', '')]) AS normalized
FROM (
-- (2b) what came back: a tool's result (its echo of the arguments taken out: a search that repeats the query back
-- brings nothing new with it), or, for a model call, its new input (the last input message)
SELECT *,
    if(op = 'execute_tool', arrayFold((acc, v) -> if(length(v) >= 4 AND match(v, '[A-Za-z]'), replaceAll(acc, v, '<arg>'),
        acc), arrayMap(kv -> kv.2, JSONExtractKeysAndValues(tool_args, 'String')), tool_result), last_input) AS observed
FROM (
-- (2) the dialects normalized: keys, usage, errors, and the content and tool calls of whichever dialect has them
SELECT *,
    -- the whole input (request fingerprint) and the new content of this call (turn fingerprints): the last input
    -- message (a tool result's text included) and the output
    multiIf(
        in_msgs != '', in_msgs,
        ol, arrayStringConcat(arrayMap(k -> concat(k, '=', a[k]), ol_prompt_keys), '\x1e'),
        oi, replaceAll(if(input_value != '', input_value,
            arrayStringConcat(arrayMap(k -> concat(k, '=', a[k]), oi_in_keys), '\x1e')), '__REDACTED__', ''),
        vc, vc_prompt,
        adk, JSONExtractRaw(adk_request, 'contents'),
        ev, arrayStringConcat(arrayMap(x -> toString(x), ev_in), '\x1e'),
        '') AS whole_input,
    multiIf(
        in_msgs != '', arrayStringConcat(arrayMap(p -> if(JSONExtractString(p, 'type') = 'tool_call_response',
                multiIf(JSONType(p, 'response') = 'String', JSONExtractString(p, 'response'), JSONHas(p, 'response'),
                    JSONExtractRaw(p, 'response'), JSONType(p, 'result') = 'String', JSONExtractString(p, 'result'),
                    JSONExtractRaw(p, 'result')),
                JSONExtractString(p, 'content')), JSONExtractArrayRaw(sc_last_msg, 'parts')), ' ')
            || JSONExtractString(sc_last_msg, 'content'),
        ol, a[concat('gen_ai.prompt.', toString(length(arrayFilter(k -> endsWith(k, '.role'), ol_prompt_keys)) - 1),
            '.content')],
        oi, replaceAll(concat(a[concat(oi_last_prefix, 'content')], arrayStringConcat(arrayMap(k -> a[k],
            arrayFilter(k -> startsWith(k, oi_last_prefix) AND endsWith(k, '.message_content.text'), oi_in_keys)), ' ')),
            '__REDACTED__', ''),
        vc, if(JSONType(vc_last_msg, 'content') = 'String', JSONExtractString(vc_last_msg, 'content'),
            arrayStringConcat(arrayMap(p -> multiIf(JSONExtractString(p, 'type') = 'text', JSONExtractString(p, 'text'),
                JSONHas(p, 'output'), if(JSONType(p, 'output', 'value') = 'String', JSONExtractString(p, 'output', 'value'),
                    JSONExtractRaw(p, 'output', 'value')),
                JSONExtractRaw(p, 'result')), JSONExtractArrayRaw(vc_last_msg, 'content')), ' ')),
        adk, arrayStringConcat(arrayMap(p -> if(JSONHas(p, 'function_response'),
            JSONExtractRaw(p, 'function_response', 'response'), JSONExtractString(p, 'text')),
            JSONExtractArrayRaw(JSONExtractRaw(JSONExtractRaw(adk_request, 'contents'), -1), 'parts')), ' '),
        ev, arrayElement(arrayMap(x -> multiIf(x['gen_ai.event.content'] != '',
            JSONExtractString(x['gen_ai.event.content'], 'content'), x['gen_ai.prompt'] != '',
            arrayElement(splitByChar('\n', x['gen_ai.prompt']), -1),
            -- Strands: the message's content blocks as JSON (text, toolResult.content[].text)
            JSONType(x['content']) = 'Array', arrayStringConcat(arrayMap(b -> concat(JSONExtractString(b, 'text'),
                arrayStringConcat(arrayMap(t -> JSONExtractString(t, 'text'), JSONExtractArrayRaw(b, 'toolResult', 'content')),
                ' ')), JSONExtractArrayRaw(x['content'])), ' '),
            x['content']), ev_in), -1),
        '') AS last_input,
    multiIf(
        out_msgs != '', arrayStringConcat(arrayFilter(x -> x != '', arrayMap(p -> JSONExtractString(p, 'content'),
            sc_parts)), ' '),
        ol, arrayStringConcat(arrayMap(k -> a[k], arraySort(mapKeys(mapExtractKeyLike(a, 'gen_ai.completion.%.content')))),
            ' '),
        oi, replaceAll(if(mapContains(a, 'llm.output_messages.0.message.role'), arrayStringConcat(arrayMap(k -> a[k],
            arraySort(arrayFilter(k -> endsWith(k, '.message.content') OR endsWith(k, '.message_content.text'),
            mapKeys(mapExtractKeyLike(a, 'llm.output_messages.%'))))), ' '),
            if(output_mime = 'text/plain', output_value, '')), '__REDACTED__', ''),
        vc, a['ai.response.text'],
        adk, arrayStringConcat(arrayFilter(x -> x != '', arrayMap(p -> JSONExtractString(p, 'text'), adk_parts)), ' '),
        ev, arrayStringConcat(arrayMap(x -> multiIf(x['gen_ai.event.content'] != '',
            JSONExtractString(x['gen_ai.event.content'], 'message', 'content'), x['gen_ai.completion'] != '',
            x['gen_ai.completion'],
            -- Strands: gen_ai.choice's `message`, the content blocks as JSON
            x['message'] != '', if(JSONType(x['message']) = 'Array', arrayStringConcat(arrayFilter(t -> t != '',
                arrayMap(b -> JSONExtractString(b, 'text'), JSONExtractArrayRaw(x['message']))), ' '), x['message']),
            x['content']), ev_out), ' '),
        '') AS output_text,
    -- tool calls the model asked for: (name, arguments)
    multiIf(
        length(sc_calls) > 0, arrayMap(p -> JSONExtractString(p, 'name'), sc_calls),
        length(ol_call_keys) > 0, arrayMap(k -> a[k], ol_call_keys),
        length(oi_call_keys) > 0, arrayMap(k -> a[k], oi_call_keys),
        length(vc_calls) > 0, arrayMap(c -> JSONExtractString(c, 'toolName'), vc_calls),
        length(adk_calls) > 0, arrayMap(p -> JSONExtractString(p, 'function_call', 'name'), adk_calls),
        length(ev_calls) > 0, arrayMap(c -> JSONExtractString(c, 'function', 'name'), ev_calls),
        lit_tools) AS out_tools,
    multiIf(
        length(sc_calls) > 0, arrayMap(p -> if(JSONType(p, 'arguments') = 'String', JSONExtractString(p, 'arguments'),
            JSONExtractRaw(p, 'arguments')), sc_calls),
        length(ol_call_keys) > 0, arrayMap(k -> a[concat(substring(k, 1, length(k) - 4), 'arguments')], ol_call_keys),
        length(oi_call_keys) > 0, arrayMap(k -> a[concat(substring(k, 1, length(k) - 4), 'arguments')], oi_call_keys),
        length(vc_calls) > 0, arrayMap(c -> multiIf(JSONType(c, 'input') = 'String', JSONExtractString(c, 'input'),
            JSONHas(c, 'input'), JSONExtractRaw(c, 'input'), JSONType(c, 'args') = 'String', JSONExtractString(c, 'args'),
            JSONExtractRaw(c, 'args')), vc_calls),
        length(adk_calls) > 0, arrayMap(p -> JSONExtractRaw(p, 'function_call', 'args'), adk_calls),
        length(ev_calls) > 0, arrayMap(c -> JSONExtractString(c, 'function', 'arguments'), ev_calls),
        length(lit_tools) = 1, [lit_tool_args],
        arrayResize(JSONExtractArrayRaw(concat('[', lit_tool_args, ']')), length(lit_tools), '')) AS out_tool_args,
    -- execute_tool spans: tool name and argument values (semconv, OpenInference TOOL, traceloop @tool, the Vercel AI
    -- SDK's ai.toolCall, ADK's legacy attributes, pydantic-ai's older ones, Strands' gen_ai.tool.message event)
    if(op = 'execute_tool', multiIf(tool_sc != '', tool_sc, tool_vc != '', tool_vc, tool_oi != '', tool_oi,
        tool_tl != '', tool_tl, replaceOne(SpanName, 'execute_tool ', '')), '') AS tool,
    if(op = 'execute_tool', multiIf(
        -- OpenLLMetry's LangChain callback envelope (the input beside the run's tags, metadata and counters): the
        -- arguments are its `inputs` object, else its `input_str`
        args_sc != '' AND JSONHas(args_sc, 'input_str'), if(JSONType(args_sc, 'inputs') = 'Object',
            JSONExtractRaw(args_sc, 'inputs'), JSONExtractString(args_sc, 'input_str')),
        args_sc != '', args_sc,
        args_vc != '', args_vc,
        args_oi != '', args_oi,
        args_adk NOT IN ('', '{}', 'N/A'), args_adk,
        a['tool_arguments'] != '', a['tool_arguments'],
        ev_tool_args != '', ev_tool_args,
        oi_kind = 'TOOL' AND input_value != '__REDACTED__', input_value,
        JSONHas(args_tl, 'kwargs') AND JSONLength(args_tl, 'args') = 0, JSONExtractRaw(args_tl, 'kwargs'),
        args_tl), '') AS tool_args,
    -- a tool's result, whichever dialect carries it
    if(op = 'execute_tool', multiIf(result_sc != '', result_sc,
        oi_kind = 'TOOL' AND output_value NOT IN ('', '__REDACTED__'), output_value, result_tl), '') AS tool_result,
    -- the first non-empty session attribute: span, then resource, else the trace
    arrayFirstIndex(x -> x != '', session_values) AS session_index,
    if(session_index = 0, TraceId, session_values[session_index]) AS session_id,
    if(session_index = 0, 'trace', arrayElement(['gen_ai.conversation.id', 'session.id',
        'traceloop.association.properties.session_id', 'langfuse.session.id', 'loop_detector.session_id',
        'ai.telemetry.metadata.sessionId', 'ai.telemetry.metadata.session_id', 'gcp.vertex.agent.session_id',
        'resource:gen_ai.conversation.id', 'resource:session.id', 'resource:loop_detector.session_id'], session_index))
        AS session_source,
    arrayFirst(x -> x != '', virtual_key_values) AS virtual_key,
    arrayFirst(x -> x != '', feature_values) AS feature,
    arrayFirst(x -> x != '', provider_values) AS provider_named,
    -- (the Vercel AI SDK names the provider and its API: 'openai.chat', 'openai.responses')
    lower(if(vc AND position(provider_named, '.') > 0, substring(provider_named, 1, position(provider_named, '.') - 1),
        provider_named)) AS provider,
    arrayFirst(x -> x != '', [model_values[1], model_values[2], model_values[3],
        if(oi, JSONExtractString(model_values[4], 'model'), '')]) AS model,
    toUInt64OrZero(arrayFirst(x -> x != '', input_token_values)) AS in_tok,
    toUInt64OrZero(arrayFirst(x -> x != '', output_token_values)) AS out_tok,
    toFloat64OrZero(arrayFirst(x -> x != '', cost_values)) AS cost_usd,
    -- errors: span status (new and old spellings), error.type, or a recorded exception event; the type as the
    -- exception class' short name whichever way it was written ('<class 'openai.RateLimitError'>' included)
    (StatusCode IN ('Error', 'STATUS_CODE_ERROR') OR error_type_attr != '') AS err,
    if(err, arrayElement(splitByChar('.', replaceRegexpOne(multiIf(error_type_attr != '', error_type_attr,
        exception_type != '', exception_type, '_OTHER'), '^<class \'(.*)\'>$', '\\1')), -1), '') AS err_type,
    arrayFilter(x -> x != '', if(finish_values[1] LIKE '[%', JSONExtract(finish_values[1], 'Array(String)'),
        finish_values)) AS finish
FROM (
-- (2a) the building blocks of each dialect, one column each (an alias used twice in one SELECT is analysed twice)
SELECT *,
    -- (a) GenAI semantic conventions: JSON messages of parts (openai-v2, OpenLLMetry >= 0.5x, OpenLIT)
    if(in_msgs != '', JSONExtractRaw(in_msgs, -1), '') AS sc_last_msg,
    arrayFilter(p -> JSONExtractString(p, 'type') = 'tool_call', sc_parts) AS sc_calls,
    -- (b) OpenLLMetry, indexed: gen_ai.prompt.N.{role,content,tool_calls.M.*}, gen_ai.completion.N.*
    if(ol, arraySort(mapKeys(mapExtractKeyLike(a, 'gen_ai.prompt.%'))), []) AS ol_prompt_keys,
    if(ol, arraySort(arrayFilter(k -> position(k, '.tool_calls.') > 0 OR position(k, '.function_call.') > 0,
        mapKeys(mapExtractKeyLike(a, 'gen_ai.completion.%.name')))), []) AS ol_call_keys,
    -- (c) OpenInference: llm.input_messages.N.message.*, llm.output_messages.N.message.*, input.value
    if(oi, arraySort(mapKeys(mapExtractKeyLike(a, 'llm.input_messages.%'))), []) AS oi_in_keys,
    if(oi, concat('llm.input_messages.', toString(length(arrayFilter(k -> endsWith(k, '.message.role'), oi_in_keys)) - 1),
        '.message.'), '') AS oi_last_prefix,
    if(oi, arraySort(mapKeys(mapExtractKeyLike(a, 'llm.output_messages.%.tool_call.function.name'))), []) AS oi_call_keys,
    -- (d) span events: {system,user,assistant,tool}.message and gen_ai.choice (body in gen_ai.event.content, or a
    -- plain 'content' attribute), gen_ai.content.prompt / .completion (attributes gen_ai.prompt / gen_ai.completion)
    if(ev, arrayFilter((x, n) -> n IN ('gen_ai.system.message', 'gen_ai.user.message', 'gen_ai.assistant.message',
        'gen_ai.tool.message', 'gen_ai.content.prompt'), ev_attrs, ev_names), []) AS ev_in,
    if(ev, arrayFilter((x, n) -> n IN ('gen_ai.choice', 'gen_ai.content.completion'), ev_attrs, ev_names), []) AS ev_out,
    -- (the choice's tool calls under its message, as the conventions put them, or beside it, as OpenLLMetry does)
    -- (Strands: toolUse blocks of the `message`, rewritten as {"function": {"name", "arguments"}})
    arrayFlatten(arrayMap(x -> arrayConcat(JSONExtractArrayRaw(x['gen_ai.event.content'], 'message', 'tool_calls'),
        JSONExtractArrayRaw(x['gen_ai.event.content'], 'tool_calls'),
        arrayMap(b -> concat('{"function":{"name":', toJSONString(JSONExtractString(b, 'toolUse', 'name')),
            ',"arguments":', toJSONString(JSONExtractRaw(b, 'toolUse', 'input')), '}}'),
            arrayFilter(b -> JSONHas(b, 'toolUse'), JSONExtractArrayRaw(x['message'])))), ev_out)) AS ev_calls,
    -- (e) the Vercel AI SDK: ai.prompt.messages (content a string or parts), ai.response.text, ai.response.toolCalls
    if(vc, JSONExtractRaw(vc_prompt, -1), '') AS vc_last_msg,
    if(vc, JSONExtractArrayRaw(a['ai.response.toolCalls']), []) AS vc_calls,
    -- (f) Google ADK's legacy call_llm: the LlmRequest and LlmResponse as JSON (contents of parts)
    if(adk, JSONExtractArrayRaw(adk_response, 'content', 'parts'), []) AS adk_parts,
    arrayFilter(p -> JSONHas(p, 'function_call'), adk_parts) AS adk_calls,
    -- Strands: a tool span's input in its gen_ai.tool.message event
    if(op = 'execute_tool' AND ev, arrayElement(arrayMap(x -> x['content'], arrayFilter((x, n) -> n = 'gen_ai.tool.message',
        ev_attrs, ev_names)), 1), '') AS ev_tool_args,
    -- OpenLIT names the tool calls on the chat span, comma-joined (with or without content)
    if(is_llm AND lit_tool_names != '', splitByString(', ', lit_tool_names), []) AS lit_tools,
    arrayElement(arrayMap(x -> x['exception.type'], arrayFilter((x, n) -> n = 'exception', ev_attrs, ev_names)), 1)
        AS exception_type
FROM (
-- (1) GenAI spans only (the operation, in the current semconv or a dialect), and the attributes the view reads
SELECT
    Timestamp AS ts,
    Timestamp + toIntervalNanosecond(Duration) AS end_ts,
    TraceId AS trace_id, TraceId, SpanId AS span_id, ParentSpanId AS parent_span_id, ServiceName AS service_name,
    SpanName, StatusCode, StatusMessage, Events.Name AS ev_names, Events.Attributes AS ev_attrs,
    a,
    a['openinference.span.kind'] AS oi_kind,
    a['llm.request.type'] AS ol_request_type,
    a['traceloop.span.kind'] AS tl_kind,
    a['gen_ai.operation.name'] AS op_named,
    a['ai.operationId'] AS vc_op,
    -- Google ADK's legacy schema reports each model call twice: call_llm (content, session) and a stable-semconv
    -- twin under it (gen_ai.system, no gen_ai.provider.name); the twin is skipped
    (op_named = 'generate_content' AND a['gcp.vertex.agent.event_id'] != '' AND a['gen_ai.system'] != ''
        AND a['gen_ai.provider.name'] = '') AS adk_twin,
    multiIf(
        adk_twin, '',
        -- a span is a tool call when any dialect says so (pydantic-ai's older tool spans carry gen_ai.tool.* only)
        op_named = 'execute_tool' OR oi_kind = 'TOOL' OR tl_kind = 'tool' OR vc_op = 'ai.toolCall'
            OR (a['gen_ai.tool.name'] != '' AND op_named = '' AND ol_request_type = '' AND oi_kind = ''), 'execute_tool',
        op_named != '', op_named,
        ol_request_type = 'chat', 'chat',
        ol_request_type = 'completion', 'text_completion',
        ol_request_type = 'embedding', 'embeddings',
        oi_kind = 'LLM', 'chat',
        oi_kind = 'AGENT', 'invoke_agent',
        oi_kind = 'EMBEDDING', 'embeddings',
        tl_kind = 'agent', 'invoke_agent',
        vc_op IN ('ai.generateText.doGenerate', 'ai.streamText.doStream', 'ai.generateObject.doGenerate',
            'ai.streamObject.doStream'), 'chat',
        vc_op IN ('ai.embed.doEmbed', 'ai.embedMany.doEmbed'), 'embeddings',
        vc_op IN ('ai.generateText', 'ai.streamText', 'ai.generateObject', 'ai.streamObject'), 'invoke_agent',
        SpanName = 'call_llm' AND a['gcp.vertex.agent.llm_request'] != '', 'generate_content',
        '') AS op,
    op IN ('chat', 'text_completion', 'generate_content') AS is_llm,
    oi_kind != '' AS oi,
    vc_op != '' AND a['ai.prompt.messages'] != '' AS vc,
    a['ai.prompt.messages'] AS vc_prompt,
    SpanName = 'call_llm' AND a['gcp.vertex.agent.llm_request'] NOT IN ('', '{}') AS adk,
    a['gcp.vertex.agent.llm_request'] AS adk_request,
    a['gcp.vertex.agent.llm_response'] AS adk_response,
    -- OpenLLMetry before its move to gen_ai.input.messages: indexed gen_ai.prompt.N.* / gen_ai.completion.N.*
    (mapContains(a, 'gen_ai.prompt.0.role') OR mapContains(a, 'gen_ai.completion.0.role')) AS ol,
    -- content as span events (semconv <= 1.30 event names; the older gen_ai.content.* events of OpenLIT)
    hasAny(Events.Name, ['gen_ai.system.message', 'gen_ai.user.message', 'gen_ai.assistant.message',
        'gen_ai.tool.message', 'gen_ai.choice', 'gen_ai.content.prompt', 'gen_ai.content.completion']) AS ev,
    -- semconv messages on the span, or in its gen_ai.client.inference.operation.details span events (Strands)
    arrayFilter((x, n) -> n = 'gen_ai.client.inference.operation.details', Events.Attributes, Events.Name)
        AS detail_events,
    if(a['gen_ai.input.messages'] != '', a['gen_ai.input.messages'],
        arrayStringConcat(arrayMap(x -> x['gen_ai.input.messages'], detail_events))) AS in_msgs,
    if(a['gen_ai.output.messages'] != '', a['gen_ai.output.messages'],
        arrayStringConcat(arrayMap(x -> x['gen_ai.output.messages'], detail_events))) AS out_msgs,
    if(out_msgs != '', arrayFlatten(arrayMap(m -> JSONExtractArrayRaw(m, 'parts'), JSONExtractArrayRaw(out_msgs))), [])
        AS sc_parts,
    a['input.value'] AS input_value,
    a['output.value'] AS output_value,
    a['output.mime_type'] AS output_mime,
    -- each list: the attributes that can supply one column, first non-empty wins (docs/instrumentations.md)
    [a['gen_ai.conversation.id'], a['session.id'], a['traceloop.association.properties.session_id'],
        a['langfuse.session.id'], a['loop_detector.session_id'], a['ai.telemetry.metadata.sessionId'],
        a['ai.telemetry.metadata.session_id'], a['gcp.vertex.agent.session_id'],
        r['gen_ai.conversation.id'], r['session.id'], r['loop_detector.session_id']] AS session_values,
    [a['loop_detector.virtual_key'], r['loop_detector.virtual_key'],
        a['traceloop.association.properties.virtual_key']] AS virtual_key_values,
    [a['loop_detector.feature'], r['loop_detector.feature'],
        a['traceloop.association.properties.feature']] AS feature_values,
    [a['gen_ai.provider.name'], a['gen_ai.system'], a['llm.provider'], a['llm.system']] AS provider_values,
    [a['gen_ai.response.model'], a['gen_ai.request.model'], a['llm.model_name'], a['llm.invocation_parameters']]
        AS model_values,
    [a['gen_ai.usage.input_tokens'], a['gen_ai.usage.prompt_tokens'], a['llm.token_count.prompt'],
        a['llm.usage.prompt_tokens']] AS input_token_values,
    [a['gen_ai.usage.output_tokens'], a['gen_ai.usage.completion_tokens'], a['llm.token_count.completion'],
        a['llm.usage.completion_tokens']] AS output_token_values,
    [a['gen_ai.usage.cost'], a['llm.cost.total'], a['llm.usage.cost']] AS cost_values,
    [a['gen_ai.response.finish_reasons'], a['gen_ai.completion.0.finish_reason'], a['llm.finish_reason']]
        AS finish_values,
    a['error.type'] AS error_type_attr,
    a['gen_ai.agent.name'] AS agent_name,
    arrayFirst(x -> x != '', [a['gen_ai.tool.call.id'], a['tool_call.id'], a['ai.toolCall.id']]) AS tool_call_id,
    a['gen_ai.tool.name'] AS tool_sc,
    a['ai.toolCall.name'] AS tool_vc,
    if(a['ai.toolCall.args'] != '', a['ai.toolCall.args'], a['ai.toolCall.input']) AS args_vc,
    a['gcp.vertex.agent.tool_call_args'] AS args_adk,
    a['tool.name'] AS tool_oi,
    a['traceloop.entity.name'] AS tool_tl,
    a['gen_ai.tool.call.arguments'] AS args_sc,
    a['tool_call.function.arguments'] AS args_oi,
    a['traceloop.entity.input'] AS args_tl,
    a['gen_ai.tool.call.result'] AS result_sc,
    a['traceloop.entity.output'] AS result_tl,
    tool_sc AS lit_tool_names,
    a['gen_ai.tool.args'] AS lit_tool_args,
    a['gen_ai.request.max_tokens'] AS max_tokens,
    a['gen_ai.request.temperature'] AS temperature
FROM (
    -- Lookups cost: a Map with LowCardinality keys is searched row by row per subscript, about 3x slower than a
    -- plain Map(String, String) (one CAST per row, measured); and a subscript by a constant key is far cheaper than
    -- arrayMap(k -> a[k], [...]), so every list above spells its lookups out.
    SELECT *, CAST(SpanAttributes, 'Map(String, String)') AS a, CAST(ResourceAttributes, 'Map(String, String)') AS r
    FROM otel.otel_traces)
-- GenAI calls, and the spans that name a session without being one (roots, framework graph and workflow spans)
WHERE op != '' OR (arrayExists(x -> x != '', session_values)
    AND (ParentSpanId = '' OR oi_kind != '' OR tl_kind != '' OR vc_op != ''))
)))))
-- optimize_and_compare_chain adds the comparisons an AND chain implies (a < b AND b < 3: a < 3), for filters that
-- read stored data; this SELECT reads one insert's rows, and the pass took half of its analysis (docs/benchmarks.md,
-- "The view's cost per insert")
SETTINGS optimize_and_compare_chain = 0;
