"""What Grafana and the ClickHouse data source plugin do to a panel's ``rawSql`` before ClickHouse sees it.

Written from the plugin's own source and tests, grafana/clickhouse-datasource v4.20.0 (the version
docker-compose.yml installs):

1. The plugin's frontend (``CHDatasource.applyTemplateVariables``) replaces dashboard template variables
   with Grafana's template service: ``$name``, ``${name}``, ``${name:fmt}`` and ``[[name]]``; a
   single-valued variable is inserted as is (no quoting: the SQL quotes it, ``'${session_id}'``).
   Names the service does not know (the ``$__`` macros below) are left alone. Alert rules run in the
   backend only, so they get no template variables.
2. The backend (``pkg/macros/macros.go``) expands the ``$__`` macros through grafana/macropro:
   a macro is ``$__name`` with an optional parenthesised argument list split on top-level commas and
   trimmed; macros nested in another macro's arguments expand innermost first; unknown macros are left
   unchanged. The macro set is sqlutil's defaults (``interval``, ``interval_ms``, ``table``, ``column``)
   overlaid with the ClickHouse ones (``timeFilter``, ``timeFrom``, ``timeTo``, ``timeGroup``,
   ``fromTime``, ``toTime``, ``fromTime_ms``, ``toTime_ms``, ``timeFilter_ms``, ``dateFilter``,
   ``dateTimeFilter``/``dt``, ``timeInterval``, ``timeInterval_ms``, ``interval_s``).

Not implemented, on purpose: the statement macros (``$__columns``, ``$__rateColumns`` ...), the
frontend's ``$__conditionalAll`` and ``$__adHocFilters``, and macros inside comments or string
literals (macropro skips comments; whether it expands inside strings is not pinned down by the
plugin's tests). Each raises :class:`MacroError`, so a dashboard relying on them fails its test
instead of passing on a guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

PLUGIN_VERSION = "4.20.0"


class MacroError(ValueError):
    """The SQL uses a macro wrongly, or one this module does not reproduce."""


@dataclass(frozen=True)
class QueryContext:
    """What the backend knows about a query: its time range and interval (sqlutil.Query)."""

    time_from: datetime
    time_to: datetime
    interval: timedelta = timedelta(seconds=1)
    table: str = ""
    column: str = ""
    variables: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for t in (self.time_from, self.time_to):
            if t.tzinfo is None:
                raise MacroError("time range bounds must be timezone-aware")


# --- time formatting, as in macros.go ----------------------------------------------------------------

def _unix(t: datetime) -> int:
    # Go's time.Unix(): whole seconds, rounding toward negative infinity.
    return math.floor(t.timestamp())


def _unix_milli(t: datetime) -> int:
    delta = t - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds) // 1000


def _to_date(t: datetime) -> str:
    return f"toDate('{t.astimezone(UTC).strftime('%Y-%m-%d')}')"


def _to_datetime(t: datetime) -> str:
    return f"toDateTime({_unix(t)})"


def _to_datetime64(t: datetime) -> str:
    return f"fromUnixTimestamp64Milli({_unix_milli(t)})"


def _interval_ms(ctx: QueryContext) -> int:
    return int(ctx.interval / timedelta(milliseconds=1))


def _interval_seconds(ctx: QueryContext) -> int:
    # int(math.Max(ctx.Interval.Seconds(), 1)): Go truncates the float toward zero.
    return int(max(ctx.interval.total_seconds(), 1.0))


def format_interval(interval: timedelta) -> str:
    """gtime.FormatInterval, what sqlutil's default ``$__interval`` returns."""
    ns = round(interval.total_seconds() * 1e9)
    for unit, size in (("y", 365 * 86_400 * 10**9), ("d", 86_400 * 10**9), ("h", 3_600 * 10**9),
                       ("m", 60 * 10**9), ("s", 10**9), ("ms", 10**6)):
        if ns >= size:
            return f"{ns // size}{unit}"
    return "1ms"


