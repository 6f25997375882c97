"""grafana/provisioning/ checked the way Grafana 12 checks it when it starts.

A provisioning error is not a warning in Grafana: a rule Grafana refuses stops the provisioning module,
which stops the HTTP server, and ``restart: unless-stopped`` loops the container (no dashboards, no
alerts). Parsing the YAML proves nothing, so tests/support/grafana_provisioning.py repeats the checks Grafana's
provisioning code makes (each one cites its source) and this module applies them: to the committed
files, which must pass, and to broken copies, which must be refused for the right reason.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from support import grafana_provisioning as gp

ROOT = Path(__file__).resolve().parents[2]
PROVISIONING = ROOT / "grafana" / "provisioning"
DASHBOARDS = ROOT / "grafana" / "dashboards"
COMPOSE = ROOT / "docker-compose.yml"


def compose_value(value: str) -> str:
    """Compose interpolation with nothing set in the shell: ``${NAME:-default}`` -> default, ``${NAME}`` -> ""."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", value)


def grafana_service() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]


def grafana_env() -> dict[str, str]:
    return {k: compose_value(str(v)) for k, v in grafana_service()["environment"].items()}


def installed_plugins(env: dict[str, str]) -> dict[str, str]:
    """GF_PLUGINS_PREINSTALL_SYNC: comma-separated ``id@version[@url]`` (pkg/setting/setting_plugins.go)."""
    out = {}
    for item in env.get("GF_PLUGINS_PREINSTALL_SYNC", "").split(","):
        if item.strip():
            plugin_id, _, version = item.strip().partition("@")
            out[plugin_id] = version.split("@")[0]
    return out


@pytest.fixture()
def prov() -> gp.Provisioning:
    env = grafana_env()
    return gp.load(PROVISIONING, DASHBOARDS, env, installed_plugins(env))


def rule(prov: gp.Provisioning, uid: str) -> dict:
    return next(r for doc in prov.alerting.values() for g in doc.get("groups", []) for r in g["rules"]
                if r["uid"] == uid)


# --- the committed files --------------------------------------------------------------------------------

def test_the_committed_provisioning_is_what_grafana_accepts(prov):
    errors = gp.all_errors(prov)
    assert not errors, "\n".join(errors)


def test_the_checks_see_every_file_and_rule(prov):
    assert set(prov.alerting) == {"alerts.yaml"}
    assert set(prov.datasources) == {"clickhouse.yaml"} and set(prov.dashboard_providers) == {"dashboards.yaml"}
    rules = [r for doc in prov.alerting.values() for g in doc["groups"] for r in g["rules"]]
    assert len(rules) == 4 and prov.dashboards.keys() == {"loop-overview", "loop-session", "loop-cost-velocity",
                                                          "loop-live-calls"}


def test_rules_that_name_a_dashboard_also_name_the_panel(prov):
    """The three rules that link a dashboard link one panel of it too: Grafana refuses one without the other."""
    linked = {}
    for doc in prov.alerting.values():
        for group in doc["groups"]:
            for r in group["rules"]:
                ann = r.get("annotations", {})
                if gp.DASHBOARD_UID_ANNOTATION in ann:
                    board = prov.dashboards[ann[gp.DASHBOARD_UID_ANNOTATION]]
                    panel = next(p for p in board["panels"] if p["id"] == int(ann[gp.PANEL_ID_ANNOTATION]))
                    linked[r["uid"]] = (board["uid"], panel["title"])
    assert linked == {
        "loop-session-hard-stop": ("loop-session", "Escalation timeline"),
        "loop-velocity-breaker": ("loop-cost-velocity", "Velocity-breaker trips"),
        "loop-budget-exhausted": ("loop-cost-velocity", "Budget actions"),
    }


def test_the_clickhouse_plugin_reads_the_provisioned_settings(prov):
    (ds,) = prov.datasources["clickhouse.yaml"]["datasources"]
    json_data = gp.interpolate_tree(ds["jsonData"], prov.env)
    # what LoadSettings ends up with under the compose environment
    assert json_data["host"] == "clickhouse" and gp.go_parse_int(json_data["port"], 0) == 9000
    assert json_data["protocol"] == "native" and json_data["defaultDatabase"] == "otel"
    assert prov.plugins == {"grafana-clickhouse-datasource": "4.20.0"}


