"""Configuration: one YAML file, validated by pydantic v2 models, every error reported at once.

The ``loop_detection:`` block is the spec's gateway block, field for field, with its ranges and its
cross-field rules (thresholds strictly ascending, consecutive counts non-decreasing, weights in
[0, 1] summing to 1 +- 0.001). Per-virtual-key override blocks merge field by field over it and
are validated exactly like it. Rules, budgets, prices and the process settings sit beside it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from detector.settings.rule_params import validate_params
from detector.settings.vocabulary import (
    BUDGET_ALERT,
    DETECTOR_EXACT_PROMPT_REPEAT,
    DETECTOR_FAILURE_LOOP,
    DETECTOR_NO_PROGRESS,
    DETECTOR_TRACE_CAP,
    EVENT_BUDGET,
    EVENT_ESCALATION,
    EVENT_RULE,
    LEVEL_HARD_STOP,
    MODE_ENFORCE,
    PRESET_DEFAULT,
    PRESET_PROTECT,
    RULE_BLOCK,
    RULE_NOTIFY,
    SIGNAL_NAMES,
    AlertEventKind,
    BudgetAction,
    BudgetScope,
    Preset,
    RuleAction,
    RuleDetector,
    RuleMode,
)

__all__ = [
    "ApiSettings", "AppConfig", "Budget", "ClickHouseHttpSettings", "ConfigError", "ConsecutiveCounts", "DetectorSettings",
    "HttpSettings", "IngestSettings", "KeyOverride", "LoopDetectionConfig", "MetricsSettings", "PRESET_SETTINGS", "Price",
    "ProgressSettings", "RetentionSettings", "Rule", "StoreSettings", "Thresholds", "TlsSettings", "WEIGHT_TOLERANCE",
    "Webhook", "WebhookDelivery", "Weights", "apply_preset", "default_rules", "duration_seconds", "format_errors",
    "load_config", "merge_loop_detection", "parse_config", "protect_rules", "yaml_error",
]

WEIGHT_TOLERANCE = 0.001


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class Thresholds(_Strict):
    warn_confidence: float = Field(0.30, ge=0.0, le=1.0)
    throttle_confidence: float = Field(0.50, ge=0.0, le=1.0)
    inject_confidence: float = Field(0.70, ge=0.0, le=1.0)
    hardstop_confidence: float = Field(0.90, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _strictly_ascending(self) -> Thresholds:
        values = [self.warn_confidence, self.throttle_confidence, self.inject_confidence, self.hardstop_confidence]
        if any(a >= b for a, b in zip(values, values[1:], strict=False)):
            raise ValueError(
                "thresholds must be strictly ascending: warn < throttle < inject < hardstop "
                f"(got {values[0]} / {values[1]} / {values[2]} / {values[3]})"
            )
        return self


class ConsecutiveCounts(_Strict):
    warn: int = Field(3, ge=1, le=100)
    throttle: int = Field(5, ge=1, le=100)
    inject: int = Field(7, ge=1, le=100)
    hardstop: int = Field(10, ge=1, le=100)

    @model_validator(mode="after")
    def _non_decreasing(self) -> ConsecutiveCounts:
        values = [self.warn, self.throttle, self.inject, self.hardstop]
        if any(a > b for a, b in zip(values, values[1:], strict=False)):
            raise ValueError(
                "consecutive_counts must be non-decreasing: warn <= throttle <= inject <= hardstop "
                f"(got {values[0]} / {values[1]} / {values[2]} / {values[3]})"
            )
        return self


class Weights(_Strict):
    content_similarity: float = Field(0.25, ge=0.0, le=1.0)
    tool_call_repetition: float = Field(0.20, ge=0.0, le=1.0)
    response_stagnation: float = Field(0.15, ge=0.0, le=1.0)
    token_velocity: float = Field(0.10, ge=0.0, le=1.0)
    error_cycling: float = Field(0.15, ge=0.0, le=1.0)
    context_growth: float = Field(0.10, ge=0.0, le=1.0)
    cost_velocity: float = Field(0.05, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _sum_to_one(self) -> Weights:
        total = sum(self.as_dict().values())
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            raise ValueError(f"weights must sum to 1.0 (+-{WEIGHT_TOLERANCE}), got {total:.4f}")
        return self

    def as_dict(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in SIGNAL_NAMES}


class ProgressSettings(_Strict):
    """How progress evidence (``detector.core.progress``) weighs on the score and raises the early warning.

    After the seven signals, per call and scope: a call that repeats an earlier one without progress lifts its raw
    confidence to at least ``exact_floor`` / ``fuzzy_floor`` (by its evidence); a repeated action whose observation
    changed (progress) and polling keep ``progress_discount`` of it; a call whose only evidence is structure stays
    below ``warn_confidence``. The EMA, the consecutive counts and one level at a time are unchanged."""

    enabled: bool = True
    early_warning: bool = Field(True, description="warn by the 2nd wasted call on exact evidence (the 3rd on fuzzy)")
    poll_wait_seconds: float = Field(1.0, ge=0, le=3600, description=(
        "a wait (tools and idle time) between repeats that makes them polling, when it is also twice the model's "
        "own time on them"))
    exact_floor: float = Field(0.75, ge=0.0, le=1.0)
    fuzzy_floor: float = Field(0.55, ge=0.0, le=1.0)
    progress_discount: float = Field(0.25, ge=0.0, le=1.0)


class LoopDetectionConfig(_Strict):
    """The spec's ``loop_detection:`` block."""

    enabled: bool = True
    session_timeout_minutes: int = Field(30, ge=1, le=1440)
    max_sessions: int = Field(10_000, ge=100, le=1_000_000)
    history_depth: int = Field(5, ge=2, le=50)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    consecutive_counts: ConsecutiveCounts = Field(default_factory=ConsecutiveCounts)
    weights: Weights = Field(default_factory=Weights)
    throttle_delay_seconds: float = Field(2, ge=1, le=30)
    injection_strategy: Literal["system_prompt_append", "context_aware"] = "system_prompt_append"
    ema_alpha: float = Field(0.3, ge=0.01, le=1.0)
    eviction_interval_seconds: int = Field(60, ge=10, le=3600)
    token_velocity_threshold: float = Field(10_000.0, gt=0, le=1e9)
    cost_velocity_threshold: float = Field(0.5, gt=0, le=1e6)
    break_instruction_template: str | None = Field(None, min_length=1, max_length=2000)
    step_down_after: int = Field(5, ge=1, le=100)
    progress: ProgressSettings = Field(default_factory=ProgressSettings)


