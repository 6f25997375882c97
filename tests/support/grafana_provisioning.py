"""The checks Grafana 12 makes when it loads file provisioning, as plain functions over parsed YAML.

No Grafana runs here, so these functions repeat the rules Grafana's own provisioning code applies, each
one citing the file and function it comes from (grafana/grafana, the 12.x sources; the alerting
annotation and interval rules are unchanged through 12.4). Every function returns the list of errors,
worded like Grafana's where Grafana has a message, so a test can both assert "no errors" on the committed
files and assert that a broken copy is refused for the right reason.

A few checks are stricter than Grafana, and say so (``project rule``): Grafana's YAML reader ignores
unknown keys, so a misspelt ``noDataStat`` silently becomes the default; we refuse it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# --- value interpolation ------------------------------------------------------------------------------

# pkg/services/provisioning/values/values.go, interpolateValue: the value is split on "$$" (a literal
# "$"), and each part goes through os.ExpandEnv ($VAR and ${VAR}; an unset variable becomes "").
_GO_SPECIAL = set("*#$@!?-0123456789")


def go_expand_env(text: str, env: Mapping[str, str]) -> str:
    """Go's os.ExpandEnv (os.Expand with os.Getenv), character for character."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 >= len(text):
            out.append(text[i])
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "{":
            end = text.find("}", i + 2)
            if end == -1 or end == i + 2:  # "${" unterminated or "${}": invalid syntax, eaten
                i = len(text) if end == -1 else end + 1
                continue
            out.append(env.get(text[i + 2:end], ""))
            i = end + 1
        elif nxt in _GO_SPECIAL:
            out.append(env.get(nxt, ""))
            i += 2
        else:
            m = re.match(r"[A-Za-z0-9_]+", text[i + 1:])
            if not m:  # "$" not followed by a name: kept
                out.append("$")
                i += 1
                continue
            out.append(env.get(m.group(0), ""))
            i += 1 + len(m.group(0))
    return "".join(out)


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """values.interpolateValue (the ``$__env{}``/``$__file{}`` expanders are not used in our files)."""
    return "$".join(go_expand_env(part, env) for part in value.split("$$"))


def interpolate_braced(value: str, env: Mapping[str, str]) -> str:
    """values.StringMapValue.ValueWithBracedVars, used for rule annotations: only ${VAR} is expanded, so
    ``{{ $labels.x }}`` templates survive."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), value)


def interpolate_tree(node: Any, env: Mapping[str, str]) -> Any:
    """values.JSONValue.Value (transformInterface): every string inside maps and lists is interpolated."""
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(v, env) for v in node]
    if isinstance(node, str):
        return interpolate(node, env)
    return node


# --- small Go parsers -----------------------------------------------------------------------------------

# github.com/prometheus/common/model/time.go, ParseDuration: "0" alone is allowed, "" is an error,
# otherwise units y w d h m s ms in that order, each at most once, integers only.
_PROM_DURATION = re.compile(r"^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$")
_PROM_UNIT_SECONDS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}


def parse_prom_duration(text: Any) -> float:
    """Seconds, or ValueError with prometheus' message."""
    if not isinstance(text, str):
        text = str(text)
    if text == "0":
        return 0.0
    if text == "":
        raise ValueError("empty duration string")
    m = _PROM_DURATION.match(text)
    if not m:
        raise ValueError(f"not a valid duration string: {text!r}")
    total = 0.0
    for unit, group in zip(("y", "w", "d", "h", "m", "s", "ms"), (2, 4, 6, 8, 10, 12, 14), strict=True):
        if m.group(group):
            total += int(m.group(group)) * _PROM_UNIT_SECONDS[unit]
    return total