EMBEDDED = ROOT / "grafana" / "provisioning-embedded"


def test_the_embedded_stores_provisioning_is_what_grafana_accepts():
    """grafana/provisioning-embedded: the same dashboards and rules (linked), the same data source uid, pointed at
    `serve --clickhouse-http-port` over HTTP, with the environment docs/grafana.md gives."""
    env = {"LOOP_DETECTOR_CLICKHOUSE_HOST": "127.0.0.1", "LOOP_DETECTOR_CLICKHOUSE_PORT": "8123",
           "LOOP_DETECTOR_CLICKHOUSE_PASSWORD": "from-the-password-file",
           "LOOP_ALERT_WEBHOOK_URL": "http://127.0.0.1:9/hook"}
    embedded = gp.load(EMBEDDED, DASHBOARDS, env, {"grafana-clickhouse-datasource": "4.20.0"})
    errors = gp.all_errors(embedded)
    assert not errors, "\n".join(errors)
    assert (EMBEDDED / "dashboards").resolve() == (PROVISIONING / "dashboards").resolve()
    assert (EMBEDDED / "alerting").resolve() == (PROVISIONING / "alerting").resolve()
    (ds,) = embedded.datasources["clickhouse.yaml"]["datasources"]
    json_data = gp.interpolate_tree(ds["jsonData"], env)
    assert ds["uid"] == "loop-clickhouse" and json_data["protocol"] == "http"
    assert gp.go_parse_int(json_data["port"], 0) == 8123 and json_data["username"] == "default"
    assert gp.interpolate_tree(ds["secureJsonData"], env) == {"password": "from-the-password-file"}


# --- broken copies are refused, each for its reason -----------------------------------------------------

def mutated(prov: gp.Provisioning, change) -> list[str]:
    broken = copy.deepcopy(prov)
    change(broken)
    return gp.all_errors(broken)


def _drop_panel(p):
    del rule(p, "loop-session-hard-stop")["annotations"]["__panelId__"]


def _panel_not_int(p):
    rule(p, "loop-session-hard-stop")["annotations"]["__panelId__"] = "three"


def _panel_not_in_board(p):
    rule(p, "loop-session-hard-stop")["annotations"]["__panelId__"] = "99"


def _panel_is_a_row(p):
    rule(p, "loop-session-hard-stop")["annotations"]["__panelId__"] = "1"


def _condition_missing(p):
    rule(p, "loop-velocity-breaker")["condition"] = "B"


def _duplicate_ref(p):
    rule(p, "loop-velocity-breaker")["data"][1]["refId"] = "A"


def _unknown_datasource(p):
    rule(p, "loop-velocity-breaker")["data"][0]["datasourceUid"] = "no-such-ds"


def _time_range_backwards(p):
    rule(p, "loop-detector-lag")["data"][0]["relativeTimeRange"] = {"from": 0, "to": 600}


def _time_range_string(p):
    rule(p, "loop-detector-lag")["data"][0]["relativeTimeRange"] = {"from": "10m", "to": 0}


def _threshold_on_missing_ref(p):
    rule(p, "loop-detector-lag")["data"][1]["model"]["expression"] = "Z"


def _threshold_two_conditions(p):
    model = rule(p, "loop-detector-lag")["data"][1]["model"]
    model["conditions"] = model["conditions"] * 2


def _threshold_range_one_param(p):
    rule(p, "loop-detector-lag")["data"][1]["model"]["conditions"][0]["evaluator"] = {"type": "within_range",
                                                                                     "params": [1]}


def _no_data_state(p):
    rule(p, "loop-budget-exhausted")["noDataState"] = "Ok"


def _exec_err_state(p):
    rule(p, "loop-budget-exhausted")["execErrState"] = "Errored"


def _for_duration(p):
    rule(p, "loop-budget-exhausted")["for"] = "1.5m"


