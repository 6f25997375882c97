"""Shared by the SDK tests (Python SDK, framework guards, TypeScript SDK, LiteLLM proxy): the rules the live
service runs with, environments created on demand (a fresh venv per test, or one cached across runs for a
library too heavy or too pinned for the project's venv), and where the repository's SDKs are."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SDK_PYTHON = ROOT / "sdk" / "python"
SDK_TYPESCRIPT = ROOT / "sdk" / "typescript"
VECTORS = ROOT / "sdk" / "test-vectors" / "fingerprints.json"

# Blocking rules reachable in a few calls: 4 identical requests in a row, the same tool call 3 times in a row;
# a $0 budget blocks feature "free" at once.
RULES = [
    {"name": "stop-repeat", "detector": "exact_prompt_repeat", "action": "block", "params": {"repeats": {1: 4}}},
    {"name": "watch-repeat", "detector": "exact_prompt_repeat", "action": "notify"},
    {"name": "stop-tool-loop", "detector": "failure_loop", "action": "block", "params": {"same_tool_repeats": 3}},
]
BUDGETS = [{"name": "free-tier", "scope": "feature", "match": "free", "limit_usd": 0, "action": "block"}]

# Server-side distributions: none may come with the SDK alone.
SERVER_DISTRIBUTIONS = ("chdb", "fastapi", "starlette", "uvicorn", "pyarrow", "clickhouse-connect", "apscheduler",
                        "opentelemetry-sdk", "opentelemetry-proto", "opentelemetry-exporter-otlp-proto-http",
                        "orjson", "prometheus-client", "pyyaml", "pydantic", "mypy", "loop-detector")


def venv_base() -> Path:
    return Path(os.environ.get("LOOP_DETECTOR_TEST_VENVS", Path.home() / ".cache" / "loop-detector" / "test-venvs"))


def run(cmd: list[str], timeout: float = 900, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]


def create_venv(path: Path, requirements: list[str], upgrade_pip: bool = False) -> str | None:
    """A venv at ``path`` with ``requirements``; None when ready, else why not (the venv is then removed)."""
    shutil.rmtree(path, ignore_errors=True)
    python = str(path / "bin" / "python")
    steps = [[sys.executable, "-m", "venv", str(path)]]
    if upgrade_pip:  # the pip of Python 3.11's venv gives up on large dependency trees
        steps.append([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade", "pip"])
    if requirements:
        steps.append([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements])
    for cmd in steps:
        try:
            proc = run(cmd)
        except subprocess.TimeoutExpired:
            shutil.rmtree(path, ignore_errors=True)
            return f"timed out: {' '.join(cmd[-3:])}"
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            shutil.rmtree(path, ignore_errors=True)
            return " / ".join(tail) or f"exit {proc.returncode}"
    return None


_FAILED: dict[str, str] = {}


def cached_venv(name: str, requirements: list[str]) -> Path:
    """The interpreter of a venv with ``requirements``, created on first use and kept across runs (keyed by
    the Python version and the requirements); skips the test when it cannot be created (no package index)."""
    if os.environ.get("LOOP_DETECTOR_SKIP_VENV_TESTS"):
        pytest.skip("LOOP_DETECTOR_SKIP_VENV_TESTS is set")
    digest = hashlib.sha256(json.dumps([sys.version, requirements]).encode()).hexdigest()[:12]
    base = venv_base()
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{name}-{digest}"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be creating it
        if not (path / ".ready").exists():
            failure = _FAILED.get(name) or create_venv(path, requirements, upgrade_pip=True)
            if failure is not None:
                _FAILED[name] = failure
                pytest.skip(f"could not create the {name} environment ({' '.join(requirements)}): {failure}")
            (path / ".ready").write_text("ok")
    return path / "bin" / "python"


def npm_ci(directory: Path, npm: str) -> None:
    """``npm ci`` in ``directory`` unless node_modules was installed from the same lockfile (kept across runs);
    skips the test when the registry cannot be reached."""
    digest = hashlib.sha256((directory / "package-lock.json").read_bytes()
                            + (directory / "package.json").read_bytes()).hexdigest()
    stamp = directory / "node_modules" / ".loop-detector-lock"
    with open(directory / ".npm-install.lock", "w") as lock:  # another test process may be installing
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest:
            return
        out = run([npm, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"], timeout=600,
                  cwd=str(directory))
        if out.returncode != 0 and any(m in out.stderr + out.stdout for m in ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED")):
            pytest.skip(f"the npm registry cannot be reached: {out.stderr[-500:]}")
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        stamp.write_text(digest)


def installed_distributions(python: Path) -> set[str]:
    """The normalized names of every distribution installed in the environment of ``python``."""
    code = "import importlib.metadata as m, json; print(json.dumps(sorted({d.metadata['Name'] for d in m.distributions()})))"
    out = run([str(python), "-c", code], timeout=60, cwd=str(python.parent))  # not this checkout's *.egg-info
    assert out.returncode == 0, out.stderr
    return {n.lower().replace("_", "-") for n in json.loads(out.stdout)}
