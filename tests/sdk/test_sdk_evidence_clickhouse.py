"""The app's fingerprints against ClickHouse itself (chDB, the real schema and view; nothing mocked).

* The shared vectors (``sdk/test-vectors/evidence.json``, which the Python and TypeScript SDKs are tested against)
  are what ClickHouse computes today: rebuilt from their inputs through real spans and the materialized view,
  and compared with the file.
* The Python implementation (``loop_detector_sdk.evidence``) against the real functions on generated texts:
  ``cityHash64``, the two SimHashes, the JSON functions, and the view's normalization (texts sent through spans:
  the view's own SQL, not a copy of its regular expressions).
* The service reads the app's fingerprints where the content is absent (the normalization's step 4): real SDK spans,
  the real completion hook, OTLP through the receiver's decoder; content present, nothing changes.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from loop_detector_sdk.completion_hook import LoopDetectorHook
from loop_detector_sdk.evidence.clickhouse_hash import city_hash64, ngram_simhash_ci, utf8, word_shingle_simhash_ci
from loop_detector_sdk.evidence.clickhouse_json import document_raw, object_pairs, pairs_text
from loop_detector_sdk.evidence.fingerprints import observation, reply, tool_call, tool_run
from loop_detector_sdk.evidence.messages import arguments_text
from loop_detector_sdk.evidence.normalize import normalize, without_keys
from support.evidence_vectors import VECTORS, _chat_span, _rows, _text, _tool_span, build

from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ChdbStore(tmp_path_factory.mktemp("evidence"))
    apply_schema(s)
    yield s
    s.close()


def _hex(text: str) -> str:
    return "unhex('" + utf8(text).hex() + "')"


def test_the_shared_vectors_are_what_clickhouse_computes(store):
    """Regenerate with ``.venv/bin/python tests/support/evidence_vectors.py`` when the inputs change."""
    assert build(store) == json.loads(VECTORS.read_text())


def test_the_vectors_normalized_texts_hash_as_the_view_hashes_them(store):
    """The normalized texts the SDKs must produce, tied to ClickHouse: their hashes are the view's."""
    vectors = json.loads(VECTORS.read_text())
    for v in vectors["texts"]:
        norm, stripped = v["normalized"], v["normalized_without_keys"]
        row = store.rows(f"SELECT toString(cityHash64({_hex(norm)})) AS fp, "
                         f"toString(wordShingleSimHashCaseInsensitiveUTF8({_hex(stripped)})) AS sim, "
                         f"toString(ngramSimHashCaseInsensitiveUTF8({_hex(norm)})) AS reply")[0]
        if norm:
            assert (row["fp"], row["reply"]) == (v["observation"]["fp"], v["reply"]["simhash"]), v["name"]
            assert v["observation"]["chars"] == len(utf8(norm))
        if stripped:
            assert row["sim"] == v["observation"]["simhash"], v["name"]


TOKENS = ["took 12ms", "elapsed=3.5", "duration: 10", "latency_ms' : 7", "2024-01-02", "2024-01-02T10:11:12.5Z",
          "10:11", "1:02:03.4", "abc123", "0xdeadbeef", "deadbeef12", "12ab", "a1-b2",
          "550e8400-e29b-41d4-a716-446655440000", " ", "\t", "\n", "\x0b", "\x0c", "é", "😀", "x", "page 2", "5 s",
          "3secs", "4 minutes", '"id": 3', '{"a": "b"}', "no results", "Not Found", '"results": []', '"count": 0',
          "null", "[ ]", "{}", "none", "NOTHING MATCHED", "_x9", "-", '"', "'", "\\", '\\"key\\": ', "é1", "1é",
          "ABCDEF01", ":", "00:00", "Word", "longer words here", "日本語", "\u2028", "Error", "errors", "can't",
          "Timed Out", "usage:", "<returncode>1", "<returncode>0", "status", '"status": "running"', "state=queued",
          '\\"phase\\": \\"in-progress\\"', "pending", "érror", "erroré", "not ready",
          # the acknowledgement and the work in progress (issue 31)
          "File created", "The file a.py has been edited.", " was saved", "True", "ok", "[The command completed with "
          "exit code 0.]", "Updated ", "Set ", "successfully", '{"ok": true}', "{", '"success"', ": true", "}",
          "Running...", "still running", "Progress: 45%", "waiting for", "Accepted", "not yet ready", "queued",
          "state: rolling out", "Scaling"]


