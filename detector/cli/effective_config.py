"""What ``check-config`` prints for a valid file: the effective configuration, every field as ``serve`` would run
with it (the defaults, the preset and the file's own settings merged), as YAML, with its secrets masked.

A secret is never printed (issue 16: config output reaches terminals, CI logs and tickets): tokens, passwords and
webhook secrets show as ``***`` when set, and a URL's password as ``user:***@``.
"""

from __future__ import annotations

from typing import Any

import yaml

from detector.settings.config import AppConfig
from detector.storage.transport import redact_url

__all__ = ["MASK", "SECRET_FIELDS", "effective_config_yaml", "masked"]

MASK = "***"
SECRET_FIELDS = frozenset({"admin_token", "api_token", "bearer_tokens", "password", "secret"})


def masked(value: Any, key: str | None = None) -> Any:
    """``value`` (a config dumped as JSON types) with every secret field masked and credentials taken out of URLs."""
    if key in SECRET_FIELDS:
        if isinstance(value, list):
            return [MASK for _ in value]
        return None if value is None else MASK
    if isinstance(value, dict):
        return {k: masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str) and "://" in value and "@" in value:
        return redact_url(value)
    return value


def effective_config_yaml(config: AppConfig) -> str:
    """The configuration as YAML, in the fields' own order, secrets masked."""
    return yaml.safe_dump(masked(config.model_dump(mode="json")), sort_keys=False, default_flow_style=False)
