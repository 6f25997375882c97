"""Rules and budgets changed through the admin API, persisted so they survive a restart and a reload.

Precedence: a list set through the API (``PUT /admin/loop-detection/rules`` or ``.../budgets``) replaces the
config file's list of the same name, at once, after every restart and after every reload of the file,
until it is removed (``DELETE`` on the same path), which brings the file's list back. The other parts of
the config always come from the file. Overrides are stored in ``otel.loop_meta`` (``override:rules``,
``override:budgets``) as the validated JSON list; an empty value means "no override".
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Literal

import orjson

from detector.settings.config import AppConfig, ConfigError, parse_config
from detector.storage.transport import Store, insert_rows

__all__ = ["KINDS", "Kind", "PolicyOverrides"]

log = logging.getLogger("loop_detector.policy")

Kind = Literal["rules", "budgets"]
KINDS: tuple[Kind, ...] = ("rules", "budgets")

SELECT_OVERRIDES = "SELECT key, value FROM otel.loop_meta FINAL WHERE key IN ('override:rules', 'override:budgets')"


class PolicyOverrides:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.lists: dict[str, list[dict[str, Any]] | None] = dict.fromkeys(KINDS)
        self._lock = threading.Lock()
        self._last_version = 0

    def load(self) -> PolicyOverrides:
        for row in self.store.rows(SELECT_OVERRIDES):
            kind = row["key"].split(":", 1)[1]
            self.lists[kind] = orjson.loads(row["value"]) if row["value"] else None
        return self

    def source(self, kind: Kind) -> str:
        return "api" if self.lists[kind] is not None else "file"

    def apply(self, config: AppConfig) -> AppConfig:
        """``config`` with the overridden lists in place of the file's (an override that no longer validates
        is logged and skipped, so a bad stored value can never keep the service from starting)."""
        for kind in KINDS:
            items = self.lists[kind]
            if items is None:
                continue
            try:
                config = self.merged(config, kind, items)
            except ConfigError as exc:
                log.error("stored %s override ignored: invalid", kind, extra={"errors": exc.errors})
        return config

    @staticmethod
    def merged(config: AppConfig, kind: Kind, items: list[Any]) -> AppConfig:
        """``config`` with ``kind`` replaced by ``items``, validated like the file (raises ConfigError)."""
        data = config.model_dump(mode="python", exclude_unset=False)
        data[kind] = items
        return parse_config(data, source=kind)

    def set(self, kind: Kind, items: list[dict[str, Any]] | None) -> None:
        """Persist an override (``None`` removes it)."""
        with self._lock:
            self._last_version = max(self._last_version + 1, time.time_ns() // 1000)
            value = "" if items is None else orjson.dumps(items).decode()
            insert_rows(self.store, "otel.loop_meta", [{"key": f"override:{kind}", "value": value,
                                                         "version": self._last_version}])
            self.lists[kind] = items
