"""The detector's Arrow writes (detector.storage.tables) store exactly what the JSONEachRow rows they replace stored:
per-call scores, events (with their signals map), decisions (with and without an expiry) and scope states."""

from __future__ import annotations

import pytest
from support.engines import make_engine

from detector.core.decisions import Decision
from detector.core.events import event_row
from detector.core.score_rows import ScoreColumns, ScoreRow, score_dict
from detector.core.signal_values import SignalValues
from detector.settings.config import AppConfig
from detector.settings.loop_settings import Rule
from detector.storage.schema import apply_schema
from detector.storage.tables import decision_table, event_table, score_table, state_table
from detector.storage.transport import ChdbStore, insert_rows

AWKWARD = ["plain", "it's", "a\\b", "tab\there", "ünï😀", ""]
T0 = 1_780_000_000 * 10**9


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ChdbStore(tmp_path_factory.mktemp("tables"))
    apply_schema(s)
    yield s
    s.close()


def read_back(store, table: str, order: str) -> list[dict]:
    written_at = "updated_at" if table in ("otel.loop_decisions", "otel.loop_state") else "inserted_at"
    rows = store.rows(f"SELECT * EXCEPT ({written_at}) FROM {table} ORDER BY {order}")
    store.command(f"TRUNCATE TABLE {table}")
    return rows


def score_rows() -> list[ScoreRow]:
    rows = []
    for i, text in enumerate(AWKWARD):
        values = SignalValues(i / 7, 0.0, 1.0, 0.5, 1 / 3, 0.123456789, 2.5e-7)
        rows.append(ScoreRow(T0 + i * 1_000_000_007, "session" if i % 2 else "trace", f"id-{text}", text, f"t{i}", f"s{i}",
                     text, text, values, 0.1 + i / 10, 0.3 + i / 100, "warn", "content_similarity", 2**40 + i, i / 3))
    return rows


def test_scores_as_arrow_store_what_json_rows_stored(store):
    rows = score_rows()
    insert_rows(store, "otel.loop_scores", [score_dict(r) for r in rows])
    from_json = read_back(store, "otel.loop_scores", "ts, scope_id")
    store.insert_arrow("otel.loop_scores", score_table(ScoreColumns.of(rows)))
    assert read_back(store, "otel.loop_scores", "ts, scope_id") == from_json
    assert len(from_json) == len(rows)


def test_events_as_arrow_store_what_json_rows_stored(store):
    events = [event_row(ts_ns=T0 + i * 999_999_999, kind="escalation" if i % 2 else "rule", scope="session",
                        scope_id=text, action="warn", detector="confidence", session_id=text, rule_name=text,
                        confidence=i / 9, signals={"content_similarity": i / 7, "cost_velocity": 1.0},
                        dominant_signal="content_similarity", consecutive=i, message=text)
              for i, text in enumerate(AWKWARD)]
    insert_rows(store, "otel.loop_events", events)
    from_json = read_back(store, "otel.loop_events", "ts, scope_id")
    store.insert_arrow("otel.loop_events", event_table(events))
    assert read_back(store, "otel.loop_events", "ts, scope_id") == from_json
    assert from_json[1]["signals"]["content_similarity"] == pytest.approx(1 / 7)


def test_decisions_as_arrow_store_what_json_rows_stored(store):
    decisions = [Decision(scope="trace" if i % 2 else "session", scope_id=text, action="block" if i % 2 else "inject",
                          level="inject", confidence=i / 11, dominant_signal="error_cycling", detector=text, reason=text,
                          rule_name=text, delay_seconds=i / 2, instruction=text,
                          expires_at_us=0 if i % 3 else 1_780_000_000_123_456 + i)
                 for i, text in enumerate(AWKWARD)]
    insert_rows(store, "otel.loop_decisions", [d.to_row(42) for d in decisions])
    from_json = read_back(store, "otel.loop_decisions", "scope, scope_id")
    store.insert_arrow("otel.loop_decisions", decision_table(decisions, 42))
    assert read_back(store, "otel.loop_decisions", "scope, scope_id") == from_json
    assert len(from_json) == len(decisions)


def test_states_as_arrow_store_what_json_rows_stored(store):
    from support.calls import looping

    # trips: state JSON with rules
    engine = make_engine(AppConfig(rules=[Rule(name="cap", detector="trace_cap", params={"threshold": 3})]))
    for i, text in enumerate(AWKWARD):
        engine.process(looping(3 + i, session=f"s-{text}", trace=f"t-{text}", key=text))
    states = list(engine.states.values())
    assert any(st.level != "none" for st in states) and any(st.trips for st in states)
    for deleted in (False, True):
        rows = [{**st.to_row(7), "deleted": int(deleted)} for st in states]
        insert_rows(store, "otel.loop_state", rows)
        from_json = read_back(store, "otel.loop_state", "scope, scope_id")
        store.insert_arrow("otel.loop_state", state_table(states, 7, deleted=deleted))
        assert read_back(store, "otel.loop_state", "scope, scope_id") == from_json
        assert len(from_json) == len(states) and {r["deleted"] for r in from_json} == {int(deleted)}