class KeyOverride(_Strict):
    """Per-virtual-key settings: a partial ``loop_detection`` block, merged field by field."""

    loop_detection: dict[str, Any] = Field(default_factory=dict)
    tpm_limit: float | None = Field(None, gt=0, description="manual tokens-per-minute cap for the velocity breaker")


class Rule(_Strict):
    name: str = Field(min_length=1, max_length=200)
    detector: RuleDetector
    action: RuleAction = RULE_NOTIFY
    mode: RuleMode = MODE_ENFORCE
    enabled: bool = True
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _params_valid(self) -> Rule:
        self.params = validate_params(self.detector, self.params)
        return self


class Budget(_Strict):
    name: str = Field(min_length=1, max_length=200)
    scope: BudgetScope
    match: str = Field("*", description="the feature / session / key id, or * for each one separately")
    limit_usd: float = Field(ge=0)
    period: Literal["run", "day", "month"] = "month"
    action: BudgetAction = BUDGET_ALERT


class Price(_Strict):
    input_per_million: float = Field(ge=0)
    output_per_million: float = Field(ge=0)


class DetectorSettings(_Strict):
    interval_seconds: float = Field(1.0, gt=0, le=3600)
    min_interval_seconds: float = Field(0.25, ge=0, le=3600, description=(
        "while the embedded receiver commits new spans, a cycle starts this long after the last one rather than "
        "interval_seconds after it (never more often; spans written by a Collector keep interval_seconds)"))
    watermark_lag_seconds: float = Field(0.0, ge=0, le=600)
    checkpoint_seconds: float = Field(5.0, ge=0, le=3600, description="how often scope state is persisted")
    shard: str = Field("0/1", pattern=r"^\d+/\d+$")
    max_calls_per_cycle: int = Field(200_000, ge=100)

    @field_validator("shard")
    @classmethod
    def _shard_in_range(cls, value: str) -> str:
        index, total = (int(x) for x in value.split("/"))
        if total < 1 or index >= total:
            raise ValueError(f"shard must be I/N with 0 <= I < N, got {value}")
        return value

    @property
    def shard_index(self) -> int:
        return int(self.shard.split("/")[0])

    @property
    def shard_count(self) -> int:
        return int(self.shard.split("/")[1])


