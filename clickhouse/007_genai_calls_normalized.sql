-- otel.genai_calls_normalized: the normalization, in one place. Every GenAI span staged in otel.genai_spans becomes one
-- otel.genai_calls row here: its keys resolved, its content normalized and fingerprinted, the content its logs carried
-- joined in. It is a parameterized view, read only through detector/detection/transform.py:
--
--   SELECT ... FROM otel.genai_calls_normalized(watermark = W, cutoff = C, shards = N, shard = I, own_shard = 1)
--
-- gives the calls of the spans staged in (W, C] (microseconds since the epoch) whose session is detector replica I's
-- of N (cityHash64(session_id) % N = I); with own_shard = 0, the tool calls of the other replicas' sessions instead
-- (a tool span usually names no session, so its session is its trace, and every replica reads every tool call:
-- docs/scaling.md). The detection cycle inserts the first into otel.genai_calls once per cycle, for the whole batch,
-- and reads the second as it is.
--
-- Content in logs: instrumentations in event mode (openai-v2 `event_only`, util-genai's `span_and_event`, older
-- per-message events) write a call's messages into log records carrying the span's trace and span id. A model call
-- whose span carries no messages of its own (gen_ai.input.messages / gen_ai.output.messages, on the span or in its
-- details span events) is read with its content logs folded in: the details record's attributes under the span's own
-- (the span winning), each per-message record appended as a span event whose gen_ai.event.content is the record's body.
-- So a call gets the same fingerprints in span mode and in event mode. A retried logs export may store a record twice:
-- the details record is read once (the newest), per-message records distinct. Timing: a log record must be stored by
-- the time its span is normalized; util-genai emits it before it ends the span and the SDK exports logs every second
-- (spans: every five); `detector.watermark_lag_seconds` gives stragglers more time.
--
-- The steps below are nested so that each attribute is looked up once and each expression is analysed once (an alias
-- used by another expression of its own SELECT is analysed again there; the statement is analysed once per cycle, but
-- a cycle that waits for it is a decision that waits). (3) fingerprints, from (2c) the content normalized, from (2b)
-- what came back, from (2) the dialects normalized, from (2a) each dialect's building blocks, from (1) the attributes
-- read, from (0b) the content logs folded in, from (0a) the batch: the staged spans of the range, keys resolved.
CREATE OR REPLACE VIEW otel.genai_calls_normalized AS
SELECT
    inserted_at, ts, end_ts, trace_id, span_id, parent_span_id, session_id, session_source, virtual_key, feature,
    service_name,
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
        AS out_tool_arg_simhashes
