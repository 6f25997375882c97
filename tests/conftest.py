"""Shared fixtures."""

from __future__ import annotations

import pytest

from detector.settings.config import AppConfig


@pytest.fixture()
def fast_config() -> AppConfig:
    """Defaults, with a detector fast enough for tests (0.1 s cycles, state saved every cycle)."""
    config = AppConfig()
    config.detector.interval_seconds = 0.1
    config.detector.checkpoint_seconds = 0
    return config
