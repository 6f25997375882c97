"""Staged spans to calls (detector/storage/normalization.py over clickhouse/genai_calls_normalized.sql.tmpl): once per
span whatever the ranges, never failing on a value a collector may store, content logs joined, and replicas that
each normalize their own sessions and together decide like one detector."""

from __future__ import annotations

import json
import re
import time

from detector.core.decisions import DecisionBook
from detector.detection.job import DetectorJob
from detector.settings.config import AppConfig
from detector.settings.vocabulary import TOOL_CALL_FINISHES
from detector.storage.normalization import Normalization, normalize_staged, normalized_calls
from detector.storage.transport import insert_rows

CALLS = 16  # per agent
MODULES = ("parser", "lexer", "tokens", "grammar", "printer", "errors", "cache", "config", "loader", "plugins",
           "scheduler", "network", "storage", "metrics", "logging", "cli")  # an honest agent reads one each step
FACTS = ("a recursive descent parser", "a table driven lexer", "the token kinds", "the grammar's productions",
         "pretty printing", "the error hierarchy", "an LRU cache", "the YAML settings", "the module loader",
         "entry point plugins", "a cron scheduler", "the HTTP client", "the SQLite layer", "Prometheus counters",
         "structured logs", "the argument parser")
CALL_COUNTS = "SELECT span_id, count() AS n FROM otel.genai_calls GROUP BY span_id ORDER BY span_id"


def span(trace: str, span_id: str, attrs: dict[str, str], *, offset_s: float = 0.0, name: str = "chat m",
         duration: int = 1_000_000, parent: str = "p", events: list[tuple[str, dict[str, str]]] = ()) -> dict:
    """A span row as the collector's exporter writes it into otel.otel_traces."""
    ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1_780_000_000 + offset_s)) + f".{int(offset_s % 1 * 1e9):09d}"
    return {"Timestamp": ts, "TraceId": trace, "SpanId": span_id, "ParentSpanId": parent, "SpanName": name,
            "SpanKind": "Client", "ServiceName": "svc", "StatusCode": "Unset", "SpanAttributes": attrs,
            "Duration": duration, "Events.Timestamp": [ts for _ in events], "Events.Name": [e[0] for e in events],
            "Events.Attributes": [e[1] for e in events]}


def chat(session: str, text: str, tool_args: str) -> dict[str, str]:
    output = [{"role": "assistant", "parts": [{"type": "text", "content": text},
                                              {"type": "tool_call", "id": "c", "name": "read_file",
                                               "arguments": json.loads(tool_args)}]}]
    return {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": session, "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": "100", "gen_ai.usage.output_tokens": "20",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": text}]}]),
            "gen_ai.output.messages": json.dumps(output)}


def tool(args: str, result: str) -> dict[str, str]:  # no session attribute: its session is its trace
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
            "gen_ai.tool.call.arguments": args, "gen_ai.tool.call.result": result}


def test_a_value_a_collector_stored_never_fails_the_batch(store):
    """The receiver's decoder refuses an end time past DateTime64(9); a collector stores whatever it gets. Such a
    span is normalized with its end saturated, and the spans beside it are normalized too."""
    insert_rows(store, "otel.otel_traces", [
        span("t", "huge", {"gen_ai.operation.name": "chat"}, duration=2**64 - 1),
        span("t", "fine", {"gen_ai.operation.name": "chat"}, offset_s=1),
    ])
    normalize_staged(store)
    rows = {r["span_id"]: r["end_ts"] for r in store.rows("SELECT span_id, toString(end_ts) AS end_ts FROM otel.genai_calls")}
    assert rows == {"huge": "2262-04-11 23:47:16.854775807", "fine": "2026-05-28 20:26:41.001000000"}


