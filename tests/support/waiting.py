"""Waiting in tests for something another thread or process does: polled, with a deadline and a message that says
what was waited for (never a bare sleep standing in for it)."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(predicate: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> None:
    """Poll ``predicate`` every 50 ms until it holds; fail the test after ``timeout`` seconds, naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