FROM (
-- (2c) what came back, the arguments and the reply, each with incidental variation normalized (see the top of
-- this SELECT)
SELECT *,
    -- (an empty text stays empty: skipped, since the five passes cost about as much on nothing as on a few words)
    arrayMap(t -> if(t = '', '', trimBoth(replaceRegexpAll(replaceRegexpAll(replaceRegexpAll(replaceRegexpAll(
        replaceRegexpAll(if(JSONType(t) = 'Object', toString(arraySort(JSONExtractKeysAndValuesRaw(t))), t),
        '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>'),
        '\\d{4}-\\d{2}-\\d{2}([T ]\\d{2}:\\d{2}(:\\d{2}(\\.\\d+)?)?(Z|[+-]\\d{2}:?\\d{2})?)?|\\b\\d{1,2}:\\d{2}(:\\d{2}(\\.\\d+)?)?\\b',
        '<ts>'),
        '(took|elapsed|duration|latency)(_ms|_s|_us)?([\'"]*\\s*[:=,]\\s*[\'"]*)\\d+(\\.\\d+)?|\\b\\d+(\\.\\d+)?\\s?(ms|us|ns|s|secs?|seconds|minutes)\\b',
        '\\1\\2\\3<dur>'),
        '(0x)?[0-9a-fA-F]{8,}|[A-Za-z_][\\w\\-]*\\d[\\w\\-]*|\\d+[A-Za-z_][\\w\\-]*', '<id>'),
        '\\s+', ' '))), [observed, tool_args, output_text,
        if(observed = '', '', replaceRegexpAll(observed, '\\\\?"[\\w .\\-]{1,64}\\\\?"\\s*:\\s*', ''))]) AS normalized
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
-- (1) the attributes the normalization reads
SELECT
    inserted_at, ts,
    -- (the end time saturates at DateTime64(9)'s last nanosecond: a collector may store any duration, and a batch must
    -- never fail on one span)
    fromUnixTimestamp64Nano(toInt64(least(toInt128(toUnixTimestamp64Nano(ts)) + duration_ns, 9223372036854775807)))
        AS end_ts,
    trace_id, span_id, parent_span_id, service_name, session_id, session_source,
    span_name AS SpanName, status_code AS StatusCode, status_message AS StatusMessage,
    a0 AS a, op, oi_kind, tl_kind, is_llm, log_input_messages, log_output_messages,
    oi_kind != '' AS oi,
    a['ai.operationId'] != '' AND a['ai.prompt.messages'] != '' AS vc,
    a['ai.prompt.messages'] AS vc_prompt,
    span_name = 'call_llm' AND a['gcp.vertex.agent.llm_request'] NOT IN ('', '{}') AS adk,
    a['gcp.vertex.agent.llm_request'] AS adk_request,
    a['gcp.vertex.agent.llm_response'] AS adk_response,
    -- OpenLLMetry before its move to gen_ai.input.messages: indexed gen_ai.prompt.N.* / gen_ai.completion.N.*
    (mapContains(a, 'gen_ai.prompt.0.role') OR mapContains(a, 'gen_ai.completion.0.role')) AS ol,
    -- content as span events (semconv <= 1.30 event names; the older gen_ai.content.* events of OpenLIT)
    ev_names, ev_attrs,
    hasAny(ev_names, ['gen_ai.system.message', 'gen_ai.user.message', 'gen_ai.assistant.message',
        'gen_ai.tool.message', 'gen_ai.choice', 'gen_ai.content.prompt', 'gen_ai.content.completion']) AS ev,
    -- semconv messages on the span, or in its gen_ai.client.inference.operation.details span events (Strands)
    arrayFilter((x, n) -> n = 'gen_ai.client.inference.operation.details', ev_attrs, ev_names) AS detail_events,
    multiIf(a['gen_ai.input.messages'] != '', a['gen_ai.input.messages'], log_input_messages != '', log_input_messages,
        arrayStringConcat(arrayMap(x -> x['gen_ai.input.messages'], detail_events))) AS in_msgs,
    multiIf(a['gen_ai.output.messages'] != '', a['gen_ai.output.messages'], log_output_messages != '',
        log_output_messages, arrayStringConcat(arrayMap(x -> x['gen_ai.output.messages'], detail_events))) AS out_msgs,
    if(out_msgs != '', arrayFlatten(arrayMap(m -> JSONExtractArrayRaw(m, 'parts'), JSONExtractArrayRaw(out_msgs))), [])
        AS sc_parts,
    a['input.value'] AS input_value,
    a['output.value'] AS output_value,
    a['output.mime_type'] AS output_mime,
    -- each list: the attributes that can supply one column, first non-empty wins (docs/instrumentations.md)
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
    a['gen_ai.tool.name'] AS lit_tool_names,
    a['gen_ai.tool.args'] AS lit_tool_args,
    a['gen_ai.request.max_tokens'] AS max_tokens,
    a['gen_ai.request.temperature'] AS temperature
FROM (
-- (0b) a model call whose span carries no messages of its own, with the messages its content log records carry: the
-- details record's (the newest), and each per-message record as a span event whose gen_ai.event.content is its body
SELECT s.*, l.input_messages AS log_input_messages, l.output_messages AS log_output_messages,
    arrayConcat(s.ev_names0, l.event_names) AS ev_names, arrayConcat(s.ev_attrs0, l.event_attributes) AS ev_attrs
FROM (
-- (0a) the batch: the spans staged in (watermark, cutoff] that are GenAI calls (or name a session), with their keys: the
-- operation and the session; those of this replica's sessions, or the other replicas' tool calls
SELECT inserted_at, ts, duration_ns, trace_id, span_id, parent_span_id, service_name, span_name, status_code,
    status_message, a0, r, CAST(event_names, 'Array(String)') AS ev_names0,
    CAST(event_attributes, 'Array(Map(String, String))') AS ev_attrs0, operation AS op, oi_kind, tl_kind,
    op IN ('chat', 'text_completion', 'generate_content') AS is_llm,
    -- a model call whose span carries no messages of its own takes them from its content logs, if it has some
    is_llm AND a0['gen_ai.input.messages'] = '' AND a0['gen_ai.output.messages'] = ''
        AND NOT has(ev_names0, 'gen_ai.client.inference.operation.details') AS content_wanted,
    -- the first non-empty session attribute: span, then resource, else the trace
    if(session_index = 0, trace_id, session_values[session_index]) AS session_id,
    if(session_index = 0, 'trace', arrayElement(['gen_ai.conversation.id', 'session.id',
        'traceloop.association.properties.session_id', 'langfuse.session.id', 'loop_detector.session_id',
        'ai.telemetry.metadata.sessionId', 'ai.telemetry.metadata.session_id', 'gcp.vertex.agent.session_id',
        'resource:gen_ai.conversation.id', 'resource:session.id', 'resource:loop_detector.session_id'], session_index))
        AS session_source
FROM (
SELECT *,
    multiIf(
        -- Google ADK's legacy schema reports each model call twice: call_llm (content, session) and a stable-semconv
        -- twin under it (gen_ai.system, no gen_ai.provider.name); the twin is skipped
        op_named = 'generate_content' AND a0['gcp.vertex.agent.event_id'] != '' AND a0['gen_ai.system'] != ''
            AND a0['gen_ai.provider.name'] = '', '',
        -- a span is a tool call when any dialect says so (pydantic-ai's older tool spans carry gen_ai.tool.* only)
        op_named = 'execute_tool' OR oi_kind = 'TOOL' OR tl_kind = 'tool' OR vc_op = 'ai.toolCall'
            OR (a0['gen_ai.tool.name'] != '' AND op_named = '' AND ol_request_type = '' AND oi_kind = ''), 'execute_tool',
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
        span_name = 'call_llm' AND a0['gcp.vertex.agent.llm_request'] != '', 'generate_content',
        '') AS operation,
    arrayFirstIndex(x -> x != '', session_values) AS session_index
FROM (
SELECT *,
    -- Lookups cost: a Map with LowCardinality keys is searched row by row per subscript, about 3x slower than a plain
    -- Map(String, String) (one CAST per row, measured)
    CAST(attributes, 'Map(String, String)') AS a0, CAST(resource_attributes, 'Map(String, String)') AS r,
    a0['gen_ai.operation.name'] AS op_named,
    a0['openinference.span.kind'] AS oi_kind,
    a0['llm.request.type'] AS ol_request_type,
    a0['traceloop.span.kind'] AS tl_kind,
    a0['ai.operationId'] AS vc_op,
    -- the attributes that can name the session, first non-empty wins (docs/instrumentations.md)
    [a0['gen_ai.conversation.id'], a0['session.id'], a0['traceloop.association.properties.session_id'],
        a0['langfuse.session.id'], a0['loop_detector.session_id'], a0['ai.telemetry.metadata.sessionId'],
        a0['ai.telemetry.metadata.session_id'], a0['gcp.vertex.agent.session_id'],
        r['gen_ai.conversation.id'], r['session.id'], r['loop_detector.session_id']] AS session_values
FROM otel.genai_spans
WHERE inserted_at > fromUnixTimestamp64Micro({watermark:Int64}) AND inserted_at <= fromUnixTimestamp64Micro({cutoff:Int64})))
-- GenAI calls, and the spans that name a session without being one (roots, framework graph and workflow spans)
WHERE (operation != '' OR (session_index > 0 AND (parent_span_id = '' OR oi_kind != '' OR tl_kind != '' OR vc_op != '')))
  AND (cityHash64(session_id) % {shards:UInt32} = {shard:UInt32}) = {own_shard:UInt8}
  AND ({own_shard:UInt8} = 1 OR operation = 'execute_tool')) AS s
-- the content log records of the spans staged in the range, by trace and span id
LEFT JOIN (
    SELECT TraceId, SpanId,
        argMaxIf(LogAttributes['gen_ai.input.messages'], Timestamp, event = 'gen_ai.client.inference.operation.details')
            AS input_messages,
        argMaxIf(LogAttributes['gen_ai.output.messages'], Timestamp, event = 'gen_ai.client.inference.operation.details')
            AS output_messages,
        arraySort(x -> x.1, arrayDistinct(groupArrayIf((Timestamp, event, Body),
            event != 'gen_ai.client.inference.operation.details'))) AS messages,
        arrayMap(x -> x.2, messages) AS event_names,
        arrayMap(x -> map('gen_ai.event.content', x.3), messages) AS event_attributes
    FROM (
        SELECT TraceId, SpanId, Timestamp, Body, LogAttributes,
            if(EventName != '', EventName, LogAttributes['event.name']) AS event
        FROM otel.otel_logs
        WHERE (TraceId, SpanId) IN (SELECT trace_id, span_id FROM otel.genai_spans WHERE inserted_at
            > fromUnixTimestamp64Micro({watermark:Int64}) AND inserted_at <= fromUnixTimestamp64Micro({cutoff:Int64})))
    WHERE event IN ('gen_ai.client.inference.operation.details', 'gen_ai.system.message', 'gen_ai.user.message',
        'gen_ai.assistant.message', 'gen_ai.tool.message', 'gen_ai.choice')
    GROUP BY TraceId, SpanId) AS l
ON s.trace_id = l.TraceId AND if(s.content_wanted, s.span_id, '') = l.SpanId
))))))
-- optimize_and_compare_chain adds the comparisons an AND chain implies (a < b AND b < 3: a < 3), for filters that
-- read stored data; it took half of this SELECT's analysis (docs/benchmarks.md, "The view's cost per insert")
SETTINGS optimize_and_compare_chain = 0;
