#!/usr/bin/env python3
"""The loop-detector Grafana dashboards, as code (grafana-foundation-sdk, Grafana 11.6 schema).

    python grafana/dashboards_src/build.py           # rewrite grafana/dashboards/*.json
    python grafana/dashboards_src/build.py --check   # exit 1 if the committed JSON is stale

Every panel queries the provisioned ClickHouse data source (uid ``loop-clickhouse``) with raw SQL
in the ClickHouse plugin's query model (``editorType: sql``, ``queryType`` + ``format``), using the
plugin's macros (``$__timeFilter``, ``$__timeInterval``, ``$__interval_s`` ...) and the dashboard
variable ``${session_id}``. The output is deterministic: fixed uids and panel ids, sorted keys.

The SDK ships no ClickHouse query type, so :class:`ClickHouseQuery` implements the SDK's
``Dataquery`` variant for it (the same shape the plugin's SQL editor saves).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import bargauge, dashboard, piechart, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.piechart import PieChartType

DATASOURCE_UID = "loop-clickhouse"
DATASOURCE_TYPE = "grafana-clickhouse-datasource"
PLUGIN_VERSION = "4.20.0"  # the plugin version docker-compose.yml installs
DATASOURCE = dm.DataSourceRef(type_val=DATASOURCE_TYPE, uid=DATASOURCE_UID)

OUT_DIR = Path(__file__).resolve().parent.parent / "dashboards"
TAGS = ["loop-detector"]

# Kept literal (not imported from the detector) so the dashboards build without the package; the
# tests check them against detector.core.escalation.LEVELS and detector.settings.config.SIGNAL_NAMES.
LEVELS = ("none", "warn", "throttle", "inject", "hard_stop")
SIGNALS = ("content_similarity", "tool_call_repetition", "response_stagnation", "error_cycling",
           "token_velocity", "context_growth", "cost_velocity")
DEFAULT_THRESHOLDS = {"warn": 0.30, "throttle": 0.50, "inject": 0.70, "hard_stop": 0.90}
LEVEL_COLORS = {"none": "green", "warn": "yellow", "throttle": "orange", "inject": "red", "hard_stop": "dark-red"}
VELOCITY_FACTOR = 10  # the velocity breaker trips at 10x the key's baseline
VELOCITY_MIN_BASELINE_TPM = 1000  # VelocityParams.min_baseline_tpm default

UIDS = {
    "overview": "loop-overview",
    "session": "loop-session",
    "cost": "loop-cost-velocity",
    "live": "loop-live-calls",
}
SESSION_LINK = f"/d/{UIDS['session']}?var-session_id=${{__value.raw}}&${{__url_time_range}}"

# Query formats of sqlds (the plugin's backend): 0 time series (long frames widened by string
# columns), 1 table. queryType is what the plugin's SQL editor stores beside it.
FORMATS = {"timeseries": 0, "table": 1}


class ClickHouseQuery(cogvariants.Dataquery):
    """A grafana-clickhouse-datasource raw SQL query, as the plugin's SQL editor saves it."""

    def __init__(self, raw_sql: str, query_type: str, ref_id: str = "A") -> None:
        if query_type not in FORMATS:
            raise ValueError(f"query type must be one of {sorted(FORMATS)}, not {query_type!r}")
        self.raw_sql = raw_sql
        self.query_type = query_type
        self.ref_id = ref_id

    def to_json(self) -> dict[str, object]:
        return {
            "datasource": DATASOURCE.to_json(),
            "editorType": "sql",
            "format": FORMATS[self.query_type],
            "pluginVersion": PLUGIN_VERSION,
            "queryType": self.query_type,
            "rawSql": self.raw_sql,
            "refId": self.ref_id,
        }


_PLACEHOLDER = re.compile(r"^(\s*)@(\w+)(,?)$")


def format_sql(raw_sql: str) -> str:
    """Dedent and strip; a line ``@NAME`` (or ``@NAME,``) becomes the items of ``SQL_LISTS[NAME]``,
    one per line at that line's indentation, comma-separated."""
    lines = []
    for line in textwrap.dedent(raw_sql).strip().splitlines():
        m = _PLACEHOLDER.match(line)
        if m is None:
            lines.append(line.rstrip())
            continue
        indent, name, trailing = m.groups()
        items = SQL_LISTS[name]
        lines.extend(f"{indent}{item}{',' if i < len(items) - 1 else trailing}" for i, item in enumerate(items))
    return "\n".join(lines)


class SQL(cogbuilder.Builder[ClickHouseQuery]):
    """Builder for :class:`ClickHouseQuery` (the SQL goes through :func:`format_sql`)."""

    def __init__(self, raw_sql: str, query_type: str = "table") -> None:
        self._internal = ClickHouseQuery(format_sql(raw_sql), query_type)

    def ref_id(self, ref_id: str) -> SQL:
        self._internal.ref_id = ref_id
        return self

    def build(self) -> ClickHouseQuery:
        return self._internal


