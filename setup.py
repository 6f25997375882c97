"""Build steps that pyproject.toml cannot declare: the DDL and the Grafana files shipped inside the package, and the
optional compiled core.

**The DDL.** ``clickhouse/`` at the repository root is the single source of the schema (the ClickHouse server's
init scripts use the same files). A wheel carries the whole folder, every file at any depth, as
``detector/storage/clickhouse/``, where :func:`detector.storage.schema.sql_dir` finds it: nothing is listed by
name, so a file added to ``clickhouse/`` ships without a change here. An editable install copies nothing: the
package then reads the checkout's ``clickhouse/`` itself.

**The Grafana files.** ``grafana/``'s dashboards (``dashboards/*.json``) and provisioning (``provisioning/``, and
``provisioning-embedded/datasources/``: its other folders are links to ``provisioning/``'s) ship the same way, as
``detector/grafana/``, where ``loop-detector grafana --out DIR`` finds them (:mod:`detector.cli.grafana_command`).
The dashboards' generator (``grafana/dashboards_src/``) stays out, and what the links hold ships once, as
``provisioning/``'s (an sdist holds it under either path).

**The compiled core** (opt-in: ``LOOP_DETECTOR_COMPILE=1``). The ``detector.core`` package (every module of it:
``detector.native.CORE_MODULES``) is compiled to C extensions with mypyc: a detection cycle then takes about half
the time (``docs/benchmarks.md``). It needs a C compiler and about a minute, so a plain install is pure Python,
which works the same. Asked for, mypyc joins the build requirements (``setup_requires``: setuptools' build backend
hands them to pip), and a build that cannot compile fails rather than quietly installing the slow core. Beside
the extensions it records the SHA-256 of each compiled source, so that an edited source is never shadowed by an
old extension.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CORE_DIR = ROOT / "detector" / "core"
DDL_SOURCE = ROOT / "clickhouse"
DDL_TARGET = ("detector", "storage", "clickhouse")  # inside the package (detector.storage.schema.PACKAGED_DDL)
GRAFANA_SOURCE = ROOT / "grafana"
GRAFANA_TARGET = ("detector", "grafana")  # inside the package (detector.cli.grafana_command.PACKAGED)
GRAFANA_SKIPPED = ("dashboards_src",)  # the generator of dashboards/*.json, not needed to use them
# provisioning-embedded/'s folders that link to provisioning/'s (an sdist holds one copy, under either path)
GRAFANA_EMBEDDED, GRAFANA_LINKED = "provisioning-embedded", ("alerting", "dashboards")
_spec = importlib.util.spec_from_file_location("_native", ROOT / "detector" / "native.py")
native = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(native)  # type: ignore[union-attr]

MYPYC = "mypy[mypyc]==2.4.1"
# Type-check the compiled modules strictly enough for mypyc; what they import is checked, not compiled.
MYPY_ARGS = ["--ignore-missing-imports", "--follow-imports=silent", "--python-version=3.11"]


def _enabled(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


COMPILE = _enabled(native.COMPILE_ENV) and not _enabled(native.PURE_ENV)


class BuildPackage(build_py):
    """The package as setuptools builds it, plus the DDL and the Grafana files (not for an editable install: see the
    docstring)."""

    def run(self) -> None:
        if COMPILE and not self.distribution.ext_modules:
            raise SystemExit(f"loop-detector: {native.COMPILE_ENV}=1, but mypyc is not installed in the build "
                             f"environment ({MYPYC}); unset it to install the pure Python core")
        super().run()
        if not self.editable_mode:
            # a file removed from clickhouse/ or grafana/ must not outlive it in a reused build directory (build/lib)
            for target in (DDL_TARGET, GRAFANA_TARGET):
                shutil.rmtree(Path(self.build_lib).joinpath(*target), ignore_errors=True)
            for source, target in self._data_files():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)

    def _data_files(self) -> list[tuple[Path, Path]]:
        return [*self._ddl_files(), *self._grafana_files()]

    def _ddl_files(self) -> list[tuple[Path, Path]]:
        target_dir = Path(self.build_lib).joinpath(*DDL_TARGET)
        return [(path, target_dir / path.relative_to(DDL_SOURCE)) for path in sorted(DDL_SOURCE.rglob("*"))
                if path.is_file() and not any(part.startswith(".") or part == "__pycache__"
                                              for part in path.relative_to(DDL_SOURCE).parts)]

    def _grafana_files(self) -> list[tuple[Path, Path]]:
        target_dir = Path(self.build_lib).joinpath(*GRAFANA_TARGET)
        files: dict[Path, Path] = {}
        for path in sorted(GRAFANA_SOURCE.rglob("*")):
            parts = path.relative_to(GRAFANA_SOURCE).parts
            if (not path.is_file() or parts[0] in GRAFANA_SKIPPED
                    or any(part.startswith(".") or part == "__pycache__" for part in parts)):
                continue
            if parts[0] == GRAFANA_EMBEDDED and parts[1] in GRAFANA_LINKED:  # provisioning/'s, under a link
                parts = ("provisioning", *parts[1:])
            files.setdefault(target_dir.joinpath(*parts), path)
        return [(source, target) for target, source in sorted(files.items())]

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:  # type: ignore[override]
        outputs = super().get_outputs(include_bytecode)
        if not self.editable_mode:
            outputs.extend(str(target) for _, target in self._data_files())
        return outputs


class BuildCore(build_ext):
    """Builds the compiled core, then writes the manifest of the sources it was built from."""

    def run(self) -> None:
        super().run()
        if not self.extensions:
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
    if not COMPILE:
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:  # the build backend asks for setup_requires first; BuildPackage refuses a build without it
        return []
    sources = [f"detector/core/{name}.py" for name in native.core_modules(CORE_DIR)]
    return mypycify([*MYPY_ARGS, *sources], opt_level="3", group_name=native.GROUP)


if _enabled(native.PURE_ENV) and _enabled(native.COMPILE_ENV):
    print(f"loop-detector: {native.PURE_ENV} is set: not compiling the core", file=sys.stderr)

setup(ext_modules=core_extensions(), cmdclass={"build_py": BuildPackage, "build_ext": BuildCore},
      setup_requires=[MYPYC] if COMPILE else [])