def _generated(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    texts = [" {\"b\": 1, \"a\": \"x y\", \"took\": 15} ", '{"results": [], "total": 0}', "null", ""]
    texts += ["".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 14))) for _ in range(n)]
    texts += [json.dumps({"path": f"src/m{i}.py", "offset": rng.randint(0, 10**6), "q": rng.choice(TOKENS)})
              for i in range(20)]
    return texts


def test_the_python_normalization_and_hashes_are_the_views_on_generated_texts(store):
    """Each text as a tool's result (observation), a reply, a requested tool call's and a tool run's arguments:
    the view's columns equal the SDK's values."""
    texts = _generated(7, 160)
    spans = []
    for i, text in enumerate(texts):
        args = arguments_text(text)
        spans += [_tool_span(f"gen-t{i}", "observe", result=text),
                  _chat_span(f"gen-r{i}", "m", [], [{"role": "assistant", "parts": [
                      _text(text), {"type": "tool_call", "name": "t", "arguments": args, "id": "x"}],
                      "finish_reason": "stop"}]),
                  _tool_span(f"gen-u{i}", "t", args=args)]
    rows = _rows(store, spans)
    for i, text in enumerate(texts):
        t, r, u = rows[f"gen-t{i}"], rows[f"gen-r{i}"], rows[f"gen-u{i}"]
        o, rep = observation(text), reply(text)
        assert (t["observation_fp"], t["observation_simhash"], t["observation_empty"], t["observation_chars"],
                t["observation_failed"], t["observation_shape_fp"], t["observation_pending"], t["observation_ack"]) == (
            str(o.fp), str(o.simhash), str(int(o.empty)), str(o.chars), str(int(o.failed)),
            str(o.shape) if o.failed or o.empty else t["observation_shape_fp"], str(int(o.pending)),
            str(int(o.ack))), repr(text)
        assert o.shape == 0 or o.failed or o.empty  # (computed for failures and "nothing" only: read only there)
        assert (r["output_fp"], r["output_norm_simhash"]) == (str(rep.fp), str(rep.simhash)), repr(text)
        args = arguments_text(text)
        call, run = tool_call("t", args), tool_run("t", args)
        assert (r["out_tool_fps"], r["out_tool_arg_simhashes"]) == (f"[{call.fp}]", f"[{call.simhash}]"), repr(text)
        assert (u["tool_fp"], u["args_fp"], u["args_simhash"]) == (str(run.fp), str(run.args_fp),
                                                                  str(run.args_simhash)), repr(text)


def test_the_hash_functions_on_generated_strings(store):
    """Every length CityHash treats differently (0..16, 17..32, 33..64, longer: whole 64-byte blocks and not),
    ASCII and not, short texts the n-gram SimHash treats as a special case."""
    rng = random.Random(11)
    alphabet = ["a", "B", "c", " ", "1", "é", "€", "😀", "\n", "-", "_", "x", "Y", ".", ":", '"', "\\", "\x10", "@"]
    texts = ["", "a", "ab", "abc", "abcd", "hello world", "é€😀ab", "abcd efgh", "abcd efgh ijkl mnop", "a\ud800b"]
    for n in [*range(0, 70), 100, 127, 128, 129, 200, 1000, 5000]:
        texts.append("".join(rng.choice(alphabet) for _ in range(n)))
    exprs = ", ".join(f"(toString(cityHash64({_hex(t)})), toString(ngramSimHashCaseInsensitiveUTF8({_hex(t)})), "
                      f"toString(wordShingleSimHashCaseInsensitiveUTF8({_hex(t)})))" for t in texts)
    got = store.rows(f"SELECT [{exprs}] AS h")[0]["h"]
    for text, (city, ngram, words) in zip(texts, got, strict=True):
        assert (int(city), int(ngram), int(words)) == (
            city_hash64(utf8(text)), ngram_simhash_ci(text), word_shingle_simhash_ci(text)), repr(text)