def ts_sql(raw_sql: str, ref_id: str = "A") -> SQL:
    return SQL(raw_sql, "timeseries").ref_id(ref_id)


def table_sql(raw_sql: str, ref_id: str = "A") -> SQL:
    return SQL(raw_sql, "table").ref_id(ref_id)


# --- small helpers over the SDK ----------------------------------------------------------------------

def fixed_color(color: str) -> dm.DynamicConfigValue:
    return dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})


def display(name: str) -> dm.DynamicConfigValue:
    return dm.DynamicConfigValue(id_val="displayName", value=name)


def unit(name: str) -> dm.DynamicConfigValue:
    return dm.DynamicConfigValue(id_val="unit", value=name)


def session_link() -> dm.DynamicConfigValue:
    return dm.DynamicConfigValue(id_val="links", value=[{
        "title": "Open session drill-down", "url": SESSION_LINK}])


def level_mappings() -> list[dm.ValueMapping]:
    return [dm.ValueMap(options={
        level: dm.ValueMappingResult(text=level, color=LEVEL_COLORS[level], index=i)
        for i, level in enumerate(LEVELS)})]


def single_color(color: str) -> dashboard.ThresholdsConfig:
    """Thresholds that color every value alike (Grafana's default turns values above 80 red)."""
    return dashboard.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps([dm.Threshold(value=None, color=color)])


def confidence_thresholds() -> dashboard.ThresholdsConfig:
    steps = [dm.Threshold(value=None, color="green")]
    steps += [dm.Threshold(value=DEFAULT_THRESHOLDS[level], color=LEVEL_COLORS[level]) for level in LEVELS[1:]]
    return dashboard.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps)


def reduce(calcs: str = "lastNotNull", fields: str = "", values: bool = False) -> Any:
    return cb.ReduceDataOptions().calcs([calcs]).fields(fields).values(values)


def legend_bottom() -> Any:
    return cb.VizLegendOptions().display_mode(common.LegendDisplayMode.LIST).placement(
        common.LegendPlacement.BOTTOM).show_legend(True)


def tooltip_all() -> Any:
    return cb.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING)


def stacked() -> Any:
    return cb.StackingConfig().mode(common.StackingMode.NORMAL)


def threshold_lines() -> Any:
    return cb.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)


def bars(panel: timeseries.Panel) -> timeseries.Panel:
    return (panel.draw_style(common.GraphDrawStyle.BARS).fill_opacity(80).line_width(1)
            .stacking(stacked()).legend(legend_bottom()).tooltip(tooltip_all()))


def lines(panel: timeseries.Panel, fill: int = 10) -> timeseries.Panel:
    return (panel.draw_style(common.GraphDrawStyle.LINE).line_interpolation(common.LineInterpolation.LINEAR)
            .fill_opacity(fill).line_width(1).show_points(common.VisibilityMode.AUTO)
            .legend(legend_bottom()).tooltip(tooltip_all()))


class Layout:
    """Places panels left to right on the 24-column grid, with explicit positions and ids."""

    def __init__(self, board: dashboard.Dashboard) -> None:
        self.board = board
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1

    def _newline(self) -> None:
        if self.x:
            self.x = 0
            self.y += self.row_h
            self.row_h = 0

    def row(self, title: str) -> None:
        self._newline()
        self.board.with_row(dashboard.Row(title).id(self.next_id).grid_pos(dm.GridPos(h=1, w=24, x=0, y=self.y)))
        self.next_id += 1
        self.y += 1

    def add(self, panel: Any, w: int, h: int) -> None:
        if self.x + w > 24:
            self._newline()
        panel.id(self.next_id).grid_pos(dm.GridPos(h=h, w=w, x=self.x, y=self.y)).datasource(DATASOURCE)
        self.board.with_panel(panel)
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)


def new_dashboard(key: str, title: str, description: str, time_from: str = "now-6h", refresh: str = "30s") -> Any:
    links = dashboard.DashboardLink("Loop detector").type(dm.DashboardLinkType.DASHBOARDS).tags(TAGS) \
        .as_dropdown(True).keep_time(True).include_vars(False)
    return (dashboard.Dashboard(title).uid(UIDS[key]).description(description).tags(TAGS)
            .time(time_from, "now").refresh(refresh).timezone("browser").editable()
            .tooltip(dm.DashboardCursorSync.CROSSHAIR).link(links))


# --- shared SQL fragments ----------------------------------------------------------------------------

