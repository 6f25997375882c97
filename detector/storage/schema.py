"""The DDL: where it lives, its statements in order, and applying it to a store (single node or cluster).

The single source of truth is ``clickhouse/0*.sql``; the cluster variant is derived from it
(:mod:`detector.storage.cluster`) and committed as ``clickhouse/cluster/schema.sql`` for init scripts
(``python -m detector.storage.schema`` regenerates it).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from detector.storage.cluster import DEFAULT_CLUSTER, cluster_statements
from detector.storage.transport import Store, StoreError, insert_rows

__all__ = ["SQL_DIR_ENV", "VIEW_KEY_PREFIX", "apply_schema", "committed_cluster_schema", "ddl_statements",
           "render_cluster_schema", "split_statements", "sql_dir", "view_statements"]

SQL_DIR_ENV = "LOOP_DETECTOR_SQL_DIR"


# Where an installed package carries the repository's clickhouse/ (setup.py copies the whole folder into the wheel)
PACKAGED_DDL = Path(__file__).resolve().parent / "clickhouse"
# The repository's clickhouse/, when the package runs from its checkout (an editable install reads the source)
CHECKOUT_DDL = Path(__file__).resolve().parents[2] / "clickhouse"


def sql_dir() -> Path:
    """Where the DDL lives: ``$LOOP_DETECTOR_SQL_DIR``, else the copy an installed package carries, else the
    checkout's ``clickhouse/``. A directory counts when it holds the numbered DDL files."""
    env = os.environ.get(SQL_DIR_ENV)
    if env:
        return Path(env)
    for candidate in (PACKAGED_DDL, CHECKOUT_DDL):
        if any(candidate.glob("[0-9][0-9][0-9]_*.sql")):
            return candidate
    raise StoreError(f"the DDL (clickhouse/*.sql) is in neither {PACKAGED_DDL} nor {CHECKOUT_DDL}: reinstall the "
                     f"package from a wheel or a checkout, or point {SQL_DIR_ENV} at a copy of clickhouse/")


def split_statements(text: str) -> list[str]:
    """Split a DDL file on the semicolons that end statements (our DDL has none inside strings)."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def ddl_statements(directory: Path | None = None) -> list[str]:
    """Every statement of the single-node DDL, in file order."""
    directory = directory or sql_dir()
    statements: list[str] = []
    for path in sorted(directory.glob("[0-9][0-9][0-9]_*.sql")):
        statements.extend(split_statements(path.read_text()))
    return statements


VIEW_KEY_PREFIX = "schema:view:"  # otel.loop_meta keys: a hash of each materialized view's statement
_VIEW = re.compile(r"^CREATE MATERIALIZED VIEW IF NOT EXISTS otel\.(\w+) ")
VIEW_EXISTS = "SELECT count() AS n FROM system.tables WHERE database = 'otel' AND name = {name:String}"
VIEW_HASH = "SELECT value FROM otel.loop_meta FINAL WHERE key = {key:String}"


def view_statements(statements: list[str]) -> dict[str, str]:
    """The materialized views of a DDL, by name: their single-node statement."""
    return {m.group(1): s for s in statements if (m := _VIEW.match(s))}


def _digest(statement: str) -> str:
    return hashlib.sha256(statement.encode()).hexdigest()[:16]


def apply_schema(store: Store, directory: Path | None = None, cluster: str | None = None) -> int:
    """Create every database, table and view that does not exist yet, add the columns a newer DDL brings to the
    tables of an older data directory (``ALTER TABLE ... ADD COLUMN IF NOT EXISTS``), and replace a materialized
    view whose statement changed since it was created (a hash of it is kept in ``otel.loop_meta``). Idempotent.
    With ``cluster``, the replicated + distributed variant (see :mod:`detector.storage.cluster`)."""
    statements = ddl_statements(directory)
    views = view_statements(statements)
    existed = {name for name in views if store.rows(VIEW_EXISTS, {"name": name})[0]["n"]}
    rendered = cluster_statements(statements, cluster) if cluster else statements
    for statement in rendered:
        store.command(statement)
    for name, statement in views.items():
        _keep_view_current(store, name, statement, name in existed, cluster)
    return len(rendered)


def _keep_view_current(store: Store, name: str, statement: str, existed: bool, cluster: str | None) -> None:
    """Replace view ``name`` when it was created from another statement. A view this run created is current; one
    that existed without a recorded hash predates the record, and is replaced once. (Inserts that arrive between the
    drop and the create are not seen by the view: the embedded service applies the schema before it listens.)"""
    key = VIEW_KEY_PREFIX + name
    digest = _digest(statement)
    found = store.rows(VIEW_HASH, {"key": key})
    if found and found[0]["value"] == digest:
        return
    if existed:
        replace = [f"DROP VIEW IF EXISTS otel.{name}", statement]
        for sql in cluster_statements(replace, cluster) if cluster else replace:
            store.command(sql)
    insert_rows(store, "otel.loop_meta", [{"key": key, "value": digest, "version": time.time_ns() // 1000}])



def render_cluster_schema(cluster: str = DEFAULT_CLUSTER) -> str:
    """The cluster variant of the whole DDL, as ``clickhouse/cluster/schema.sql`` holds it."""
    header = ("-- GENERATED by detector/storage/schema.py from clickhouse/0*.sql: do not edit by hand.\n"
              f"-- Cluster variant (cluster '{cluster}'): Replicated*MergeTree local tables + Distributed tables.\n")
    return header + "".join(f"\n{s};\n" for s in cluster_statements(ddl_statements(), cluster))


def committed_cluster_schema() -> Path:
    """Where the generated cluster DDL is committed."""
    return sql_dir() / "cluster" / "schema.sql"


if __name__ == "__main__":
    committed_cluster_schema().parent.mkdir(exist_ok=True)
    committed_cluster_schema().write_text(render_cluster_schema())
    print(f"wrote {committed_cluster_schema()}")
