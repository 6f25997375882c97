"""The SDK examples stay runnable: each one, run as documented (one command: a stub model and loop-detector
in-process), stops its looping agent with a pre-flight block before the third identical tool call runs. The
Vercel AI SDK example runs with node against a stub model and a service this test starts (its npm install is
kept while its lockfile is unchanged). The LiteLLM proxy example is run by tests/sdk/test_sdk_litellm.py."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import pytest
from support.sdk import ROOT, SDK_TYPESCRIPT, npm_ci, run

EXAMPLES = ROOT / "examples"
NODE, NPM = shutil.which("node"), shutil.which("npm")


def check_blocked(stdout: str) -> None:
    tools = [line for line in stdout.splitlines() if "read_file(" in line]
    assert len(tools) == 2, stdout  # two reads ran; the third was refused before it ran
    assert '"reason": "failure_loop"' in stdout.replace('":"', '": "'), stdout


@pytest.mark.parametrize("example", [
    ["openai_responses_guard.py"], ["openai_responses_guard.py", "--async", "--stream"],
    ["anthropic_guard.py", "--stream"], ["langchain_agent.py"], ["openai_agents_sdk.py"]],
    ids=lambda e: " ".join(e))
def test_python_example(example):
    needs = {"anthropic_guard.py": ["anthropic"], "langchain_agent.py": ["langchain", "langchain_openai"],
             "openai_agents_sdk.py": ["agents"]}.get(example[0], ["openai"])
    for module in needs:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    out = run([sys.executable, str(EXAMPLES / example[0]), *example[1:]], timeout=300, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    check_blocked(out.stdout)


@pytest.mark.skipif(not (NODE and NPM), reason="node and npm are needed for the Vercel AI SDK example")
def test_vercel_ai_example():
    sys.path.insert(0, str(EXAMPLES))
    from _harness import local_stack

    npm_ci(SDK_TYPESCRIPT, NPM)
    assert run([NPM, "run", "build", "--silent"], timeout=300, cwd=str(SDK_TYPESCRIPT)).returncode == 0
    npm_ci(EXAMPLES / "vercel-ai", NPM)
    with local_stack(None, None) as (api, base):
        env = {**os.environ, "LOOP_DETECTOR_URL": api, "OPENAI_BASE_URL": base + "/v1"}
        out = run([NODE, "agent.mjs"], timeout=120, cwd=str(EXAMPLES / "vercel-ai"), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    check_blocked(out.stdout)