_LEVEL_ARRAY = "[" + ", ".join(f"'{level}'" for level in LEVELS) + "]"
SQL_LISTS: dict[str, list[str]] = {
    "LEVEL_COUNTS": [f"countIf(level = '{level}') AS {level}" for level in LEVELS],
    "LAST_LEVEL_COUNTS": [f"countIf(last_level = '{level}') AS {level}" for level in LEVELS],
    "DOMINANT_COUNTS": [f"countIf(dominant_signal = '{s}') AS {s}" for s in SIGNALS],
    "SIGNALS": list(SIGNALS),
    "LEVEL_ARRAY": [f"{_LEVEL_ARRAY} AS levels"],
    "ESCALATIONS_TO": [
        f"countIf(to_level = '{level}' AND indexOf(levels, to_level) > indexOf(levels, from_level)) AS to_{level}"
        for level in LEVELS[1:]
    ] + ["countIf(indexOf(levels, to_level) < indexOf(levels, from_level)) AS step_down"],
}


# --- Loop overview -----------------------------------------------------------------------------------

def overview() -> Any:
    board = new_dashboard(
        "overview", "Loop detector: overview",
        "Sessions by enforcement level, the sessions closest to a loop, what drives them, and what the loops cost.")
    grid = Layout(board)

    grid.row("Now")
    level_stat = (stat.Panel().thresholds(single_color("text")).title("Sessions by enforcement level")
                  .description("Sessions active in the time range, by their current level (loop_state).")
                  .with_target(table_sql("""
                      SELECT
                          @LEVEL_COUNTS
                      FROM otel.loop_state FINAL
                      WHERE scope = 'session' AND deleted = 0 AND $__timeFilter(last_activity)
                  """))
                  .reduce_options(reduce(fields="/.*/")).color_mode(common.BigValueColorMode.BACKGROUND)
                  .graph_mode(common.BigValueGraphMode.NONE).text_mode(common.BigValueTextMode.VALUE_AND_NAME))
    for level in LEVELS:
        level_stat.override_by_name(level, [fixed_color(LEVEL_COLORS[level])])
    grid.add(level_stat, 12, 5)

    loop_spend = (stat.Panel().thresholds(single_color("text")).title("Spent inside loops")
                  .description("Tokens and cost of calls scored while their session was at warn or above, "
                               "and that cost's share of all scored spend.")
                  .with_target(table_sql("""
                      SELECT
                          sumIf(tokens, level != 'none') AS loop_tokens,
                          sumIf(cost_usd, level != 'none') AS loop_cost_usd,
                          if(sum(cost_usd) > 0, sumIf(cost_usd, level != 'none') / sum(cost_usd), 0) AS loop_cost_share
                      FROM otel.loop_scores
                      WHERE scope = 'session' AND $__timeFilter(ts)
                  """))
                  .reduce_options(reduce(fields="/.*/")).graph_mode(common.BigValueGraphMode.NONE)
                  .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
                  .override_by_name("loop_tokens", [display("Tokens in loops"), unit("short")])
                  .override_by_name("loop_cost_usd", [display("Cost in loops"), unit("currencyUSD")])
                  .override_by_name("loop_cost_share", [display("Share of cost"), unit("percentunit")]))
    grid.add(loop_spend, 8, 5)

    blocked = (stat.Panel().thresholds(single_color("text")).title("Blocked calls")
               .description("Calls scored while their session was at hard_stop (the API answers 429), "
                            "plus enforced block actions of rules and budgets.")
               .with_target(table_sql("""
                   SELECT
                       (SELECT countIf(level = 'hard_stop') FROM otel.loop_scores
                        WHERE scope = 'session' AND $__timeFilter(ts)) AS calls_at_hard_stop,
                       (SELECT count() FROM otel.loop_events
                        WHERE kind IN ('rule', 'budget', 'manual') AND action = 'block' AND mode != 'dry_run'
                          AND $__timeFilter(ts)) AS block_actions
               """))
               .reduce_options(reduce(fields="/.*/")).graph_mode(common.BigValueGraphMode.NONE)
               .text_mode(common.BigValueTextMode.VALUE_AND_NAME).color_mode(common.BigValueColorMode.VALUE)
               .override_by_name("calls_at_hard_stop", [display("Calls at hard_stop"), fixed_color("dark-red")])
               .override_by_name("block_actions", [display("Block actions"), fixed_color("red")]))
    grid.add(blocked, 4, 5)

    grid.row("Over time")
    by_level = bars(timeseries.Panel().title("Sessions by enforcement level over time")
                    .description("Per interval, each session counted once at the last level it had in it.")
                    .with_target(ts_sql("""
                        SELECT
                            time,
                            @LAST_LEVEL_COUNTS
                        FROM
                        (
                            SELECT $__timeInterval(ts) AS time, scope_id, argMax(level, ts) AS last_level
                            FROM otel.loop_scores
                            WHERE scope = 'session' AND $__timeFilter(ts)
                            GROUP BY time, scope_id
                        )
                        GROUP BY time
                        ORDER BY time
                    """)).unit("short"))
    for level in LEVELS:
        by_level.override_by_name(level, [fixed_color(LEVEL_COLORS[level])])
    grid.add(by_level, 12, 8)

    transitions = bars(timeseries.Panel().title("Enforcement transitions")
                       .description("Escalation events by the level they moved to; de-escalations count "
                                    "as step-downs.")
                       .with_target(ts_sql("""
                           WITH
                               @LEVEL_ARRAY
                           SELECT
                               $__timeInterval(ts) AS time,
                               @ESCALATIONS_TO
                           FROM otel.loop_events
                           WHERE kind = 'escalation' AND $__timeFilter(ts)
                           GROUP BY time
                           ORDER BY time
                       """)).unit("short"))
    for level in LEVELS[1:]:
        transitions.override_by_name(f"to_{level}", [display(f"→ {level}"), fixed_color(LEVEL_COLORS[level])])
    transitions.override_by_name("step_down", [display("step down"), fixed_color("blue")])
    grid.add(transitions, 12, 8)

    blocked_ts = bars(timeseries.Panel().title("Blocked calls over time")
                      .with_target(ts_sql("""
                          SELECT $__timeInterval(ts) AS time, countIf(level = 'hard_stop') AS calls_at_hard_stop
                          FROM otel.loop_scores
                          WHERE scope = 'session' AND $__timeFilter(ts)
                          GROUP BY time
                          ORDER BY time
                      """, "A"))
                      .with_target(ts_sql("""
                          SELECT
                              $__timeInterval(ts) AS time,
                              countIf(mode != 'dry_run') AS block_actions,
                              countIf(mode = 'dry_run') AS dry_run_blocks
                          FROM otel.loop_events
                          WHERE kind IN ('rule', 'budget', 'manual') AND action = 'block' AND $__timeFilter(ts)
                          GROUP BY time
                          ORDER BY time
                      """, "B")).unit("short")
                      .override_by_name("calls_at_hard_stop", [fixed_color("dark-red")])
                      .override_by_name("block_actions", [fixed_color("red")])
                      .override_by_name("dry_run_blocks", [fixed_color("purple")]))
    grid.add(blocked_ts, 12, 8)

    loop_cost_ts = lines(timeseries.Panel().title("Tokens and cost inside loops")
                         .description("Calls scored at warn or above, per interval.")
                         .with_target(ts_sql("""
                             SELECT
                                 $__timeInterval(ts) AS time,
                                 sumIf(tokens, level != 'none') AS loop_tokens,
                                 sumIf(cost_usd, level != 'none') AS loop_cost_usd
                             FROM otel.loop_scores
                             WHERE scope = 'session' AND $__timeFilter(ts)
                             GROUP BY time
                             ORDER BY time
                         """)), fill=20)
    loop_cost_ts.override_by_name("loop_tokens", [display("tokens"), unit("short")])
    loop_cost_ts.override_by_name("loop_cost_usd", [
        display("cost"), unit("currencyUSD"), dm.DynamicConfigValue(id_val="custom.axisPlacement", value="right")])
    grid.add(loop_cost_ts, 12, 8)

    grid.row("Sessions and signals")
    top = (table.Panel().title("Top sessions by confidence")
           .description("Highest peak confidence among the sessions active in the time range. "
                        "Click a session to drill down.")
           .with_target(table_sql("""
               SELECT
                   scope_id AS session_id,
                   level,
                   round(confidence, 3) AS confidence_now,
                   round(peak_confidence, 3) AS peak,
                   dominant_signal,
                   virtual_key,
                   call_count AS calls,
                   total_tokens AS tokens,
                   round(cost_usd, 4) AS cost,
                   last_activity
               FROM otel.loop_state FINAL
               WHERE scope = 'session' AND deleted = 0 AND $__timeFilter(last_activity)
               ORDER BY peak_confidence DESC, confidence DESC, session_id
               LIMIT 20
           """))
           .override_by_name("session_id", [session_link()])
           .override_by_name("level", [dm.DynamicConfigValue(id_val="mappings", value=level_mappings()),
                                       dm.DynamicConfigValue(id_val="custom.cellOptions",
                                                             value={"type": "color-background"})])
           .override_by_name("cost", [unit("currencyUSD")]))
    grid.add(top, 16, 10)

    dominant = (piechart.Panel().title("Dominant signals")
                .description("Which signal dominated the confidence of calls scored at warn or above.")
                .with_target(table_sql("""
                    SELECT
                        @DOMINANT_COUNTS
                    FROM otel.loop_scores
                    WHERE scope = 'session' AND level != 'none' AND $__timeFilter(ts)
                """))
                .pie_type(PieChartType.DONUT).reduce_options(reduce(calcs="sum", fields="/.*/"))
                .tooltip(tooltip_all()))
    grid.add(dominant, 8, 10)

    events = (table.Panel().title("Recent enforcement events")
              .description("Escalations, rule trips, budget and manual actions, newest first.")
              .with_target(table_sql("""
                  SELECT
                      ts AS time, kind, scope, scope_id, session_id, detector, rule_name, action, mode,
                      from_level, to_level, round(confidence, 3) AS event_confidence, dominant_signal, message
                  FROM otel.loop_events
                  WHERE $__timeFilter(ts)
                  ORDER BY ts DESC
                  LIMIT 200
              """))
              .override_by_name("session_id", [session_link()])
              .override_by_name("to_level", [dm.DynamicConfigValue(id_val="mappings", value=level_mappings()),
                                             dm.DynamicConfigValue(id_val="custom.cellOptions",
                                                                   value={"type": "color-text"})]))
    grid.add(events, 24, 10)
    return board


