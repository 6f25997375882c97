"""Grafana: the dashboards as code, their SQL, the alert rules and the provisioning files.

No Grafana runs here. Instead every panel query and every alert query goes through what Grafana and
the ClickHouse plugin would do to it (tests/support/grafana_macros.py: template variables, then the plugin's
macros) and runs on chDB against a store holding GenAI spans and detector output, and the result must
have the columns its panel type needs.
"""

from __future__ import annotations

import importlib.util
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from support.grafana_macros import (
    MacroError,
    QueryContext,
    expand_macros,
    interpolate,
    leftover_macros,
    replace_variables,
)
from support.grafana_seed import (
    DASHBOARD_CTX,
    LOOP_FEATURE,
    LOOP_KEY,
    LOOP_LEVELS,
    LOOP_SESSION,
    OK_SESSION,
    T0,
    alert_ctx,
    alerting,
    all_panels,
    dashboards,
    datasource_uids,
    panel_targets,
    rules,
    seed,
)

from detector.core.escalation import LEVELS
from detector.settings.loop_settings import Thresholds
from detector.settings.rule_params import VelocityParams
from detector.settings.vocabulary import SIGNAL_NAMES
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "grafana"
DASHBOARD_DIR = GRAFANA / "dashboards"
PROVISIONING = GRAFANA / "provisioning"
BUILD_SCRIPT = GRAFANA / "dashboards_src" / "build.py"

def load_builder():
    spec = importlib.util.spec_from_file_location("loop_dashboards_build", BUILD_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = load_builder()


# --- dashboards as code ------------------------------------------------------------------------------

def test_committed_dashboards_are_what_the_builder_generates():
    generated = build.build_all()
    committed = {p.name for p in DASHBOARD_DIR.glob("*.json")}
    assert committed == set(generated), "grafana/dashboards/ holds files the builder does not make (or misses some)"
    for name, text in generated.items():
        assert (DASHBOARD_DIR / name).read_bytes() == text.encode("utf-8"), (
            f"{name} is stale: run python grafana/dashboards_src/build.py")


def test_generation_is_deterministic(tmp_path):
    assert build.build_all() == build.build_all()
    assert build.main(["--out", str(tmp_path)]) == 0
    assert build.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "loop-overview.json").write_text("{}")
    assert build.main(["--check", "--out", str(tmp_path)]) == 1


def test_builder_constants_match_the_detector():
    assert build.LEVELS == LEVELS
    assert build.SIGNALS == SIGNAL_NAMES
    t = Thresholds()
    expected = {"warn": t.warn_confidence, "throttle": t.throttle_confidence, "inject": t.inject_confidence,
                "hard_stop": t.hardstop_confidence}
    assert expected == build.DEFAULT_THRESHOLDS
    assert VelocityParams().min_baseline_tpm == build.VELOCITY_MIN_BASELINE_TPM


def test_dashboards_have_the_expected_panels():
    boards = dashboards()
    assert {b["uid"] for b in boards.values()} == {"loop-overview", "loop-session", "loop-cost-velocity",
                                                     "loop-live-calls"}
    types = {name: {p["type"] for p in all_panels(b)} for name, b in boards.items()}
    assert {"stat", "timeseries", "table", "piechart"} <= types["loop-overview.json"]
    assert {"state-timeline", "timeseries", "table"} <= types["loop-session.json"]
    assert {"timeseries", "bargauge"} <= types["loop-cost-velocity.json"]
    assert {"table"} <= types["loop-live-calls.json"]
    session = boards["loop-session.json"]
    assert [v["name"] for v in session["templating"]["list"]] == ["session_id"]
    for board in boards.values():
        assert "loop-detector" in board["tags"]