JSON_CASES = [
    '{"a":1.0}', '{"a":2e3}', '{"a":0.1}', '{"a":1e300}', '{"a":1.5e-7}', '{"a":-0.0}', '{"a":-0}',
    '{"a":123456789012345678901}', '{"a":18446744073709551615}', '{"a":18446744073709551616}',
    '{"a":9223372036854775807}', '{"a":-9223372036854775808}', '{"a":-9223372036854775809}', '{"a":1e21}',
    '{"a":1e22}', '{"a":0.000001}', '{"a":1e-7}', '{"a":100000000000000000000.0}', '{"a":5e-324}',
    '{"a":1.7976931348623157e308}', '{"a":"\\u0001\\u001f\\u007f\\b\\f\\n\\r\\t/\\"\\\\"}', '{"a":"\\u2028\\u2029é😀"}',
    '{"a":"\\ud83d\\ude00"}', '{"a":"\\ud800"}', '{"a":[1, {"y":2, "x":[]} , null, true, false]}', '{"a":{}}',
    '{"b":1,"a":2,"b":3}', ' {"a":1} ', '{"a":1} x', '{"a":NaN}', '[1,2]', '"str"', '12', '{"a":1,}', '{"a":"\x01"}',
    "{'a':1}", '{"a":1}\n', '\ufeff{"a":1}', '{"é":1,"a\\"b":2}', '{"a":"x\\u0000y"}', '{"k":0.30000000000000004}',
    '{"k":123e-20}', '{"a":1e400}', '{"a":-1e-400}', '{"a":[123456789012345678901, 1.0, -0.0, 1e21]}',
    '{"a":"tab\there"}', '{"a":"\\uDBFF\\uDFFF"}', '{"a":"\\ude00"}', '{"a":01}', '{"a":1.}', '{"a":.5}', '{"a":+1}',
    '{"\\u0001k":"v\'\\\\"}', '{"a":"\\u000b"}', '{"\\ud800":1}', '{}', ' ', '', 'null', '{"a":1}{"b":2}',
    '{"a":-1.5E+10}', '{"x":1}\x00',
]


def test_the_json_functions_on_edge_cases(store):
    """Validity, re-serialization (numbers, escapes, long integers, duplicate keys) and the sorted pairs' text."""
    exprs = ", ".join(f"(JSONType({_hex(c)}) = 'Object', toString(arraySort(JSONExtractKeysAndValuesRaw({_hex(c)}))), "
                      f"JSONExtractRaw({_hex(c)}))" for c in JSON_CASES)
    got = store.rows(f"SELECT [{exprs}] AS r")[0]["r"]
    for case, (is_object, pairs, raw) in zip(JSON_CASES, got, strict=True):
        mine = object_pairs(case)
        assert (mine is not None) == bool(is_object), repr(case)
        assert (pairs_text(mine) if mine is not None else "[]") == pairs, repr(case)
        assert (document_raw(case) or "") == raw, repr(case)


def test_normalization_texts_match_a_probe_of_the_views_regular_expressions(store):
    """The normalized text itself (not only its hash) for a few texts: the view's observation over the text equals
    cityHash64 of the SDK's normalized text, and the SDK strips JSON keys as the view does."""
    texts = ['{"id": "550e8400-e29b-41d4-a716-446655440000", "took": 15, "items": []}', "retry at 10:45 took 3 s",
             'the \\"name\\": "x"']
    spans = [_tool_span(f"probe-{i}", "observe", result=t) for i, t in enumerate(texts)]
    rows = _rows(store, spans)
    for i, text in enumerate(texts):
        norm = normalize(text)
        assert rows[f"probe-{i}"]["observation_fp"] == str(city_hash64(utf8(norm)))
        stripped = normalize(without_keys(text))
        assert rows[f"probe-{i}"]["observation_simhash"] == str(word_shingle_simhash_ci(stripped) if stripped else 0)


