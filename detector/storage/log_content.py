"""GenAI content carried in logs, joined to its span: the call normalized again, with its logs' content.

Instrumentations in *event* mode (openai-v2 ``event_only``, util-genai's ``span_and_event``, older per-message
events) write a call's messages into log records that carry the span's trace and span id, not onto the span:

* ``gen_ai.client.inference.operation.details``: the messages as attributes (``gen_ai.input.messages``,
  ``gen_ai.output.messages``, ``gen_ai.system_instructions``), exactly as a span would carry them;
* ``gen_ai.system.message`` / ``gen_ai.user.message`` / ``gen_ai.assistant.message`` / ``gen_ai.tool.message`` /
  ``gen_ai.choice``: one record per message, the message in the body (semantic conventions up to 1.30).

The span's row in ``otel.genai_calls`` then has no content. When the detector reads such a call, it looks its
logs up (by trace and span id) and, for the spans that have content logs, evaluates **the materialized view's own
SELECT** (``clickhouse/002_genai_calls.sql``) over the span with its logs folded in: the details record's
attributes merged under the span's own (the span wins), each per-message record appended as a span event whose
``gen_ai.event.content`` is the record's body. One normalization, whichever way the content travelled, so the same
call gets the same fingerprints in span mode and in event mode.

Timing: a log record must be stored by the time the detector reads its span's call. util-genai emits the record
before it ends the span, and the SDK's log batch processor exports every second (spans: every five), so the logs
of a call normally arrive first; ``detector.watermark_lag_seconds`` gives stragglers more time.

A retried logs export may store its records twice (:mod:`detector.ingest.logs_commit`): the details record is
read once (the newest), and per-message records are taken distinct, so a duplicate changes no content.
"""

from __future__ import annotations

from typing import Final

from detector.core.models import Call
from detector.storage.call_rows import CALL_COLUMNS
from detector.storage.schema import sql_dir
from detector.storage.transport import Store

__all__ = ["CONTENT_EVENTS", "DETAILS_EVENT", "MESSAGE_EVENTS", "LogContent", "content_query"]

DETAILS_EVENT: Final = "gen_ai.client.inference.operation.details"
MESSAGE_EVENTS: Final = ("gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message",
                         "gen_ai.tool.message", "gen_ai.choice")
CONTENT_EVENTS: Final = (DETAILS_EVENT, *MESSAGE_EVENTS)

# The spans asked about, with their content logs folded in, in otel.otel_traces' shape.
_ENRICHED_SPANS = """(
    SELECT t.Timestamp AS Timestamp, t.TraceId AS TraceId, t.SpanId AS SpanId, t.ParentSpanId AS ParentSpanId,
        t.TraceState AS TraceState, t.SpanName AS SpanName, t.SpanKind AS SpanKind, t.ServiceName AS ServiceName,
        t.ResourceAttributes AS ResourceAttributes, t.ScopeName AS ScopeName, t.ScopeVersion AS ScopeVersion,
        mapUpdate(l.details, CAST(t.SpanAttributes, 'Map(String, String)')) AS SpanAttributes,
        t.Duration AS Duration, t.StatusCode AS StatusCode, t.StatusMessage AS StatusMessage,
        arrayConcat(t.`Events.Name`, l.event_names) AS `Events.Name`,
        arrayConcat(CAST(t.`Events.Attributes`, 'Array(Map(String, String))'), l.event_attributes)
            AS `Events.Attributes`
    FROM otel.otel_traces AS t
    INNER JOIN (
        SELECT TraceId, SpanId,
            argMaxIf(CAST(LogAttributes, 'Map(String, String)'), Timestamp, event = {details:String}) AS details,
            arraySort(x -> x.1, arrayDistinct(groupArrayIf((Timestamp, event, Body), event != {details:String}))) AS messages,
            arrayMap(x -> x.2, messages) AS event_names,
            arrayMap(x -> map('gen_ai.event.content', x.3), messages) AS event_attributes
        FROM (
            SELECT TraceId, SpanId, Timestamp, Body, LogAttributes,
                if(EventName != '', EventName, LogAttributes['event.name']) AS event
            FROM otel.otel_logs
            WHERE TraceId IN {traces:Array(String)} AND SpanId IN {spans:Array(String)})
        WHERE event IN {events:Array(String)}
        GROUP BY TraceId, SpanId) AS l
    ON t.TraceId = l.TraceId AND t.SpanId = l.SpanId
    WHERE t.TraceId IN {traces:Array(String)} AND t.SpanId IN {spans:Array(String)})"""

HAS_LOGS: Final = "SELECT count() > 0 AS any FROM (SELECT 1 FROM otel.otel_logs LIMIT 1)"


def content_query() -> str:
    """The view's SELECT (002_genai_calls.sql) over the spans asked about, with their logs' content, as the
    detector's select list."""
    ddl = (sql_dir() / "002_genai_calls.sql").read_text()
    view = ddl.split("CREATE MATERIALIZED VIEW IF NOT EXISTS otel.genai_calls_mv TO otel.genai_calls AS\n", 1)[1]
    view = view.strip().rstrip(";")
    assert view.count("FROM otel.otel_traces)") == 1, "the view reads otel.otel_traces in one place"
    view = view.replace("FROM otel.otel_traces)", f"FROM {_ENRICHED_SPANS})")
    return f"SELECT {CALL_COLUMNS} FROM (SELECT now64(6) AS inserted_at, * FROM (\n{view}\n))"


class LogContent:
    """Replaces, in a batch of calls, those without content whose span has content logs by the same call normalized
    with them. Holds the query (built once) and whether the logs table was ever seen non-empty."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._query = content_query()
        self._logs_seen = False
        self.joined = 0  # calls that got their content from logs (metrics, tests)

    def enrich(self, calls: list[Call]) -> list[Call]:
        wanted = [i for i, c in enumerate(calls) if c.is_llm and not c.has_content]
        if not wanted or not self._any_logs():
            return calls
        traces = sorted({calls[i].trace_id for i in wanted})
        spans = sorted({calls[i].span_id for i in wanted})
        table = self.store.arrow(self._query, {"traces": traces, "spans": spans, "details": DETAILS_EVENT,
                                               "events": list(CONTENT_EVENTS)})
        found = {(c.trace_id, c.span_id): c for c in Call.from_columns(table.to_pydict()) if c.has_content}
        if not found:
            return calls
        out = list(calls)
        for i in wanted:
            call = calls[i]
            again = found.get((call.trace_id, call.span_id))
            if again is not None:
                again.inserted_us = call.inserted_us  # the watermark is the span's insertion, not this read's
                out[i] = again
                self.joined += 1
        return out

    def _any_logs(self) -> bool:
        if not self._logs_seen:
            self._logs_seen = bool(self.store.rows(HAS_LOGS)[0]["any"])
        return self._logs_seen
