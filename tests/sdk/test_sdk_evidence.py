"""The Python SDK's fingerprints (``loop_detector_sdk.evidence``) against the shared vectors, which ClickHouse
made (``tests/sdk/test_sdk_evidence_clickhouse.py`` keeps them so), and its readers of each library's messages: the
openai chat reader against the openai-v2 instrumentation's own conversion (so a guard and the completion hook in one
app fingerprint a call alike), and the other libraries' shapes."""

from __future__ import annotations

import json

import pytest
from loop_detector_sdk.evidence.fingerprints import (
    ATTRIBUTES,
    call_evidence,
    new_input_text,
    observation,
    reply,
    request_fp,
    tool_call,
    tool_run,
)
from loop_detector_sdk.evidence.messages import (
    Message,
    Part,
    arguments_text,
    from_anthropic,
    from_genai,
    from_langchain,
    from_openai_chat,
    from_responses_input,
    reply_text,
)
from loop_detector_sdk.evidence.normalize import normalize, without_keys
from support.evidence_vectors import VECTORS

DOC = json.loads(VECTORS.read_text())


def observed(o) -> dict:
    return {"fp": str(o.fp), "simhash": str(o.simhash), "empty": o.empty, "chars": o.chars, "failed": o.failed,
            "shape": str(o.shape), "pending": o.pending, "ack": o.ack}


@pytest.mark.parametrize("v", DOC["texts"], ids=lambda v: v["name"])
def test_texts(v):
    text = v["text"]
    assert normalize(text) == v["normalized"] and normalize(without_keys(text)) == v["normalized_without_keys"]
    o, r = observation(text), reply(text)
    assert observed(o) == v["observation"]
    assert {"fp": str(r.fp), "simhash": str(r.simhash)} == v["reply"]


@pytest.mark.parametrize("v", DOC["tool_calls"], ids=lambda v: v["name"])
def test_tool_calls(v):
    canonical = arguments_text(v["arguments"])
    assert canonical == v["canonical"] and normalize(canonical) == v["normalized"]
    call, run = tool_call(v["tool"], canonical), tool_run(v["tool"], canonical)
    assert {"fp": str(call.fp), "simhash": str(call.simhash)} == v["call"]
    assert {"fp": str(run.fp), "args_fp": str(run.args_fp), "args_simhash": str(run.args_simhash)} == v["run"]


@pytest.mark.parametrize("v", DOC["calls"], ids=lambda v: v["name"])
def test_calls(v):
    inputs, outputs = from_genai(v["inputs"]), from_genai(v["outputs"])
    assert new_input_text(inputs) == v["new_input"] and reply_text(outputs) == v["reply_text"]
    assert str(request_fp(v["model"], inputs)) == v["request"]
    evidence = call_evidence(v["model"], inputs, outputs, reply_text(outputs))
    o = evidence.observation
    assert o is not None and observed(o) == v["observation"]
    attrs = evidence.span_attributes()
    assert set(attrs) <= set(ATTRIBUTES) and attrs["loop_detector.fp.version"] == 3
    assert attrs["loop_detector.fp.request"] == v["request"]
    assert attrs.get("loop_detector.fp.tool_calls", []) == [c["fp"] for c in v["tool_calls"]]
    assert attrs.get("loop_detector.fp.tool_call_simhashes", []) == [c["simhash"] for c in v["tool_calls"]]
    if v["reply"]["fp"] != "0":
        assert (attrs["loop_detector.fp.output"], attrs["loop_detector.fp.output_simhash"]) == (
            v["reply"]["fp"], v["reply"]["simhash"])
    assert evidence.check_evidence() == {
        "version": 3, "request": v["request"], "input": v["observation"]["fp"],
        "input_simhash": v["observation"]["simhash"], "input_empty": v["observation"]["empty"],
        "input_chars": v["observation"]["chars"], "input_failed": v["observation"]["failed"],
        "input_shape": v["observation"]["shape"], "input_pending": v["observation"]["pending"],
        "input_ack": v["observation"]["ack"]}
    assert (attrs["loop_detector.fp.input"], attrs["loop_detector.fp.input_empty"],
            attrs["loop_detector.fp.input_chars"]) == (v["observation"]["fp"], v["observation"]["empty"],
                                                       v["observation"]["chars"])
    assert (attrs["loop_detector.fp.input_failed"], attrs.get("loop_detector.fp.input_shape", "0"),
            attrs["loop_detector.fp.input_pending"], attrs["loop_detector.fp.input_ack"]) == (
        v["observation"]["failed"], v["observation"]["shape"], v["observation"]["pending"], v["observation"]["ack"])
    assert not any(isinstance(x, str) and len(x) > 20 and x in json.dumps(v["inputs"]) for x in attrs.values())


