"""Cached virtual environments for tests that run a real library which cannot live beside the project's pins
(and, for JavaScript libraries, a cached ``node_modules``: :func:`node_modules`).

    python = venv_python("openlit", ["openlit==1.45.0", "openai>=2,<3"])

Each environment is created once (keyed by the Python version and the requirement list) under
``LOOP_DETECTOR_TEST_VENVS`` (default ``~/.cache/loop-detector/test-venvs``) and reused by later runs; creation
is serialized by a lock file, so parallel test processes do not build the same one twice. If it cannot be
created (no package index), the test is skipped with the reason; ``LOOP_DETECTOR_SKIP_VENV_TESTS=1`` skips
every such test outright.
"""

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

__all__ = ["node_modules", "venv_python"]

_VENV_FAILURES: dict[str, str] = {}  # per test run: one failed creation is not retried by every test


def venv_python(name: str, requirements: list[str]) -> Path:
    """The interpreter of the cached venv ``name`` holding ``requirements``, created on first use (skip if
    impossible)."""
    if os.environ.get("LOOP_DETECTOR_SKIP_VENV_TESTS"):
        pytest.skip("LOOP_DETECTOR_SKIP_VENV_TESTS is set")
    digest = hashlib.sha256(json.dumps([sys.version, requirements]).encode()).hexdigest()[:12]
    base = Path(os.environ.get("LOOP_DETECTOR_TEST_VENVS", Path.home() / ".cache" / "loop-detector" / "test-venvs"))
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{name}-{digest}"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be creating it
        if not (path / ".ready").exists():
            failure = _VENV_FAILURES.get(name) or _create_venv(path, requirements)
            if failure is not None:
                _VENV_FAILURES[name] = failure
                pytest.skip(f"could not create the {name} environment ({' '.join(requirements)}): {failure}")
    return path / "bin" / "python"


def _create_venv(path: Path, requirements: list[str]) -> str | None:
    """Create the venv; None when ready, else why not (it is then removed, to be tried again next run)."""
    shutil.rmtree(path, ignore_errors=True)
    steps = [
        [sys.executable, "-m", "venv", str(path)],
        # the pip that ships with Python 3.11's venv cannot resolve some dependency trees: upgrade it first
        [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade", "pip"],
        [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
    ]
    for cmd in steps:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            shutil.rmtree(path, ignore_errors=True)
            return f"timed out: {' '.join(cmd[-3:])}"
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            shutil.rmtree(path, ignore_errors=True)
            return " / ".join(tail) or f"exit {proc.returncode}"
    (path / ".ready").write_text("ok")
    return None


def node_modules(name: str, packages: list[str]) -> Path:
    """A ``node_modules`` holding ``packages`` (npm specs), installed once under the same cache (skip if node or
    npm is missing or the registry cannot be reached)."""
    if os.environ.get("LOOP_DETECTOR_SKIP_VENV_TESTS"):
        pytest.skip("LOOP_DETECTOR_SKIP_VENV_TESTS is set")
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed")
    digest = hashlib.sha256(json.dumps(packages).encode()).hexdigest()[:12]
    base = Path(os.environ.get("LOOP_DETECTOR_TEST_VENVS", Path.home() / ".cache" / "loop-detector" / "test-venvs"))
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"node-{name}-{digest}"
    with open(base / f"node-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / ".ready").exists():
            failure = _VENV_FAILURES.get(f"node-{name}")
            if failure is None:
                shutil.rmtree(path, ignore_errors=True)
                path.mkdir(parents=True)
                (path / "package.json").write_text(json.dumps({"name": f"test-{name}", "private": True}))
                try:
                    proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *packages],
                                          cwd=path, capture_output=True, text=True, timeout=900)
                    failure = None if proc.returncode == 0 else " / ".join(
                        (proc.stderr or proc.stdout).strip().splitlines()[-3:]) or f"exit {proc.returncode}"
                except subprocess.TimeoutExpired:
                    failure = "npm install timed out"
            if failure is not None:
                _VENV_FAILURES[f"node-{name}"] = failure
                shutil.rmtree(path, ignore_errors=True)
                pytest.skip(f"could not install {' '.join(packages)}: {failure}")
            (path / ".ready").write_text("ok")
    return path / "node_modules"