# -- the service reads the app's fingerprints where the content is absent (clickhouse/genai_calls_normalized.sql.tmpl,
# step 4): real spans of the OpenTelemetry SDK, their attributes set by the real completion hook, exported as OTLP
# protobuf, decoded by the receiver and normalized by the detection cycle's statement

EVIDENCE_COLUMNS = ("request_fp", "observation_fp", "observation_simhash", "observation_empty", "observation_chars",
                    "observation_failed", "observation_shape_fp", "observation_pending", "observation_ack", "output_fp",
                    "output_norm_simhash", "out_tool_names", "out_tool_fps", "out_tool_arg_simhashes", "has_content")


def _exported_rows(store, spans: list[tuple[str, dict[str, Any], Any]]) -> dict[str, dict[str, Any]]:
    """``spans``: (name, attributes, hook call or None) each; every span a real SDK span, the hook's attributes set by
    :class:`LoopDetectorHook` on it while it is open, as util-genai calls it. Returns the calls' evidence columns by
    span name."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from detector.ingest.otlp import decode_protobuf
    from detector.storage.normalization import SELECT_NOW_US, normalize_staged

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("fingerprints")
    ids = {}
    for name, attributes, hook_call in spans:
        with tracer.start_as_current_span(name, attributes=attributes) as span:
            if hook_call is not None:
                LoopDetectorHook().on_completion(span=span, **hook_call)
            ids[format(span.get_span_context().span_id, "016x")] = name
    before_us = int(store.rows(SELECT_NOW_US)[0]["now_us"])
    decoded = decode_protobuf(encode_spans(memory.get_finished_spans()).SerializeToString())
    store.insert_arrow("otel.otel_traces", decoded.spans.to_arrow())
    normalize_staged(store, before_us)
    cols = ", ".join(f"toString({c}) AS {c}" for c in EVIDENCE_COLUMNS)
    rows = store.rows(f"SELECT span_id, {cols} FROM otel.genai_calls WHERE span_id IN {{ids:Array(String)}}",
                      {"ids": list(ids)})
    return {ids[r["span_id"]]: {c: r[c] for c in EVIDENCE_COLUMNS} for r in rows}


def _chat_attributes(model: str, content: dict[str, Any] | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 100,
                             "gen_ai.usage.output_tokens": 20}
    if model:  # (the hook reads the model asked for: none, none in the request fingerprint)
        attrs["gen_ai.request.model"] = model
    if content is not None:
        attrs.update({"gen_ai.input.messages": json.dumps(content["inputs"]),
                      "gen_ai.output.messages": json.dumps(content["outputs"])})
    return attrs


def _hook_call(call: dict[str, Any]) -> dict[str, Any]:
    return {"inputs": call["inputs"], "outputs": call["outputs"]}


def test_a_chat_span_without_content_takes_its_evidence_from_the_app_fingerprints(store):
    """Each vector call, content capture off, the hook on: the columns are the vectors' (what ClickHouse computes
    from the same content: the observation of the call's new input, the reply, the requested tool calls, the
    request by the SDK's formula), and no longer the structure alone."""
    vectors = json.loads(VECTORS.read_text())["calls"]
    spans = [(f"chat off {i}", _chat_attributes(c["model"]), _hook_call(c)) for i, c in enumerate(vectors)]
    spans += [(f"chat bare {i}", _chat_attributes(c["model"]), None) for i, c in enumerate(vectors)]
    rows = _exported_rows(store, spans)
    for i, call in enumerate(vectors):
        got, bare = rows[f"chat off {i}"], rows[f"chat bare {i}"]
        o, r = call["observation"], call["reply"]
        assert got["has_content"] == "0", call["name"]
        assert (got["request_fp"], got["observation_fp"], got["observation_simhash"], got["observation_empty"],
                got["observation_chars"]) == (call["request"], o["fp"], o["simhash"], str(int(o["empty"])),
                                              str(o["chars"])), call["name"]
        assert (got["observation_failed"], got["observation_shape_fp"], got["observation_pending"],
                got["observation_ack"]) == (str(int(o["failed"])), o["shape"], str(int(o["pending"])),
                                            str(int(o["ack"]))), call["name"]
        assert (got["output_fp"], got["output_norm_simhash"]) == (r["fp"], r["simhash"]), call["name"]
        names = [p["name"] for m in call["outputs"] for p in m["parts"] if p["type"] == "tool_call"]
        assert got["out_tool_names"] == json.dumps(names).replace(" ", "").replace('"', "'"), call["name"]
        assert got["out_tool_fps"] == "[" + ",".join(t["fp"] for t in call["tool_calls"]) + "]", call["name"]
        assert got["out_tool_arg_simhashes"] == "[" + ",".join(t["simhash"] for t in call["tool_calls"]) + "]"
        # without the hook: the structure alone (no observation, no reply, no tool fingerprints)
        assert (bare["observation_fp"], bare["output_fp"], bare["out_tool_fps"]) == ("0", "0", "[]"), call["name"]
        assert bare["request_fp"] != got["request_fp"]


