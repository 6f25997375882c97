"""Shared fixtures."""

from __future__ import annotations

import os

import pytest
from support.clickhouse_server import local_clickhouse_server

from detector.settings.config import AppConfig
from detector.storage.schema import apply_schema
from detector.storage.transport import CLICKHOUSE_URL_ENV, ChdbStore


@pytest.fixture()
def fast_config() -> AppConfig:
    """Defaults, with a detector fast enough for tests (0.1 s cycles, state saved every cycle)."""
    config = AppConfig()
    config.detector.interval_seconds = 0.1
    config.detector.checkpoint_seconds = 0
    return config


@pytest.fixture()
def store(tmp_path):
    """A fresh embedded store with the schema (a module that needs another store defines its own ``store``)."""
    s = ChdbStore(tmp_path)
    apply_schema(s)
    yield s
    s.close()


@pytest.fixture(scope="module")
def clickhouse_url(tmp_path_factory):
    """A ClickHouse server's URL for the server-store tests: $LOOP_DETECTOR_CLICKHOUSE_URL, else loop-detector's own
    ClickHouse-compatible endpoint over a chDB store with writes enabled (tests/support/clickhouse_server.py).
    Per module: chDB holds one data directory per process at a time, and other modules open their own."""
    url = os.environ.get(CLICKHOUSE_URL_ENV)
    if url:
        yield url
        return
    with local_clickhouse_server(tmp_path_factory.mktemp("clickhouse-server")) as url:
        yield url