def _typo_key(p):
    r = rule(p, "loop-budget-exhausted")
    r["noDataStat"] = r.pop("noDataState")


def _group_interval(p):
    p.alerting["alerts.yaml"]["groups"][0]["interval"] = "15s"


def _group_interval_zero(p):
    p.alerting["alerts.yaml"]["groups"][0]["interval"] = "0"


def _duplicate_uid(p):
    rule(p, "loop-detector-lag")["uid"] = "loop-velocity-breaker"


def _duplicate_title(p):
    rule(p, "loop-detector-lag")["title"] = rule(p, "loop-velocity-breaker")["title"]


def _bad_uid(p):
    rule(p, "loop-detector-lag")["uid"] = "loop detector lag"


def _long_uid(p):
    rule(p, "loop-detector-lag")["uid"] = "x" * 41


def _reserved_label(p):
    rule(p, "loop-detector-lag")["labels"]["__grafana_receiver__"] = "x"


def _unknown_receiver(p):
    p.alerting["alerts.yaml"]["policies"][0]["routes"][0]["receiver"] = "nobody"


def _root_without_receiver(p):
    del p.alerting["alerts.yaml"]["policies"][0]["receiver"]


def _matcher_op(p):
    p.alerting["alerts.yaml"]["policies"][0]["routes"][0]["object_matchers"][0] = ["component", "==", "x"]


def _group_by_duplicate(p):
    p.alerting["alerts.yaml"]["policies"][0]["group_by"] = ["alertname", "alertname"]


def _repeat_interval_zero(p):
    p.alerting["alerts.yaml"]["policies"][0]["repeat_interval"] = "0s"


def _webhook_without_url(p):
    p.env["LOOP_ALERT_WEBHOOK_URL"] = ""


def _receiver_without_uid(p):
    del p.alerting["alerts.yaml"]["contactPoints"][0]["receivers"][0]["uid"]


def _rule_to_missing_contact_point(p):
    rule(p, "loop-detector-lag")["notification_settings"] = {"receiver": "nobody"}


def _ds_port(p):
    p.env["CLICKHOUSE_PORT"] = ""


def _ds_host(p):
    p.env["CLICKHOUSE_HOST"] = "  "


def _ds_protocol(p):
    p.datasources["clickhouse.yaml"]["datasources"][0]["jsonData"]["protocol"] = "tcp"


def _ds_secure_type(p):
    p.datasources["clickhouse.yaml"]["datasources"][0]["jsonData"]["secure"] = 1


def _ds_unknown_key(p):
    p.datasources["clickhouse.yaml"]["datasources"][0]["jsonData"]["database"] = "otel"


def _ds_two_defaults(p):
    ds = p.datasources["clickhouse.yaml"]["datasources"]
    ds.append({**copy.deepcopy(ds[0]), "uid": "other", "name": "other"})


def _ds_plugin_not_installed(p):
    p.plugins.clear()


def _ds_api_version(p):
    p.datasources["clickhouse.yaml"]["apiVersion"] = 0


def _bad_suffix(p):
    p.alerting_files.append("alerts.yaml.bak")


