"""The OpenTelemetry Collector's own checks on collector-config/otel-collector.yaml, for the pinned release.

The collector decodes each component's section with confmap, which sets mapstructure's ``ErrorUnused``
(go.opentelemetry.io/collector/confmap/internal/decoder.go: ``ErrorUnused: !settings.IgnoreUnused``):
a key the component's Config struct does not declare is an error, and the collector refuses to start.
Then it calls each Config's ``Validate`` and otelcol/config.go ``Config.Validate`` (every referenced
component is configured). This module repeats both, with the key sets read from the Go structs:

* core (open-telemetry/opentelemetry-collector, tag v0.159.0, the newest tag the source snapshot read
  for this holds; the image runs contrib 0.162.0, so a key added since would be refused here and a key
  removed since would not be caught): otlpreceiver
  config.go, confighttp server.go, configgrpc configgrpc.go, confignet confignet.go,
  internal/memorylimiter config.go, batchprocessor config.go, configretry generated_config.go,
  exporterhelper internal/queuebatch config.go and timeout_sender.go, configoptional optional.go (an
  Optional section also takes ``enabled``);
* contrib: exporter/clickhouseexporter config.go (the Config struct with ``tls`` and ``json``) and
  config.schema.yaml (blob 09ea2f42, which adds ``profiles_table_name``; ``auth`` is not in it: that is
  open PR #50765), extension/healthcheckextension config.go.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

ANY = object()  # a free-form map (connection_params) or a value not checked further

CONFIGNET_ADDR = {"endpoint": str, "transport": str, "dialer": {"timeout": "duration"}}
TLS_SERVER = ANY
HTTP_SERVER = {**CONFIGNET_ADDR, "enabled": bool, "tls": TLS_SERVER, "cors": ANY, "auth": ANY,
               "max_request_body_size": int, "include_metadata": bool, "response_headers": ANY,
               "compression_algorithms": list, "read_timeout": "duration", "read_header_timeout": "duration",
               "write_timeout": "duration", "idle_timeout": "duration", "middlewares": list,
               "keep_alives_enabled": bool}
GRPC_SERVER = {**CONFIGNET_ADDR, "enabled": bool, "tls": TLS_SERVER, "max_recv_msg_size_mib": int,
               "max_concurrent_streams": int, "read_buffer_size": int, "write_buffer_size": int,
               "keepalive": ANY, "auth": ANY, "include_metadata": bool, "middlewares": list}
OTLP_RECEIVER = {"protocols": {"grpc": GRPC_SERVER,
                               "http": {**HTTP_SERVER, "traces_url_path": str, "metrics_url_path": str,
                                        "logs_url_path": str}}}
MEMORY_LIMITER = {"check_interval": "duration", "min_gc_interval_when_soft_limited": "duration",
                  "min_gc_interval_when_hard_limited": "duration", "max_gc_interval_when_soft_limited": "duration",
                  "max_gc_interval_when_hard_limited": "duration", "limit_mib": int, "spike_limit_mib": int,
                  "limit_percentage": int, "spike_limit_percentage": int}
BATCH = {"timeout": "duration", "send_batch_size": int, "send_batch_max_size": int, "metadata_keys": list,
         "metadata_cardinality_limit": int}
BACKOFF = {"enabled": bool, "initial_interval": "duration", "randomization_factor": float, "multiplier": float,
           "max_interval": "duration", "max_elapsed_time": "duration"}
QUEUE_BATCH = {"enabled": bool, "wait_for_result": bool, "sizer": str, "queue_size": int, "block_on_overflow": bool,
               "storage": str, "num_consumers": int,
               "batch": {"enabled": bool, "flush_timeout": "duration", "sizer": str, "min_size": int,
                         "max_size": int, "partition": ANY}}
METRIC_TYPE = {"name": str}
CLICKHOUSE_EXPORTER = {
    "timeout": "duration", "retry_on_failure": BACKOFF, "sending_queue": QUEUE_BATCH,
    "endpoint": str, "username": str, "password": str, "database": str, "tls": ANY, "connection_params": ANY,
    "logs_table_name": str, "traces_table_name": str, "metrics_table_name": str, "profiles_table_name": str,
    "ttl": "duration", "table_engine": {"name": str, "params": str}, "cluster_name": str, "create_schema": bool,
    "compress": str, "async_insert": bool, "json": bool,
    "metrics_tables": {k: METRIC_TYPE for k in ("gauge", "sum", "summary", "histogram", "exponential_histogram")},
}
HEALTH_CHECK = {**HTTP_SERVER, "path": str, "response_body": {"healthy": str, "unhealthy": str},
                "check_collector_pipeline": {"enabled": bool, "interval": str, "exporter_failure_threshold": int}}

COMPONENTS = {
    ("receivers", "otlp"): OTLP_RECEIVER,
    ("processors", "memory_limiter"): MEMORY_LIMITER,
    ("processors", "batch"): BATCH,
    ("exporters", "clickhouse"): CLICKHOUSE_EXPORTER,
    ("extensions", "health_check"): HEALTH_CHECK,
}
TOP_LEVEL = {"receivers", "processors", "exporters", "connectors", "extensions", "service"}
SERVICE = {"telemetry", "extensions", "pipelines"}
PIPELINE = {"receivers", "processors", "exporters"}

# Go time.ParseDuration
_GO_DURATION = re.compile(r"^[-+]?(0|((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+)$")
# confmap's env provider with a default: ${env:NAME:-default}
_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def go_duration_seconds(text: str) -> float:
    if not _GO_DURATION.match(text):
        raise ValueError(f'time: invalid duration "{text}"')
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    sign = -1 if text.startswith("-") else 1
    return sign * sum(float(n) * scale[u] for n, _, _, u in re.findall(r"((\d+(\.\d*)?|\.\d+))(ns|us|µs|ms|s|m|h)",
                                                                      text.lstrip("+-")))


def resolve(node: Any, env: Mapping[str, str]) -> Any:
    """${env:NAME:-default} as the collector's env provider resolves it."""
    if isinstance(node, dict):
        return {k: resolve(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, env) for v in node]
    if isinstance(node, str):
        return _ENV_REF.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), node)
    return node