class TlsSettings(_Strict):
    """TLS on the OTLP listener; with ``client_ca_file``, mutual TLS: a client must present a certificate that CA
    signed (the collector's ``tls.client_ca_file``)."""

    cert_file: str = Field(min_length=1)
    key_file: str = Field(min_length=1)
    client_ca_file: str | None = Field(None, min_length=1)


class IngestSettings(_Strict):
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    max_future_skew_seconds: int = Field(3600, ge=1)
    max_age_days: int = Field(30, ge=1)
    # OTLP authentication, the collector's bearertokenauth convention: "Authorization: Bearer <token>", any of the
    # tokens (these, $LOOP_DETECTOR_OTLP_TOKEN, and the lines of bearer_token_file). None configured: open.
    bearer_tokens: list[str] = Field(default_factory=list, max_length=100)
    bearer_token_file: str | None = Field(None, min_length=1, description="one token per line")
    tls: TlsSettings | None = None

    @field_validator("bearer_tokens")
    @classmethod
    def _long_enough(cls, tokens: list[str]) -> list[str]:
        if any(len(t.strip()) < 16 for t in tokens):
            raise ValueError("every bearer token must have at least 16 characters")
        return [t.strip() for t in tokens]


class HttpSettings(_Strict):
    """Connection limits of both listeners (the OTLP receiver and the API): a slow or silent client is cut off."""

    header_timeout_seconds: float = Field(10.0, gt=0, le=3600,
                                          description="a request's header must be complete this long after it began")
    body_timeout_seconds: float = Field(60.0, gt=0, le=3600,
                                        description="a request's body must be complete this long after its header")
    keep_alive_seconds: int = Field(5, ge=1, le=3600, description="an idle keep-alive connection is closed after this")
    graceful_shutdown_seconds: int = Field(10, ge=1, le=600,
                                           description="on SIGTERM / SIGINT, requests in flight get this long to finish")


class MetricsSettings(_Strict):
    """Prometheus label sets are bounded: a virtual key gets its own ``virtual_key`` label value only when it has an
    override block under ``virtual_keys:`` or is among the first ``max_key_labels`` keys seen since the start; every
    other key is counted under ``other``. (Keys arrive in spans: unbounded, and forgeable by whoever can send OTLP.)"""

    max_key_labels: int = Field(0, ge=0, le=10_000)


class StoreSettings(_Strict):
    url: str | None = None
    cluster: str | None = None


class ApiSettings(_Strict):
    admin_token: str | None = Field(None, min_length=16)
    api_token: str | None = Field(
        None, min_length=16, description="the agents' (non-admin) token for the enforcement reads; else "
        "$LOOP_DETECTOR_API_TOKEN, else <data-dir>/api-token created at first start")
    require_api_token: Literal["auto", "always", "never"] = Field(
        "auto", description="the enforcement reads (/v1/check, /v1/decision, /v1/blocklist, /api/budgets/status, "
        "/metrics) need the API (or admin) token: auto = whenever the API listens beyond loopback")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
                                description="a larger request body is refused with 413 before it is parsed")
    block_seconds: int = Field(60, ge=1, le=86400)