_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """time.ParseDuration, in seconds (sign and the bare "0" included)."""
    s = text
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    if not s:
        raise MacroError(f"invalid duration {text!r}")
    while pos < len(s):
        m = _GO_DURATION.match(s, pos)
        if not m:
            raise MacroError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


# --- the macros --------------------------------------------------------------------------------------

def _args(name: str, args: list[str], want: int) -> list[str]:
    if len(args) != want:
        raise MacroError(f"unexpected number of arguments: $__{name} expected {want} argument(s), "
                         f"received {len(args)}")
    return args


def _time_filter(ctx: QueryContext, args: list[str]) -> str:
    (col,) = _args("timeFilter", args, 1)
    return f"{col} >= {_to_datetime(ctx.time_from)} AND {col} <= {_to_datetime(ctx.time_to)}"


def _time_filter_ms(ctx: QueryContext, args: list[str]) -> str:
    (col,) = _args("timeFilter_ms", args, 1)
    return f"{col} >= {_to_datetime64(ctx.time_from)} AND {col} <= {_to_datetime64(ctx.time_to)}"


def _date_filter(ctx: QueryContext, args: list[str]) -> str:
    (col,) = _args("dateFilter", args, 1)
    return f"{col} >= {_to_date(ctx.time_from)} AND {col} <= {_to_date(ctx.time_to)}"


def _date_time_filter(ctx: QueryContext, args: list[str]) -> str:
    date_col, time_col = _args("dateTimeFilter", args, 2)
    date_part = f"({date_col} >= {_to_date(ctx.time_from)} AND {date_col} <= {_to_date(ctx.time_to)})"
    time_part = f"({time_col} >= {_to_datetime(ctx.time_from)} AND {time_col} <= {_to_datetime(ctx.time_to)})"
    return f"{date_part} AND {time_part}"


def _time_interval(ctx: QueryContext, args: list[str]) -> str:
    (col,) = _args("timeInterval", args, 1)
    return f"toStartOfInterval(toDateTime({col}), INTERVAL {_interval_seconds(ctx)} second)"


def _time_interval_ms(ctx: QueryContext, args: list[str]) -> str:
    (col,) = _args("timeInterval_ms", args, 1)
    return f"toStartOfInterval(toDateTime64({col}, 3), INTERVAL {max(_interval_ms(ctx), 1)} millisecond)"


def _time_from(ctx: QueryContext, args: list[str]) -> str:
    (col,) = _args("timeFrom", args, 1)
    return f"{col} >= {_to_datetime(ctx.time_from)}"


def _time_to(ctx: QueryContext, args: list[str]) -> str:
    (col,) = _args("timeTo", args, 1)
    return f"{col} <= {_to_datetime(ctx.time_to)}"


def _time_group(ctx: QueryContext, args: list[str]) -> str:
    col, period = _args("timeGroup", args, 2)
    seconds = round(parse_go_duration(period.strip().strip("'\"")))
    if seconds <= 0:
        raise MacroError(f"$__timeGroup: interval must be positive, got {period!r}")
    return f"toStartOfInterval(toDateTime({col.strip()}), INTERVAL {seconds} second)"


MACROS: dict[str, Callable[[QueryContext, list[str]], str]] = {
    # sqlutil defaults kept by the plugin
    "interval": lambda ctx, _a: format_interval(ctx.interval),
    "interval_ms": lambda ctx, _a: str(_interval_ms(ctx)),
    "table": lambda ctx, _a: ctx.table,
    "column": lambda ctx, _a: ctx.column,
    # the plugin's overrides and extensions
    "timeFilter": _time_filter,
    "timeFrom": _time_from,
    "timeTo": _time_to,
    "timeGroup": _time_group,
    "fromTime": lambda ctx, _a: _to_datetime(ctx.time_from),
    "toTime": lambda ctx, _a: _to_datetime(ctx.time_to),
    "fromTime_ms": lambda ctx, _a: _to_datetime64(ctx.time_from),
    "toTime_ms": lambda ctx, _a: _to_datetime64(ctx.time_to),
    "timeFilter_ms": _time_filter_ms,
    "dateFilter": _date_filter,
    "dateTimeFilter": _date_time_filter,
    "dt": _date_time_filter,
    "timeInterval": _time_interval,
    "timeInterval_ms": _time_interval_ms,
    "interval_s": lambda ctx, _a: str(_interval_seconds(ctx)),
}

