"""Python's cyclic garbage collector around detection cycles.

The engine keeps every active scope's state in memory: with 10,000 sessions, 0.5 to 1 million container
objects (scope states, their recent turns and windows). None of it forms reference cycles: a scope that is
evicted or reset is freed by reference counting alone. CPython's generational collector still traverses all
of it at each full collection, and the short-lived allocations of a 10,000-call cycle trigger one every few
cycles, each costing about as much as a whole cycle's budget (``docs/benchmarks.md``, "Detection cycle").

So a cycle runs with automatic collection paused, and what it leaves alive (the new turns, the scopes'
windows) is then moved to the permanent generation (:func:`gc.freeze`): later collections no longer
traverse it. Objects in the permanent generation are still freed by reference counting; only a reference
cycle among them (say another thread's request, alive when a cycle ended) would never be collected, so
:meth:`CollectorPolicy.collect_if_due` unfreezes everything and runs one full collection every
``full_every_seconds`` (the eviction job calls it). A steady cycle creates no garbage cycles at all
(``tests/test_collector.py``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CollectorPolicy"]


class CollectorPolicy:
    """Pause automatic collection during a cycle, freeze its survivors, collect in full now and then."""

    def __init__(self, full_every_seconds: float = 600.0, enabled: bool = True) -> None:
        self.enabled = enabled
        self.full_every_seconds = full_every_seconds
        self.last_full = time.monotonic()
        self.full_collections = 0

    @contextmanager
    def cycle(self) -> Iterator[None]:
        """Run a cycle with automatic collection paused; then freeze what it left alive."""
        if not self.enabled:
            yield
            return
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            gc.freeze()
            if was_enabled:
                gc.enable()

    def collect_if_due(self, force: bool = False) -> int | None:
        """A full collection of everything, frozen or not, when ``full_every_seconds`` have passed since the
        last one; returns the number of unreachable objects found (None when not due)."""
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last_full < self.full_every_seconds):
            return None
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self.last_full = now
        self.full_collections += 1
        return found