CHAT = [
    {"role": "system", "content": "You fix builds."},
    {"role": "user", "content": "Fix it."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "grep", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "import os"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "no matches"}]},
    {"role": "user", "content": [{"type": "text", "text": "And now?"}, {"type": "image_url", "image_url": {}}]},
]


def test_the_openai_chat_reader_is_the_openai_v2_instrumentations_conversion():
    """openai-v2 turns the request's messages into util-genai's (what the completion hook receives); the guard
    reads the same messages itself: the same request and new input, so guard and hook agree."""
    from opentelemetry.instrumentation.openai_v2.utils import _prepare_input_messages

    plain = CHAT[:5]  # openai-v2 drops a user message whose content is a list of parts; the guard reads its text
    via_instrumentation = from_genai(_prepare_input_messages(plain))
    assert from_openai_chat(plain) == via_instrumentation
    assert request_fp("gpt-4o-mini", from_openai_chat(plain)) == request_fp("gpt-4o-mini", via_instrumentation)
    assert new_input_text(from_openai_chat(CHAT)) == 'import os [{"type":"text","text":"no matches"}] And now?'


def test_new_input_is_what_came_since_the_models_last_message():
    msgs = [Message("system", (Part("text", "sys"),)), Message("user", (Part("text", "task"),))]
    assert new_input_text(msgs) == "task"  # the first call: the user's message, not the system prompt
    msgs.append(Message("assistant", (Part("tool_call", name="t", arguments="{}"),)))
    assert new_input_text(msgs) is None  # nothing new yet
    assert new_input_text([*msgs, Message("user", ())]) is None  # a message without parts: nothing captured
    assert new_input_text([*msgs, Message("tool", (Part("tool_call_response", ""),))]) == ""  # an empty result
    msgs += [Message("tool", (Part("tool_call_response", "r1"),)), Message("developer", (Part("text", "d"),)),
             Message("tool", (Part("tool_call_response", "r2"),))]
    assert new_input_text(msgs) == "r1 r2"