UNSUPPORTED = ("columns", "rateColumns", "perSecondColumns", "increaseColumns", "lttb", "conditionalAll",
               "adHocFilters")


# --- step 1: template variables (frontend) -----------------------------------------------------------

# Grafana's variableRegex: $name | [[name(:fmt)]] | ${name(.path)(:fmt)}
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}")


def replace_variables(sql: str, variables: Mapping[str, str]) -> str:
    """templateSrv.replace for single-valued variables; unknown names stay as written."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        if name not in variables:
            return m.group(0)
        return variables[name]

    return _VARIABLE.sub(sub, sql)


# --- step 2: macros (backend) ------------------------------------------------------------------------

_MACRO = re.compile(r"\$__(\w+)")


def _protected_regions(sql: str) -> list[tuple[int, int]]:
    """Spans of comments and quoted literals (the regions macropro's comment pass recognises)."""
    regions: list[tuple[int, int]] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif c in "'`":
            j = i + 1
            while j < n:
                if sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:  # doubled quote
                        j += 2
                        continue
                    break
                j += 1
            end = min(j + 1, n)
        elif c == "$":
            m = re.match(r"\$(\w*)\$", sql[i:])
            if m and not sql.startswith("$__", i):
                tag = m.group(0)
                close = sql.find(tag, i + len(tag))
                end = n if close < 0 else close + len(tag)
            else:
                i += 1
                continue
        else:
            i += 1
            continue
        regions.append((i, end))
        i = end
    return regions


def _split_args(text: str, start: int) -> tuple[list[str], int]:
    """sqlutil.parseArgs: the bracketed list at ``start``; returns (args, index after ``)``)."""
    depth, arg, args = 0, [], []
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "(":
            depth += 1
            if depth == 1:
                continue
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(arg).strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append("".join(arg).strip())
            arg = []
            continue
        arg.append(ch)
    raise MacroError("failed to parse macro arguments (missing close bracket?)")


def expand_macros(sql: str, ctx: QueryContext) -> str:
    """macros.Interpolate: every ``$__`` macro expanded, innermost first; unknown ones left as written."""
    regions = _protected_regions(sql)
    out: list[str] = []
    pos = 0
    while True:
        m = _MACRO.search(sql, pos)
        if not m:
            out.append(sql[pos:])
            return "".join(out)
        name = m.group(1)
        if any(a <= m.start() < b for a, b in regions):
            raise MacroError(f"$__{name} inside a comment or string literal: not reproduced here")
        if name in UNSUPPORTED:
            raise MacroError(f"$__{name} is not reproduced by this module")
        out.append(sql[pos:m.start()])
        end = m.end()
        args: list[str] = []
        if end < len(sql) and sql[end] == "(":
            raw_args, end = _split_args(sql, end)
            args = [expand_macros(a, ctx) for a in raw_args]
        func = MACROS.get(name)
        if func is None:
            out.append(sql[m.start():end])
        else:
            out.append(func(ctx, args))
        pos = end


def interpolate(sql: str, ctx: QueryContext, *, frontend: bool = True) -> str:
    """The SQL ClickHouse receives: variables replaced (dashboards only), then macros expanded."""
    if frontend:
        sql = replace_variables(sql, ctx.variables)
    return expand_macros(sql, ctx)


def leftover_macros(sql: str) -> list[str]:
    """``$__`` names still present (the plugin would send them to ClickHouse verbatim)."""
    return _MACRO.findall(sql)
