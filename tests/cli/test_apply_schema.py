"""``loop-detector apply-schema``: the DDL applied once by a deployment's init job (the compose stack's ``schema``
service), to the embedded store or to a ClickHouse server, idempotent, and one line when the store cannot be had."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from detector.storage.schema import ddl_statements
from detector.storage.transport import CLICKHOUSE_URL_ENV, ChdbStore, ServerStore


def apply_schema_cli(tmp_path: Path, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CLICKHOUSE_URL_ENV}
    if url:
        env[CLICKHOUSE_URL_ENV] = url
    return subprocess.run([sys.executable, "-m", "detector", "apply-schema", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def otel_tables(store) -> set[str]:
    return {r["name"] for r in store.rows("SELECT name FROM system.tables WHERE database = 'otel'")}


def test_the_embedded_store_twice(tmp_path):
    for _ in range(2):  # the second run finds everything current
        done = apply_schema_cli(tmp_path, "--data-dir", "data")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"schema applied to the embedded store in data: {len(ddl_statements())} "), \
            done.stdout
    store = ChdbStore(tmp_path / "data")
    try:
        assert {"otel_traces", "genai_calls", "loop_state", "loop_meta"} <= otel_tables(store)
    finally:
        store.close()


@pytest.mark.server
def test_a_clickhouse_server(tmp_path, clickhouse_url):
    done = apply_schema_cli(tmp_path, url=clickhouse_url)
    assert done.returncode == 0, done.stderr
    assert "schema applied to ClickHouse at http://default:***@" in done.stdout
    assert clickhouse_url.split("@")[0].split(":")[-1] not in done.stdout + done.stderr  # never the password
    store = ServerStore(clickhouse_url)
    try:
        assert {"otel_traces", "genai_calls", "loop_state"} <= otel_tables(store)
    finally:
        store.close()


def test_a_server_that_cannot_be_reached_is_one_line(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = apply_schema_cli(tmp_path, url=f"http://loop:pw-never-shown@127.0.0.1:{port}/")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"cannot apply the schema: cannot reach ClickHouse at http://loop:***@127.0.0.1:" \
                                  f"{port}/: Connection refused"
