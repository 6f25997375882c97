"""The data directory: readable by its owner only, and held by one ``serve`` at a time.

A chDB data directory can be opened by one process only. A second ``serve`` on the same directory used to get as
far as opening the store and end in two chained tracebacks, the cause ("Another server instance in same directory
is already running") only on chDB's stderr; and with a ClickHouse server as the store, two processes would share
one ingest journal. So ``serve`` first takes ``<data-dir>/serve.lock``: an exclusive ``flock`` that the kernel
releases when the process ends, however it ends (no stale lock after a ``kill -9``), holding the pid, start time and
command line of its holder, which a second ``serve`` names when it refuses.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import sys
import time
from pathlib import Path

__all__ = ["LOCK_FILE", "DataDirInUse", "DataDirLock", "private_directory"]

log = logging.getLogger("loop_detector")

LOCK_FILE = "serve.lock"


def private_directory(path: Path) -> None:
    """Create the data directory readable by its owner only (it holds the spans: prompts and responses), and
    tighten an existing one that this user owns (0700: nothing below it is reachable by other users)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if path.stat().st_uid == os.getuid() and stat.S_IMODE(path.stat().st_mode) & 0o077:
            os.chmod(path, 0o700)
            log.warning("data directory %s was readable by other users: now 0700", path)
    except OSError as exc:
        log.warning("cannot restrict the data directory %s to its owner: %s", path, exc.strerror)


class DataDirInUse(Exception):
    """Another process holds the data directory; ``str()`` names it and says what to do."""


class DataDirLock:
    """``<data-dir>/serve.lock``, held from :meth:`acquire` until :meth:`release` (or the process's end)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Create the data directory if needed and take the lock, or raise :class:`DataDirInUse`."""
        private_directory(self.data_dir)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise DataDirInUse(f"the data directory {self.data_dir} is in use by {holder}: stop that process, or "
                               "give this one its own --data-dir") from None
        os.ftruncate(fd, 0)
        command = " ".join(["loop-detector", *sys.argv[1:]]) if sys.argv else "loop-detector"
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        os.write(fd, f"pid {os.getpid()} ({command}, started {started})\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock; the file stays (an empty lock is not a held one)
            self._fd = None

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