# --- Session drill-down ------------------------------------------------------------------------------

SESSION = "'${session_id}'"


def session() -> Any:
    board = new_dashboard(
        "session", "Loop detector: session drill-down",
        "One session: its escalation timeline, confidence and the seven signals call by call, and its calls.",
        time_from="now-3h")
    board.with_variable(
        dashboard.QueryVariable("session_id").label("Session").datasource(DATASOURCE)
        .query({"refId": "session_id", "queryType": "sql", "rawSql": textwrap.dedent("""
            SELECT scope_id
            FROM otel.loop_state FINAL
            WHERE scope = 'session' AND deleted = 0 AND $__timeFilter(last_activity)
            ORDER BY peak_confidence DESC, last_activity DESC
            LIMIT 500
        """).strip()})
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).allow_custom_value(True))
    grid = Layout(board)

    grid.row("Where the session stands")
    now = (stat.Panel().thresholds(single_color("text")).title("Session now")
           .with_target(table_sql(f"""
               SELECT
                   level,
                   round(confidence, 3) AS confidence_now,
                   round(peak_confidence, 3) AS peak,
                   dominant_signal,
                   call_count AS calls,
                   total_tokens AS tokens,
                   cost_usd AS cost
               FROM otel.loop_state FINAL
               WHERE scope = 'session' AND scope_id = {SESSION}
           """))
           .reduce_options(reduce(fields="/.*/")).graph_mode(common.BigValueGraphMode.NONE)
           .text_mode(common.BigValueTextMode.VALUE_AND_NAME).color_mode(common.BigValueColorMode.BACKGROUND)
           .override_by_name("level", [dm.DynamicConfigValue(id_val="mappings", value=level_mappings())])
           .override_by_name("confidence_now", [display("confidence"), dm.DynamicConfigValue(
               id_val="thresholds", value=confidence_thresholds().build())])
           .override_by_name("peak", [display("peak confidence"), dm.DynamicConfigValue(
               id_val="thresholds", value=confidence_thresholds().build())])
           .override_by_name("cost", [unit("currencyUSD")]))
    grid.add(now, 24, 4)

    timeline = (statetimeline.Panel().title("Escalation timeline")
                .description("The session's enforcement level after each scored call (loop_scores).")
                .with_target(table_sql(f"""
                    SELECT ts AS time, level
                    FROM otel.loop_scores
                    WHERE scope = 'session' AND scope_id = {SESSION} AND $__timeFilter(ts)
                    ORDER BY ts
                """))
                .mappings(level_mappings()).show_value(common.VisibilityMode.AUTO).merge_values(True)
                .row_height(0.8).legend(legend_bottom()))
    grid.add(timeline, 24, 5)

    confidence = lines(timeseries.Panel().title("Confidence")
                       .description("Weighted confidence per call: raw and EMA-smoothed, against the "
                                    "default escalation thresholds.")
                       .with_target(ts_sql(f"""
                           SELECT ts AS time, confidence AS smoothed, raw_confidence AS raw
                           FROM otel.loop_scores
                           WHERE scope = 'session' AND scope_id = {SESSION} AND $__timeFilter(ts)
                           ORDER BY ts
                       """))).min(0).max(1).thresholds(confidence_thresholds()).thresholds_style(threshold_lines())
    confidence.override_by_name("raw", [dm.DynamicConfigValue(id_val="custom.lineStyle",
                                                              value={"fill": "dash", "dash": [4, 4]})])
    grid.add(confidence, 12, 9)

    signals = lines(timeseries.Panel().title("Signals")
                    .description("The seven signals of each call, each in [0, 1].")
                    .with_target(ts_sql(f"""
                        SELECT
                            ts AS time,
                            @SIGNALS
                        FROM otel.loop_scores
                        WHERE scope = 'session' AND scope_id = {SESSION} AND $__timeFilter(ts)
                        ORDER BY ts
                    """)), fill=0).min(0).max(1)
    grid.add(signals, 12, 9)

    grid.row("Calls and events")
    calls = (table.Panel().title("Calls")
             .description("Every GenAI call of the session, newest first, with its fingerprints (hex) and "
                          "the score it got.")
             .with_target(table_sql(f"""
                 SELECT
                     c.ts AS time,
                     c.operation,
                     c.model,
                     c.tool_name,
                     arrayStringConcat(c.out_tool_names, ', ') AS requested_tools,
                     hex(c.tool_fp) AS tool_fp,
                     hex(c.request_fp) AS request_fp,
                     hex(c.turn_fp) AS turn_fp,
                     hex(c.response_fp) AS response_fp,
                     c.input_tokens,
                     c.output_tokens,
                     round(c.cost_usd, 6) AS cost,
                     c.is_error,
                     c.error_type,
                     hex(c.error_fp) AS error_fp,
                     s.level AS level_after,
                     round(s.confidence, 3) AS call_confidence,
                     s.dominant_signal AS dominant,
                     c.trace_id,
                     c.span_id
                 FROM otel.genai_calls AS c
                 LEFT JOIN
                 (
                     SELECT span_id, level, confidence, dominant_signal
                     FROM otel.loop_scores
                     WHERE scope = 'session' AND scope_id = {SESSION} AND $__timeFilter(ts)
                 ) AS s ON s.span_id = c.span_id
                 WHERE c.session_id = {SESSION} AND $__timeFilter(c.ts)
                 ORDER BY c.ts DESC
                 LIMIT 1000
             """))
             .override_by_name("level_after", [dm.DynamicConfigValue(id_val="mappings", value=level_mappings()),
                                               dm.DynamicConfigValue(id_val="custom.cellOptions",
                                                                     value={"type": "color-text"})])
             .override_by_name("cost", [unit("currencyUSD")]))
    grid.add(calls, 24, 12)

    events = (table.Panel().title("Detector events")
              .with_target(table_sql(f"""
                  SELECT
                      ts AS time, kind, scope, detector, rule_name, action, mode, from_level, to_level,
                      round(confidence, 3) AS event_confidence, dominant_signal, consecutive, message, trace_id
                  FROM otel.loop_events
                  WHERE session_id = {SESSION} AND $__timeFilter(ts)
                  ORDER BY ts DESC
                  LIMIT 500
              """)))
    grid.add(events, 24, 8)
    return board