_DURATION = re.compile(r"^(\d+)\s*([smhd]?)$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(value: Any) -> int | None:
    """A retention period: ``7d``, ``36h``, ``90m``, ``3600s`` or a number of seconds; ``0``, ``off`` or null keep
    data forever (None)."""
    if value is None or value is False:
        return None
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 7d, 36h or 90m")
    if isinstance(value, int):
        seconds = value
    else:
        text = str(value).strip().lower()
        if text in ("", "off", "none", "never", "forever"):
            return None
        m = _DURATION.match(text)
        if not m:
            raise ValueError(f"expected a duration such as 7d, 36h, 90m or 3600s, got {value!r}")
        seconds = int(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if seconds < 0:
        raise ValueError("a retention period cannot be negative")
    if seconds > 100 * 365 * 86400:
        raise ValueError("a retention period must be under 100 years")
    return seconds or None


class RetentionSettings(_Strict):
    """How long each group of tables keeps its rows (``detector/storage/retention.py`` says which tables are in
    which group). Applied as a ClickHouse TTL at start and on every config change, on chDB and on a server."""

    spans: int | None = Field(7 * 86400, description="raw spans (they can carry prompts): otel_traces, its trace-id "
                              "lookup table, otel_logs, the staged GenAI spans (genai_spans); default 7d; 0/off keeps "
                              "them forever")
    detector: int | None = Field(30 * 86400, description="the detector's own rows: genai_calls, scores, events, the "
                                 "webhook outbox; default 30d; 0/off keeps them forever")

    @field_validator("spans", "detector", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int | None:
        return duration_seconds(value)


class ClickHouseHttpSettings(_Strict):
    """The read-only ClickHouse-compatible HTTP endpoint over the embedded store (off unless ``port`` is set)."""

    port: int | None = Field(None, ge=0, le=65535, description="e.g. 8123; off when not set")
    password: str | None = Field(None, min_length=1, description="password of user `default` (else "
                                 "$LOOP_DETECTOR_CLICKHOUSE_PASSWORD, else <data-dir>/clickhouse-password)")
    allow_writes: bool = Field(False, description="TESTS ONLY: also accept INSERT and DDL (never on in production)")
    max_result_bytes: int = Field(256 * 1024 * 1024, ge=1024, description="refuse results larger than this")


class WebhookDelivery(_Strict):
    """How the outbox delivers: attempts before a delivery is a dead letter, the backoff between attempts."""

    max_attempts: int = Field(8, ge=1, le=100)
    initial_backoff_seconds: float = Field(5.0, gt=0, le=86400)
    max_backoff_seconds: float = Field(3600.0, gt=0, le=7 * 86400)
    max_retry_after_seconds: float = Field(86400.0, gt=0, le=7 * 86400,
                                           description="the longest Retry-After honoured")
    timeout_seconds: float = Field(15.0, gt=0, le=300)


class Webhook(_Strict):
    url: str = Field(pattern=r"^https?://")
    secret: str | None = Field(None, min_length=1, description="whsec_<base64 of 24-64 random bytes> (Standard "
                               "Webhooks); any other string is used as the key's UTF-8 bytes")
    min_level: Literal["warn", "throttle", "inject", "hard_stop"] = LEVEL_HARD_STOP
    events: list[AlertEventKind] = Field(default_factory=lambda: [EVENT_ESCALATION, EVENT_RULE, EVENT_BUDGET])

    @field_validator("secret")
    @classmethod
    def _standard_secret(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("whsec_"):
            try:
                key = base64.b64decode(value.removeprefix("whsec_"), validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("a whsec_ secret must be base64 after the prefix") from None
            if not 24 <= len(key) <= 64:
                raise ValueError(f"a whsec_ secret must decode to 24-64 bytes, got {len(key)}")
        return value


def default_rules() -> list[Rule]:
    """The three notify-only rules every fresh installation starts with."""
    return [
        Rule(name="Loop: Exact prompt repeat", detector=DETECTOR_EXACT_PROMPT_REPEAT, action=RULE_NOTIFY),
        Rule(name="Loop: Per-trace call cap", detector=DETECTOR_TRACE_CAP, action=RULE_NOTIFY,
             params={"unit": "calls", "threshold": 25}),
        Rule(name="Loop: Per-trace cost cap", detector=DETECTOR_TRACE_CAP, action=RULE_NOTIFY,
             params={"unit": "usd", "threshold": 5.0}),
    ]


def protect_rules() -> list[dict[str, Any]]:
    """The rules of the ``protect`` preset: the defaults (notify), plus blocking that is safe for honest work: a loop
    resting on exact evidence, by its 4th wasted step (trace and session scope), and the failure loop (result-aware;
    it clears when the streak ends). docs/detection-quality.md measures that no honest real run is blocked."""
    return [
        {"name": "Loop: Exact prompt repeat", "detector": DETECTOR_EXACT_PROMPT_REPEAT, "action": RULE_NOTIFY},
        {"name": "Loop: No progress", "detector": DETECTOR_NO_PROGRESS, "action": RULE_BLOCK,
         "params": {"wasted_calls": 4, "min_evidence": "exact"}},
        {"name": "Loop: Failure loop", "detector": DETECTOR_FAILURE_LOOP, "action": RULE_BLOCK},
        {"name": "Loop: Per-trace call cap", "detector": DETECTOR_TRACE_CAP, "action": RULE_NOTIFY,
         "params": {"unit": "calls", "threshold": 25}},
        {"name": "Loop: Per-trace cost cap", "detector": DETECTOR_TRACE_CAP, "action": RULE_NOTIFY,
         "params": {"unit": "usd", "threshold": 5.0}},
    ]


# What each preset sets; the config file's own settings override it, field by field (a list, such as `rules`,
# as a whole). `protect` also lets the score reach hard_stop for loops without errors (floors of 1.0 and 0.85).
PRESET_SETTINGS: dict[str, dict[str, Any]] = {
    PRESET_DEFAULT: {},
    PRESET_PROTECT: {
        "loop_detection": {"progress": {"exact_floor": 1.0, "fuzzy_floor": 0.85}},
        "rules": protect_rules(),
    },
}


class AppConfig(_Strict):
    preset: Preset = Field(PRESET_DEFAULT, description="default, or protect (blocking that is safe for honest work)")
    loop_detection: LoopDetectionConfig = Field(default_factory=LoopDetectionConfig)
    virtual_keys: dict[str, KeyOverride] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=default_rules)
    budgets: list[Budget] = Field(default_factory=list)
    prices: dict[str, Price] = Field(default_factory=dict)
    detector: DetectorSettings = Field(default_factory=DetectorSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    webhooks: list[Webhook] = Field(default_factory=list)
    webhook_delivery: WebhookDelivery = Field(default_factory=WebhookDelivery)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    clickhouse_http: ClickHouseHttpSettings = Field(default_factory=ClickHouseHttpSettings)
    grafana_url: str | None = Field(None, description="base URL of Grafana, for dashboard links in alerts")

    @model_validator(mode="after")
    def _overrides_valid(self) -> AppConfig:
        errors: list[str] = []
        for key, override in self.virtual_keys.items():
            try:
                merge_loop_detection(self.loop_detection, override.loop_detection)
            except ValidationError as exc:
                errors.extend(f"virtual_keys.{key}.loop_detection.{msg}" for msg in format_errors(exc))
        names = [r.name for r in self.rules]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            errors.append(f"rules: duplicate rule names {duplicates}")
        budget_names = [b.name for b in self.budgets]
        duplicate_budgets = sorted({n for n in budget_names if budget_names.count(n) > 1})
        if duplicate_budgets:
            errors.append(f"budgets: duplicate budget names {duplicate_budgets}")
        if errors:
            raise ValueError("; ".join(errors))
        return self

    def for_key(self, virtual_key: str | None) -> LoopDetectionConfig:
        """The effective ``loop_detection`` block for one virtual key."""
        override = self.virtual_keys.get(virtual_key or "")
        if override is None or not override.loop_detection:
            return self.loop_detection
        return merge_loop_detection(self.loop_detection, override.loop_detection)


def _deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def merge_loop_detection(base: LoopDetectionConfig, patch: dict[str, Any]) -> LoopDetectionConfig:
    """Merge a partial block over ``base`` field by field and validate the result like the global one."""
    return LoopDetectionConfig.model_validate(_deep_merge(base.model_dump(), patch))


class ConfigError(ValueError):
    """The configuration is invalid; ``errors`` lists every problem with its path."""

    def __init__(self, errors: list[str], source: str = "config") -> None:
        self.errors = errors
        self.source = source
        super().__init__(f"{source}: {len(errors)} error(s)\n" + "\n".join(f"  - {e}" for e in errors))


def format_errors(exc: ValidationError) -> list[str]:
    """Pydantic errors as ``path.to.field: message`` lines."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{path}: {msg}" if path else msg)
    return lines


def apply_preset(data: dict[str, Any], preset: str | None = None) -> dict[str, Any]:
    """``data`` (a config file's mapping) over its preset's settings: ``preset`` (the command line's) or the file's
    own ``preset:`` key. The file's settings win, field by field; an unknown preset is left to validation."""
    name = preset or data.get("preset") or PRESET_DEFAULT
    settings = PRESET_SETTINGS.get(name) if isinstance(name, str) else None
    if settings is None:
        return data
    merged = _deep_merge(settings, data)
    merged["preset"] = name
    return merged


def parse_config(data: Any, source: str = "config", preset: str | None = None) -> AppConfig:
    """Validate a config mapping (``preset``: the command line's, over the file's ``preset:`` key)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"top level must be a mapping, got {type(data).__name__}"], source)
    try:
        return AppConfig.model_validate(apply_preset(data, preset))
    except ValidationError as exc:
        raise ConfigError(format_errors(exc), source) from None


def load_config(path: str | os.PathLike[str] | None, preset: str | None = None) -> AppConfig:
    """Read and validate a YAML config file; ``None`` gives the defaults (of ``preset``, when given)."""
    if path is None:
        return parse_config({}, "defaults", preset) if preset else AppConfig()
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError([f"cannot read file: {exc.strerror}"], str(p)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_error(exc)], str(p)) from None
    return parse_config(data, str(p), preset)


_QUOTED = re.compile(r"'[^']*'")
_HARMLESS = re.compile(r"'<[a-z ]+>'|'[^\w\s']'|'\\[a-z]'")  # a token name, one punctuation mark, an escape


def yaml_error(exc: yaml.YAMLError) -> str:
    """A YAML syntax error as its position and problem only. PyYAML's own message quotes the offending line (a
    token or a webhook secret with it) and names what it found (an undefined alias is part of the value): neither
    may reach ``check-config``, the reload's 422 or the log. Quoted fragments are kept only when they are YAML's
    token names (``'<block end>'``), a punctuation mark or an escape (``','``, ``'\\t'``)."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return "invalid YAML"
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    parts = [text for text in (exc.problem, exc.context) if text]
    described = "; ".join(_QUOTED.sub(lambda m: m.group(0) if _HARMLESS.fullmatch(m.group(0)) else "'...'",
                                      re.sub(r'"[^"]*"', '"..."', text)) for text in parts)
    return f"invalid YAML{where}" + (f": {described}" if described else "")