def test_the_other_libraries_messages():
    anthropic = from_anthropic([
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": [{"type": "text", "text": "Reading."},
                                          {"type": "tool_use", "id": "t1", "name": "read_file",
                                           "input": {"path": "a.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "import os"}]},
                                     {"type": "text", "text": "Go on."}]}], system="You fix builds.")
    assert [m.role for m in anthropic] == ["system", "user", "assistant", "user"]
    assert anthropic[2].parts[1] == Part("tool_call", name="read_file", arguments='{"path":"a.py"}')
    assert new_input_text(anthropic) == "import os Go on."

    responses = from_responses_input([
        {"role": "user", "content": "Fix it."},
        {"type": "function_call", "name": "read_file", "arguments": '{"path": "a.py"}', "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "import os"}], instructions="Be brief.")
    assert [m.role for m in responses] == ["system", "user", "assistant", "tool"]
    assert new_input_text(responses) == "import os"
    assert new_input_text(from_responses_input("Hello")) == "Hello"

    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    lc = from_langchain([HumanMessage("Fix it."), AIMessage("", tool_calls=[
        {"name": "read_file", "args": {"path": "a.py"}, "id": "c1"}]), ToolMessage("import os", tool_call_id="c1")],
        system="You fix builds.")
    assert [m.role for m in lc] == ["system", "user", "assistant", "tool"]
    assert lc[2].parts[0] == anthropic[2].parts[1]  # the same tool call, whichever library wrote it
    assert new_input_text(lc) == "import os"


def test_a_tool_call_is_one_fingerprint_whatever_its_spelling():
    spellings = ['{"path": "a.py", "line": 1}', '{"line":1.0,"path":"a.py"}', {"path": "a.py", "line": 1},
                 {"line": 1.0, "path": "a.py"}]
    assert len({tool_run("read_file", arguments_text(s)).fp for s in spellings}) == 1
    assert tool_run("read_file", arguments_text({"path": "b.py", "line": 1})).fp != tool_run(
        "read_file", arguments_text(spellings[0])).fp
    # reworded or shifted: the SimHash of the normalized arguments stays close, the exact ones differ
    a = tool_run("search", arguments_text({"q": "deploy status", "offset": 0}))
    b = tool_run("search", arguments_text({"q": "deploy status", "offset": 20}))
    assert a.args_fp != b.args_fp and a.args_simhash == b.args_simhash


def test_a_failing_reader_leaves_the_check_without_evidence_and_logs_no_content(caplog):
    from loop_detector_sdk.evidence.pending import model_evidence

    def broken(messages):
        raise KeyError(messages[0])

    with caplog.at_level("DEBUG"):
        assert model_evidence("m", broken, ["SECRET-CANARY"]) is None
    assert "KeyError" in caplog.text and "SECRET-CANARY" not in caplog.text


def _genai(messages: list[dict]) -> list:
    """The semantic-conventions messages as util-genai's own types (what the completion hook is called with)."""
    from opentelemetry.util.genai.types import InputMessage, Reasoning, Text, ToolCallRequest, ToolCallResponse

    def part(p: dict):
        kind = p["type"]
        if kind == "text":
            return Text(p["content"])
        if kind == "reasoning":
            return Reasoning(p["content"])
        if kind == "tool_call":
            return ToolCallRequest(p["arguments"], p["name"], p.get("id"))
        return ToolCallResponse(p["response"], p.get("id"))

    return [InputMessage(m["role"], [part(p) for p in m["parts"]]) for m in messages]


@pytest.mark.parametrize("v", DOC["calls"], ids=lambda v: v["name"])
def test_the_hooks_path_over_util_genais_types_is_the_same(v):
    """The hook recognizes the history from a cache: the first and the repeated call give the vectors' values."""
    from loop_detector_sdk.evidence.fingerprints import genai_call_evidence

    inputs, outputs = from_genai(v["inputs"]), from_genai(v["outputs"])
    expected = call_evidence(v["model"], inputs, outputs, reply_text(outputs)).span_attributes()
    for _ in range(2):
        got = genai_call_evidence(v["model"], _genai(v["inputs"]), _genai(v["outputs"])).span_attributes()
        assert got == expected and got["loop_detector.fp.request"] == v["request"]
    system = genai_call_evidence(v["model"], _genai(v["inputs"]), [], [_genai([{"role": "system", "parts": [
        {"type": "text", "content": "extra instructions"}]}])[0].parts[0]])
    assert system.span_attributes()["loop_detector.fp.request"] != v["request"]  # system instructions count


def test_the_vectors_of_issue_31_say_what_their_names_say():
    """The shared vectors are ClickHouse's values, which both SDKs must give; here, that those values are the right
    ones: an acknowledgement is one (a failure, work in progress, a result beyond it never), work in progress is
    (in any common wording, never a retryable error), a captured empty result is an outcome ("nothing")."""
    texts = {v["name"]: v["observation"] for v in DOC["texts"]}
    acks = [n for n in texts if n.startswith("ack")]
    not_acks = [n for n in texts if n.startswith("not ack")]
    pending = [n for n in texts if n.startswith("pending") and "in a failure" not in n]
    assert len(acks) >= 8 and len(not_acks) >= 8 and len(pending) >= 8
    assert [n for n in acks if not texts[n]["ack"]] == []
    assert [n for n in not_acks if texts[n]["ack"]] == []
    assert [n for n in pending if not texts[n]["pending"] or texts[n]["ack"]] == []
    assert not texts["a retryable error is not pending"]["pending"]
    assert texts["pending phrase in a failure"]["failed"] and not texts["pending phrase in a failure"]["pending"]
    assert texts["not ack: accepted is in progress"]["pending"]
    assert not texts["not pending: a phrase below the first line"]["pending"]  # a log that says "waiting for"
    assert [n for n in texts if texts[n]["ack"] and texts[n]["pending"]] == []
    # an edit acknowledged on its first line, its snippet of code saying "error" further down: both flags, the core
    # reads it as the acknowledgement
    snippet = texts["ack: an edit whose snippet handles errors"]
    assert snippet["ack"] and snippet["failed"]
    empty = "11160318154034397263"  # cityHash64('')
    for name in ("empty", "spaces only"):
        assert texts[name] == {"fp": empty, "simhash": "0", "empty": True, "chars": 0, "failed": False,
                               "shape": empty, "pending": False, "ack": False}
    calls = {v["name"]: v for v in DOC["calls"]}
    assert calls["a tool's empty response"]["new_input"] == ""
    assert calls["a tool's empty response"]["observation"]["fp"] == empty
    assert calls["an acknowledgement"]["observation"]["ack"] and calls["work in progress"]["observation"]["pending"]
