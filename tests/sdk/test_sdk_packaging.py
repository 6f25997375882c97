"""The SDK's packaging: ``pip install ./sdk/python`` in a fresh venv installs httpx and nothing of the
server, and that SDK works against a real running service; the server's distribution carries the same
package (``detector.sdk`` re-exports it), editable (this checkout) and as a wheel."""

from __future__ import annotations

import configparser
import json
import os
import sys
import textwrap
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from support.enforcement import make_config, uid
from support.sdk import (
    BUDGETS,
    ROOT,
    RULES,
    SDK_PYTHON,
    SERVER_DISTRIBUTIONS,
    create_venv,
    installed_distributions,
    run,
)

from detector.service.process import running_service

# What the fresh environment runs: the SDK against the service, sync and async, every answer it handles.
SDK_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    import loop_detector_sdk
    from loop_detector_sdk import AsyncLoopGuard, LoopBlockedError, LoopGuard, pending_request, pending_tool

    api, session = sys.argv[1], sys.argv[2]
    out = {"file": loop_detector_sdk.__file__, "modules": sorted({m.split(".")[0] for m in sys.modules})}
    with LoopGuard(api, blocklist_interval=None) as guard:
        out["allow"] = guard.check(session_id=session + "-new").action
        pending = pending_request("gpt-4o-mini", [{"role": "user", "content": "deploy again"}])
        sent = 0
        try:
            for _ in range(6):
                guard.before_call(session_id=session, trace_id=session + "-trace", pending=pending)
                sent += 1
        except LoopBlockedError as exc:
            out["blocked_after"], out["reason"] = sent, exc.body["error"]["reason"]
            out["retry_after"] = exc.retry_after
        out["budget"] = guard.check(session_id=session + "-b", feature="free").reason

    async def main():
        async with AsyncLoopGuard(api, blocklist_interval=None) as guard:
            tool = pending_tool("read_file", {"path": "a.py"})
            actions = []
            for _ in range(3):
                actions.append((await guard.check(session_id=session + "-t", pending=tool)).action)
            return actions

    out["tool_actions"] = asyncio.run(main())
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with running_service(make_config(rules=RULES, budgets=BUDGETS), tmp_path_factory.mktemp("pkg")) as (svc, eps):
        yield svc, eps


def test_the_sdk_installs_alone_and_works_against_the_service(tmp_path, service):
    _, eps = service
    venv = tmp_path / "venv"
    failure = create_venv(venv, [str(SDK_PYTHON)])
    if failure is not None and ("No matching distribution" in failure or "Could not find" in failure):
        pytest.skip(f"no package index: {failure}")
    assert failure is None, failure
    python = venv / "bin" / "python"
    installed = installed_distributions(python)
    assert "loop-detector-sdk" in installed and "httpx" in installed
    assert not installed & set(SERVER_DISTRIBUTIONS), installed & set(SERVER_DISTRIBUTIONS)

    session = uid("alone")
    proc = run([str(python), "-c", SDK_SCRIPT, eps.api, session], timeout=120, cwd=str(tmp_path),
               env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert Path(out["file"]).is_relative_to(venv)  # the installed copy, not this checkout's
    assert not {"detector", "chdb", "fastapi", "opentelemetry", "openai"} & set(out["modules"])
    assert out["allow"] == "allow"
    assert (out["blocked_after"], out["reason"], out["retry_after"]) == (3, "exact_prompt_repeat", 60)
    assert out["budget"] == "budget_exhausted"
    assert out["tool_actions"] == ["allow", "allow", "block"]


def test_detector_sdk_is_the_sdk_package():
    import detector.sdk.client
    import loop_detector_sdk

    import detector.sdk
    from detector.sdk import LoopGuard, guard_openai

    assert LoopGuard is loop_detector_sdk.LoopGuard and guard_openai is loop_detector_sdk.guard_openai
    assert detector.sdk.client is loop_detector_sdk.client
    from detector.sdk.otel import LoopAttributesSpanProcessor  # an optional submodule, under the old name
    assert LoopAttributesSpanProcessor is loop_detector_sdk.LoopAttributesSpanProcessor
    assert detector.sdk.LoopAttributesSpanProcessor is loop_detector_sdk.LoopAttributesSpanProcessor
    assert set(detector.sdk.__all__) == set(loop_detector_sdk.__all__)
    # this checkout's install is editable: the package is the SDK's own source tree, not a copy
    assert Path(loop_detector_sdk.__file__).resolve().parent == SDK_PYTHON / "loop_detector_sdk"


def _wheel(tmp_path: Path, source: Path) -> zipfile.ZipFile:
    out = tmp_path / source.name
    # a pure-Python build (no mypyc compile): only the file list matters here
    env = {**os.environ, "LOOP_DETECTOR_PURE_PYTHON": "1"}
    proc = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                "--disable-pip-version-check", "-w", str(out), str(source)], timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


def test_both_wheels_carry_the_sdk(tmp_path):
    sdk_files = sorted(p.relative_to(SDK_PYTHON).as_posix() for p in (SDK_PYTHON / "loop_detector_sdk").rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts)
    server = _wheel(tmp_path, ROOT)
    names = set(server.namelist())
    assert set(sdk_files) <= names, set(sdk_files) - names
    assert "detector/sdk/__init__.py" in names and "detector/api/app.py" in names

    sdk = _wheel(tmp_path, SDK_PYTHON)
    names = sdk.namelist()
    assert set(sdk_files) <= set(names) and not [n for n in names if n.startswith("detector/")]
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = Parser().parsestr(sdk.read(metadata).decode())
    required = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert [r.split(">")[0].split("=")[0].strip() for r in required] == ["httpx"]
    assert {"openai", "anthropic", "langchain", "openai-agents", "litellm", "otel"} <= set(
        meta.get_all("Provides-Extra") or [])
    # OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK=loop_detector finds the hook in either distribution
    for wheel in (server, sdk):
        (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser()
        parser.read_string(wheel.read(entry_points).decode())
        assert parser["opentelemetry_genai_completion_hook"]["loop_detector"] == \
            "loop_detector_sdk.completion_hook:loop_detector_hook"
