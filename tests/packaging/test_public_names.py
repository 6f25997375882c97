"""One name per meaning, and ``__all__`` holding only what a module offers: no SQL statement, no word pool.

Two ``Step`` classes (a simulated agent's step, a stored call the baselines read) and two ``Progress`` classes (the
eval's progress bar beside the core's progress evidence) used to share their names, and two ``logs.py`` (OTLP log
records, the process's own log); ``__all__`` listed the detector's SQL and the generated corpus's word lists."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections import defaultdict
from pathlib import Path

import detector
from detector.evaluation import corpus

PACKAGE = Path(detector.__file__).resolve().parent
SQL = re.compile(r"^\s*(SELECT|INSERT|CREATE|ALTER|DELETE|DROP|OPTIMIZE|WITH|SYSTEM)\b", re.I)


def modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(detector.__path__, "detector.")
            if not m.name.endswith("__main__") and not m.name.startswith("detector.sdk")]


def test_every_exported_name_exists_and_none_is_a_sql_statement():
    sql = []
    for name in modules():
        module = importlib.import_module(name)
        for exported in getattr(module, "__all__", []):
            assert hasattr(module, exported), f"{name}.__all__ names {exported}, which it does not define"
            value = getattr(module, exported)
            if isinstance(value, str) and SQL.match(value):
                sql.append(f"{name}.{exported}")
    assert not sql, f"SQL statements in __all__ (keep them module-private): {sql}"


def test_the_corpus_exports_its_families_not_its_word_pools():
    for exported in corpus.__all__:
        value = getattr(corpus, exported)
        if isinstance(value, (list, tuple, frozenset, set)) and value and all(isinstance(v, str) for v in value):
            assert set(value) <= set(corpus.FAMILIES), f"corpus.{exported} is a word pool, not a list of families"


def test_one_class_per_name_for_the_renamed_meanings():
    classes: dict[str, list[str]] = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append(str(path.relative_to(PACKAGE)))
    for name in ("Step", "Progress", "SimulatedStep", "StoredCall", "ProgressBar"):
        assert len(classes.get(name, [])) <= 1, (name, classes[name])


def test_no_two_modules_share_a_file_name():
    seen: dict[str, list[str]] = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            seen[path.name].append(str(path.relative_to(PACKAGE)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
