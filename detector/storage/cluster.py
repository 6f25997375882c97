"""The cluster variant of the DDL: Replicated*MergeTree local tables plus Distributed tables, ON CLUSTER.

Derived from the single-node DDL in ``clickhouse/`` so the two can never drift apart:

* every ``otel.NAME`` table becomes ``otel.NAME_local`` (engine ``Replicated<engine>`` with the usual
  ``/clickhouse/tables/{shard}/otel/NAME_local`` and ``{replica}`` macros) plus ``otel.NAME``, a
  Distributed table over it with the same columns, so every query of the project runs unchanged;
* a materialized view on ``otel.otel_traces`` reads ``otel_traces_local`` and writes its target's ``_local`` table
  on each shard, so spans inserted through the Distributed ``otel_traces`` (by the Collector or by loop-detector)
  are staged on the shard that stores them. (The normalization is a query, not DDL: it reads the Distributed tables
  like every query of the project.)

Sharding keys keep what is read together on one shard: spans by trace, detector rows by scope id.
``clickhouse/cluster/schema.sql`` is this output for the default cluster name, committed for init
scripts (:func:`detector.storage.schema.render_cluster_schema`); a test regenerates it.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_CLUSTER", "DEFAULT_SHARDING_KEY", "SHARDING_KEYS", "cluster_statements"]

DEFAULT_CLUSTER = "loop_cluster"

SHARDING_KEYS = {
    "otel_traces": "cityHash64(TraceId)",
    "otel_traces_trace_id_ts": "cityHash64(TraceId)",
    "otel_logs": "cityHash64(TraceId)",  # a span's logs on its span's shard
    "genai_calls": "cityHash64(trace_id)",
    "genai_spans": "cityHash64(trace_id)",
    "loop_meta": "cityHash64(key)",
    "loop_webhook_outbox": "cityHash64(event_id)",
}
DEFAULT_SHARDING_KEY = "cityHash64(scope_id)"

_CREATE_TABLE = re.compile(r"^CREATE TABLE IF NOT EXISTS otel\.(\w+) \(", re.S)
_ENGINE = re.compile(r"\) ENGINE = (\w+)\(([^)]*)\)")
_MV = re.compile(r"^CREATE MATERIALIZED VIEW IF NOT EXISTS otel\.(\w+) TO otel\.(\w+) AS", re.S)
_ALTER = re.compile(r"^ALTER TABLE otel\.(\w+)\s", re.S)
_DROP_VIEW = re.compile(r"^DROP VIEW IF EXISTS otel\.(\w+)$")
# Replicated tables deduplicate inserts by default: the single-node window setting has no cluster counterpart.
_NON_REPLICATED_DEDUP = re.compile(r"^ALTER TABLE otel\.\w+ MODIFY SETTING non_replicated_deduplication_window = \d+$")


def _quote(name: str) -> str:
    return "'" + name.replace("'", "") + "'"


def cluster_statements(statements: list[str], cluster: str = DEFAULT_CLUSTER) -> list[str]:
    """Rewrite single-node statements into their ON CLUSTER, replicated and distributed form."""
    on = f"ON CLUSTER {_quote(cluster)}"
    out: list[str] = []
    for stmt in statements:
        if _NON_REPLICATED_DEDUP.match(stmt):
            continue
        if stmt.startswith("CREATE DATABASE IF NOT EXISTS"):
            out.append(f"{stmt} {on}")
            continue
        table = _CREATE_TABLE.match(stmt)
        if table:
            name = table.group(1)
            local = f"{name}_local"
            engine = _ENGINE.search(stmt)
            if engine is None:
                raise ValueError(f"no engine found for otel.{name}")
            args = [f"'/clickhouse/tables/{{shard}}/otel/{local}'", "'{replica}'"]
            if engine.group(2).strip():
                args.append(engine.group(2).strip())
            replicated = f") ENGINE = Replicated{engine.group(1)}({', '.join(args)})"
            body = stmt[: engine.start()] + replicated + stmt[engine.end():]
            body = body.replace(f"CREATE TABLE IF NOT EXISTS otel.{name} (",
                                f"CREATE TABLE IF NOT EXISTS otel.{local} {on} (", 1)
            out.append(body)
            key = SHARDING_KEYS.get(name, DEFAULT_SHARDING_KEY)
            out.append(f"CREATE TABLE IF NOT EXISTS otel.{name} {on} AS otel.{local}\n"
                       f"ENGINE = Distributed({_quote(cluster)}, 'otel', '{local}', {key})")
            continue
        mv = _MV.match(stmt)
        if mv:
            name, target = mv.group(1), mv.group(2)
            body = stmt.replace(mv.group(0),
                                f"CREATE MATERIALIZED VIEW IF NOT EXISTS otel.{name} {on} TO otel.{target}_local AS", 1)
            body = re.sub(r"\bFROM otel\.otel_traces\b", "FROM otel.otel_traces_local", body)
            out.append(body)
            continue
        alter = _ALTER.match(stmt)
        if alter:  # an upgrade (ADD COLUMN IF NOT EXISTS): the local table, and the Distributed one over it
            name, rest = alter.group(1), stmt[alter.end():]
            out.append(f"ALTER TABLE otel.{name}_local {on} {rest}")
            out.append(f"ALTER TABLE otel.{name} {on} {rest}")
            continue
        drop = _DROP_VIEW.match(stmt)
        if drop:  # a materialized view being replaced (detector.storage.schema)
            out.append(f"{stmt} {on}")
            continue
        raise ValueError(f"statement not understood by the cluster rewrite: {stmt[:80]}")
    return out
