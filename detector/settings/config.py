"""Configuration: one YAML file, validated by pydantic v2 models, every error reported at once.

The ``loop_detection:`` block is the spec's gateway block, field for field, with its ranges and its
cross-field rules (thresholds strictly ascending, consecutive counts non-decreasing, weights in
[0, 1] summing to 1 +- 0.001). Per-virtual-key override blocks merge field by field over it and
are validated exactly like it. Rules, budgets, prices and the process settings sit beside it.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from detector.settings.loop_settings import (
    PRESET_SETTINGS,
    Budget,
    KeyOverride,
    LoopDetectionConfig,
    Price,
    Rule,
    default_rules,
)
from detector.settings.service_settings import (
    ApiSettings,
    ClickHouseHttpSettings,
    DetectorSettings,
    HttpSettings,
    IngestSettings,
    MetricsSettings,
    RetentionSettings,
    StoreSettings,
    Webhook,
    WebhookDelivery,
)
from detector.settings.strict import StrictModel
from detector.settings.vocabulary import (
    PRESET_DEFAULT,
    Preset,
)

__all__ = [
    "AppConfig", "ConfigError", "apply_preset", "format_errors", "load_config", "merge_loop_detection",
    "parse_config", "yaml_error",
]


class AppConfig(StrictModel):
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