def go_parse_bool(text: str) -> bool:
    """strconv.ParseBool."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def go_parse_int(text: str, base: int = 10) -> int:
    """strconv.ParseInt(text, base, 64), for base 10 and base 0 (where a 0x, 0o or 0b prefix, or a bare
    leading 0 for octal, picks the base)."""
    if base == 10 and re.fullmatch(r"[+-]?[0-9]+", text):
        return int(text)
    if base == 0:
        if re.fullmatch(r"[+-]?0[0-7]+", text):
            return int(text, 8)
        try:
            return int(text, 0)
        except ValueError:
            pass
    raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')


# pkg/util/shortid_generator.go, ValidateUID: at most MaxUIDLength (40) characters of [a-zA-Z0-9-_].
MAX_UID_LENGTH = 40
_UID = re.compile(r"^[a-zA-Z0-9\-_]*$")


def uid_error(uid: str) -> str | None:
    if len(uid) > MAX_UID_LENGTH:
        return f"UID is longer than {MAX_UID_LENGTH} symbols"
    if not _UID.match(uid):
        return "invalid format of UID. Only letters, numbers, '-' and '_' are allowed"
    return None


# --- the provisioning directory --------------------------------------------------------------------------

@dataclass
class Provisioning:
    """Everything Grafana reads at start: provisioning files (already YAML-parsed), the dashboards the
    dashboard providers load, the plugins it installs, and its environment (for interpolation)."""

    alerting: dict[str, Any]
    datasources: dict[str, Any]
    dashboard_providers: dict[str, Any]
    dashboards: dict[str, dict]  # uid -> dashboard JSON
    env: dict[str, str]
    plugins: dict[str, str] = field(default_factory=dict)  # id -> version installed
    alerting_files: list[str] = field(default_factory=list)
    base_interval_seconds: int = 10


def load(provisioning_dir: Path, dashboards_dir: Path, env: Mapping[str, str],
         plugins: Mapping[str, str]) -> Provisioning:
    def parsed(sub: str, suffixes: tuple[str, ...]) -> dict[str, Any]:
        return {p.name: yaml.safe_load(p.read_text()) for p in sorted((provisioning_dir / sub).iterdir())
                if p.name.endswith(suffixes)}

    boards = {}
    for path in sorted(dashboards_dir.glob("*.json")):
        board = json.loads(path.read_text())
        boards[board["uid"]] = board
    return Provisioning(
        # config_reader.go (alerting) reads .yaml, .yml and .json; datasources and dashboards .yaml/.yml
        alerting=parsed("alerting", (".yaml", ".yml", ".json")),
        datasources=parsed("datasources", (".yaml", ".yml")),
        dashboard_providers=parsed("dashboards", (".yaml", ".yml")),
        dashboards=boards,
        env=dict(env),
        plugins=dict(plugins),
        alerting_files=sorted(p.name for p in (provisioning_dir / "alerting").iterdir()),
    )


def _unknown(where: str, node: Mapping[str, Any], known: Iterable[str]) -> list[str]:
    extra = sorted(set(node) - set(known))
    return [f"{where}: unknown key {k!r} (Grafana would silently ignore it)" for k in extra]


# --- data sources ------------------------------------------------------------------------------------------

# pkg/services/provisioning/datasources/types.go, upsertDataSourceFromConfigV1 (yaml tags).
DATASOURCE_KEYS = {"orgId", "version", "name", "type", "access", "url", "user", "database", "basicAuth",
                   "basicAuthUser", "withCredentials", "isDefault", "correlations", "jsonData", "secureJsonData",
                   "editable", "uid", "apiVersion", "isPrunable"}
DATASOURCE_FILE_KEYS = {"apiVersion", "datasources", "deleteDatasources", "prune"}
CLICKHOUSE_PLUGIN = "grafana-clickhouse-datasource"

# grafana/clickhouse-datasource v4.20.0: jsonData keys the backend reads (pkg/plugin/settings.go,
# LoadSettings and loadHttpHeaders) and the frontend saves (src/types/config.ts, CHConfig).
CLICKHOUSE_JSONDATA_KEYS = {
    # settings.go LoadSettings
    "server", "host", "port", "protocol", "secure", "path", "tlsSkipVerify", "tlsAuth", "tlsAuthWithCACert",
    "username", "defaultDatabase", "timeout", "dialTimeout", "queryTimeout", "customSettings",
    "forwardGrafanaHeaders", "enableRowLimit", "enableSchemaCache", "schemaCacheTTLSeconds", "rowCapacityHint",
    "httpHeaders", "connMaxLifetime", "maxIdleConns", "maxOpenConns",
    # config.ts CHConfig (frontend-only keys)
    "version", "defaultTable", "validateSql", "logs", "traces", "aliasTables", "enableSecureSocksProxy",
    "hideTableNameInAdhocFilters", "enableMapKeysDiscovery", "pdcInjected", "configMode", "signalType",
}
# settings.go: booleans that accept a JSON bool or a strconv.ParseBool string; any other type panics on
# the Go type assertion (jsonData[key].(bool)).
CLICKHOUSE_BOOL_KEYS = ("secure", "tlsSkipVerify", "tlsAuth", "tlsAuthWithCACert", "forwardGrafanaHeaders",
                        "enableRowLimit")
CLICKHOUSE_SECURE_KEYS = {"password", "tlsCACert", "tlsClientCert", "tlsClientKey"}  # + secureHttpHeaders.*


def clickhouse_settings_errors(where: str, json_data: Mapping[str, Any], secure: Mapping[str, Any]) -> list[str]:
    """grafana/clickhouse-datasource v4.20.0 pkg/plugin/settings.go LoadSettings + Settings.isValid, and
    pkg/plugin/driver.go Connect (timeouts through strconv.Atoi), on interpolated jsonData."""
    errors = _unknown(f"{where} jsonData", json_data, CLICKHOUSE_JSONDATA_KEYS)
    host = json_data.get("host", json_data.get("server", ""))
    if not isinstance(host, str) or not host.strip():
        errors.append(f"{where}: invalid server host (settings.go isValid: ErrorMessageInvalidHost)")
    port = json_data.get("port")
    if isinstance(port, str):
        try:
            port = go_parse_int(port, 0)
        except ValueError as exc:
            errors.append(f"{where}: could not parse port value: {exc}")
            port = None
    elif port is not None and not isinstance(port, int | float):
        errors.append(f"{where}: port must be a number or a numeric string")
        port = None
    if not port:
        errors.append(f"{where}: invalid port (settings.go isValid: ErrorMessageInvalidPort)")
    # driver.go Connect: anything but "http" silently means the native protocol; be explicit.
    if json_data.get("protocol") not in ("native", "http"):
        errors.append(f"{where}: protocol must be 'native' or 'http', got {json_data.get('protocol')!r}")
    for key in CLICKHOUSE_BOOL_KEYS:
        if key in json_data:
            value = json_data[key]
            if isinstance(value, str):
                try:
                    go_parse_bool(value)
                except ValueError as exc:
                    errors.append(f"{where}: could not parse {key} value: {exc}")
            elif not isinstance(value, bool):
                errors.append(f"{where}: {key} must be a boolean (the plugin's type assertion would panic)")
    for key in ("username", "defaultDatabase", "path", "protocol"):
        if key in json_data and not isinstance(json_data[key], str):
            errors.append(f"{where}: {key} must be a string (the plugin's type assertion would panic)")
    for key in ("dialTimeout", "queryTimeout"):
        value = json_data.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            continue  # LoadSettings formats a JSON number as an integer string
        if value is not None:
            try:
                go_parse_int(str(value))
            except ValueError:
                errors.append(f"{where}: invalid {key}: {value} (driver.go Connect, strconv.Atoi)")
    for key in secure:
        if key not in CLICKHOUSE_SECURE_KEYS and not key.startswith("secureHttpHeaders."):
            errors.append(f"{where} secureJsonData: unknown key {key!r} (the plugin never reads it)")
    return errors


def datasource_errors(prov: Provisioning) -> list[str]:
    errors: list[str] = []
    defaults: dict[int, int] = {}
    uids: dict[tuple[int, str], str] = {}
    names: dict[tuple[int, str], str] = {}
    for filename, doc in prov.datasources.items():
        if not isinstance(doc, dict):
            errors.append(f"{filename}: not a mapping")
            continue
        errors += _unknown(filename, doc, DATASOURCE_FILE_KEYS)
        # config_reader.go parseDatasourceConfig: apiVersion > 0 selects the v1 format; 0 is deprecated.
        if not isinstance(doc.get("apiVersion"), int) or doc["apiVersion"] < 1:
            errors.append(f"{filename}: apiVersion must be 1 (0 is the deprecated v0 format)")
        for ds in doc.get("datasources") or []:
            where = f"{filename}: datasource {ds.get('name')!r}"
            errors += _unknown(where, ds, DATASOURCE_KEYS)
            org = int(interpolate(str(ds.get("orgId", 1)), prov.env) or 1)  # validateDefaultUniqueness: 0 -> 1
            if org != 1:  # validateAccessAndOrgID: the org must exist; only org 1 exists at first start
                errors.append(f"{where}: orgId {org} does not exist at first start")
            name = interpolate(str(ds.get("name", "")), prov.env)
            if not name.strip():
                errors.append(f"{where}: a data source needs a name")
            ds_type = ds.get("type", "")
            if not ds_type:
                errors.append(f"{where}: a data source needs a type")
            uid = interpolate(str(ds.get("uid", "")), prov.env)
            if not uid:
                errors.append(f"{where}: no uid (Grafana would derive one from the name; rules and dashboards "
                              "refer to it, so it must be fixed)")  # project rule
            elif (problem := uid_error(uid)) is not None:
                errors.append(f"{where}: {problem}")  # datasources service: util.ValidateUID on the uid
            for seen, key in ((uids, uid), (names, name)):
                if (org, key) in seen:
                    errors.append(f"{where}: duplicates {seen[(org, key)]} ({key!r})")
                seen[(org, key)] = where
            access = ds.get("access", "proxy")
            if access not in ("proxy", "direct"):  # validateAccessAndOrgID (Grafana warns, then uses proxy)
                errors.append(f"{where}: access must be 'proxy' or 'direct', got {access!r}")
            if ds.get("isDefault"):  # validateDefaultUniqueness: ErrInvalidConfigToManyDefault
                defaults[org] = defaults.get(org, 0) + 1
                if defaults[org] > 1:
                    errors.append("datasource.yaml config is invalid. Only one datasource per organization "
                                  "can be marked as default")
            if ds_type and ds_type not in prov.plugins:
                errors.append(f"{where}: type {ds_type!r} is not a plugin this Grafana installs")
            if ds_type == CLICKHOUSE_PLUGIN:
                errors += clickhouse_settings_errors(where, interpolate_tree(ds.get("jsonData") or {}, prov.env),
                                                     ds.get("secureJsonData") or {})
    return errors


def datasource_types(prov: Provisioning) -> dict[str, str]:
    """uid -> plugin type of every provisioned data source."""
    return {interpolate(str(ds.get("uid", "")), prov.env): ds.get("type", "")
            for doc in prov.datasources.values() for ds in (doc or {}).get("datasources") or []}


# --- dashboards providers ------------------------------------------------------------------------------------

DASHBOARD_PROVIDER_KEYS = {"name", "type", "orgId", "folder", "folderUid", "editable", "options",
                           "disableDeletion", "updateIntervalSeconds", "allowUiUpdates"}


def dashboard_provider_errors(prov: Provisioning) -> list[str]:
    """pkg/services/provisioning/dashboards/config_reader.go readConfig and types.go (configV1)."""
    errors: list[str] = []
    folder_uids: dict[str, int] = {}
    for filename, doc in prov.dashboard_providers.items():
        if not isinstance(doc.get("apiVersion"), int) or doc["apiVersion"] < 1:
            errors.append(f"{filename}: apiVersion must be 1")
        for provider in doc.get("providers") or []:
            where = f"{filename}: provider {provider.get('name')!r}"
            errors += _unknown(where, provider, DASHBOARD_PROVIDER_KEYS)
            if provider.get("type", "file") != "file":
                errors.append(f"{where}: only the file provider is used here")
            if not (provider.get("options") or {}).get("path"):
                errors.append(f"{where}: options.path is required by the file reader")
            folder_uid = provider.get("folderUid", "")
            if folder_uid:
                if (problem := uid_error(folder_uid)) is not None:
                    errors.append(f"{where}: folderUid: {problem}")
                folder_uids[folder_uid] = folder_uids.get(folder_uid, 0) + 1
    # readConfig logs "the same folder UID is used more than once"
    errors += [f"folder uid {uid!r} is used by {n} providers" for uid, n in folder_uids.items() if n > 1]
    titles: set[str] = set()
    for uid, board in prov.dashboards.items():
        if (problem := uid_error(uid)) is not None:
            errors.append(f"dashboard {uid!r}: {problem}")
        # one provider, one folder: the dashboard store keeps titles unique per folder
        if board.get("title") in titles:
            errors.append(f"dashboard {uid!r}: title {board.get('title')!r} is used twice in the folder")
        titles.add(board.get("title"))
    return errors


# --- alerting ---------------------------------------------------------------------------------------------

# pkg/services/provisioning/alerting/types.go (AlertingFileV1), rules_types.go (AlertRuleGroupV1,
# AlertRuleV1, QueryV1, NotificationSettingsV1), contact_point_types.go (ContactPointV1, ReceiverV1).
ALERTING_FILE_KEYS = {"apiVersion", "groups", "deleteRules", "contactPoints", "deleteContactPoints", "policies",
                      "resetPolicies", "templates", "deleteTemplates", "muteTimes", "deleteMuteTimes"}
GROUP_KEYS = {"orgId", "name", "folder", "interval", "rules"}
RULE_KEYS = {"uid", "title", "condition", "data", "dasboardUid", "dashboardUid", "panelId", "noDataState",
             "execErrState", "for", "keepFiringFor", "missing_series_evals_to_resolve", "annotations", "labels",
             "isPaused", "notification_settings", "record"}
QUERY_KEYS = {"refId", "queryType", "relativeTimeRange", "datasourceUid", "model"}
CONTACT_POINT_KEYS = {"orgId", "name", "receivers"}
RECEIVER_KEYS = {"uid", "type", "settings", "disableResolveMessage"}

# pkg/services/ngalert/models/alert_rule.go, NoDataStateFromString and ErrStateFromString.
NO_DATA_STATES = {"Alerting", "NoData", "OK", "KeepLast"}
EXEC_ERR_STATES = {"Alerting", "Error", "OK", "KeepLast"}
DASHBOARD_UID_ANNOTATION = "__dashboardUid__"
PANEL_ID_ANNOTATION = "__panelId__"
# alert_rule.go LabelsUserCannotSpecify
RESERVED_LABELS = {"__grafana_autogenerated__", "__grafana_receiver__", "__grafana_route_settings_hash__"}
# pkg/expr/nodes.go: DatasourceUID "__expr__" and OldDatasourceUID "-100" are server-side expressions.
EXPRESSION_UIDS = {"__expr__", "-100"}
# pkg/expr/commands.go GetExpressionCommandType
EXPRESSION_TYPES = {"math", "reduce", "resample", "classic_conditions", "threshold", "sql"}
# pkg/expr/threshold.go: supported threshold functions and how many params each needs.
THRESHOLD_PARAMS = {"gt": 1, "lt": 1, "eq": 1, "ne": 1, "ge": 1, "le": 1, "within_range": 2, "outside_range": 2,
                    "within_range_included": 2, "outside_range_included": 2}
# definitions/provisioning_contactpoints.go, EmbeddedContactPoint.Type (its swagger enum); Valid() looks the
# type up in the notifier factories and refuses an unknown one. Newer Grafana adds types; none is used here.
RECEIVER_TYPES = {"alertmanager", "dingding", "discord", "email", "googlechat", "kafka", "line", "opsgenie",
                  "pagerduty", "pushover", "sensugo", "slack", "teams", "telegram", "threema", "victorops",
                  "webhook", "wecom"}
# Prometheus labels.MatchType as written in object_matchers
MATCHER_OPS = {"=", "!=", "=~", "!~"}


def _query_errors(where: str, query: dict, refs: set[str], ds_types: Mapping[str, str]) -> list[str]:
    errors = _unknown(where, query, QUERY_KEYS)
    ref = query.get("refId", "")
    ds_uid = query.get("datasourceUid", "")
    model = query.get("model")
    if not ds_uid:  # pkg/expr/graph.go buildDependencyGraphAll
        errors.append(f"{where}: missing datasource uid in query with refId {ref}")
    if not isinstance(model, dict):  # values.JSONValue unmarshals the model into a map
        errors.append(f"{where}: model must be a mapping")
        model = {}
    rng = query.get("relativeTimeRange") or {}
    # alert_query.go Duration.UnmarshalYAML: only a YAML int (seconds) is accepted
    for key in ("from", "to"):
        if key in rng and (not isinstance(rng[key], int) or isinstance(rng[key], bool)):
            errors.append(f"{where}: invalid duration {rng[key]!r} (relativeTimeRange.{key} is whole seconds)")
    if ds_uid in EXPRESSION_UIDS:
        kind = model.get("type")
        if kind not in EXPRESSION_TYPES:
            errors.append(f"{where}: expression type {kind!r} is not one of {sorted(EXPRESSION_TYPES)}")
        if kind in ("threshold", "reduce", "resample"):
            target = model.get("expression", "")
            # graph.go buildAllEdges: "unable to find dependent node" / "cannot reference itself"
            if target == ref:
                errors.append(f"{where}: expression '{target}' cannot reference itself")
            elif target not in refs:
                errors.append(f"{where}: unable to find dependent node '{target}'")
        if kind == "threshold":
            conditions = model.get("conditions") or []
            if len(conditions) != 1:  # threshold.go UnmarshalThresholdCommand
                errors.append(f"{where}: threshold expression requires exactly one condition")
            for cond in conditions:
                evaluator = (cond or {}).get("evaluator") or {}
                fn = evaluator.get("type")
                if fn not in THRESHOLD_PARAMS:
                    errors.append(f"{where}: expected threshold function to be one of {sorted(THRESHOLD_PARAMS)}, "
                                  f"got {fn}")
                elif len(evaluator.get("params") or []) < THRESHOLD_PARAMS[fn]:
                    errors.append(f"{where}: incorrect number of arguments: got "
                                  f"{len(evaluator.get('params') or [])} but need {THRESHOLD_PARAMS[fn]}")
    else:
        # alert_query.go PreSave: for a data source query, relativeTimeRange.From must be > To
        if not (isinstance(rng.get("from", 0), int) and isinstance(rng.get("to", 0), int)
                and rng.get("from", 0) > rng.get("to", 0)):
            errors.append(f"{where}: Invalid alert rule query {ref}: invalid relative time range "
                          f"[From: {rng.get('from', 0)}, To: {rng.get('to', 0)}]")
        # eval.go getExprRequest: "data source not found" at every evaluation
        if ds_uid and ds_uid not in ds_types:
            errors.append(f"{where}: failed to build query '{ref}': data source not found ({ds_uid})")
    return errors


def _rule_errors(where: str, rule: dict, prov: Provisioning, receivers: set[str]) -> list[str]:
    errors = _unknown(where, rule, RULE_KEYS)
    env = prov.env
    title = interpolate(str(rule.get("title", "")), env)
    uid = interpolate(str(rule.get("uid", "")), env)
    # rules_types.go AlertRuleV1.mapToModel
    if not title:
        return errors + [f"{where}: rule has no title set"]
    if not uid:
        return errors + [f"{where}: rule '{title}' failed to parse: no UID set"]
    if (problem := uid_error(uid)) is not None:  # alert_rule.go ValidateAlertRule -> util.ValidateUID
        errors.append(f"{where}: cannot create rule with UID '{uid}': {problem}")
    for key in ("for", "keepFiringFor"):
        if rule.get(key, "") != "":
            try:
                parse_prom_duration(interpolate(str(rule[key]), env))
            except ValueError as exc:
                errors.append(f"{where}: rule '{title}' failed to parse '{key}' field: {exc}")
    missing = rule.get("missing_series_evals_to_resolve")
    if missing is not None and (not isinstance(missing, int) or missing <= 0):
        errors.append(f"{where}: field `missing_series_evals_to_resolve` must be greater than 0")
    for key, allowed, kind in (("noDataState", NO_DATA_STATES, "NoData"), ("execErrState", EXEC_ERR_STATES, "Error")):
        value = interpolate(str(rule.get(key, "")), env).strip()
        if value and value not in allowed:
            errors.append(f"{where}: rule '{title}' failed to parse: unknown {kind} state option {value}")
    if not isinstance(rule.get("isPaused", False), bool):
        errors.append(f"{where}: isPaused must be a boolean")
    # annotations: a string map; alert_rule.go SetDashboardAndPanelFromAnnotations
    annotations = rule.get("annotations") or {}
    if not all(isinstance(v, str) for v in annotations.values()):
        errors.append(f"{where}: annotation values must be strings (quote numbers)")
    annotations = {k: interpolate_braced(str(v), env) for k, v in annotations.items()}
    dash_uid = annotations.get(DASHBOARD_UID_ANNOTATION, "")
    panel_id = annotations.get(PANEL_ID_ANNOTATION, "")
    if bool(dash_uid) != bool(panel_id):
        errors.append(f"{where}: invalid alert rule: both annotations {DASHBOARD_UID_ANNOTATION} and "
                      f"{PANEL_ID_ANNOTATION} must be specified")
    elif dash_uid:
        try:
            panel = go_parse_int(panel_id)
        except ValueError:
            errors.append(f"{where}: invalid alert rule: annotation {PANEL_ID_ANNOTATION} must be a valid "
                          "integer Panel ID")
        else:
            # Grafana stores the link unchecked; a link to nowhere is still a broken rule (project rule)
            board = prov.dashboards.get(dash_uid)
            if board is None:
                errors.append(f"{where}: {DASHBOARD_UID_ANNOTATION} {dash_uid!r} is not a provisioned dashboard")
            else:
                panels = {p["id"]: p for top in board.get("panels", []) for p in [top, *top.get("panels", [])]}
                if panel not in panels or panels[panel].get("type") == "row":
                    errors.append(f"{where}: {PANEL_ID_ANNOTATION} {panel} is not a panel of dashboard {dash_uid!r}")
    labels = rule.get("labels") or {}
    for name in labels:
        if name in RESERVED_LABELS:  # alert_rule.go ValidateAlertRule
            errors.append(f"{where}: system reserved label {name} cannot be defined")
    # data: AlertRuleV1.mapToModel "no data set"; refIds; condition
    data = rule.get("data") or []
    if not data:
        errors.append(f"{where}: rule '{title}' failed to parse: no data set")
    refs = [q.get("refId", "") for q in data]
    # pkg/expr/graph.go buildNodeRegistry keeps one node per refId: a second query with the same refId
    # shadows the first, so the condition may evaluate the wrong query.
    for ref in sorted({r for r in refs if refs.count(r) > 1}):
        errors.append(f"{where}: refId {ref!r} is used by more than one query")
    if any(not r for r in refs):
        errors.append(f"{where}: a query has no refId")
    ds_types = datasource_types(prov)
    for query in data:
        errors += _query_errors(f"{where} query {query.get('refId')!r}", query, set(refs), ds_types)
    condition = interpolate(str(rule.get("condition", "")), env)
    if not condition and rule.get("record") is None:
        errors.append(f"{where}: rule '{title}' failed to parse: no condition set")
    elif condition and condition not in refs:  # eval ConditionValidator.Validate: ErrConditionNotExist
        errors.append(f"{where}: Condition {condition} does not exist, must be one of {refs}")
    settings = rule.get("notification_settings")
    if settings is not None:
        receiver = (settings or {}).get("receiver", "")
        if not receiver:  # NotificationSettingsV1.mapToModel
            errors.append(f"{where}: receiver must not be empty")
        elif receiver not in receivers:  # rules_provisioner.go pauses the rule: "(Provisioning Failed)"
            errors.append(f"{where}: receiver '{receiver}' does not exist")
    return errors


def _route_errors(where: str, route: dict, receivers: set[str], *, root: bool) -> list[str]:
    """definitions/alertmanager_validation.go Route.Validate / validateChild / ValidateReceivers, and
    provisioning/notification_policies.go UpdatePolicyTree (receiver "" is allowed below the root)."""
    errors: list[str] = []
    receiver = route.get("receiver", "")
    if root:
        if not receiver:
            errors.append(f"{where}: root route must specify a default receiver")
        if route.get("match") or route.get("match_re") or route.get("matchers") or route.get("object_matchers"):
            errors.append(f"{where}: root route must not have any matchers")
        if route.get("mute_time_intervals"):
            errors.append(f"{where}: root route must not have any mute time intervals")
    if receiver and receiver not in receivers:
        errors.append(f"{where}: receiver '{receiver}' does not exist")
    group_by = route.get("group_by") or []
    if "..." in group_by and len(group_by) > 1:
        errors.append(f"{where}: cannot have wildcard group_by (`...`) and other other labels at the same time")
    for label in sorted({g for g in group_by if group_by.count(g) > 1}):
        errors.append(f"{where}: duplicated label {label!r} in group_by")
    for key in ("group_wait", "group_interval", "repeat_interval"):
        if key in route:
            try:
                seconds = parse_prom_duration(route[key])
            except ValueError as exc:
                errors.append(f"{where}: {key}: {exc}")
                continue
            if key != "group_wait" and seconds == 0:
                errors.append(f"{where}: {key} cannot be zero")
    for i, matcher in enumerate(route.get("object_matchers") or []):
        # definitions ObjectMatchers.UnmarshalJSON: [name, op, value], labels.NewMatcher
        if not (isinstance(matcher, list) and len(matcher) == 3 and all(isinstance(p, str) for p in matcher)):
            errors.append(f"{where}: object_matchers[{i}] must be [name, operator, value]")
            continue
        if matcher[1] not in MATCHER_OPS:
            errors.append(f"{where}: object_matchers[{i}]: unknown match type {matcher[1]!r}")
        elif matcher[1] in ("=~", "!~"):
            try:
                re.compile(matcher[2])
            except re.error as exc:
                errors.append(f"{where}: object_matchers[{i}]: invalid regexp: {exc}")
    for i, child in enumerate(route.get("routes") or []):
        errors += _route_errors(f"{where}.routes[{i}]", child, receivers, root=False)
    return errors


def alerting_errors(prov: Provisioning) -> list[str]:
    errors: list[str] = []
    env = prov.env
    for name in prov.alerting_files:  # config_reader.go readConfig
        if not name.endswith((".yaml", ".yml", ".json")):
            errors.append(f"file has invalid suffix '{name}' (.yaml,.yml,.json accepted)")
    # contact points first: provisioner.go provisions them before policies and rules
    receivers: set[str] = set()
    receiver_uids: dict[str, str] = {}
    for filename, doc in prov.alerting.items():
        for i, cp in enumerate((doc or {}).get("contactPoints") or []):
            where = f"{filename}: contactPoints[{i}]"
            errors += _unknown(where, cp, CONTACT_POINT_KEYS)
            name = interpolate(str(cp.get("name", "")), env).strip()
            if not name:  # ContactPointV1.MapToModel
                errors.append(f"{where}: no name is set")
                continue
            receivers.add(name)
            for j, rc in enumerate(cp.get("receivers") or []):
                rwhere = f"{where} ({name}) receivers[{j}]"
                errors += _unknown(rwhere, rc, RECEIVER_KEYS)
                uid = interpolate(str(rc.get("uid", "")), env).strip()
                kind = interpolate(str(rc.get("type", "")), env).strip()
                settings = interpolate_tree(rc.get("settings") or {}, env)
                if not uid:  # ReceiverV1.mapToModel
                    errors.append(f"{rwhere}: no uid is set")
                elif uid in receiver_uids:
                    errors.append(f"{rwhere}: uid {uid!r} is also used by {receiver_uids[uid]}")
                receiver_uids.setdefault(uid, rwhere)
                if not kind:
                    errors.append(f"{rwhere}: no type is set")
                elif kind not in RECEIVER_TYPES:  # EmbeddedContactPoint.Valid: factory lookup
                    errors.append(f"{rwhere}: unknown type '{kind}'")
                if not settings:
                    errors.append(f"{rwhere}: no settings are set")
                # grafana/alerting receivers/webhook NewConfig: url is required (after interpolation)
                if kind == "webhook" and not str(settings.get("url", "")):
                    errors.append(f"{rwhere}: required field 'url' is not specified")
    for filename, doc in prov.alerting.items():
        if not isinstance(doc, dict):
            errors.append(f"{filename}: not a mapping")
            continue
        errors += _unknown(filename, doc, ALERTING_FILE_KEYS)
        if doc.get("apiVersion") != 1:
            errors.append(f"{filename}: apiVersion must be 1")
        for i, policy in enumerate(doc.get("policies") or []):
            errors += _route_errors(f"{filename}: policies[{i}]", interpolate_tree(policy, env), receivers, root=True)
    # rule groups
    uids: dict[tuple[int, str], str] = {}
    titles: dict[tuple[int, str, str], str] = {}
    for filename, doc in prov.alerting.items():
        for gi, group in enumerate((doc or {}).get("groups") or []):
            gwhere = f"{filename}: groups[{gi}]"
            errors += _unknown(gwhere, group, GROUP_KEYS)
            org = max(int(interpolate(str(group.get("orgId", 1)), env) or 1), 1)  # MapToModel: max(orgId, 1)
            name = interpolate(str(group.get("name", "")), env)
            folder = interpolate(str(group.get("folder", "")), env)
            # rules_types.go AlertRuleGroupV1.MapToModel
            if not name.strip():
                errors.append(f"{gwhere}: rule group has no name set")
            if not folder.strip():
                errors.append(f"{gwhere}: rule group has no folder set")
            try:
                interval = parse_prom_duration(interpolate(str(group.get("interval", "")), env))
            except ValueError as exc:
                errors.append(f"{gwhere}: interval: {exc}")
            else:
                # alert_rule.go ValidateRuleGroupInterval: non-zero and a multiple of the scheduler's base
                # interval (10 s), called by AlertRuleService.UpdateRuleGroup after the group's rules
                seconds = int(interval)
                if seconds <= 0 or seconds % prov.base_interval_seconds or interval != seconds:
                    errors.append(f"{gwhere}: invalid alert rule: interval ({group.get('interval')}) should be "
                                  f"non-zero and divided exactly by scheduler interval: {prov.base_interval_seconds}")
            for ri, rule in enumerate(group.get("rules") or []):
                rwhere = f"{gwhere} rule {rule.get('uid') or ri!r}"
                errors += _rule_errors(rwhere, rule, prov, receivers)
                uid = interpolate(str(rule.get("uid", "")), env)
                title = interpolate(str(rule.get("title", "")), env)
                # the rule table's unique (org_id, uid): a second rule with the uid is an *update* of the
                # first (rules_provisioner.go provisionRule), so the earlier rule silently disappears
                if uid and (org, uid) in uids:
                    errors.append(f"{rwhere}: uid {uid!r} is also the uid of {uids[(org, uid)]}")
                uids.setdefault((org, uid), rwhere)
                # project rule: Grafana 12 no longer requires unique titles per folder (grafana/grafana
                # #102067), but the default notification grouping is by alertname and folder, so two rules
                # with one title would share notifications.
                if title and (org, folder, title) in titles:
                    errors.append(f"{rwhere}: title {title!r} is also the title of {titles[(org, folder, title)]}")
                titles.setdefault((org, folder, title), rwhere)
    return errors


def all_errors(prov: Provisioning) -> list[str]:
    return datasource_errors(prov) + dashboard_provider_errors(prov) + alerting_errors(prov)
