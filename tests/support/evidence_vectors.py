"""The shared fingerprint vectors (``sdk/test-vectors/evidence.json``), made by ClickHouse itself.

Inputs (texts, tool calls, whole model calls as GenAI semantic-conventions messages) go into real spans
(``otel.otel_traces``), and the expected values are what the normalization writes into ``otel.genai_calls``
for them: the observation of a tool's result, the reply's hashes, the requested tool calls' hashes, a tool run's
hashes. The request fingerprint is computed by :data:`REQUEST_FP_SQL`, the SDK's per-message formula in SQL: a
span with content keeps the hash of its whole input as its dialect wrote it (``request_fp``), which an app cannot
reproduce byte for byte, and a span without content takes ``loop_detector.fp.request`` as it is (both are compared
only with the same session's own, for equality; docs/sdk.md, "Fingerprints"). The canonical forms in between (the
new input of a call, a tool call's arguments as a span holds them, the normalized texts) are the SDK's definitions,
pinned here for both SDKs; the normalized texts are checked against ClickHouse through their hashes.

    .venv/bin/python tests/support/evidence_vectors.py   # rewrites sdk/test-vectors/evidence.json

``tests/sdk/test_sdk_evidence_clickhouse.py`` rebuilds the document on chDB and compares it with the file.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "sdk" / "test-vectors" / "evidence.json"

# The request fingerprint of a call, from its gen_ai.input.messages (the SDK's definition, in SQL).
_ARGS = ("if(JSONType(p, 'arguments') = 'String', JSONExtractString(p, 'arguments'), JSONExtractRaw(p, 'arguments'))")
REQUEST_FP_SQL = f"""
SELECT cityHash64({{model:String}}, arrayMap(m -> cityHash64(JSONExtractString(m, 'role'), arrayMap(p ->
    if(JSONExtractString(p, 'type') = 'tool_call',
       cityHash64(JSONExtractString(p, 'name'), arraySort(JSONExtractKeysAndValuesRaw({_ARGS})),
                  if(JSONType({_ARGS}) = 'Object', '', {_ARGS})),
       cityHash64(JSONExtractString(p, 'type'), if(JSONExtractString(p, 'type') = 'tool_call_response',
           if(JSONType(p, 'response') = 'String', JSONExtractString(p, 'response'), JSONExtractRaw(p, 'response')),
           JSONExtractString(p, 'content')))),
    JSONExtractArrayRaw(m, 'parts'))), JSONExtractArrayRaw({{messages:String}}))) AS fp
