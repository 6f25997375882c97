"""An engine for the tests: built from a configuration as the detection job builds it."""

from __future__ import annotations

from detector.core.engine import Engine
from detector.detection.engine_config import engine_tuning
from detector.settings.config import AppConfig


def make_engine(config: AppConfig | None = None) -> Engine:
    return Engine(engine_tuning(config or AppConfig()))
