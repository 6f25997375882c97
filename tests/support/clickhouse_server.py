"""A ClickHouse server for the server-store tests when none is configured: loop-detector's own ClickHouse-compatible
HTTP endpoint over a chDB store, with writes enabled (the test-only ``clickhouse_http.allow_writes``), so
clickhouse-connect (``ServerStore``) runs its real HTTP code path against real SQL. With
``LOOP_DETECTOR_CLICKHOUSE_URL`` set, the tests use that server instead."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from detector.api.clickhouse_http import create_clickhouse_http_app
from detector.settings.service_settings import ClickHouseHttpSettings
from detector.storage.transport import ChdbStore
from support.servers import serve_app

PASSWORD = "server-tests-password"


@contextmanager
def local_clickhouse_server(data_dir: Path) -> Iterator[str]:
    """Yields a URL of the form ``http://default:<password>@127.0.0.1:<port>``."""
    store = ChdbStore(data_dir)
    try:
        app = create_clickhouse_http_app(store, PASSWORD, ClickHouseHttpSettings(port=0, allow_writes=True))
        with serve_app(app) as base:
            yield base.replace("http://", f"http://default:{PASSWORD}@")
    finally:
        store.close()