def test_content_present_keeps_the_contents_columns_whatever_the_attributes_say(store):
    """A span with content and the hook's attributes of *another* call: every column is the content's (the attributes
    are read only where the content is absent), equal to the same span's without the hook."""
    vectors = json.loads(VECTORS.read_text())["calls"]
    others = vectors[1:] + vectors[:1]
    spans = [(f"with {i}", _chat_attributes(c["model"], c), _hook_call(other))
             for i, (c, other) in enumerate(zip(vectors, others, strict=True))]
    spans += [(f"plain {i}", _chat_attributes(c["model"], c), None) for i, c in enumerate(vectors)]
    rows = _exported_rows(store, spans)
    for i, call in enumerate(vectors):
        assert rows[f"with {i}"]["has_content"] == "1"
        assert rows[f"with {i}"] == rows[f"plain {i}"], call["name"]
        assert rows[f"with {i}"]["output_fp"] == call["reply"]["fp"]


def test_the_failure_shape_pending_and_ack_attributes_and_older_sets(store):
    """Version 3's input_ack gives observation_ack, version 2's input_failed / input_shape / input_pending give
    observation_failed / _shape_fp / _pending; a version 2 set (without input_ack) leaves observation_ack 0, a version 1
    set (without the three) leaves them 0 too, and a value that is not a number gives 0 (never a failed batch)."""
    base = {"loop_detector.fp.version": 2, "loop_detector.fp.input": "123", "loop_detector.fp.input_chars": 12,
            "loop_detector.fp.input_empty": False}
    v2 = {**base, "loop_detector.fp.input_failed": True, "loop_detector.fp.input_shape": "18446744073709551615",
          "loop_detector.fp.input_pending": True}
    v3 = {**v2, "loop_detector.fp.version": 3, "loop_detector.fp.input_ack": True}
    v1 = {**base, "loop_detector.fp.version": 1}
    odd = {**v2, "loop_detector.fp.input_shape": "not a number", "loop_detector.fp.tool_calls": ["x", "7"],
           "loop_detector.fp.tool_names": ["a", "b"]}
    rows = _exported_rows(store, [("v3", {**_chat_attributes("m"), **v3}, None),
                                  ("v2", {**_chat_attributes("m"), **v2}, None),
                                  ("v1", {**_chat_attributes("m"), **v1}, None),
                                  ("odd", {**_chat_attributes("m"), **odd}, None),
                                  ("tool", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t", **v3},
                                   None)])
    pick = ("observation_fp", "observation_chars", "observation_failed", "observation_shape_fp", "observation_pending",
            "observation_ack")
    assert [rows["v3"][c] for c in pick] == ["123", "12", "1", "18446744073709551615", "1", "1"]
    assert [rows["v2"][c] for c in pick] == ["123", "12", "1", "18446744073709551615", "1", "0"]
    assert [rows["v1"][c] for c in pick] == ["123", "12", "0", "0", "0", "0"]
    assert [rows["odd"][c] for c in pick] == ["123", "12", "1", "0", "1", "0"]
    assert (rows["odd"]["out_tool_names"], rows["odd"]["out_tool_fps"]) == ("['a','b']", "[0,7]")
    assert [rows["tool"][c] for c in pick] == ["0", "0", "0", "0", "0", "0"]  # a model call's evidence only
