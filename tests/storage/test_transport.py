"""The store transport: parameters round-trip exactly, the schema applies idempotently."""

from __future__ import annotations

import pytest

from detector.storage.schema import apply_schema, ddl_statements
from detector.storage.transport import ChdbStore, StoreError, insert_rows

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
    assert {"otel_traces", "genai_spans", "genai_spans_mv", "genai_calls", "loop_state", "loop_scores", "loop_events",
            "loop_decisions", "loop_manual", "loop_meta"} <= tables
    assert "genai_calls_mv" not in tables  # the previous releases' view: its work is the detection cycle's now


def test_inserted_rows_are_read_back_and_errors_are_clear(store):
    insert_rows(store, "otel.loop_meta", [{"key": "k\\1", "value": "v", "version": 1}])
    assert store.rows("SELECT value FROM otel.loop_meta FINAL WHERE key = {k:String}", {"k": "k\\1"}) == [
        {"value": "v"}]
    with pytest.raises(StoreError, match="UNKNOWN_TABLE|does not exist"):
        store.rows("SELECT * FROM otel.no_such_table")


def test_from_columns_passes_every_field_to_its_own_parameter():
    """Call.from_columns spells out all of Call's fields (a direct call when compiled): each gets a value of its
    own here, so a field missed or passed in another's place fails."""
    from dataclasses import fields

    from detector.core.models import Call

    values: dict = {}
    for n, f in enumerate(fields(Call)):
        kind = f.type if isinstance(f.type, str) else f.type.__name__  # a class once compiled
        if kind == "bool":
            values[f.name] = True
        elif kind == "float":
            values[f.name] = n + 0.5
        elif kind == "int":
            values[f.name] = 2**63 + n
        elif kind.startswith("tuple"):
            values[f.name] = (n, n + 1) if "fps" in f.name else (f.name, "x")
        else:
            assert kind == "str", f.type
            values[f.name] = f"{f.name}-value"
    expected = Call(**values)
    columns = {name: [list(v) if isinstance(v, tuple) else int(v) if isinstance(v, bool) else v]
               for name, v in values.items()}
    assert Call.from_columns(columns) == [expected]


def test_arrow_reads_build_the_same_calls_as_json_rows(store):
    """The detector reads new calls as Arrow columns (Call.from_columns); they must equal the calls built from
    the JSON rows (Call.from_row), 64-bit fingerprints, arrays, flags and awkward strings included."""
    from detector.core.models import Call
    from detector.storage.normalization import SELECT_NEW_CALLS

    rows = []
    for i, text in enumerate(AWKWARD):
        rows.append({
            "ts": f"2026-01-02 03:04:{i:02d}.123456789", "end_ts": f"2026-01-02 03:05:{i:02d}.000000001",
            "trace_id": f"t{i}", "span_id": f"s{i}", "session_id": text, "operation": "chat" if i % 2 else "execute_tool",
            "call_kind": "llm" if i % 2 else "tool", "model": text, "tool_name": text, "input_tokens": 2**40 + i,
            "output_tokens": i, "cost_usd": i / 7, "is_error": i % 3 == 0, "error_type": text,
            "finish_reasons": [text, "stop"] if i % 2 else [], "has_content": i % 2 == 1,
            "request_fp": 2**64 - 1 - i, "turn_fp": 2**63 + i, "input_simhash": 2**32 - 1, "output_simhash": i,
            "tool_fp": 2**64 - 2, "out_tool_names": [text] * (i % 3), "out_tool_fps": [2**64 - 1] * (i % 3),
            "response_fp": 7, "error_fp": 2**62})
    insert_rows(store, "otel.genai_calls", rows)
    params = {"watermark": 0, "cutoff": 2**62, "shards": 1, "shard": 0}
    from_json = sorted((Call.from_row(r) for r in store.rows(SELECT_NEW_CALLS, params)), key=lambda c: c.span_id)
    from_arrow = sorted(Call.from_columns(store.arrow(SELECT_NEW_CALLS, params).to_pydict()), key=lambda c: c.span_id)
    assert len(from_arrow) == len(AWKWARD)
    assert from_arrow == from_json
    call = next(c for c in from_arrow if c.span_id == "s1")
    assert (call.is_error, call.has_content, call.finish_reasons, call.request_fp) == (
        False, True, (AWKWARD[1], "stop"), 2**64 - 2)


def test_ns_to_ch_pads_the_nanoseconds_to_nine_digits():
    from detector.core.models import ns_to_ch

    base = 1_700_000_000 * 10**9  # 2023-11-14 22:13:20 UTC
    assert ns_to_ch(base) == "2023-11-14 22:13:20.000000000"
    assert ns_to_ch(base + 123) == "2023-11-14 22:13:20.000000123"
    assert ns_to_ch(base + 999_999_999) == "2023-11-14 22:13:20.999999999"
    assert ns_to_ch(base + 10**9 + 5 * 10**8) == "2023-11-14 22:13:21.500000000"