def test_each_staged_span_is_one_call_whatever_the_ranges(store):
    insert_rows(store, "otel.otel_traces", [span("t", "a", {"gen_ai.operation.name": "chat"}),
                                            span("t", "a", {"gen_ai.operation.name": "chat"}),  # sent twice, one insert
                                            span("t", "x", {"http.method": "GET"})])  # not a GenAI span: not staged
    first = normalize_staged(store)
    insert_rows(store, "otel.otel_traces", [span("t", "b", {"gen_ai.operation.name": "execute_tool"})])
    normalization = Normalization(store)
    normalization.transform(0, first)  # a cycle killed after its transform runs it again
    normalize_staged(store)
    normalize_staged(store, first)
    assert store.rows(CALL_COUNTS) == [{"span_id": "a", "n": 2}, {"span_id": "b", "n": 1}]
    assert store.rows("SELECT count() AS n FROM otel.genai_spans") == [{"n": 3}]


def test_content_in_logs_is_joined_and_a_span_keeps_its_own(store):
    """A model call whose content came as log records (event mode) gets the fingerprints of the same call with its
    content on the span; a call that has content of its own keeps it, whatever its logs say."""
    attrs = chat("s", "read the config again", '{"path": "config.yaml"}')
    bare = {k: v for k, v in attrs.items() if "messages" not in k}
    insert_rows(store, "otel.otel_traces", [span("t1", "on-span", attrs), span("t2", "in-logs", bare),
                                            span("t3", "both", attrs)])
    details = {k: v for k, v in attrs.items() if "messages" in k}
    other = {"gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "x"}]}])}
    now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1_780_000_000))
    insert_rows(store, "otel.otel_logs", [
        {"Timestamp": now, "TraceId": trace, "SpanId": span_id, "EventName": "gen_ai.client.inference.operation.details",
         "LogAttributes": logged} for trace, span_id, logged in (("t2", "in-logs", details), ("t3", "both", other))])
    normalize_staged(store)
    fingerprints = "has_content, request_fp, turn_fp, input_simhash, output_simhash, out_tool_fps, observation_fp"
    rows = {r.pop("span_id"): r for r in store.rows(f"SELECT span_id, {fingerprints} FROM otel.genai_calls")}
    assert rows["on-span"]["has_content"] == 1
    assert rows["in-logs"] == rows["on-span"] == rows["both"]


def looping_agents(store, sessions: int) -> None:
    """Agents that each run one trace of chat calls, every other one stuck on read_file("a.py"), each chat followed
    by its tool span (which names no session)."""
    rows = []
    for s in range(sessions):
        stuck = s % 2 == 0
        for i in range(CALLS):
            args = '{"path": "a.py"}' if stuck else json.dumps({"path": f"{MODULES[i]}.py"})
            result = ("def parse(text): return text.split() # the same file, nothing new in it" if stuck
                      else f"# {MODULES[i]}: {FACTS[i]}, written by the {MODULES[i]} team")
            said = ("Let me read a.py once more to find where the parser goes wrong" if stuck
                    else f"Now {MODULES[i]}.py, to see how {FACTS[i]} fits in")
            rows.append(span(f"t{s}", f"c{s}-{i}", chat(f"s{s}", said, args),
                             offset_s=10 * i))
            rows.append(span(f"t{s}", f"x{s}-{i}", tool(args, result), offset_s=10 * i + 2, name="execute_tool read_file"))
    insert_rows(store, "otel.otel_traces", rows)