# --- Cost and velocity -------------------------------------------------------------------------------

def cost_velocity() -> Any:
    board = new_dashboard(
        "cost", "Loop detector: cost and velocity",
        "Spend per feature (the cost cliff a loop draws), tokens per minute per key against its baseline, "
        "budget burn and velocity-breaker trips.")
    grid = Layout(board)

    grid.row("Cost")
    per_feature = bars(timeseries.Panel().title("Cost per feature")
                       .with_target(ts_sql("""
                           SELECT
                               $__timeInterval(ts) AS time,
                               if(feature = '', '(none)', feature) AS feature_name,
                               sum(cost_usd) AS cost
                           FROM otel.genai_calls
                           WHERE $__timeFilter(ts)
                           GROUP BY time, feature_name
                           ORDER BY time
                       """))).unit("currencyUSD").display_name("${__field.labels.feature_name}")
    grid.add(per_feature, 12, 9)

    cliff = lines(timeseries.Panel().title("Cumulative cost per feature (the cost cliff)")
                  .description("Running total over the time range: a loop shows as a cliff.")
                  .with_target(ts_sql("""
                      SELECT
                          time,
                          feature_name,
                          sum(cost) OVER (PARTITION BY feature_name ORDER BY time
                                          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cumulative_cost
                      FROM
                      (
                          SELECT
                              $__timeInterval(ts) AS time,
                              if(feature = '', '(none)', feature) AS feature_name,
                              sum(cost_usd) AS cost
                          FROM otel.genai_calls
                          WHERE $__timeFilter(ts)
                          GROUP BY time, feature_name
                      )
                      ORDER BY time
                  """)), fill=10).unit("currencyUSD").display_name("${__field.labels.feature_name}")
    grid.add(cliff, 12, 9)

    loop_cost = bars(timeseries.Panel().title("Cost inside loops per feature")
                     .description("Cost of calls scored while their session was at warn or above.")
                     .with_target(ts_sql("""
                         SELECT
                             $__timeInterval(ts) AS time,
                             if(feature = '', '(none)', feature) AS feature_name,
                             sum(cost_usd) AS loop_cost
                         FROM otel.loop_scores
                         WHERE scope = 'session' AND level != 'none' AND $__timeFilter(ts)
                         GROUP BY time, feature_name
                         ORDER BY time
                     """))).unit("currencyUSD").display_name("${__field.labels.feature_name}")
    grid.add(loop_cost, 12, 8)

    burn = (bargauge.Panel().thresholds(single_color("blue")).title("Budget burn: spend per feature")
            .description("Spend per feature in the time range, highest first.")
            .with_target(table_sql("""
                SELECT if(feature = '', '(none)', feature) AS feature_name, sum(cost_usd) AS spend
                FROM otel.genai_calls
                WHERE $__timeFilter(ts)
                GROUP BY feature_name
                ORDER BY spend DESC
                LIMIT 20
            """))
            .reduce_options(reduce(fields="/^spend$/", values=True)).unit("currencyUSD")
            .orientation(common.VizOrientation.HORIZONTAL).display_mode(common.BarGaugeDisplayMode.GRADIENT))
    grid.add(burn, 12, 8)

    grid.row("Velocity")
    tpm = lines(timeseries.Panel().title("Tokens per minute per virtual key, against its baseline")
                .description(
                    "Per-minute token rate of each key; baseline = mean of the key's previous 60 active minutes "
                    f"(floor {VELOCITY_MIN_BASELINE_TPM} TPM), the SQL approximation of the breaker's EMA; the "
                    f"breaker trips at {VELOCITY_FACTOR}x the baseline.")
                .with_target(ts_sql(f"""
                    SELECT
                        time,
                        key_name,
                        tpm,
                        greatest({VELOCITY_MIN_BASELINE_TPM}, ifNotFinite(avg(tpm) OVER w, 0)) AS baseline_tpm,
                        {VELOCITY_FACTOR} * greatest({VELOCITY_MIN_BASELINE_TPM}, ifNotFinite(avg(tpm) OVER w, 0))
                            AS trip_tpm
                    FROM
                    (
                        SELECT
                            toStartOfMinute(ts) AS time,
                            if(virtual_key = '', '(none)', virtual_key) AS key_name,
                            sum(input_tokens + output_tokens) AS tpm
                        FROM otel.genai_calls
                        WHERE $__timeFilter(ts)
                        GROUP BY time, key_name
                    )
                    WINDOW w AS (PARTITION BY key_name ORDER BY time ROWS BETWEEN 60 PRECEDING AND 1 PRECEDING)
                    ORDER BY time
                """)), fill=0).unit("short").display_name("${__field.name} ${__field.labels.key_name}")
    tpm.override_by_regexp("^trip_tpm.*", [dm.DynamicConfigValue(
        id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}), fixed_color("red")])
    tpm.override_by_regexp("^baseline_tpm.*", [dm.DynamicConfigValue(
        id_val="custom.lineStyle", value={"fill": "dot", "dash": [0, 10]})])
    grid.add(tpm, 24, 9)

    trips = bars(timeseries.Panel().title("Velocity-breaker trips")
                 .with_target(ts_sql("""
                     SELECT
                         $__timeInterval(ts) AS time,
                         if(virtual_key = '', scope_id, virtual_key) AS key_name,
                         count() AS trips
                     FROM otel.loop_events
                     WHERE kind = 'rule' AND detector = 'velocity' AND $__timeFilter(ts)
                     GROUP BY time, key_name
                     ORDER BY time
                 """))).unit("short").display_name("${__field.labels.key_name}")
    grid.add(trips, 12, 8)

    trip_table = (table.Panel().title("Velocity and budget events")
                  .with_target(table_sql("""
                      SELECT
                          ts AS time, kind, detector, scope, scope_id, virtual_key, feature, rule_name, action, mode,
                          message
                      FROM otel.loop_events
                      WHERE (detector = 'velocity' OR kind = 'budget') AND $__timeFilter(ts)
                      ORDER BY ts DESC
                      LIMIT 200
                  """)))
    grid.add(trip_table, 12, 8)

    grid.row("Budgets")
    budget_events = bars(timeseries.Panel().title("Budget actions")
                         .description("Budget events (kind 'budget') by action: alert when a budget is crossed, "
                                      "block when a blocking budget is exhausted.")
                         .with_target(ts_sql("""
                             SELECT
                                 $__timeInterval(ts) AS time,
                                 countIf(action = 'alert') AS alert,
                                 countIf(action = 'block' AND mode != 'dry_run') AS block,
                                 countIf(action = 'block' AND mode = 'dry_run') AS dry_run_block
                             FROM otel.loop_events
                             WHERE kind = 'budget' AND $__timeFilter(ts)
                             GROUP BY time
                             ORDER BY time
                         """))).unit("short")
    budget_events.override_by_name("alert", [fixed_color("yellow")])
    budget_events.override_by_name("block", [fixed_color("red")])
    budget_events.override_by_name("dry_run_block", [fixed_color("purple")])
    grid.add(budget_events, 12, 8)

    totals = (stat.Panel().thresholds(single_color("text")).title("Spend in range")
              .with_target(table_sql("""
                  SELECT
                      sum(cost_usd) AS cost,
                      sum(input_tokens + output_tokens) AS tokens,
                      count() AS calls
                  FROM otel.genai_calls
                  WHERE $__timeFilter(ts)
              """))
              .reduce_options(reduce(fields="/.*/")).graph_mode(common.BigValueGraphMode.NONE)
              .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
              .override_by_name("cost", [unit("currencyUSD")]))
    grid.add(totals, 12, 8)
    return board


