"""The data directory's free space, checked cheaply: the guard that refuses new writes before the disk is full.

ClickHouse keeps reserved space on its disks for the same reason (``keep_free_space_bytes``): a store that fills its
disk to the last byte cannot merge, mutate or even record what it was doing. Ingest asks :meth:`FreeSpace.shortage`
before it takes a request (so that a sender is refused at once, retryable, rather than after its bytes are written
and fail), and the health check asks it why the service is degraded. One ``statvfs`` per
:data:`CHECK_INTERVAL_SECONDS` at most, whatever the request rate.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Final

__all__ = ["CHECK_INTERVAL_SECONDS", "FreeSpace", "mib"]

# How long a reading of the free space is reused: requests arrive by the thousand a second under load, and a disk
# fills in seconds at the fastest; a tenth of a second keeps the guard current at ten statvfs calls a second at most.
CHECK_INTERVAL_SECONDS: Final = 0.1


def mib(nbytes: int) -> str:
    return f"{nbytes / (1024 * 1024):,.1f} MiB"


class FreeSpace:
    """The free bytes of the filesystem holding ``path`` (what an unprivileged writer may use: ``f_bavail``), against
    ``min_free_bytes`` (0: never short). Safe to call from any thread."""

    def __init__(self, path: str | os.PathLike[str], min_free_bytes: int,
                 interval_seconds: float = CHECK_INTERVAL_SECONDS) -> None:
        self.path = Path(path)
        self.min_free_bytes = min_free_bytes
        self.interval_seconds = interval_seconds
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._free: int | None = None

    def free_bytes(self, fresh: bool = False) -> int | None:
        """The free bytes now (a reading at most ``interval_seconds`` old unless ``fresh``); None when the path
        cannot be read (then nothing is refused for it: the writes themselves will say what is wrong)."""
        now = time.monotonic()
        with self._lock:
            if fresh or now - self._read_at >= self.interval_seconds:
                try:
                    st = os.statvfs(self.path)
                    self._free = st.f_bavail * st.f_frsize
                except OSError:
                    self._free = None
                self._read_at = now
            return self._free

    def shortage(self, fresh: bool = False) -> str | None:
        """Why new data must not be written now (the free space and the setting), or None when there is room."""
        if self.min_free_bytes <= 0:
            return None
        free = self.free_bytes(fresh)
        if free is None or free >= self.min_free_bytes:
            return None
        # (the path is not named: this message reaches senders)
        return f"data directory has {mib(free)} free, below ingest.min_free_bytes ({mib(self.min_free_bytes)})"