def test_replicas_each_normalize_their_own_sessions_and_decide_like_one_detector(store):
    looping_agents(store, 8)

    read: dict[str, int] = {}

    def run(shard: str) -> dict:
        config = AppConfig()
        config.detector.shard = shard
        produced: dict = {}
        job = DetectorJob(store, config, DecisionBook(), on_cycle=[lambda out, _: produced.update(
            {(d.scope, d.scope_id): (d.action, d.level, round(d.confidence, 9)) for d in out.decisions})])
        job.load()
        read[shard] = job.run_cycle().calls_read
        return produced

    single = run("0/1")
    assert {scope_id for (scope, scope_id), v in single.items() if scope == "session" and v[2] > 0.1} == {
        "s0", "s2", "s4", "s6"}  # the stuck agents' tool calls were attributed (with them, their confidence)
    for table in ("genai_calls", "loop_state", "loop_scores", "loop_events", "loop_decisions", "loop_meta"):
        store.command(f"TRUNCATE TABLE otel.{table}")  # the replicas start from the staged spans alone
    # replica 0 runs first: the tool calls of replica 1's sessions are not written yet, it reads them from the view;
    # replica 1 then finds replica 0's written
    first, second = run("0/2"), run("1/2")
    assert first and second and not set(first) & set(second)
    assert {**first, **second} == single
    counts = store.rows(CALL_COUNTS)
    assert len(counts) == 8 * 2 * CALLS and {r["n"] for r in counts} == {1}  # every span written by one replica, once
    # each replica read its own sessions' model calls and every tool call, written by whichever replica or not yet
    own = {r["shard"]: r["n"] for r in store.rows("SELECT cityHash64(session_id) % 2 AS shard, count() AS n "
                                                  "FROM otel.genai_calls WHERE call_kind = 'llm' GROUP BY shard")}
    assert read == {"0/1": 8 * 2 * CALLS, "0/2": own[0] + 8 * CALLS, "1/2": own[1] + 8 * CALLS}
    assert own[0] and own[1]


def test_the_normalization_gives_every_column_of_the_calls_table(store):
    """A new column of otel.genai_calls goes into the table (002_genai_calls.sql, with its ALTER for older data
    directories), into the normalization's output (genai_calls_normalized.sql.tmpl) and, to be read, into Call: the
    transform writes every stored column of the table from the view's column of the same name; an ALIAS column,
    evidence_source, is computed as it is read."""
    produced = [r["name"] for r in store.rows(f"DESCRIBE TABLE (\n{normalized_calls()}\n)", {
        "watermark": 0, "cutoff": 0, "shards": 1, "shard": 0, "own_shard": 1})]
    table = [r["name"] for r in store.rows("SELECT name FROM system.columns WHERE database = 'otel' "
                                           "AND table = 'genai_calls' AND default_kind != 'ALIAS' ORDER BY position")]
    assert sorted(produced) == sorted(table)  # by name: the transform lists the columns


# -- one vocabulary of finish reasons: the SQL's and the core's (detector/settings/vocabulary.py) ---------------------

def test_the_normalization_spells_the_vocabularys_tool_call_finishes():
    """The response structure fingerprint's list of "asked for tools" finish reasons is TOOL_CALL_FINISHES, word for
    word (the SQL keeps its own literal list: it is rendered as the file holds it, never spliced)."""
    lists = re.findall(r"if\(x IN \(([^)]*)\), 'tool_call',", normalized_calls())
    assert len(lists) == 1, lists
    assert set(re.findall(r"'([^']*)'", lists[0])) == TOOL_CALL_FINISHES


def test_every_tool_call_finish_gives_one_response_structure(store):
    """Run on chDB: calls alike but for their finish reason share a response_fp when it says they asked for tools, the
    Vercel AI SDK's ``tool-calls`` as OpenAI's ``tool_calls``; ``stop`` is another structure."""
    finishes = [*sorted(TOOL_CALL_FINISHES), "stop"]
    insert_rows(store, "otel.otel_traces", [
        span("t", f"s{i}", {"gen_ai.operation.name": "chat", "gen_ai.usage.output_tokens": "20",
                            "gen_ai.response.finish_reasons": json.dumps([finish])}, offset_s=i)
        for i, finish in enumerate(finishes)])
    normalize_staged(store)
    rows = store.rows("SELECT finish_reasons, response_fp FROM otel.genai_calls ORDER BY ts")
    assert [r["finish_reasons"] for r in rows] == [[f] for f in finishes]
    fps = [r["response_fp"] for r in rows]
    assert len(set(fps[:-1])) == 1 and fps[-1] != fps[0], dict(zip(finishes, fps, strict=True))


EMPTY_FP = 11160318154034397263  # cityHash64(''): every captured empty observation


