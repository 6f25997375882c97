"""The real runs' replay (``detector/evaluation/real_runs.py``) in its three content modes: what each puts on the
spans. (The runs themselves are not in the repository; ``loop-detector eval --real-runs`` replays them.)

* ``on``: the conversation on the chat spans, the arguments and results on the tool spans;
* ``off``: none of it;
* ``fingerprints``: no content either, and each chat span carries the ``loop_detector.fp.*`` attributes the SDK's
  completion hook computes from the same conversation (the hook's own code, called on the span as util-genai calls
  it), so the replay measures what an app with the hook sends.
"""

from __future__ import annotations

import json

import pytest
from loop_detector_sdk.completion_hook import LoopDetectorHook
from loop_detector_sdk.evidence.fingerprints import ATTRIBUTES
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from detector.evaluation.emit import emit_call
from detector.evaluation.real_runs import CONTENT_MODES, RealRun, RunLabel, RunStep, to_scenario

CANARY = "CANARY-realruns"
RUN = RealRun(id="r1", source="swe-agent", model="gpt-4o", steps=(
    RunStep(tool="bash", args={"command": "cat setup.py"}, result=f"Traceback: no such file {CANARY}", error=True,
            out_text="Let me read it.", user_text=None),
    RunStep(tool="bash", args={"command": "cat setup.py"}, result=f"Traceback: no such file {CANARY}", error=True,
            out_text="Again.", user_text=None),
    RunStep(tool=None, args=None, result="", error=False, out_text="Done.", user_text="ok"),
))
LABEL = RunLabel(id="r1", label="loop", onset=1, end=1, kind="repeat", clear=True)


def spans_of(mode: str):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    scenario = to_scenario(RUN, LABEL, capture_content=mode == "on", app_fingerprints=mode == "fingerprints")
    history: list = []
    t = 1_780_000_000 * 10**9
    conversations = []
    for call in scenario.calls:
        conversations.append(json.loads(json.dumps(history + ([{"role": "user", "parts": [
            {"type": "text", "content": call.user_text}]}] if call.user_text else []))))
        t = emit_call(provider.get_tracer("t"), call, session_id="s", start_ns=t,
                      capture_content=scenario.capture_content, history=history,
                      app_fingerprints=scenario.app_fingerprints)
    return memory.get_finished_spans(), conversations, scenario


@pytest.mark.parametrize("mode", CONTENT_MODES)
def test_each_content_mode_puts_what_it_says_on_the_spans(mode):
    spans, conversations, scenario = spans_of(mode)
    chats = [s for s in spans if s.name.startswith("chat")]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert len(chats) == 3 and len(tools) == 2
    every = json.dumps([dict(s.attributes) for s in spans])
    assert (CANARY in every) == (mode == "on")
    fps = [{k: v for k, v in s.attributes.items() if k.startswith("loop_detector.fp.")} for s in chats]
    if mode != "fingerprints":
        assert not any(fps)
        return
    for span, conversation, call, got in zip(chats, conversations, scenario.calls, fps, strict=True):
        parts = ([{"type": "text", "content": call.output_text}] if call.output_text else []) + [
            {"type": "tool_call", "id": f"call_{i}", "name": t.name, "arguments": t.arguments}
            for i, t in enumerate(call.tools)]
        outputs = [{"role": "assistant", "parts": parts, "finish_reason": "tool_calls" if call.tools else "stop"}]
        hooked = _HookSpan(span.attributes)
        LoopDetectorHook().on_completion(inputs=conversation, outputs=outputs, span=hooked)
        assert got == {k: tuple(v) if isinstance(v, list) else v for k, v in hooked.set.items()}
        assert set(got) <= set(ATTRIBUTES)
    # the loop: the same failure came back twice (the new input of the 2nd and 3rd calls)
    assert fps[1]["loop_detector.fp.input"] == fps[2]["loop_detector.fp.input"] != fps[0]["loop_detector.fp.input"]
    assert fps[1]["loop_detector.fp.input_failed"] is True and fps[0]["loop_detector.fp.input_failed"] is False


class _HookSpan:
    """The span the hook is handed (what it reads: the model asked for; what it writes: attributes)."""

    def __init__(self, attributes) -> None:
        self.attributes = dict(attributes)
        self.set: dict = {}

    def is_recording(self) -> bool:
        return True

    def set_attributes(self, attributes) -> None:
        self.set.update(attributes)
