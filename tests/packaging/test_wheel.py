"""The runtime wheel, as ``pip`` builds it from the checkout: it carries the DDL (every file of ``clickhouse/``, found
from the installed package), the Grafana dashboards and provisioning (``grafana/`` but the dashboards' generator)
and the SDK, not the recorded corpus or its recorder; installed away from the checkout, ``loop-detector serve``
creates its store and answers ``/healthz``, and ``loop-detector grafana --out`` writes the dashboards.

CI also installs the wheel with its dependencies into a clean virtualenv outside the checkout (``tools/ci_checks.py
wheel``); here the wheel is unpacked with ``--no-deps --target`` and runs on this environment's dependencies.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
from support.serve_process import STARTUP_LINE

from detector import native
from detector.storage.schema import SQL_DIR_ENV

ROOT = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in", "detector", "clickhouse", "grafana",
                "sdk/python")
PACKAGED_DDL = "detector/storage/clickhouse/"
PACKAGED_GRAFANA = "detector/grafana/"


def build_env() -> dict[str, str]:
    """A plain build (pure Python, as the README's first command): the compiled core is not what is tested here."""
    return {k: v for k, v in os.environ.items() if k not in (native.COMPILE_ENV, SQL_DIR_ENV)}


def build_wheel(source: Path, out: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
                          env=build_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("loop_detector-*.whl")
    return wheel


def copy_build_inputs(target: Path) -> Path:
    """What a build reads of the checkout (nothing of a previous build directory)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "build", "node_modules")
    for name in BUILD_INPUTS:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore, symlinks=True)  # (grafana/'s linked folders)
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target / name)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(copy_build_inputs(tmp_path_factory.mktemp("source")), tmp_path_factory.mktemp("dist"))


def ddl_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def grafana_files() -> set[str]:
    """What a Grafana user needs of grafana/: the dashboards, the provisioning, the embedded store's data source."""
    grafana = ROOT / "grafana"
    return {*(p.relative_to(grafana).as_posix() for p in grafana.glob("dashboards/*.json")),
            *(p.relative_to(grafana).as_posix() for p in grafana.glob("provisioning/*/*.yaml")),
            *(p.relative_to(grafana).as_posix() for p in grafana.glob("provisioning-embedded/datasources/*.yaml"))}


def test_the_wheel_carries_the_grafana_dashboards_and_provisioning(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    packaged = {n[len(PACKAGED_GRAFANA):] for n in names if n.startswith(PACKAGED_GRAFANA)}
    assert packaged == grafana_files()
    assert len([n for n in packaged if n.startswith("dashboards/")]) >= 4
    assert not [n for n in packaged if "dashboards_src" in n]


def test_a_wheel_built_from_the_sdist_carries_the_same_grafana_files(tmp_path):
    """The sdist keeps one copy of the folders provisioning-embedded/ links to provisioning/ (under either path):
    the wheel built from it ships them as provisioning/'s all the same."""
    source = copy_build_inputs(tmp_path / "source")
    done = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "sdist")], cwd=source,
                          env=build_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (sdist,) = (tmp_path / "sdist").glob("loop*-*.tar.gz")
    with zipfile.ZipFile(build_wheel(sdist, tmp_path / "dist")) as zf:
        packaged = {n[len(PACKAGED_GRAFANA):] for n in zf.namelist() if n.startswith(PACKAGED_GRAFANA)}
    assert packaged == grafana_files()


def test_the_wheel_carries_the_ddl_and_the_sdk_not_the_corpus(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        size = sum(info.file_size for info in zf.infolist())
    packaged = {n[len(PACKAGED_DDL):] for n in names if n.startswith(PACKAGED_DDL)}
    assert packaged == ddl_files(ROOT / "clickhouse")
    assert {"loop_detector_sdk/__init__.py", "detector/cli/main.py", "detector/py.typed"} <= names
    assert not [n for n in names if re.search(r"recording|recorder|/otlp/.*\.json$", n)]
    assert size < 5 * 2**20, f"{size} bytes unpacked: something large is in the runtime wheel"


def test_a_file_added_to_the_ddl_folder_ships_without_a_change_to_the_build(tmp_path):
    source = copy_build_inputs(tmp_path / "source")
    (source / "clickhouse" / "templates").mkdir()
    (source / "clickhouse" / "templates" / "new_view.sql").write_text("SELECT 1\n")
    with zipfile.ZipFile(build_wheel(source, tmp_path / "dist")) as zf:
        assert f"{PACKAGED_DDL}templates/new_view.sql" in zf.namelist()


def test_the_installed_wheel_finds_its_ddl_and_serves(wheel, tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    away = tmp_path / "elsewhere"  # no checkout here: the package must find everything inside itself
    away.mkdir()
    env = {**build_env(), "PYTHONPATH": str(site)}
    where = subprocess.run([sys.executable, "-P", "-c", "import detector; from detector.storage.schema import sql_dir; "
                            "print(detector.__file__); print(sql_dir())"], cwd=away, env=env, capture_output=True,
                           text=True, timeout=120)
    assert where.returncode == 0, where.stderr[-3000:]
    package, ddl = where.stdout.split()
    assert Path(package).is_relative_to(site) and Path(ddl) == site / "detector" / "storage" / "clickhouse"

    written = subprocess.run([sys.executable, "-P", "-m", "detector", "grafana", "--out", "dashboards-here"], cwd=away,
                             env=env, capture_output=True, text=True, timeout=120)
    assert written.returncode == 0, written.stderr[-3000:]
    out = away / "dashboards-here"
    assert {p.name for p in (out / "dashboards").glob("*.json")} == {
        p.name for p in (ROOT / "grafana" / "dashboards").glob("*.json")}
    assert (out / "provisioning" / "datasources" / "clickhouse.yaml").read_bytes() == (
        ROOT / "grafana" / "provisioning-embedded" / "datasources" / "clickhouse.yaml").read_bytes()

    proc = subprocess.Popen([sys.executable, "-P", "-m", "detector", "serve", "--data-dir", str(tmp_path / "data"),
                             "--otlp-port", "0", "--api-port", "0", "--otlp-grpc-port", "0"],
                            cwd=away, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if match := STARTUP_LINE.search(line):
                assert httpx.get(match.group(2) + "/healthz", timeout=10).json()["status"] == "ok"
                break
        else:
            pytest.fail("serve from the wheel did not start:\n" + "".join(lines[-20:]))
    finally:
        proc.terminate()
        proc.wait(60)
    assert proc.returncode == 0, "".join(lines[-20:])
