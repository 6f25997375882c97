"""docs/sdk.md's snippets are complete programs: each Python and TypeScript block runs as written against a
live service and the stub model (only the documented ports are swapped for this test's free ones)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import uuid

import pytest
from support.enforcement import make_config
from support.sdk import ROOT, SDK_TYPESCRIPT, npm_ci, run

from detector.service.process import running_service

sys.path.insert(0, str(ROOT / "examples"))
from _harness import BLOCKING_RULES  # noqa: E402
from openai_stub import serve_stub  # noqa: E402

DOC = ROOT / "docs" / "sdk.md"
NODE, NPM = shutil.which("node"), shutil.which("npm")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    with running_service(make_config(rules=BLOCKING_RULES), tmp_path_factory.mktemp("docs")) as (_, eps), \
            serve_stub() as stub:
        yield eps.api, stub


def localize(code: str, urls: tuple[str, str]) -> str:
    api, stub = urls
    return code.replace("http://127.0.0.1:8080", api).replace("http://127.0.0.1:8765", stub)


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_snippet_runs(index, urls, tmp_path):
    code = localize(blocks("python")[index], urls)
    out = run([sys.executable, "-c", code], timeout=180, cwd=str(tmp_path),
              env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "sdk" / "python")])})
    assert out.returncode == 0, f"{code}\n---\n{out.stderr[-3000:]}"


@pytest.mark.skipif(not (NODE and NPM), reason="node and npm are needed for the TypeScript snippets")
@pytest.mark.parametrize("index", range(len(blocks("ts"))))
def test_typescript_snippet_runs(index, urls):
    npm_ci(SDK_TYPESCRIPT, NPM)
    assert run([NPM, "run", "build", "--silent"], timeout=300, cwd=str(SDK_TYPESCRIPT)).returncode == 0
    example = ROOT / "examples" / "vercel-ai"  # has ai, @ai-sdk/openai and the SDK installed
    npm_ci(example, NPM)
    script = example / f".doc-snippet-{uuid.uuid4().hex[:8]}.mjs"
    script.write_text(localize(blocks("ts")[index], urls))
    try:
        out = run([NODE, str(script)], timeout=120, cwd=str(example))
    finally:
        script.unlink()
    assert out.returncode == 0, out.stderr[-3000:]
