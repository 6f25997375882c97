"""What every OTLP decoder (traces, logs; protobuf, JSON) shares: the error that refuses a whole request, and the
garbage collector paused while a request is decoded."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["OTLPDecodeError", "gc_paused"]


class OTLPDecodeError(ValueError):
    """The body cannot be decoded as an OTLP export request (the whole request is rejected)."""


# -- garbage collection -----------------------------------------------------------------------------
#
# Decoding allocates a few dicts per span; with the collector on, CPython's generational collections
# triggered by those allocations cost more than the decoding itself (``docs/benchmarks.md``, "Ingest"). The
# rows hold no reference cycles (plain dicts, lists and strings freed by refcount), so the
# collector is paused while a request is decoded and re-enabled when the last decoder finishes.

_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()