def _check(where: str, node: Any, schema: Any) -> list[str]:
    if schema is ANY:
        return []
    if isinstance(schema, dict):
        if node is None:
            return []
        if not isinstance(node, dict):
            return [f"{where}: expected a map"]
        errors = [f"'{where}' has invalid keys: {key}" for key in sorted(set(node) - set(schema))]
        for key, value in node.items():
            if key in schema:
                errors += _check(f"{where}::{key}", value, schema[key])
        return errors
    if schema == "duration":
        try:
            go_duration_seconds(str(node))
        except ValueError as exc:
            return [f"{where}: {exc}"]
        return []
    if schema is bool and not isinstance(node, bool):
        return [f"{where}: expected a bool, got {node!r}"]
    if schema is int and (not isinstance(node, int) or isinstance(node, bool)):
        return [f"{where}: expected an integer, got {node!r}"]
    if schema is float and (not isinstance(node, int | float) or isinstance(node, bool)):
        return [f"{where}: expected a number, got {node!r}"]
    if schema is str and not isinstance(node, str):
        return [f"{where}: expected a string, got {node!r}"]
    if schema is list and not isinstance(node, list):
        return [f"{where}: expected a list, got {node!r}"]
    return []


def _component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]  # "type[/name]"


def validate(raw: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    cfg = resolve(dict(raw), env)
    errors = [f"'' has invalid keys: {k}" for k in sorted(set(cfg) - TOP_LEVEL)]
    for kind in ("receivers", "processors", "exporters", "extensions"):
        for cid, section in (cfg.get(kind) or {}).items():
            schema = COMPONENTS.get((kind, _component_type(cid)))
            if schema is None:
                errors.append(f"{kind}::{cid}: no schema here for this component type (add it from its config.go)")
                continue
            errors += _check(f"{kind}::{cid}", section, schema)
    service = cfg.get("service") or {}
    errors += [f"'service' has invalid keys: {k}" for k in sorted(set(service) - SERVICE)]
    # otelcol/config.go Config.Validate
    if not cfg.get("receivers"):
        errors.append("no receiver configuration specified in config")
    if not cfg.get("exporters"):
        errors.append("no exporter configuration specified in config")
    for ref in service.get("extensions") or []:
        if ref not in (cfg.get("extensions") or {}):
            errors.append(f'service::extensions: references extension "{ref}" which is not configured')
    for pid, pipeline in (service.get("pipelines") or {}).items():
        errors += [f"'service::pipelines::{pid}' has invalid keys: {k}" for k in sorted(set(pipeline) - PIPELINE)]
        if _component_type(pid) not in ("traces", "metrics", "logs", "profiles"):
            errors.append(f"service::pipelines::{pid}: unknown signal")
        for kind, singular in (("receivers", "receiver"), ("processors", "processor"), ("exporters", "exporter")):
            for ref in pipeline.get(kind) or []:
                if ref not in (cfg.get(kind) or {}) and ref not in (cfg.get("connectors") or {}):
                    errors.append(f'service::pipelines::{pid}: references {singular} "{ref}" which is not configured')
    # the components' own Validate()
    for cid, limiter in ((k, v) for k, v in (cfg.get("processors") or {}).items()
                         if _component_type(k) == "memory_limiter"):
        limiter = limiter or {}
        if go_duration_seconds(str(limiter.get("check_interval", "0"))) <= 0:
            errors.append(f"processors::{cid}: checkInterval must be greater than zero")
        limit, spike = limiter.get("limit_percentage", 0), limiter.get("spike_limit_percentage", 0)
        if not limiter.get("limit_mib") and not limit:
            errors.append(f"processors::{cid}: memAllocLimit or memoryLimitPercentage must be greater than zero")
        if limit > 100 or spike > 100:
            errors.append(f"processors::{cid}: memoryLimitPercentage and memorySpikePercentage must be <= 100")
        if limit and limit <= spike:
            errors.append(f"processors::{cid}: memSpikeLimitPercentage must be smaller than memLimitPercentage")
    for cid, batch in ((k, v) for k, v in (cfg.get("processors") or {}).items() if _component_type(k) == "batch"):
        batch = batch or {}
        if batch.get("send_batch_max_size", 0) and batch["send_batch_max_size"] < batch.get("send_batch_size", 8192):
            errors.append(f"processors::{cid}: send_batch_max_size must be greater or equal to send_batch_size")
    for cid, ch in ((k, v) for k, v in (cfg.get("exporters") or {}).items() if _component_type(k) == "clickhouse"):
        ch = ch or {}
        endpoint = ch.get("endpoint", "")
        if not endpoint:  # clickhouseexporter config.go errConfigNoEndpoint
            errors.append(f"exporters::{cid}: endpoint must be specified")
        elif urlparse(endpoint).scheme not in ("tcp", "clickhouse", "http", "https"):
            errors.append(f"exporters::{cid}: endpoint must be url format (tcp://, clickhouse://, http://, https://)")
        if "compress" in ch and ch["compress"] not in ("none", "zstd", "lz4", "gzip", "deflate", "br", "true"):
            errors.append(f"exporters::{cid}: compress must be one of none, zstd, lz4, gzip, deflate, br, true")
    for cid, hc in ((k, v) for k, v in (cfg.get("extensions") or {}).items() if _component_type(k) == "health_check"):
        if not (hc or {}).get("endpoint", "localhost:13133"):
            errors.append(f"extensions::{cid}: bad config: endpoint must be specified")
        if not str((hc or {}).get("path", "/")).startswith("/"):
            errors.append(f"extensions::{cid}: bad config: path must start with /")
    return errors