def test_panel_layout_ids_and_grid():
    for name, board in dashboards().items():
        panels = all_panels(board)
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), name
        cells: set[tuple[int, int]] = set()
        for p in panels:
            g = p["gridPos"]
            assert g["x"] >= 0 and g["x"] + g["w"] <= 24, (name, p["title"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    assert (x, y) not in cells, f"{name}: panel {p['title']!r} overlaps another"
                    cells.add((x, y))


def test_every_query_uses_the_plugin_query_model():
    targets = panel_targets()
    assert len(targets) >= 25
    for name, panel, target in targets:
        assert target["datasource"] == {"type": "grafana-clickhouse-datasource", "uid": "loop-clickhouse"}
        assert panel["datasource"] == target["datasource"]
        assert target["editorType"] == "sql" and target["pluginVersion"] == build.PLUGIN_VERSION
        assert (target["queryType"], target["format"]) in (("timeseries", 0), ("table", 1)), (name, panel["title"])
        if panel["type"] == "timeseries":
            assert target["queryType"] == "timeseries", (name, panel["title"])
        else:
            assert target["queryType"] == "table", (name, panel["title"])
        assert "$__timeFilter(" in target["rawSql"] or "FINAL" in target["rawSql"], (name, panel["title"])
    refs = [(n, p["title"], t["refId"]) for n, p, t in targets]
    assert len(refs) == len(set(refs))


# --- the plugin's macros, checked against the plugin's own test vectors ------------------------------

FROM = datetime(2014, 11, 12, 11, 45, 26, 123000, tzinfo=UTC)
TO = datetime(2015, 11, 12, 11, 45, 26, 456000, tzinfo=UTC)


@pytest.mark.parametrize(("sql", "expected"), [
    ("select * from foo where $__timeFilter(cast(sth as timestamp))",
     "select * from foo where cast(sth as timestamp) >= toDateTime(1415792726) AND cast(sth as timestamp) "
     "<= toDateTime(1447328726)"),
    ("select * from foo where $__timeFilter(cast(sth as timestamp) )",
     "select * from foo where cast(sth as timestamp) >= toDateTime(1415792726) AND cast(sth as timestamp) "
     "<= toDateTime(1447328726)"),
    ("select * from foo where $__timeFilter_ms(cast(sth as timestamp))",
     "select * from foo where cast(sth as timestamp) >= fromUnixTimestamp64Milli(1415792726123) AND "
     "cast(sth as timestamp) <= fromUnixTimestamp64Milli(1447328726456)"),
    ("select * from foo where ( date >= $__fromTime and date <= $__toTime ) limit 100",
     "select * from foo where ( date >= toDateTime(1415792726) and date <= toDateTime(1447328726) ) limit 100"),
    ("select * from foo where ( date >= $__fromTime_ms ) and ( date <= $__toTime_ms ) limit 100",
     "select * from foo where ( date >= fromUnixTimestamp64Milli(1415792726123) ) and "
     "( date <= fromUnixTimestamp64Milli(1447328726456) ) limit 100"),
    ("SELECT $__timeInterval($__fromTime) AS from_time",
     "SELECT toStartOfInterval(toDateTime(toDateTime(1415792726)), INTERVAL 60 second) AS from_time"),
    ("SELECT $__timeInterval_ms($__fromTime_ms)",
     "SELECT toStartOfInterval(toDateTime64(fromUnixTimestamp64Milli(1415792726123), 3), INTERVAL 60000 "
     "millisecond)"),
    ("select * from foo where $__timeFilter(coalesce(closed_at, $__toTime))",
     "select * from foo where coalesce(closed_at, toDateTime(1447328726)) >= toDateTime(1415792726) AND "
     "coalesce(closed_at, toDateTime(1447328726)) <= toDateTime(1447328726)"),
    ("select * from foo where msg = 'it\\'s -- fine' and $__fromTime",
     "select * from foo where msg = 'it\\'s -- fine' and toDateTime(1415792726)"),
    ("select * from foo where msg = 'it''s' and $__fromTime",
     "select * from foo where msg = 'it''s' and toDateTime(1415792726)"),
    ("SELECT $__dateFilter(d), $__dateTimeFilter(d, t)",
     "SELECT d >= toDate('2014-11-12') AND d <= toDate('2015-11-12'), (d >= toDate('2014-11-12') AND "
     "d <= toDate('2015-11-12')) AND (t >= toDateTime(1415792726) AND t <= toDateTime(1447328726))"),
    ("$__timeFrom(ts) AND $__timeTo(ts)", "ts >= toDateTime(1415792726) AND ts <= toDateTime(1447328726)"),
    ("$__timeGroup(ts, 5m) / $__timeGroup(ts, '1h')",
     "toStartOfInterval(toDateTime(ts), INTERVAL 300 second) / toStartOfInterval(toDateTime(ts), INTERVAL 3600 "
     "second)"),
    ("$__interval_s $__interval $__interval_ms", "60 1m 60000"),
    ("SELECT $__unknownMacro(x)", "SELECT $__unknownMacro(x)"),
])
def test_macro_expansion_matches_the_plugin(sql, expected):
    ctx = QueryContext(FROM, TO, interval=timedelta(minutes=1))
    assert expand_macros(sql, ctx) == expected


def test_interval_has_a_one_second_floor_and_macro_errors():
    ctx = QueryContext(FROM, TO, interval=timedelta(milliseconds=20))
    assert expand_macros("$__interval_s|$__timeInterval(c)", ctx) == (
        "1|toStartOfInterval(toDateTime(c), INTERVAL 1 second)")
    with pytest.raises(MacroError):
        expand_macros("WHERE $__timeFilter", ctx)
    with pytest.raises(MacroError):
        expand_macros("$__timeFilter(a, b)", ctx)
    with pytest.raises(MacroError):
        expand_macros("$__timeGroup(ts, nope)", ctx)
    with pytest.raises(MacroError):
        expand_macros("-- $__timeFilter(ts)", ctx)
    with pytest.raises(MacroError):
        expand_macros("SELECT $__columns(a)", ctx)


def test_template_variables_are_replaced_like_grafana():
    sql = "x = '${session_id}' AND y = '$session_id' AND z = '[[session_id]]' AND $__timeFilter(ts) AND $other"
    assert replace_variables(sql, {"session_id": "s1"}) == (
        "x = 's1' AND y = 's1' AND z = 's1' AND $__timeFilter(ts) AND $other")


# --- a store with spans and detector output ----------------------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ChdbStore(tmp_path_factory.mktemp("grafana-store"))
    apply_schema(s)
    seed(s)
    yield s
    s.close()


def test_seeded_spans_reach_genai_calls(store):
    rows = store.rows("SELECT session_id, count() AS n, sum(is_error) AS errors FROM otel.genai_calls "
                      "GROUP BY session_id ORDER BY session_id")
    assert rows == [{"session_id": LOOP_SESSION, "n": len(LOOP_LEVELS), "errors": 3},
                    {"session_id": OK_SESSION, "n": 3, "errors": 0}]


# --- every panel query on chDB -----------------------------------------------------------------------

NUMERIC = re.compile(r"^(Nullable\()?(U?Int\d+|Float\d+|Decimal)")
DATETIME = re.compile(r"^(Nullable\()?DateTime(64)?\b")
STRING = re.compile(r"^(Nullable\()?(LowCardinality\()?(Nullable\()?(String|FixedString)")


def describe(store, sql: str) -> list[tuple[str, str]]:
    return [(r["name"], r["type"]) for r in store.rows(f"DESCRIBE TABLE ({sql})")]


def check_timeseries(columns: list[tuple[str, str]], where: str) -> None:
    """sqlds time-series format: a time column, numeric value columns, string columns become labels."""
    names = dict(columns)
    assert "time" in names and DATETIME.match(names["time"]), f"{where}: no DateTime 'time' column: {columns}"
    values = [n for n, t in columns if n != "time" and NUMERIC.match(t)]
    assert values, f"{where}: no numeric column: {columns}"
    for n, t in columns:
        assert n == "time" or NUMERIC.match(t) or STRING.match(t), f"{where}: column {n} {t} is neither"


@pytest.mark.parametrize(("board", "panel", "target"),
                         [pytest.param(*t, id=f"{t[0].removesuffix('.json')}:{t[1]['title']}:{t[2]['refId']}")
                          for t in panel_targets()])
def test_panel_query_runs_and_returns_what_the_panel_needs(store, board, panel, target):
    sql = interpolate(target["rawSql"], DASHBOARD_CTX)
    assert not leftover_macros(sql), sql
    assert "${" not in sql and "$session_id" not in sql
    columns = describe(store, sql)
    rows = store.rows(sql)
    where = f"{board} / {panel['title']}"
    assert rows, f"{where}: no rows on the seeded store"
    kind = panel["type"]
    if kind == "timeseries":
        check_timeseries(columns, where)
    elif kind == "state-timeline":
        assert [n for n, _ in columns] == ["time", "level"], where
        assert DATETIME.match(columns[0][1]) and STRING.match(columns[1][1]), columns
        levels = [r["level"] for r in rows]
        assert set(levels) <= set(LEVELS)
        assert levels == LOOP_LEVELS  # the session's escalation, call by call, in time order
    elif kind in ("stat", "piechart", "bargauge"):
        assert any(NUMERIC.match(t) for _, t in columns), f"{where}: nothing numeric to show: {columns}"
        fields = panel["options"]["reduceOptions"]["fields"]
        pattern = re.compile(fields.strip("/")) if fields else None
        if pattern:
            assert any(pattern.search(n) for n, _ in columns), (where, fields)
    elif kind == "table":
        assert columns
    else:  # pragma: no cover - a new panel type needs a check here
        pytest.fail(f"{where}: no shape check for panel type {kind}")


def test_field_overrides_name_real_columns(store):
    """A byName override with a typo silently does nothing in Grafana."""
    panels: dict[tuple[str, int], tuple[dict, set[str]]] = {}
    for board, panel, target in panel_targets():
        key = (board, panel["id"])
        names = {n for n, _ in describe(store, interpolate(target["rawSql"], DASHBOARD_CTX))}
        panels[key] = (panel, panels.get(key, (panel, set()))[1] | names)
    checked = 0
    for (board, _), (panel, names) in panels.items():
        for override in panel.get("fieldConfig", {}).get("overrides", []):
            if override["matcher"]["id"] == "byName":
                assert override["matcher"]["options"] in names, (board, panel["title"], override["matcher"])
                checked += 1
    assert checked >= 20


def test_panel_results_reflect_the_seeded_loop(store):
    def run(board: str, title: str, ref: str = "A") -> list[dict]:
        target = next(t for n, p, t in panel_targets() if n == board and p["title"] == title and t["refId"] == ref)
        return store.rows(interpolate(target["rawSql"], DASHBOARD_CTX))

    assert run("loop-overview.json", "Sessions by enforcement level") == [
        {"none": 1, "warn": 0, "throttle": 0, "inject": 0, "hard_stop": 1}]
    top = run("loop-overview.json", "Top sessions by confidence")
    assert [r["session_id"] for r in top] == [LOOP_SESSION, OK_SESSION]
    blocked = run("loop-overview.json", "Blocked calls")
    assert blocked == [{"calls_at_hard_stop": 2, "block_actions": 2}]  # dry-run block excluded
    transitions = run("loop-overview.json", "Enforcement transitions")
    assert sum(r["to_hard_stop"] for r in transitions) == 1
    calls = run("loop-session.json", "Calls")
    assert len(calls) == len(LOOP_LEVELS) and calls[0]["level_after"] == "hard_stop"
    assert {c["tool_name"] for c in calls} == {"", "read_file"}
    assert all(len(c["tool_fp"]) == 16 for c in calls if c["tool_name"])
    newest = run("loop-live-calls.json", "Newest calls, clustered by session")
    sessions = [r["session_id"] for r in newest]
    assert sessions == sorted(sessions, key=lambda s: s != LOOP_SESSION)  # clustered, newest session first
    tpm = run("loop-cost-velocity.json", "Tokens per minute per virtual key, against its baseline")
    loop = [r for r in tpm if r["key_name"] == LOOP_KEY]
    assert loop and all(r["baseline_tpm"] >= build.VELOCITY_MIN_BASELINE_TPM for r in loop)
    assert all(r["trip_tpm"] == build.VELOCITY_FACTOR * r["baseline_tpm"] for r in loop)
    cliff = run("loop-cost-velocity.json", "Cumulative cost per feature (the cost cliff)")
    support = [r["cumulative_cost"] for r in cliff if r["feature_name"] == LOOP_FEATURE]
    assert support == sorted(support) and support[-1] == pytest.approx(0.02 * len(LOOP_LEVELS))


def test_session_variable_query(store):
    board = dashboards()["loop-session.json"]
    (variable,) = board["templating"]["list"]
    assert variable["type"] == "query" and variable["datasource"]["uid"] == "loop-clickhouse"
    assert variable["query"]["queryType"] == "sql"
    sql = interpolate(variable["query"]["rawSql"], DASHBOARD_CTX)
    columns = describe(store, sql)
    assert len(columns) == 1 and STRING.match(columns[0][1])
    assert [r["scope_id"] for r in store.rows(sql)] == [LOOP_SESSION, OK_SESSION]


# --- alert rules -------------------------------------------------------------------------------------

def test_alert_rules_are_well_formed():
    uids = datasource_uids()
    found = rules()
    assert {r["uid"] for r in found} == {"loop-session-hard-stop", "loop-velocity-breaker", "loop-budget-exhausted",
                                         "loop-detector-lag"}
    for rule in found:
        refs = {q["refId"] for q in rule["data"]}
        assert rule["condition"] in refs
        for q in rule["data"]:
            assert q["datasourceUid"] in uids | {"__expr__"}, rule["uid"]
            if q["datasourceUid"] == "__expr__":
                assert q["model"]["type"] == "threshold" and q["model"]["expression"] in refs
            else:
                assert q["datasourceUid"] == "loop-clickhouse"
                assert q["model"]["datasource"] == {"type": "grafana-clickhouse-datasource", "uid": "loop-clickhouse"}
                assert q["model"]["editorType"] == "sql" and q["model"]["format"] == 1
                assert q["relativeTimeRange"]["from"] > q["relativeTimeRange"]["to"] >= 0
        assert rule["noDataState"] in ("OK", "NoData", "Alerting", "KeepLast")
        assert rule["execErrState"] in ("OK", "Error", "Alerting", "KeepLast")
        # labels are environment-interpolated by Grafana: a '$' there would be eaten
        assert all("$" not in v for v in rule["labels"].values())
        assert rule["labels"]["component"] == "loop-detector"
        dash = rule["annotations"].get("__dashboardUid__")
        assert dash is None or dash in {b["uid"] for b in dashboards().values()}


ALERT_QUERIES = [pytest.param(r, q, id=r["uid"]) for r in rules() for q in r["data"]
                 if q["datasourceUid"] == "loop-clickhouse"]


@pytest.mark.parametrize(("rule", "query"), ALERT_QUERIES)
def test_alert_query_runs_and_gives_one_number_per_instance(store, rule, query):
    sql = interpolate(query["model"]["rawSql"], alert_ctx(query), frontend=False)  # no template variables
    assert not leftover_macros(sql)
    columns = describe(store, sql)
    numeric = [n for n, t in columns if NUMERIC.match(t)]
    assert len(numeric) == 1, f"{rule['uid']}: Grafana needs exactly one numeric column, got {columns}"
    assert all(STRING.match(t) for n, t in columns if n not in numeric), columns
    rows = store.rows(sql)
    threshold = next(q for q in rule["data"] if q["refId"] == rule["condition"])["model"]
    (limit,) = threshold["conditions"][0]["evaluator"]["params"]
    firing = [r for r in rows if r[numeric[0]] > limit]
    expected = {
        "loop-session-hard-stop": [{"session_id": LOOP_SESSION, "hard_stops": 1.0}],
        "loop-velocity-breaker": [{"virtual_key_id": LOOP_KEY, "trips": 1.0}],
        "loop-budget-exhausted": [{"scope": "feature", "scope_id": LOOP_FEATURE, "budget": "support-bot daily",
                                   "blocks": 1.0}],
        "loop-detector-lag": [{"shard": "0/2", "lag_seconds": 300.0}],
    }[rule["uid"]]
    assert firing == expected


def test_alert_queries_are_quiet_outside_the_window(store):
    for rule in rules():
        for q in rule["data"]:
            if q["datasourceUid"] != "loop-clickhouse" or "$__timeFilter" not in q["model"]["rawSql"]:
                continue
            later = QueryContext(T0 + timedelta(hours=2), T0 + timedelta(hours=2, minutes=5))
            assert store.rows(interpolate(q["model"]["rawSql"], later, frontend=False)) == [], rule["uid"]


def test_contact_point_and_policies():
    doc = alerting()
    (contact,) = doc["contactPoints"]
    (receiver,) = contact["receivers"]
    assert receiver["type"] == "webhook"
    assert receiver["settings"]["url"] in ("$LOOP_ALERT_WEBHOOK_URL", "${LOOP_ALERT_WEBHOOK_URL}")
    names = {c["name"] for c in doc["contactPoints"]}
    (policy,) = doc["policies"]
    assert policy["receiver"] in names
    for route in policy.get("routes", []):
        assert route["receiver"] in names
        assert ["component", "=", "loop-detector"] in route["object_matchers"]


# --- provisioning files ------------------------------------------------------------------------------

def test_datasource_provisioning():
    doc = yaml.safe_load((PROVISIONING / "datasources" / "clickhouse.yaml").read_text())
    (ds,) = doc["datasources"]
    assert ds["uid"] == build.DATASOURCE_UID and ds["type"] == build.DATASOURCE_TYPE
    assert ds["jsonData"]["host"] == "${CLICKHOUSE_HOST}" and ds["jsonData"]["port"] == "${CLICKHOUSE_PORT}"
    assert ds["jsonData"]["protocol"] in ("native", "http")
    assert ds["secureJsonData"]["password"] == "${CLICKHOUSE_PASSWORD}"


def test_dashboard_provider_and_every_datasource_reference():
    doc = yaml.safe_load((PROVISIONING / "dashboards" / "dashboards.yaml").read_text())
    (provider,) = doc["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    uids = datasource_uids()

    def refs(node):
        if isinstance(node, dict):
            if "datasource" in node and isinstance(node["datasource"], dict):
                yield node["datasource"]
            for v in node.values():
                yield from refs(v)
        elif isinstance(node, list):
            for v in node:
                yield from refs(v)

    for name, board in dashboards().items():
        found = list(refs(board))
        assert found, name
        for ref in found:
            assert ref["uid"] in uids, (name, ref)
