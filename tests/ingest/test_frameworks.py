"""Agent frameworks that trace themselves, each run for real against the local OpenAI-compatible stub.

For each framework (and each of its span formats worth telling apart) a looping and a healthy agent run: the
looping one is flagged and the healthy one is never warned (no event of its session warns, at any point of the run),
each call lands in its session, the tool runs are tool calls with the loop's repeated arguments fingerprinted alike,
and the model calls carry tokens and (content on) the tool calls the model asked for. With content capture off (each
framework's own switch), tools take a second as real ones do, and a second honest agent applies one procedure to 20
items (the stub's ``[batch N]``: the same tool, another message each time, results of the same size): sizes alone must
not flag it either (issue 31). The libraries run from cached environments (``support/frameworks.py``: a venv each, a
``node_modules`` for the Vercel AI SDK), created once; ``LOOP_DETECTOR_SKIP_VENV_TESTS=1`` skips them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.detector_reads import detector_calls
from support.frameworks import NODE_PACKAGES, PYTHON_ENVS
from support.venvs import node_modules, venv_python

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from openai_stub import HEALTHY_STEPS, LOOP_CALL, TOOL_SCHEMAS  # noqa: E402

from detector.evaluation.simulate import wait_for_detector  # noqa: E402

LOOP_STEPS = 12
BATCH_STEPS = 20  # one procedure over 20 items: an honest run whose tool results all have the same size


@dataclass(frozen=True)
class Case:
    framework: str  # a key of PYTHON_ENVS, or "vercel-ai"
    label: str
    session_source: str  # the attribute the session is read from
    content: bool = True  # whether message content reaches loop-detector (the model's tool calls, the texts)
    env: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # CrewAI ends an agent's exact repeats itself (ToolExecutionFailedError after a few identical tool uses): its
    # loop is short, warned before it could be escalated
    loop_min_calls: int = LOOP_STEPS
    # the honest agents run beside the loop: the healthy one (a different tool each step), and with content off the
    # procedure over items too
    honest: tuple[str, ...] = ("healthy",)
    tool_seconds: float = 0.0  # how long each tool takes (content off: timing must not be evidence)

    @property
    def id(self) -> str:
        return f"{self.framework}-{self.label}"


CASES = [
    Case("vercel-ai", "v6", "ai.telemetry.metadata.sessionId"),
    Case("pydantic-ai", "instrumentation-v3", "gen_ai.conversation.id"),
    Case("pydantic-ai", "instrumentation-v2", "gen_ai.conversation.id", extra={"pydantic_ai_version": 2}),
    Case("strands", "span-events", "session.id"),
    Case("strands", "latest-conventions", "session.id", env={"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}),
    Case("google-adk", "legacy-call-llm", "gcp.vertex.agent.session_id", env={"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1"}),
    Case("google-adk", "semconv", "gen_ai.conversation.id", content=False),
    Case("crewai", "openinference", "session.id", loop_min_calls=4),
    Case("langgraph-openinference", "openinference", "session.id"),
    Case("langgraph-openllmetry", "openllmetry", "traceloop.association.properties.session_id"),
    # content off, tools of a second: what the spans carry is the tools' names and the token counts (pydantic-ai: the
    # tool calls without their arguments; OpenInference: every input and output hidden, the model's tool calls too)
    Case("pydantic-ai", "native-content-off", "gen_ai.conversation.id", content=False,
         honest=("healthy", "batch"), tool_seconds=1.0),
    Case("openai-agents", "openinference-content-hidden", "session.id", content=False,
         honest=("healthy", "batch"), tool_seconds=1.0),
]

STEPS = {"loop": LOOP_STEPS, "healthy": HEALTHY_STEPS, "batch": BATCH_STEPS}


def run(case: Case, eps, stub_url: str, agents: list[dict[str, Any]]) -> dict[str, Any]:
    config = {"framework": case.framework, "otlp": eps.otlp, "openai_base_url": stub_url + "/v1",
              "tools": TOOL_SCHEMAS, "agents": agents, "env": case.env, "content": case.content,
              "tool_seconds": case.tool_seconds, **case.extra}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_", "TRACELOOP_"))}
    if case.framework == "vercel-ai":
        env["NODE_PATH"] = str(node_modules("vercel-ai", NODE_PACKAGES))
        cmd = ["node", str(ROOT / "tests" / "support" / "vercel_agent.mjs"), json.dumps(config)]
    else:
        python = venv_python(case.framework, PYTHON_ENVS[case.framework])
        cmd = [str(python), str(ROOT / "tests" / "support" / "framework_agent.py"), json.dumps(config)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(ROOT))
    assert proc.returncode == 0, f"{case.id} failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def warnings(store, session: str) -> list[dict[str, Any]]:
    """Every event of the session that told its agent more than ``allow`` (the early warning, an escalation, a rule),
    in time order: what the agent would have read had it asked then."""
    return store.rows("SELECT toString(ts) AS ts, scope, kind, detector, action, evidence FROM otel.loop_events "
                      "WHERE session_id = {s:String} AND action IN ('warn', 'throttle', 'inject', 'block') "
                      "ORDER BY ts", {"s": session})


def tool_fingerprint(store, name: str, arguments: dict[str, Any]) -> int:
    return store.rows("SELECT cityHash64({n:String}, arraySort(JSONExtractKeysAndValuesRaw({a:String})), '') AS fp",
                      {"n": name, "a": json.dumps(arguments)})[0]["fp"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_framework_agents(case: Case, service, stub_url):
    svc, eps = service
    tag = uuid.uuid4().hex[:8]
    agents = [{"session": f"{scenario}-{tag}", "scenario": scenario, "steps": STEPS[scenario]}
              for scenario in ("loop", *case.honest)]
    result = run(case, eps, stub_url, agents)
    runs = {r["scenario"]: r for r in result["agents"]}
    assert all(r["trace_id"] for r in runs.values()), (case.id, result)
    wait_for_detector(eps.api, time.time_ns() // 1000)
    loop, healthy = runs["loop"], runs["healthy"]

    # the verdicts: asked by session, and by trace alone
    def decision(**params: str) -> dict[str, Any]:
        return httpx.get(f"{eps.api}/v1/decision", params=params).json()

    stuck, fine = decision(session_id=loop["session"]), decision(session_id=healthy["session"])
    # every framework's loop is warned (CrewAI ends its run early, at four calls), its score above the healthy one's
    assert stuck["action"] != "allow" and stuck["confidence"] > fine["confidence"], (case.id, stuck, fine)
    assert fine["action"] == "allow", (case.id, fine)
    assert decision(trace_id=loop["trace_id"])["session_id"] == loop["session"]
    store = svc.store
    for scenario in case.honest:  # allowed at the end, and never warned on the way (the early warning lifts)
        honest = runs[scenario]
        final = decision(session_id=honest["session"])
        assert final["action"] == "allow", (case.id, scenario, final, warnings(store, honest["session"]))
        assert warnings(store, honest["session"]) == [], (case.id, scenario)

    expected = tool_fingerprint(store, *LOOP_CALL)
    for r in runs.values():
        calls = detector_calls(store, [r["trace_id"]])
        llm = [c for c in calls if c["call_kind"] == "llm"]
        tools = [c for c in calls if c["call_kind"] == "tool"]
        assert len(llm) >= (case.loop_min_calls if r is loop else STEPS[r["scenario"]]), (case.id, r["scenario"], len(llm))
        assert len(tools) >= len(llm) - 1, (case.id, [c["operation"] for c in calls])
        # every call in its session: named on the span, or bound from another span of the run
        named = [c for c in llm + tools if c["session_source"] != "trace"]
        assert named and all(c["session_id"] == r["session"] for c in named), (case.id, {c["session_id"] for c in named})
        assert any(c["session_source"] == case.session_source for c in calls), \
            (case.id, {c["session_source"] for c in calls})
        assert all(c["input_tokens"] > 0 and c["output_tokens"] > 0 for c in llm), case.id
        assert all(c["model"] for c in llm) and all(c["provider"] for c in llm), case.id
        assert all(c["tool_name"] for c in tools), case.id
        if case.content:
            assert all(c["has_content"] for c in llm), (case.id, [c["has_content"] for c in llm])

    loop_calls = detector_calls(store, [loop["trace_id"]])
    loop_llm = [c for c in loop_calls if c["call_kind"] == "llm"]
    loop_tools = [c for c in loop_calls if c["call_kind"] == "tool"]
    assert {c["tool_name"] for c in loop_tools} == {LOOP_CALL[0]}, case.id
    # the same call again and again: one tool fingerprint, from the argument values
    assert len({c["tool_fp"] for c in loop_tools}) == 1 and loop_tools[0]["tool_fp"] != 0, \
        (case.id, {c["tool_fp"] for c in loop_tools})
    if case.content:
        # the tool call the model asked for, read from the model call's output, fingerprinted as everywhere else
        asked = [c for c in loop_llm if c["out_tool_fps"]]
        assert len(asked) >= case.loop_min_calls - 1, (case.id, [c["out_tool_names"] for c in loop_llm])
        assert all(list(c["out_tool_fps"]) == [expected] for c in asked), (case.id, asked[0]["out_tool_fps"])