"""

LONG = " ".join(f"line {i}: status=ok took {i * 3}ms id=req{i:04d} value {i * i}" for i in range(60))
TEXTS: list[tuple[str, str]] = [
    ("empty", ""),
    ("spaces only", "  \t\n "),
    ("one word", "ok"),
    ("short", "abc"),
    ("sentence", "The build failed because the config file is missing."),
    ("case and punctuation", "ERROR: Config NOT loaded!! (see README.md, section 3)"),
    ("ids, uuids, timestamps, durations",
     "request 550e8400-e29b-41d4-a716-446655440000 at 2026-03-01T10:11:12.345Z took 15ms, job abc123 ready "
     "after 1.5 s; trace 0xdeadbeefcafe; retry at 10:45"),
    ("numbers stay", "page 2 of 7, 40 rows, total 280"),
    ("json object", '{"path": "src/app.py", "lines": 120, "content": "def main():\\n    return 0"}'),
    ("json object, keys reordered", '{"lines": 120, "content": "def main():\\n    return 0", "path": "src/app.py"}'),
    ("json object, ids inside", '{"id": "run-42", "started": "2026-03-01 10:00:00", "elapsed_ms": 812, "ok": true}'),
    ("json array", '[{"name": "a.py"}, {"name": "b.py"}]'),
    ("no results", '{"results": [], "total": 0}'),
    ("not found", "Error: file not found"),
    ("null", "null"),
    ("unicode", "Tu répares des builds. 🛠 — ça marche? 日本語のテキスト"),
    ("escapes in json", '{"s": "caf\\u00e9 \\ud83d\\ude00 tab\\tnl\\n", "k\'q": "a\\\\b"}'),
    ("vertical tab and form feed", "a\x0bb\x0cc d"),
    ("lone surrogate", "broken \ud800 text"),
    ("a failure with numbers",
     "Traceback (most recent call last):\n  File \"app.py\", line 42\nValueError: bad port 8080"),
    ("the same failure, other numbers",
     "Traceback (most recent call last):\n  File \"app.py\", line 57\nValueError: bad port 9090"),
    ("return code", "<returncode>2</returncode><output>usage: git [--version]</output>"),
    ("failure words in case", "CONNECTION REFUSED; Could Not reach host"),
    ("not a failure word", "errors=0, the terror of unexpectedly fine output"),
    ("pending json", '{"job": "build-7", "status": "running", "progress": 40}'),
    ("pending escaped json", '{\\"state\\": \\"In Progress\\"}'),
    ("pending words", "phase = queued; STATE: not_ready"),
    ("done status", '{"status": "succeeded"}'),
    ("pending status words of issue 31", 'deployment "web" state: Rolling Out; replicas status=scaling'),
    ("pending bare word", '  "Running..."\n'),
    ("pending bare word, two words", "in_progress."),
    ("pending phrase", 'Waiting for deployment "web" rollout to finish: 4 of 10 updated replicas are available...'),
    ("pending phrase, not yet ready", "The index is not yet ready; still building shard 3."),
    ("pending percentage", "Upload progress: 45.5 % (1.2 GB of 2.6 GB)"),
    ("pending phrase in a failure", "error: timed out waiting for the condition"),
    ("not pending: a phrase below the first line", "  401  INFO exporter.batch: batch exported, 500 rows\n"
     "  402  DEBUG exporter.pool: worker idle, waiting for next batch (timeout=<dur>)\n  403  DEBUG heartbeat: alive"),
    ("a retryable error is not pending", "503 Service Unavailable, try again later"),
    ("ack: a file created", "File created successfully at: /workspace/app.py"),
    ("ack: an edit, then what the file holds",
     "The file /workspace/app.py has been edited. Here's the result of running `cat -n` on a snippet:\n     1\timport os"),
    ("ack: the command said nothing", "\n[The command completed with exit code 0.]"),
    ("not ack: the command failed", "[The command completed with exit code 1.]"),
    ("ack: an edit whose snippet handles errors", "The file /workspace/app/io.py has been edited. Here's the result of "
     "running `cat -n` on a snippet of /workspace/app/io.py:\n    41\t    except OSError as error:\n    42\t        "
     "raise ValueError('cannot read') from error\nReview the changes and make sure they are as expected."),
    ("not ack: a failure on the first line", "Error: the file has been deleted by another process"),
    ("ack: true", "True"),
    ("ack: a key updated", "Updated config key retries to 5"),
    ("ack: json", '{ "ok" : true }'),
    ("ack: json over lines", '{\n  "Success": true\n}\n'),
    ("not ack: json with more", '{"ok": true, "items": [1, 2]}'),
    ("not ack: a result after success", "Success! Result: 3"),
    ("not ack: set up is an instruction", "Set up the virtualenv before running the tests"),
    ("not ack: an error", "ERROR: the file was not written (disk full)"),
    ("not ack: a traceback", "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>"),
    ("not ack: test output", "============ 3 passed, 1 warning in 0.12s ============"),
    ("not ack: accepted is in progress", "Accepted"),
    ("ack after 150 emoji (characters, not UTF-16 units)", "\U0001F600" * 150 + " was saved"),
    ("ack: the first line is read up to 300 characters", "OK" + " " * 400 + "and more"),
    ("ack: anywhere in the first line", "x" * 250 + " was saved"),
    ("not ack: beyond the first line's 300 characters", "x" * 300 + " was saved"),
    ("long", LONG),
]
TOOL_CALLS: list[tuple[str, str, str]] = [
    ("object", "read_file", '{"path": "config.yaml"}'),
    ("object, spaced and reordered", "read_file", '{ "offset" : 40,\n  "path": "log.txt" }'),
    ("floats and integers", "search", '{"q": "deploy status", "limit": 10.0, "score": 0.5, "n": -0}'),
    ("nested objects keep their order", "edit", '{"b": {"y": 2, "x": 1}, "a": [3, 2, 1]}'),
    ("long integer", "get", '{"id": 123456789012345678901, "small": 9007199254740993}'),
    ("duplicate keys", "set", '{"k": 1, "k": 2}'),
    ("unicode and escapes", "write", '{"text": "caf\\u00e9 \\"quoted\\" \\\\ \\n", "path": "/tmp/x"}'),
    ("ids in arguments", "fetch", '{"url": "https://example.com/api/v2/items/9f8e7d6c5b4a", "since": "2026-03-01"}'),
    ("array", "sum", "[1, 2, 3]"),
    ("not json", "shell", "ls -la /tmp"),
    ("empty", "git_diff", ""),
    ("empty object", "list", "{}"),
]


def _text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def _call(name: str, args: Any, call_id: str) -> dict[str, Any]:
    return {"type": "tool_call", "name": name, "arguments": args, "id": call_id}


def _result(response: Any, call_id: str) -> dict[str, Any]:
    return {"type": "tool_call_response", "response": response, "id": call_id}


SYSTEM = {"role": "system", "parts": [_text("You are a coding agent. Fix the build.")]}
USER = {"role": "user", "parts": [_text("The CI job fails on config parsing; please fix it.")]}
CALLS: list[dict[str, Any]] = [
    {"name": "first call", "model": "gpt-4o-mini", "inputs": [SYSTEM, USER],
     "outputs": [{"role": "assistant", "parts": [_text("Let me look at the config."),
                                                 _call("read_file", {"path": "config.yaml"}, "call_1")],
                  "finish_reason": "tool_calls"}]},
    {"name": "after a tool result", "model": "gpt-4o-mini",
     "inputs": [SYSTEM, USER, {"role": "assistant", "parts": [_call("read_file", {"path": "config.yaml"}, "call_1")]},
                {"role": "tool", "parts": [_result("port: 8080\nhost: 0.0.0.0\n", "call_1")]}],
     "outputs": [{"role": "assistant", "parts": [_call("read_file", {"path": "config.yaml"}, "call_2")],
                  "finish_reason": "tool_calls"}]},
    {"name": "parallel tool results and a user message", "model": "gpt-4o-mini",
     "inputs": [SYSTEM, USER, {"role": "assistant", "parts": [_call("read_file", {"path": "a.py"}, "c1"),
                                                             _call("grep", '{"pattern": "def main"}', "c2")]},
                {"role": "tool", "parts": [_result({"lines": 3, "text": "import os"}, "c1")]},
                {"role": "tool", "parts": [_result("no matches", "c2")]},
                {"role": "user", "parts": [_text("Any luck? Job 7f3a2b1c9d is still red.")]}],
     "outputs": [{"role": "assistant", "parts": [_text("Not yet: nothing matched. Trying the tests next.")],
                  "finish_reason": "stop"}]},
    {"name": "a tool's empty response", "model": "gpt-4o-mini",
     "inputs": [SYSTEM, USER, {"role": "assistant", "parts": [_call("run", {"cmd": "touch a.py"}, "c1")]},
                {"role": "tool", "parts": [_result("", "c1")]}],
     "outputs": [{"role": "assistant", "parts": [_call("run", {"cmd": "ls"}, "c2")], "finish_reason": "tool_calls"}]},
    {"name": "an acknowledgement", "model": "gpt-4o-mini",
     "inputs": [SYSTEM, USER, {"role": "assistant", "parts": [_call("write_file", {"path": "a.py"}, "c1")]},
                {"role": "tool", "parts": [_result("File written.", "c1")]}],
     "outputs": [{"role": "assistant", "parts": [_text("Done.")], "finish_reason": "stop"}]},
    {"name": "work in progress", "model": "gpt-4o-mini",
     "inputs": [SYSTEM, USER, {"role": "assistant", "parts": [_call("deploy_status", {}, "c1")]},
                {"role": "tool", "parts": [_result({"state": "progressing", "ready": 3}, "c1")]}],
     "outputs": [{"role": "assistant", "parts": [_call("deploy_status", {}, "c2")], "finish_reason": "tool_calls"}]},
    {"name": "no model, empty parts, reasoning", "model": "",
     "inputs": [{"role": "user", "parts": []}, {"role": "assistant", "parts": [{"type": "reasoning", "content": "hm"}]},
                {"role": "user", "parts": [_text("again")]}],
     "outputs": [{"role": "assistant", "parts": [{"type": "reasoning", "content": "thinking 12 ms"}, _text("Done.")],
                  "finish_reason": "stop"}]},
]


def _span(span_id: str, name: str, attributes: dict[str, str]) -> dict[str, Any]:
    return {"Timestamp": "2026-03-01 10:00:00.000000000", "TraceId": "evidence-vectors", "SpanId": span_id,
            "SpanName": name, "SpanKind": "SPAN_KIND_CLIENT", "ServiceName": "vectors", "StatusCode": "Unset",
            "SpanAttributes": attributes}


def _tool_span(span_id: str, tool: str, args: str = "", result: str | None = None) -> dict[str, Any]:
    """An execute_tool span; ``result`` None: no result attribute at all (not captured), "" an empty one."""
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
    if args:
        attrs["gen_ai.tool.call.arguments"] = args
    if result is not None:
        attrs["gen_ai.tool.call.result"] = result
    return _span(span_id, f"execute_tool {tool}", attrs)


def _chat_span(span_id: str, model: str, inputs: list[Any], outputs: list[Any]) -> dict[str, Any]:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model or "m",
             "gen_ai.input.messages": json.dumps(inputs), "gen_ai.output.messages": json.dumps(outputs)}
    return _span(span_id, "chat", attrs)


COLUMNS = ("observation_fp", "observation_simhash", "observation_empty", "observation_chars", "observation_failed",
           "observation_shape_fp", "observation_pending", "observation_ack", "output_fp",
           "output_norm_simhash", "out_tool_fps", "out_tool_arg_simhashes", "tool_fp", "args_fp", "args_simhash")


def _rows(store: Any, spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The view's columns for these spans, by span id (each batch in spans of its own trace)."""
    from detector.storage.normalization import SELECT_NOW_US, normalize_staged
    from detector.storage.transport import insert_rows

    before_us = int(store.rows(SELECT_NOW_US)[0]["now_us"])
    insert_rows(store, "otel.otel_traces", spans)
    normalize_staged(store, before_us)  # as the next detection cycle does
    ids = [s["SpanId"] for s in spans]
    cols = ", ".join(f"toString({c}) AS {c}" for c in COLUMNS)
    rows = store.rows(f"SELECT span_id, {cols} FROM otel.genai_calls WHERE span_id IN {{ids:Array(String)}}",
                      {"ids": ids})
    return {r["span_id"]: r for r in rows}


