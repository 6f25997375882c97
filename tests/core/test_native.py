"""The compiled detection core (``detector.native``, ``setup.py``): in use after an install that asks for it
(``LOOP_DETECTOR_COMPILE=1``, as CI's does), exactly as the Python source behaves, and never used once its source has
changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import detector
import detector.core.engine
from detector import native

PACKAGE_DIR = Path(detector.__file__).resolve().parent
ROOT = PACKAGE_DIR.parent

compiled_here = pytest.mark.skipif(not native.is_compiled(detector.core.engine),
                                   reason=f"the detection core is not compiled here ({native.status()})")


def has_c_compiler() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


def test_install_compiles_the_core():
    """An install that asked for the compiled core runs it, every module of it. CI's install asks (README's test
    command: ``LOOP_DETECTOR_COMPILE=1``), so there the core must be compiled; a build that cannot compile fails."""
    if not has_c_compiler():
        pytest.skip("no C compiler: the install falls back to the Python source")
    if native.PURE_ENV in os.environ or "changed since the build" in native.status():
        pytest.skip(f"deliberately pure here: {native.status()}")
    if not os.environ.get("CI") and native.status().startswith("pure: not compiled"):
        pytest.skip(f"installed without {native.COMPILE_ENV}=1: {native.status()}")
    assert native.status() == "compiled (mypyc)"
    for name in native.CORE_MODULES:
        module = sys.modules.get(f"detector.core.{name}") or __import__(f"detector.core.{name}", fromlist=["_"])
        assert native.is_compiled(module), name


def digest_in_subprocess(seed: int, pure: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    if pure:
        env[native.PURE_ENV] = "1"
    code = ("import sys; sys.path.insert(0, 'tests'); from support.engine_digest import engine_digest; "
            "from detector import native; print(native.status()); print(engine_digest(int(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", code, str(seed)], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True, timeout=300)
    status, _, digest = done.stdout.partition("\n")
    assert status.startswith("pure") == pure, status
    return digest


@compiled_here
@pytest.mark.parametrize("seed", [1, 2])
def test_compiled_and_python_engines_give_identical_output(seed):
    """The compiled engine and the Python source give the very same scores, events, decisions and state."""
    compiled, pure = digest_in_subprocess(seed, pure=False), digest_in_subprocess(seed, pure=True)
    assert '"to_level": "hard_stop"' in compiled and '"instruction": "Loop detected' in compiled  # escalates all the way
    assert '"kind": "rule"' in compiled and '"kind": "budget' in compiled  # rules and budgets tripped
    assert compiled == pure


@compiled_here
def test_an_edited_source_is_never_shadowed_by_its_old_extension(tmp_path):
    """An editable install keeps the extensions beside the sources: edit one, and the package runs every core
    module from source (with a warning) until it is rebuilt."""
    copy = tmp_path / "detector"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import detector, detector.core.engine, detector.core.window; from detector import native; "
            "print(native.status()); print(native.is_compiled(detector.core.engine), native.is_compiled(detector.core.window))")

    def run() -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        env.pop(native.PURE_ENV, None)
        return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                              check=True, timeout=120)

    assert run().stdout.splitlines() == ["compiled (mypyc)", "True True"]
    with (copy / "core" / "window.py").open("a") as f:
        f.write("\n# an edit after the build\n")
    edited = run()
    assert edited.stdout.splitlines() == ["pure: window changed since the build", "False False"]
    assert "older than its source (window)" in edited.stderr
