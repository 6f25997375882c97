"""The store transport: parameters round-trip exactly, the schema applies idempotently."""

from __future__ import annotations

import pytest

from detector.store import ChdbStore, StoreError, apply_schema, ddl_statements, insert_rows

AWKWARD = ["plain", "a\\b", "ends with \\", "tab\there", "new\nline", "it's", "[x,'y']", "{x:String}", "ünï😀"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ChdbStore(tmp_path_factory.mktemp("store"))
    apply_schema(s)
    yield s
    s.close()


@pytest.mark.parametrize("value", AWKWARD)
def test_string_and_array_parameters_round_trip(store, value):
    assert store.rows("SELECT {v:String} AS v", {"v": value})[0]["v"] == value
    assert store.rows("SELECT {v:Array(String)} AS v", {"v": [value, "x"]})[0]["v"] == [value, "x"]


def test_schema_is_idempotent_and_complete(store):
    assert apply_schema(store) == len(ddl_statements())
    tables = {r["name"] for r in store.rows("SELECT name FROM system.tables WHERE database = 'otel'")}
    assert {"otel_traces", "genai_calls", "genai_calls_mv", "loop_state", "loop_scores", "loop_events",
            "loop_decisions", "loop_manual", "loop_meta"} <= tables


def test_inserted_rows_are_read_back_and_errors_are_clear(store):
    insert_rows(store, "otel.loop_meta", [{"key": "k\\1", "value": "v", "version": 1}])
    assert store.rows("SELECT value FROM otel.loop_meta FINAL WHERE key = {k:String}", {"k": "k\\1"}) == [
        {"value": "v"}]
    with pytest.raises(StoreError, match="UNKNOWN_TABLE|does not exist"):
        store.rows("SELECT * FROM otel.no_such_table")
