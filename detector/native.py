"""The compiled detection core: which modules ``setup.py`` compiles with mypyc, and whether they are in use.

A detection cycle scores every new call in pure Python, call by call (see :mod:`detector.core.window`). At 10,000
new calls a cycle, interpreting that code was most of the cycle's time, so the install compiles the
:mod:`detector.core` package (pure, no I/O: every module of it) to C extensions with `mypyc <https://mypyc.readthedocs.io>`_: the same source, type-checked, run
about twice as fast. Nothing else changes: every module stays plain, readable Python, and the Python source
is always there to fall back to. Compiling is opt-in (``LOOP_DETECTOR_COMPILE=1 pip install ...``: a C compiler and
about a minute), so that a first install is quick; the container image and CI compile.

The compiled core is used only while it matches the source it was built from. ``setup.py`` records the
SHA-256 of each compiled source beside the extensions (``_native_manifest.json``). At import, before any core
module loads, :func:`install` compares them; if a source was edited since the build (an editable install
after a change), or ``LOOP_DETECTOR_PURE_PYTHON=1`` is set, it puts a finder first on ``sys.meta_path`` that
loads every core module from its ``.py`` file instead. All of them or none: compiled modules call each
other directly, so mixing an edited source with the old extensions would run the old code.

Stdlib only: the package imports it before anything else (the SDK included).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

PACKAGE = "detector.core"  # compiled whole: every module of the package (what it imports is not compiled)
GROUP = "detector.core._compiled"  # the extensions' shared library: detector/core/_compiled__mypyc.*.so
MANIFEST = "_native_manifest.json"
PURE_ENV = "LOOP_DETECTOR_PURE_PYTHON"  # run the Python source even where the compiled core is installed
COMPILE_ENV = "LOOP_DETECTOR_COMPILE"  # at install: compile the core (setup.py); a plain install is pure Python

_PACKAGE_DIR = Path(__file__).resolve().parent / "core"


def core_modules(package_dir: Path = _PACKAGE_DIR) -> tuple[str, ...]:
    """The core package's modules (``__init__`` aside), by name, sorted."""
    return tuple(sorted(p.stem for p in package_dir.glob("*.py") if p.stem != "__init__"))


CORE_MODULES: tuple[str, ...] = core_modules()
_NOT_COMPILED = f"pure: not compiled ({COMPILE_ENV}=1 at install compiles it)"
_status = _NOT_COMPILED


def source_digests(package_dir: Path) -> dict[str, str]:
    """SHA-256 of each core module's source (what ``setup.py`` records at build time)."""
    return {name: hashlib.sha256((package_dir / f"{name}.py").read_bytes()).hexdigest()
            for name in core_modules(package_dir)}


def _compiled(package_dir: Path) -> bool:
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    return any((package_dir / f"engine{suffix}").exists() for suffix in suffixes)


def _stale(package_dir: Path) -> list[str]:
    """Core modules whose source differs from the one their extension was built from (all, without a manifest)."""
    try:
        built = json.loads((package_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return list(core_modules(package_dir))
    return [name for name, digest in source_digests(package_dir).items() if built.get(name) != digest]


class _SourceFinder:
    """Finds the core modules as ``.py`` sources, ahead of the compiled extensions beside them."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir
        self.names = {f"{PACKAGE}.{name}" for name in core_modules(package_dir)}

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        return importlib.util.spec_from_file_location(fullname, self.package_dir / f"{fullname.rpartition('.')[2]}.py")


def install(package_dir: Path = _PACKAGE_DIR) -> str:
    """Decide, once per process, whether the core runs compiled; returns (and keeps) the reason."""
    global _status
    if not _compiled(package_dir):
        _status = _NOT_COMPILED
        return _status
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        _status = f"pure: {PURE_ENV} is set"
    else:
        stale = _stale(package_dir)
        if not stale:
            _status = "compiled (mypyc)"
            return _status
        _status = f"pure: {', '.join(stale)} changed since the build"
        warnings.warn(f"loop-detector: the compiled detection core is older than its source ({', '.join(stale)});"
                      " running the Python source (rebuild: LOOP_DETECTOR_COMPILE=1 pip install -e .)", RuntimeWarning, stacklevel=2)
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder(package_dir))
    return _status


def status() -> str:
    """``"compiled (mypyc)"``, or ``"pure: <why>"``: how this process runs the detection core."""
    return _status


def is_compiled(module: ModuleType) -> bool:
    """Whether a loaded module is a compiled extension (for tests and the benchmark)."""
    return not str(getattr(module, "__file__", "")).endswith(".py")