BROKEN = [
    (_drop_panel, "both annotations __dashboardUid__ and __panelId__ must be specified"),
    (_panel_not_int, "annotation __panelId__ must be a valid integer Panel ID"),
    (_panel_not_in_board, "__panelId__ 99 is not a panel of dashboard 'loop-session'"),
    (_panel_is_a_row, "__panelId__ 1 is not a panel of dashboard 'loop-session'"),
    (_condition_missing, "Condition B does not exist, must be one of ['A', 'C']"),
    (_duplicate_ref, "refId 'A' is used by more than one query"),
    (_unknown_datasource, "failed to build query 'A': data source not found (no-such-ds)"),
    (_time_range_backwards, "invalid relative time range [From: 0, To: 600]"),
    (_time_range_string, "relativeTimeRange.from is whole seconds"),
    (_threshold_on_missing_ref, "unable to find dependent node 'Z'"),
    (_threshold_two_conditions, "threshold expression requires exactly one condition"),
    (_threshold_range_one_param, "incorrect number of arguments: got 1 but need 2"),
    (_no_data_state, "unknown NoData state option Ok"),
    (_exec_err_state, "unknown Error state option Errored"),
    (_for_duration, "failed to parse 'for' field: not a valid duration string: '1.5m'"),
    (_typo_key, "unknown key 'noDataStat'"),
    (_group_interval, "divided exactly by scheduler interval: 10"),
    (_group_interval_zero, "should be non-zero"),
    (_duplicate_uid, "uid 'loop-velocity-breaker' is also the uid of"),
    (_duplicate_title, "title 'Velocity breaker tripped' is also the title of"),
    (_bad_uid, "invalid format of UID"),
    (_long_uid, "UID is longer than 40 symbols"),
    (_reserved_label, "system reserved label __grafana_receiver__ cannot be defined"),
    (_unknown_receiver, "receiver 'nobody' does not exist"),
    (_root_without_receiver, "root route must specify a default receiver"),
    (_matcher_op, "unknown match type '=='"),
    (_group_by_duplicate, "duplicated label 'alertname' in group_by"),
    (_repeat_interval_zero, "repeat_interval cannot be zero"),
    (_webhook_without_url, "required field 'url' is not specified"),
    (_receiver_without_uid, "no uid is set"),
    (_rule_to_missing_contact_point, "receiver 'nobody' does not exist"),
    (_ds_port, "invalid port"),
    (_ds_host, "invalid server host"),
    (_ds_protocol, "protocol must be 'native' or 'http'"),
    (_ds_secure_type, "secure must be a boolean"),
    (_ds_unknown_key, "jsonData: unknown key 'database'"),
    (_ds_two_defaults, "Only one datasource per organization can be marked as default"),
    (_ds_plugin_not_installed, "is not a plugin this Grafana installs"),
    (_ds_api_version, "apiVersion must be 1"),
    (_bad_suffix, "file has invalid suffix 'alerts.yaml.bak'"),
]


@pytest.mark.parametrize(("change", "message"), BROKEN, ids=[c.__name__.strip("_") for c, _ in BROKEN])
def test_a_broken_copy_is_refused_for_its_reason(prov, change, message):
    errors = mutated(prov, change)
    assert any(message in e for e in errors), errors


def test_the_alert_rules_before_the_fix_were_refused(prov):
    """main's alerts.yaml: three rules with __dashboardUid__ and no __panelId__ (Grafana crash-looped)."""
    def strip_panels(p):
        for doc in p.alerting.values():
            for group in doc["groups"]:
                for r in group["rules"]:
                    r.get("annotations", {}).pop(gp.PANEL_ID_ANNOTATION, None)

    errors = [e for e in mutated(prov, strip_panels) if "must be specified" in e]
    assert len(errors) == 3, errors


# --- the interpolation Grafana applies ----------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "expected"), [
    ("$HOST:$PORT", "ch:9000"), ("${HOST}x", "chx"), ("$$HOST", "$HOST"), ("a$", "a$"), ("$UNSET.", "."),
    ("{{ $labels.x }}", "{{ .x }}"), ("${}", ""), ("$1", ""),
])
def test_interpolation_is_go_os_expand_env(raw, expected):
    assert gp.interpolate(raw, {"HOST": "ch", "PORT": "9000"}) == expected


def test_annotations_only_expand_braced_variables():
    assert gp.interpolate_braced("{{ $labels.x }} ${HOST}", {"HOST": "ch"}) == "{{ $labels.x }} ch"


@pytest.mark.parametrize(("text", "seconds"), [("0", 0), ("1m", 60), ("1h30m", 5400), ("2d", 172800),
                                                ("500ms", 0.5), ("1w1d", 691200)])
def test_prometheus_durations(text, seconds):
    assert gp.parse_prom_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1.5m", "m", "1m1h", "-1m", "1 m"])
def test_prometheus_durations_refused(text):
    with pytest.raises(ValueError):
        gp.parse_prom_duration(text)