# --- Live calls --------------------------------------------------------------------------------------

def live() -> Any:
    board = new_dashboard(
        "live", "Loop detector: live calls",
        "The newest GenAI calls, clustered by session, with each session's current enforcement level.",
        time_from="now-15m", refresh="5s")
    grid = Layout(board)

    totals = (stat.Panel().thresholds(single_color("text")).title("Traffic")
              .with_target(table_sql("""
                  SELECT
                      count() AS calls,
                      uniqExact(session_id) AS sessions,
                      countIf(is_error = 1) AS errors,
                      sum(input_tokens + output_tokens) AS tokens,
                      sum(cost_usd) AS cost
                  FROM otel.genai_calls
                  WHERE $__timeFilter(ts)
              """))
              .reduce_options(reduce(fields="/.*/")).graph_mode(common.BigValueGraphMode.NONE)
              .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
              .override_by_name("cost", [unit("currencyUSD")]))
    grid.add(totals, 12, 4)

    rate = bars(timeseries.Panel().title("Calls per second by session (ten busiest)")
                .with_target(ts_sql("""
                    SELECT $__timeInterval(ts) AS time, session_id, count() / $__interval_s AS calls_per_second
                    FROM otel.genai_calls
                    WHERE $__timeFilter(ts) AND session_id IN
                    (
                        SELECT session_id
                        FROM otel.genai_calls
                        WHERE $__timeFilter(ts)
                        GROUP BY session_id
                        ORDER BY count() DESC, session_id
                        LIMIT 10
                    )
                    GROUP BY time, session_id
                    ORDER BY time
                """))).unit("reqps").display_name("${__field.labels.session_id}")
    grid.add(rate, 12, 4)

    newest = (table.Panel().title("Newest calls, clustered by session")
              .description("The 500 newest calls; sessions ordered by their latest call, calls newest first.")
              .with_target(table_sql("""
                  SELECT
                      session_id, time, level, operation, model, tool_name, tokens, cost, is_error, error_type,
                      virtual_key, feature, trace_id
                  FROM
                  (
                      SELECT
                          c.session_id AS session_id,
                          c.ts AS time,
                          st.level AS level,
                          c.operation AS operation,
                          c.model AS model,
                          c.tool_name AS tool_name,
                          c.input_tokens + c.output_tokens AS tokens,
                          c.cost_usd AS cost,
                          c.is_error AS is_error,
                          c.error_type AS error_type,
                          c.virtual_key AS virtual_key,
                          c.feature AS feature,
                          c.trace_id AS trace_id,
                          max(c.ts) OVER (PARTITION BY c.session_id) AS session_last
                      FROM
                      (
                          SELECT *
                          FROM otel.genai_calls
                          WHERE $__timeFilter(ts)
                          ORDER BY ts DESC
                          LIMIT 500
                      ) AS c
                      LEFT JOIN
                      (
                          SELECT scope_id, level
                          FROM otel.loop_state FINAL
                          WHERE scope = 'session' AND deleted = 0
                      ) AS st ON st.scope_id = c.session_id
                  )
                  ORDER BY session_last DESC, session_id, time DESC
              """))
              .override_by_name("session_id", [session_link()])
              .override_by_name("level", [dm.DynamicConfigValue(id_val="mappings", value=level_mappings()),
                                          dm.DynamicConfigValue(id_val="custom.cellOptions",
                                                                value={"type": "color-background"})])
              .override_by_name("cost", [unit("currencyUSD")]))
    grid.add(newest, 24, 18)
    return board


DASHBOARDS = {
    "loop-overview.json": overview,
    "loop-session.json": session,
    "loop-cost-velocity.json": cost_velocity,
    "loop-live-calls.json": live,
}


def render(builder: Any) -> str:
    """The dashboard as the committed JSON text (sorted keys, two-space indent, final newline)."""
    return json.dumps(builder.build(), cls=JSONEncoder, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def build_all() -> dict[str, str]:
    return {name: render(factory()) for name, factory in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed JSON differs")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    stale = []
    for name, text in build_all().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if stale:
        print("stale dashboards (run grafana/dashboards_src/build.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
