"""Real instrumentation libraries end to end: the ``openai`` SDK, instrumented in turn by each popular GenAI
instrumentation, calls a local OpenAI-compatible stub and exports OTLP to a running loop-detector.

For each instrumentation, with message content capture on and off: a looping tool-calling agent is flagged,
a healthy one is not, and the per-call keys (session, trace, model, provider), tokens, errors and tool-call
fingerprints in ``otel.genai_calls`` are right. Each agent runs in a fresh interpreter
(``tests/instrumented_agent.py``): instrumentors patch the ``openai`` module globally.

Libraries that cannot live beside the project's pinned OpenTelemetry (OpenLIT pulls contrib instrumentations
that pin an older opentelemetry-sdk) and old releases (OpenLLMetry's indexed ``gen_ai.prompt.N.*`` dialect)
run from a virtual environment the test creates once and caches (``LOOP_DETECTOR_TEST_VENVS``, default
``~/.cache/loop-detector/test-venvs``); if it cannot be created (no package index), that case is skipped.
``LOOP_DETECTOR_SKIP_VENV_TESTS=1`` skips them outright.

The second half checks the materialized view alone, on hand-built spans in each dialect as the libraries'
sources write them (including the ones no installable library emits any more).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from detector.config import AppConfig
from detector.escalation import LEVEL_RANK
from detector.server import running_service
from detector.store import ChdbStore, apply_schema, insert_rows

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
AGENT = Path(__file__).resolve().parent / "instrumented_agent.py"
sys.path.insert(0, str(EXAMPLES))

from openai_stub import LOOP_CALL, serve_stub  # noqa: E402

LOOP_STEPS = 14
HEALTHY_STEPS = 14
MODEL = "gpt-4o-mini-2024-07-18"  # the stub answers with the dated model name, as OpenAI does

# Separate environments: (pip requirements) for libraries that cannot be installed into the project's venv.
VENVS: dict[str, list[str]] = {
    # openlit requires the contrib HTTP instrumentations, whose newest threading/urllib3 releases pin
    # opentelemetry-sdk 1.45.1; it also caps openai below 3
    "openlit": ["openlit==1.45.0", "openai>=2,<3"],
    # the last OpenLLMetry releases before the move to gen_ai.input.messages: indexed gen_ai.prompt.N.*
    "openllmetry-legacy": ["opentelemetry-instrumentation-openai==0.47.5", "openai>=1.60,<2",
                           "opentelemetry-sdk>=1.28,<2", "opentelemetry-exporter-otlp-proto-http>=1.28,<2"],
}


@dataclass(frozen=True)
class Variant:
    instrumentation: str
    content: bool
    session_mode: str  # native | processor | invoke_agent
    venv: str | None = None  # a key of VENVS, else the project's own venv
    module: str | None = None  # importable in the project's venv when installed

    @property
    def id(self) -> str:
        name = self.venv or self.instrumentation
        return f"{name}-{'content' if self.content else 'no-content'}-{self.session_mode}"


VARIANTS = [
    Variant("openai-v2", True, "invoke_agent", module="opentelemetry.instrumentation.openai_v2"),
    Variant("openai-v2", False, "processor", module="opentelemetry.instrumentation.openai_v2"),
    Variant("openllmetry", True, "native", module="opentelemetry.instrumentation.openai"),
    Variant("openllmetry", False, "native", module="opentelemetry.instrumentation.openai"),
    Variant("openinference", True, "native", module="openinference.instrumentation.openai"),
    Variant("openinference", False, "native", module="openinference.instrumentation.openai"),
    Variant("openlit", True, "processor", venv="openlit"),
    Variant("openlit", False, "invoke_agent", venv="openlit"),
    Variant("openllmetry", True, "native", venv="openllmetry-legacy"),
    Variant("openllmetry", False, "processor", venv="openllmetry-legacy"),
]

PRICING = {"chat": {MODEL: {"promptPrice": 0.00015, "completionPrice": 0.0006}}}


# -- environments -------------------------------------------------------------------------------------------


def venv_python(name: str) -> Path:
    """The interpreter of the cached venv for ``VENVS[name]``, created on first use (skip if impossible)."""
    if os.environ.get("LOOP_DETECTOR_SKIP_VENV_TESTS"):
        pytest.skip("LOOP_DETECTOR_SKIP_VENV_TESTS is set")
    requirements = VENVS[name]
    digest = hashlib.sha256(json.dumps([sys.version, requirements]).encode()).hexdigest()[:12]
    base = Path(os.environ.get("LOOP_DETECTOR_TEST_VENVS", Path.home() / ".cache" / "loop-detector" / "test-venvs"))
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{name}-{digest}"
    python = path / "bin" / "python"
    ready = path / ".ready"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            failure = (path / ".failed").read_text() if (path / ".failed").exists() else None
            if failure is None:
                failure = _create_venv(path, requirements)
            if failure is not None:
                pytest.skip(f"could not create the {name} environment ({' '.join(requirements)}): {failure}")
    return python


def _create_venv(path: Path, requirements: list[str]) -> str | None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    steps = [
        [sys.executable, "-m", "venv", str(path)],
        # the pip that ships with Python 3.11's venv cannot resolve openlit's dependency tree: upgrade it first
        [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade", "pip"],
        [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
    ]
    for cmd in steps:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return f"timed out: {' '.join(cmd[-3:])}"
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            message = " / ".join(tail) or f"exit {proc.returncode}"
            path.mkdir(parents=True, exist_ok=True)
            (path / ".failed").write_text(message)  # do not retry in every test of this run
            return message
    (path / ".ready").write_text("ok")
    return None


def interpreter_for(variant: Variant) -> str:
    if variant.venv is not None:
        return str(venv_python(variant.venv))
    assert variant.module is not None
    try:
        found = importlib.util.find_spec(variant.module) is not None
    except ModuleNotFoundError:
        found = False
    if not found or importlib.util.find_spec("openai") is None:
        pytest.skip(f"{variant.module} or openai is not installed (pip install -e '.[instrumentations]')")
    return sys.executable


# -- the service and the stub -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub_url():
    with serve_stub() as url:
        yield url


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    config = AppConfig()
    config.detector.interval_seconds = 0.1
    config.detector.checkpoint_seconds = 0
    with running_service(config, tmp_path_factory.mktemp("instrumentations")) as (svc, eps):
        yield svc, eps


@pytest.fixture(scope="module")
def pricing_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("pricing") / "pricing.json"
    path.write_text(json.dumps(PRICING))
    return str(path)


def wait_for_watermark(api: str, after_us: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(f"{api}/healthz").json()["watermark_us"] >= after_us:
            return
        time.sleep(0.05)
    raise AssertionError("detector did not catch up")


def tool_fingerprint(store, name: str, arguments: dict[str, Any]) -> int:
    """The fingerprint the MV gives a tool call (name + argument values), computed by the same store."""
    args = json.dumps(arguments)
    return store.rows(
        "SELECT cityHash64({n:String}, arraySort(JSONExtractKeysAndValuesRaw({a:String})), '') AS fp",
        {"n": name, "a": args})[0]["fp"]


def run_agent_process(variant: Variant, python: str, eps, stub_url: str, agents: list[dict[str, Any]],
                      pricing: str) -> dict[str, Any]:
    config = {
        "instrumentation": variant.instrumentation, "content": variant.content, "session_mode": variant.session_mode,
        "otlp": eps.otlp, "openai_base_url": stub_url + "/v1", "examples_dir": str(EXAMPLES), "agents": agents,
        "pricing_json": pricing,
    }
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "TRACELOOP_", "OPENINFERENCE_", "OPENLIT_", "OPENAI_"))}
    env["OTEL_SDK_DISABLED"] = "false"
    proc = subprocess.run([python, str(AGENT), json.dumps(config)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=str(ROOT))
    assert proc.returncode == 0, f"agent failed ({variant.id}):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- end to end, one instrumentation at a time ----------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_instrumented_agents(variant: Variant, service, stub_url, pricing_file):
    svc, eps = service
    python = interpreter_for(variant)
    tag = uuid.uuid4().hex[:8]
    agents = [
        {"session": f"loop-{tag}", "scenario": "loop", "steps": LOOP_STEPS},
        {"session": f"healthy-{tag}", "scenario": "healthy", "steps": HEALTHY_STEPS},
        {"session": f"error-{tag}", "scenario": "error", "steps": 2},
    ]
    result = run_agent_process(variant, python, eps, stub_url, agents, pricing_file)
    wait_for_watermark(eps.api, time.time_ns() // 1000)
    runs = {r["scenario"]: r for r in result["agents"]}
    loop, healthy, error = runs["loop"], runs["healthy"], runs["error"]

    def decision(run: dict[str, Any]) -> dict[str, Any]:
        params = {"session_id": run["session"]}
        if variant.session_mode == "invoke_agent":
            # the session arrives on the run's root span, exported after its calls: the trace scope decides
            params["trace_id"] = run["trace_id"]
        return httpx.get(f"{eps.api}/v1/decision", params=params).json()

    stuck, fine = decision(loop), decision(healthy)
    assert stuck["action"] != "allow", (variant.id, stuck)
    assert LEVEL_RANK[stuck["level"]] >= LEVEL_RANK["warn"], (variant.id, stuck)
    assert fine["action"] == "allow", (variant.id, fine)

    store = svc.store
    rows = store.rows(
        "SELECT * FROM otel.genai_calls WHERE trace_id IN {t:Array(String)} ORDER BY ts, span_id",
        {"t": [loop["trace_id"], healthy["trace_id"], error["trace_id"]]})
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_trace.setdefault(row["trace_id"], []).append(row)

    expected_loop_fp = tool_fingerprint(store, *LOOP_CALL)
    for run in (loop, healthy, error):
        calls = by_trace.get(run["trace_id"], [])
        llm = [c for c in calls if c["call_kind"] == "llm"]
        agent = [c for c in calls if c["operation"] == "invoke_agent"]
        assert len(agent) == 1, (variant.id, run["scenario"], [c["operation"] for c in calls])
        # keys: session, trace, model, provider
        for c in llm:
            assert c["trace_id"] == run["trace_id"]
            assert c["provider"] == "openai", (variant.id, c["provider"])
            if variant.session_mode == "invoke_agent":
                assert c["session_source"] == "trace" and c["session_id"] == run["trace_id"]
            else:
                assert c["session_id"] == run["session"], (variant.id, c["session_id"], c["session_source"])
        if variant.session_mode == "invoke_agent":
            assert agent[0]["session_id"] == run["session"]
            assert agent[0]["session_source"] == "gen_ai.conversation.id"

        ok = [c for c in llm if not c["is_error"]]
        assert all(c["model"] == MODEL for c in ok), (variant.id, {c["model"] for c in ok})
        # tokens: exactly the usage the SDK received, call by call
        assert sorted([c["input_tokens"], c["output_tokens"]] for c in ok) == sorted(run["usage"]), variant.id
        assert all(c["has_content"] == int(variant.content) for c in llm), (variant.id, [c["has_content"] for c in llm])
        if variant.instrumentation == "openlit":
            assert all(c["cost_usd"] > 0 for c in ok), (variant.id, [c["cost_usd"] for c in ok])

    # errors: the stub's HTTP 500s, whichever way the library wrote the error type
    failed = [c for c in by_trace.get(error["trace_id"], []) if c["call_kind"] == "llm"]
    assert len(failed) == error["errors"] == 2, variant.id
    assert all(c["is_error"] == 1 and c["error_type"] == "InternalServerError" for c in failed), \
        (variant.id, [(c["is_error"], c["error_type"]) for c in failed])
    assert failed[0]["error_fp"] == failed[1]["error_fp"] != 0

    # tool calls: the loop's read_file("config.yaml") gives the same fingerprint in every dialect
    loop_llm = [c for c in by_trace[loop["trace_id"]] if c["call_kind"] == "llm"]
    loop_tools = [c for c in by_trace[loop["trace_id"]] if c["call_kind"] == "tool"]
    assert len(loop_llm) == LOOP_STEPS and len(loop_tools) == LOOP_STEPS, variant.id
    assert {c["tool_name"] for c in loop_tools} == {LOOP_CALL[0]}, variant.id
    if variant.content:
        assert all(c["tool_fp"] == expected_loop_fp for c in loop_tools), variant.id
    if variant.content or variant.instrumentation == "openlit":  # OpenLIT names the calls even without content
        assert all(list(c["out_tool_fps"]) == [expected_loop_fp] for c in loop_llm), \
            (variant.id, [c["out_tool_fps"] for c in loop_llm])
        assert all(list(c["out_tool_names"]) == [LOOP_CALL[0]] for c in loop_llm), variant.id
    else:
        assert all(list(c["out_tool_fps"]) == [] for c in loop_llm), variant.id
    if variant.content:
        # the new content of a step is the tool result: it feeds the input SimHash
        assert all(c["input_simhash"] != 0 for c in loop_llm[1:]), (variant.id, [c["input_simhash"] for c in loop_llm])
        assert len({c["turn_fp"] for c in loop_llm[1:]}) == 1, variant.id  # the same step again and again
