"""Build step: compile the detection core with mypyc (see ``detector/native.py``); metadata is in pyproject.toml.

The ``detector.core`` package (every module of it: ``detector.native.CORE_MODULES``) is compiled to C extensions when mypyc and a C compiler
are available. When they are not, or ``LOOP_DETECTOR_PURE_PYTHON=1`` is set, the package installs as plain
Python, which works the same, only slower; the build says so. Beside the extensions it records the SHA-256 of
each compiled source, so that an edited source is never shadowed by an old extension.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
CORE_DIR = ROOT / "detector" / "core"
_spec = importlib.util.spec_from_file_location("_native", ROOT / "detector" / "native.py")
native = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(native)  # type: ignore[union-attr]

# Type-check the compiled modules strictly enough for mypyc; what they import is checked, not compiled.
MYPY_ARGS = ["--ignore-missing-imports", "--follow-imports=silent", "--python-version=3.11"]


def warn(message: str) -> None:
    print(f"\n*** loop-detector: {message}; installing the detection core as plain Python (slower)\n",
          file=sys.stderr)


class BuildCore(build_ext):
    """Builds the extensions, falling back to pure Python on a compiler error, then writes the manifest."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, missing headers: the pure package still works
            warn(f"compiling the core failed ({exc})")
            self.extensions = []
            return
        target = CORE_DIR if self.inplace else Path(self.build_lib) / "detector" / "core"
        target.mkdir(parents=True, exist_ok=True)
        (target / native.MANIFEST).write_text(json.dumps(native.source_digests(CORE_DIR), indent=1) + "\n")

    def get_outputs(self) -> list[str]:
        outputs = super().get_outputs()
        if self.extensions and not self.inplace:
            outputs.append(str(Path(self.build_lib) / "detector" / "core" / native.MANIFEST))
        return outputs


def core_extensions() -> list:
    if os.environ.get(native.PURE_ENV, "") not in ("", "0"):
        print(f"loop-detector: {native.PURE_ENV} is set: not compiling the core", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        warn("mypyc is not installed")
        return []
    sources = [f"detector/core/{name}.py" for name in native.core_modules(CORE_DIR)]
    try:
        return mypycify([*MYPY_ARGS, *sources], opt_level="3", group_name=native.GROUP)
    except (SystemExit, Exception) as exc:  # mypyc exits on a type error
        warn(f"mypyc could not compile the core ({exc})")
        return []


setup(ext_modules=core_extensions(), cmdclass={"build_ext": BuildCore})
