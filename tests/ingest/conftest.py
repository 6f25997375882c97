"""What the framework and instrumentation modules share: the local stub model, and a live service for each module
with a fast detector (0.1 s cycles, state saved every cycle, spans normalized half a second after they arrive). Module-scoped: a service of its own per module, one at a
time (chDB opens one data directory per process); a module with another setup defines its own ``service``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from detector.service.process import running_service
from detector.settings.config import AppConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from openai_stub import serve_stub  # noqa: E402


@pytest.fixture(scope="module")
def stub_url():
    with serve_stub() as url:
        yield url


@pytest.fixture(scope="module")
def service(request, tmp_path_factory):
    config = AppConfig()
    config.detector.interval_seconds = 0.1
    config.detector.checkpoint_seconds = 0
    # the agents export spans and content logs with two independent batch timers (every 200 and 100 ms): a cycle
    # normalizes the spans staged up to half a second ago, so that a call's logs are in by then (the setting exists
    # for exactly this: docs/instrumentations.md)
    config.detector.watermark_lag_seconds = 0.5
    with running_service(config, tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])) as (svc, eps):
        yield svc, eps
