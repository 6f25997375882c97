"""Group commit: items queued while the store is busy are committed together, a group at a time.

Both ingest paths commit this way (spans, :mod:`detector.ingest.commit`; log records,
:mod:`detector.ingest.logs_commit`). An insert has a fixed cost whatever its size (the statement is parsed, planned
and its views run), so the requests that queue while one insert runs go into the next one together, and every
request still waits for the insert that holds its own rows. The store is used from one worker thread at a time;
the event loop only queues and waits.

Lingering: before it takes its items, a group may let those arriving alongside join it. It waits one
:data:`LINGER_STEP_SECONDS`, then as long as a receiver is still reading or decoding a request (:meth:`arriving`),
at most ``linger_seconds``. Senders answered together send again together; without the wait the first of them got
an insert of its own while the rest queued behind it (groups of 7 and 1 by turns, with 8 senders: ``bench/lag.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import anyio

__all__ = ["GroupCommitter", "LINGER_STEP_SECONDS", "MAX_GROUP_BYTES", "take_group"]

log = logging.getLogger("loop_detector.ingest")

Item = TypeVar("Item")  # what is queued: a decoded request, a table of log rows
Outcome = TypeVar("Outcome")  # what its sender is answered
_Waiter = TypeVar("_Waiter")

# One group stops taking items once their sizes reach this (one item at least, however large).
MAX_GROUP_BYTES = 128 * 1024 * 1024
LINGER_STEP_SECONDS = 0.01


def take_group(queue: list[tuple[Item, _Waiter]], nbytes: Callable[[Item], int],
               max_bytes: int) -> list[tuple[Item, _Waiter]]:
    """Take the next group off ``queue``: its oldest entries while their sizes fit ``max_bytes`` (one at least,
    however large)."""
    group: list[tuple[Item, _Waiter]] = []
    size = 0
    while queue and (not group or size + nbytes(queue[0][0]) <= max_bytes):
        item = queue.pop(0)
        group.append(item)
        size += nbytes(item[0])
    return group


class GroupCommitter(Generic[Item, Outcome]):
    """Queues items and commits them a group at a time with ``commit_group`` (called in a worker thread, one group
    at a time, returning one outcome per item, in order). Should the worker fail (cancelled at shutdown, or a bug),
    every item of its group gets ``aborted(exc)``, and a cancellation propagates."""

    def __init__(self, commit_group: Callable[[list[Item]], list[Outcome]], nbytes: Callable[[Item], int],
                 aborted: Callable[[BaseException], Outcome], *, max_group_bytes: int = MAX_GROUP_BYTES,
                 linger_seconds: float = 0.0) -> None:
        self.commit_group = commit_group
        self.nbytes = nbytes
        self.aborted = aborted
        self.max_group_bytes = max_group_bytes
        self.linger_seconds = linger_seconds
        self._queue: list[tuple[Item, asyncio.Future[Outcome]]] = []
        self._queued_at: list[float] = []  # when each queued item was submitted (wall clock), in queue order
        self._task: asyncio.Task[None] | None = None
        self._arriving = 0  # items being read or decoded, not yet submitted

    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Around an item's reading and decoding (on the event loop): a group about to start waits for it."""
        self._arriving += 1
        try:
            yield
        finally:
            self._arriving -= 1

    async def submit(self, item: Item) -> Outcome:
        """Queue ``item``; its outcome once the group holding it is committed."""
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._queued_at.append(time.time())
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._queue:
            await self._gather()
            gathered = time.time()
            group = take_group(self._queue, self.nbytes, self.max_group_bytes)
            queued_at, self._queued_at = self._queued_at[:len(group)], self._queued_at[len(group):]
            try:
                outcomes = await anyio.to_thread.run_sync(self._timed_commit, [item for item, _ in group],
                                                          queued_at, gathered)
            except BaseException as exc:  # cancelled (shutdown) or a bug
                for _, future in group:
                    if not future.done():
                        future.set_result(self.aborted(exc))
                if not isinstance(exc, Exception):
                    raise
                continue
            for (_, future), outcome in zip(group, outcomes, strict=True):
                if not future.done():
                    future.set_result(outcome)

    def _timed_commit(self, items: list[Item], queued_at: list[float], gathered: float) -> list[Outcome]:
        """``commit_group`` (in the worker thread), its timings in the debug log: where a request's lag goes
        (``bench/lag.py`` reads them)."""
        started = time.time()
        outcomes = self.commit_group(items)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("group committed", extra={"group_items": len(items), "queued_at": queued_at,
                                                "gathered_at": gathered, "commit_started_at": started,
                                                "commit_ended_at": time.time()})
        return outcomes

    async def _gather(self) -> None:
        """Let the items arriving alongside join this group: wait while some are being read or decoded, at least one
        step (a sender answered a moment ago is sending again), at most ``linger_seconds``."""
        waited = 0.0
        while waited < self.linger_seconds:
            await asyncio.sleep(LINGER_STEP_SECONDS)
            waited += LINGER_STEP_SECONDS
            if not self._arriving:
                return
