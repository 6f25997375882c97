"""The server store (clickhouse-connect over ClickHouse's HTTP interface), for real: against
$LOOP_DETECTOR_CLICKHOUSE_URL when set, else against loop-detector's own ClickHouse-compatible endpoint over chDB
with writes enabled (tests/conftest.py ``clickhouse_url``). The same statements as on chDB: DDL, parameters,
JSONEachRow and Arrow inserts, Arrow reads, retention, and a whole service on it."""

from __future__ import annotations

import uuid

import httpx
import pytest
from support.agents import run_agents

from detector.cli.demo import looping_step
from detector.service.process import running_service
from detector.settings.config import parse_config
from detector.settings.service_settings import RetentionSettings
from detector.storage.retention import apply_retention, current_ttl
from detector.storage.schema import apply_schema
from detector.storage.transport import ServerStore, StoreError, insert_rows

pytestmark = pytest.mark.server

AWKWARD = ["plain", "a\\b", "ends with \\", "tab\there", "new\nline", "it's", "[x,'y']", "{x:String}", "ünï😀"]


@pytest.fixture(scope="module")
def store(clickhouse_url):
    s = ServerStore(clickhouse_url)
    apply_schema(s)
    yield s
    s.close()


@pytest.mark.parametrize("value", AWKWARD)
def test_parameters_round_trip(store, value):
    assert store.rows("SELECT {v:String} AS v", {"v": value})[0]["v"] == value
    assert store.rows("SELECT {v:Array(String)} AS v", {"v": [value, "x"]})[0]["v"] == [value, "x"]


def test_json_and_arrow_inserts_and_arrow_reads(store):
    import pyarrow as pa

    key = f"srv-{uuid.uuid4().hex[:8]}"
    insert_rows(store, "otel.loop_meta", [{"key": key, "value": "json", "version": 1}])
    store.insert_arrow("otel.loop_meta", pa.table({"key": [key], "value": ["arrow"],
                                                   "version": pa.array([2], pa.uint64())}))
    assert store.rows("SELECT value FROM otel.loop_meta FINAL WHERE key = {k:String}", {"k": key}) == [
        {"value": "arrow"}]
    table = store.arrow("SELECT key, value, version FROM otel.loop_meta WHERE key = {k:String} ORDER BY version",
                        {"k": key})
    assert table.to_pydict() == {"key": [key, key], "value": ["json", "arrow"], "version": [1, 2]}


def test_errors_are_store_errors_with_clickhouses_code(store):
    with pytest.raises(StoreError, match="UNKNOWN_TABLE|60"):
        store.rows("SELECT * FROM otel.no_such_table")
    with pytest.raises(StoreError, match="SYNTAX_ERROR|62"):
        store.command("SELEC 1")


def test_retention_on_the_server(store):
    apply_retention(store, RetentionSettings(spans="3d"))
    ttl = {r["name"]: current_ttl(r["engine_full"]) for r in store.rows(
        "SELECT name, engine_full FROM system.tables WHERE database = 'otel'")}
    assert ttl["otel_traces"] == "toDateTime(Timestamp) + toIntervalDay(3)"
    assert apply_retention(store, RetentionSettings(spans="3d")) == []
    apply_retention(store, RetentionSettings())


def test_a_service_on_the_server_store_ingests_detects_and_decides(clickhouse_url, tmp_path):
    """OTLP in through the receiver (Arrow inserts over HTTP), the detector's windowed SQL and writes, the API's
    decision: every statement through clickhouse-connect."""
    config = parse_config({"store": {"url": clickhouse_url},
                           "detector": {"interval_seconds": 0.1, "checkpoint_seconds": 0}})
    session = f"srv-{uuid.uuid4().hex[:8]}"
    with running_service(config, tmp_path) as (_service, eps):
        timeline = run_agents(eps.otlp, eps.api, {session: looping_step}, 10)
        decision = httpx.get(f"{eps.api}/v1/decision", params={"session_id": session}).json()
    assert timeline[session][-1]["level"] != "none"
    assert decision["action"] != "allow"


def test_an_insert_retried_with_its_deduplication_token_is_stored_once(store):
    """The detector retries a cycle's writes with the same insert_deduplication_token (an insert whose answer was
    lost may have reached the server): through clickhouse-connect, the setting reaches the store."""
    import pyarrow as pa

    table = f"otel.dedup_{uuid.uuid4().hex[:8]}"
    store.command(f"CREATE TABLE {table} (x UInt32) ENGINE = MergeTree ORDER BY x "
                  "SETTINGS non_replicated_deduplication_window = 100")
    rows = pa.table({"x": pa.array([1, 2, 3], pa.uint32())})
    for _ in range(2):
        store.insert_arrow(table, rows, {"insert_deduplication_token": "scores:0/1:10:20"})
    store.insert_arrow(table, rows, {"insert_deduplication_token": "scores:0/1:20:30"})
    assert store.rows(f"SELECT count() AS n FROM {table}") == [{"n": 6}]
    store.command(f"DROP TABLE {table}")