def _observation(row: dict[str, Any]) -> dict[str, Any]:
    """What came back, as the view's columns have it (the fingerprint set's ``input_*``). The shape only where it
    failed or says "nothing": the only rows ``observation_shape_fp`` is read on, the only ones the SDKs compute it for
    (0 otherwise)."""
    failed, empty = row["observation_failed"] == "1", row["observation_empty"] == "1"
    return {"fp": row["observation_fp"], "simhash": row["observation_simhash"], "empty": empty,
            "chars": int(row["observation_chars"]), "failed": failed,
            "shape": row["observation_shape_fp"] if failed or empty else "0", "pending": row["observation_pending"] == "1",
            "ack": row["observation_ack"] == "1"}


def _u64s(text: str) -> list[str]:
    return [x for x in text.strip("[]").split(",") if x]


def build(store: Any) -> dict[str, Any]:
    """The vectors document, with every hash from ClickHouse (``store``: a store with the schema applied)."""
    from loop_detector_sdk.evidence.clickhouse_hash import utf8
    from loop_detector_sdk.evidence.fingerprints import new_input_text
    from loop_detector_sdk.evidence.messages import arguments_text, from_genai, reply_text
    from loop_detector_sdk.evidence.normalize import normalize, without_keys

    tag = hashlib.sha256(json.dumps([TEXTS, TOOL_CALLS, CALLS]).encode()).hexdigest()[:8]
    texts_out, spans = [], []
    for i, (_, text) in enumerate(TEXTS):
        sent = utf8(text).decode()  # as a span carries it: UTF-8 (a lone surrogate as U+FFFD)
        spans.append(_tool_span(f"{tag}-t{i}", "observe", result=sent))
        spans.append(_chat_span(f"{tag}-r{i}", "m", [], [{"role": "assistant", "parts": [_text(sent)],
                                                          "finish_reason": "stop"}]))
    for i, (_, name, args) in enumerate(TOOL_CALLS):
        canonical = arguments_text(args)
        # a requested call: its arguments a JSON object as util-genai writes a parsed one (spliced in as the text
        # is, duplicate keys and long integers kept), or a string
        part = {"type": "tool_call", "name": name, "arguments": "@ARGS@", "id": "x"}
        message = json.dumps([{"role": "assistant", "parts": [part], "finish_reason": "tool_calls"}])
        is_object = canonical.startswith("{")
        message = message.replace('"@ARGS@"', canonical if is_object else json.dumps(canonical))
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.output.messages": message}
        spans.append(_span(f"{tag}-c{i}", "chat", attrs))
        spans.append(_tool_span(f"{tag}-u{i}", name, args=canonical))
    new_inputs = []
    for i, call in enumerate(CALLS):
        text = new_input_text(from_genai(call["inputs"]))
        new_inputs.append(text)
        spans.append(_tool_span(f"{tag}-n{i}", "observe", result=text))
        spans.append(_chat_span(f"{tag}-o{i}", call["model"], call["inputs"], call["outputs"]))
    rows = _rows(store, spans)

    for i, (name, text) in enumerate(TEXTS):
        t, r = rows[f"{tag}-t{i}"], rows[f"{tag}-r{i}"]
        texts_out.append({
            "name": name, "text": text, "normalized": normalize(text),
            "normalized_without_keys": normalize(without_keys(text)),
            "observation": _observation(t),
            "reply": {"fp": r["output_fp"], "simhash": r["output_norm_simhash"]},
        })
    tools_out = []
    for i, (name, tool, args) in enumerate(TOOL_CALLS):
        c, u = rows[f"{tag}-c{i}"], rows[f"{tag}-u{i}"]
        canonical = arguments_text(args)
        tools_out.append({
            "name": name, "tool": tool, "arguments": args, "canonical": canonical, "normalized": normalize(canonical),
            "call": {"fp": _u64s(c["out_tool_fps"])[0], "simhash": _u64s(c["out_tool_arg_simhashes"])[0]},
            "run": {"fp": u["tool_fp"], "args_fp": u["args_fp"], "args_simhash": u["args_simhash"]},
        })
    calls_out = []
    for i, call in enumerate(CALLS):
        n, o = rows[f"{tag}-n{i}"], rows[f"{tag}-o{i}"]
        request = store.rows(REQUEST_FP_SQL, {"model": call["model"], "messages": json.dumps(call["inputs"])})[0]["fp"]
        calls_out.append({
            **call, "new_input": new_inputs[i], "reply_text": reply_text(from_genai(call["outputs"])),
            "request": str(request),
            "observation": _observation(n),
            "reply": {"fp": o["output_fp"], "simhash": o["output_norm_simhash"]},
            "tool_calls": [{"fp": fp, "simhash": sh} for fp, sh in zip(
                _u64s(o["out_tool_fps"]), _u64s(o["out_tool_arg_simhashes"]), strict=True)],
            # the view reads only the last input message as the new input: equal when that is all of it
            "view_observation": {"fp": o["observation_fp"], "simhash": o["observation_simhash"]},
        })
    return {
        "about": __doc__.split("\n\n")[0] + " See tests/support/evidence_vectors.py and docs/sdk.md, 'Fingerprints'. "
                 "Hashes are UInt64 in decimal. Both SDKs must give every value from the inputs: "
                 "texts -> normalized -> observation / reply hashes; tool calls -> canonical (as a span holds the "
                 "arguments) -> call and run hashes; calls (semantic-conventions messages) -> new_input, reply_text, "
                 "request and the rest.",
        "version": 3, "texts": texts_out, "tool_calls": tools_out, "calls": calls_out,
    }


def main() -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "sdk" / "python"))
    from detector.storage.schema import apply_schema
    from detector.storage.transport import ChdbStore

    with tempfile.TemporaryDirectory() as tmp:
        store = ChdbStore(tmp)
        apply_schema(store)
        document = build(store)
        store.close()
    VECTORS.write_text(json.dumps(document, indent=1) + "\n")  # ASCII: a lone surrogate as its escape
    print(f"wrote {VECTORS}")


if __name__ == "__main__":
    main()