def vercel_prompt(last: dict) -> str:
    return json.dumps([{"role": "user", "content": "touch a.py"}, last])


def test_a_captured_empty_result_is_an_outcome_and_an_absent_one_unknown(store):
    """A result attribute that is present but empty (or blank) is what came back: cityHash64(''), "nothing", 0
    characters, in every dialect that carries a tool's result; absent (or redacted) it is unknown, as before. So is a
    model call's last input message that exists with an empty text (a tool's empty response), in the dialects that
    tell a message from its text."""
    tool_op = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "run"}
    vercel_tool = {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "run", "ai.toolCall.args": "{}"}
    traceloop_tool = {"traceloop.span.kind": "tool", "traceloop.entity.name": "run"}
    oi_tool = {"openinference.span.kind": "TOOL", "tool.name": "run"}
    semconv_chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
    tool_message = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c", "response": ""}]}
    ol_chat = {"llm.request.type": "chat", "gen_ai.request.model": "m", "gen_ai.prompt.0.role": "user",
               "gen_ai.prompt.0.content": "touch a.py", "gen_ai.prompt.1.role": "tool"}
    oi_chat = {"openinference.span.kind": "LLM", "llm.model_name": "m",
               "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "touch a.py",
               "llm.input_messages.1.message.role": "tool"}
    vercel_chat = {"ai.operationId": "ai.generateText.doGenerate", "ai.model.id": "m"}
    vercel_empty = {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c", "toolName": "run",
                                                 "output": {"type": "text", "value": ""}}]}
    cases = {
        # (attributes, captured empty)
        "semconv tool, empty": ({**tool_op, "gen_ai.tool.call.result": ""}, True),
        "semconv tool, blank": ({**tool_op, "gen_ai.tool.call.result": " \n\t"}, True),
        "semconv tool, absent": (tool_op, False),
        "vercel tool, empty": ({**vercel_tool, "ai.toolCall.result": ""}, True),
        "vercel tool, absent": (vercel_tool, False),
        "traceloop tool, empty": ({**traceloop_tool, "traceloop.entity.output": ""}, True),
        "traceloop tool, absent": (traceloop_tool, False),
        "openinference tool, empty": ({**oi_tool, "output.value": ""}, True),
        "openinference tool, redacted": ({**oi_tool, "output.value": "__REDACTED__"}, False),
        "openinference tool, absent": (oi_tool, False),
        "semconv chat, empty tool response": ({**semconv_chat, "gen_ai.input.messages": json.dumps([tool_message])},
                                              True),
        "semconv chat, a message without parts": (
            {**semconv_chat, "gen_ai.input.messages": json.dumps([{"role": "user", "parts": []}]),
             "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "?"}]}])},
            False),
        "semconv chat, no content": (semconv_chat, False),
        # pydantic-ai with content off: the messages' parts, without their content
        "semconv chat, parts without their content": (
            {**semconv_chat, "gen_ai.input.messages": json.dumps([
                {"role": "user", "parts": [{"type": "tool_call_response", "id": "c", "name": "read_file"}]}])},
            False),
        "openllmetry chat, empty": ({**ol_chat, "gen_ai.prompt.1.content": ""}, True),
        "openllmetry chat, no content attribute": (ol_chat, False),
        "openinference chat, empty": ({**oi_chat, "llm.input_messages.1.message.content": ""}, True),
        "openinference chat, redacted": ({**oi_chat, "llm.input_messages.1.message.content": "__REDACTED__"}, False),
        "vercel chat, empty tool output": ({**vercel_chat, "ai.prompt.messages": vercel_prompt(vercel_empty)}, True),
        "vercel chat, no content": ({**vercel_chat, "ai.prompt.messages": vercel_prompt({"role": "tool"})}, False),
    }
    ids = {name: f"s{i}" for i, name in enumerate(cases)}
    insert_rows(store, "otel.otel_traces", [
        span(f"t{i}", ids[name], attrs, offset_s=i) for i, (name, (attrs, _)) in enumerate(cases.items())])
    normalize_staged(store)
    rows = {r.pop("span_id"): r for r in store.rows(
        "SELECT span_id, call_kind, observation_fp, observation_empty, observation_chars, observation_shape_fp, "
        "observation_failed, observation_pending, observation_ack FROM otel.genai_calls")}
    for name, (_, captured) in cases.items():
        row = rows[ids[name]]
        assert row["call_kind"] == ("tool" if "tool," in name else "llm"), name
        expected = (EMPTY_FP, 1, 0, EMPTY_FP) if captured else (0, 0, 0, 0)
        assert (row["observation_fp"], row["observation_empty"], row["observation_chars"],
                row["observation_shape_fp"]) == expected, name
        assert (row["observation_failed"], row["observation_pending"], row["observation_ack"]) == (0, 0, 0), name


def test_acknowledgements_and_work_in_progress_in_each_dialect(store):
    """What came back acknowledges what was done (the first line of the result as it came, its echo of the arguments
    included; a model call's new input) or says the work is in progress, whichever dialect carries it; a failure is
    neither."""
    def tool_attrs(result: str, args: str = '{"path": "src/app.py"}') -> dict[str, str]:
        return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "write_file",
                "gen_ai.tool.call.arguments": args, "gen_ai.tool.call.result": result}

    def chat_after(result: str) -> dict[str, str]:
        return {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.input.messages": json.dumps(
            [{"role": "tool", "parts": [{"type": "tool_call_response", "id": "c", "response": result}]}])}

    cases = {
        # (attributes, (ack, pending, failed))
        "the echo of the arguments is read": (tool_attrs("src/app.py was saved"), (1, 0, 0)),
        "an edit with what follows": (tool_attrs("\n\nThe file src/app.py has been edited. Here's the result:\n 1 x"),
                                      (1, 0, 0)),
        "a bash result without output": (tool_attrs("[The command completed with exit code 0.]"), (1, 0, 0)),
        "a bash failure": (tool_attrs("[The command completed with exit code 2.]"), (0, 0, 0)),
        "an error that mentions a change": (tool_attrs("Error: nothing was written"), (0, 0, 1)),
        "vercel's json": ({"ai.operationId": "ai.toolCall", "ai.toolCall.name": "save", "ai.toolCall.args": "{}",
                           "ai.toolCall.result": '{"success":true}'}, (1, 0, 0)),
        "traceloop, in progress": ({"traceloop.span.kind": "tool", "traceloop.entity.name": "deploy",
                                    "traceloop.entity.output": "Deployment still in progress (3/5)"}, (0, 1, 0)),
        "openinference, a bare status": ({"openinference.span.kind": "TOOL", "tool.name": "job",
                                          "output.value": "'QUEUED'"}, (0, 1, 0)),
        "a kubectl rollout": (tool_attrs('Waiting for deployment "web" rollout to finish: 4 of 10 updated replicas are '
                                         "available...", "{}"), (0, 1, 0)),
        "a timeout waiting is a failure": (tool_attrs("error: timed out waiting for the condition", "{}"), (0, 0, 1)),
        "a retryable error is not in progress": (tool_attrs("503 Service Unavailable, try again later", "{}"),
                                                 (0, 0, 0)),
        "a model call's new input": (chat_after("File created successfully at: /tmp/a.py"), (1, 0, 0)),
        "a model call's new input in progress": (chat_after("Progress: 45%"), (0, 1, 0)),
    }
    ids = {name: f"k{i}" for i, name in enumerate(cases)}
    insert_rows(store, "otel.otel_traces", [
        span(f"t{i}", ids[name], attrs, offset_s=i) for i, (name, (attrs, _)) in enumerate(cases.items())])
    normalize_staged(store)
    rows = {r.pop("span_id"): r for r in store.rows(
        "SELECT span_id, observation_ack, observation_pending, observation_failed FROM otel.genai_calls")}
    got = {name: tuple(rows[ids[name]].values()) for name in cases}
    assert got == {name: flags for name, (_, flags) in cases.items()}
