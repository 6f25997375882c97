"""The ingest journal: each group of spans written down before its insert, and the requests already committed.

Both live in one directory (``<data-dir>/ingest-journal/``):

- ``<time_ns>-<sequence>.arrow``: a group's rows as Arrow IPC, each request's digest, row count and decoder result in
  the schema's metadata; written to a temporary name and renamed (a journal file is whole or absent), removed once
  every request of the group has its outcome. A file found at start is a batch a killed process did not finish:
  :mod:`detector.ingest.repair` completes it. The name's time is when the batch was journaled, before its insert:
  the repair looks for what that insert left from then on.
- ``committed.log``: the requests committed, by digest, with their outcome (JSON lines), so that an exporter's retry
  of a request whose ``200`` it never saw is answered again without storing anything twice. Remembered for
  :data:`REMEMBER_SECONDS`, :data:`REMEMBERED_REQUESTS` at most.

Durability is the store's own: files are written without fsync, like ClickHouse's parts by default, so a killed
process loses nothing, a crashed machine may lose what its page cache held.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson
import pyarrow as pa

from detector.ingest.requests import CommitOutcome, DecodedRequest
from detector.settings.vocabulary import COMMIT_COMMITTED

__all__ = ["COMMITTED_LOG", "CommittedRequests", "JOURNAL_SUFFIX", "Journal", "JournaledBatch", "REMEMBERED_REQUESTS",
           "REMEMBER_SECONDS", "read_journal", "write_journal"]

log = logging.getLogger("loop_detector.ingest")

JOURNAL_SUFFIX: Final = ".arrow"
COMMITTED_LOG: Final = "committed.log"
_METADATA_KEY: Final = b"loop_detector.requests"
# Committed requests remembered for retries: exporters retry within minutes (the OTel SDKs' and the collector's
# backoff gives up after about 5 minutes by default).
REMEMBER_SECONDS = 3600
REMEMBERED_REQUESTS = 100_000


def write_journal(path: Path, requests: Sequence[DecodedRequest]) -> Path:
    """Journal a batch (before its insert): its rows as Arrow IPC, each request's digest, row count and decoder
    result in the schema's metadata. Written to a temporary name and renamed: a journal file is whole or absent."""
    tmp = path.with_suffix(".tmp")
    meta = [{"digest": r.digest.hex(), "rows": r.accepted, "rejected": r.rejected, "message": r.error_message}
            for r in requests]
    schema = requests[0].rows.schema.with_metadata({_METADATA_KEY: orjson.dumps(meta)})
    try:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for r in requests:
                if r.accepted:
                    writer.write_table(r.rows)
        os.replace(tmp, path)
    except BaseException:  # a full disk: the torn file would hold on to the space it took until the next start
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_journal(path: Path) -> list[DecodedRequest]:
    """The requests of a journal file (:func:`write_journal`)."""
    with pa.OSFile(str(path), "rb") as source:
        table = pa.ipc.open_file(source).read_all()
    meta: list[dict[str, Any]] = orjson.loads(table.schema.metadata[_METADATA_KEY])
    table = table.replace_schema_metadata(None)
    out, offset = [], 0
    for item in meta:
        n = int(item["rows"])
        out.append(DecodedRequest(table.slice(offset, n), int(item["rejected"]), str(item["message"]),
                                  bytes.fromhex(item["digest"])))
        offset += n
    return out


@dataclass(slots=True)
class JournaledBatch:
    """A batch on its way to the store: its journal file (None without a journal directory), its requests, and when
    it was journaled (nanoseconds since the epoch: its insert started after that)."""

    path: Path | None
    requests: list[DecodedRequest]
    journaled_ns: int


class Journal:
    """The journal directory (or none: nothing survives a restart then). Used from the committer's worker thread."""

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._sequence = 0
        self.committed = CommittedRequests(self.directory / COMMITTED_LOG if self.directory is not None else None)

    def write(self, requests: Sequence[DecodedRequest]) -> JournaledBatch:
        """Journal a batch before its insert (raises OSError when the file cannot be written)."""
        now = time.time_ns()
        if self.directory is None:
            return JournaledBatch(None, list(requests), now)
        self._sequence += 1
        path = write_journal(self.directory / f"{now:020d}-{self._sequence:06d}{JOURNAL_SUFFIX}", requests)
        return JournaledBatch(path, list(requests), now)

    @staticmethod
    def remove(batch: JournaledBatch) -> None:
        if batch.path is not None:
            batch.path.unlink(missing_ok=True)

    def leftovers(self) -> Iterator[JournaledBatch]:
        """The batches a previous process journaled and did not finish, oldest first (a file torn before its rename
        never had its insert started: it is removed)."""
        if self.directory is None:
            return
        for stray in self.directory.glob("*.tmp"):
            stray.unlink(missing_ok=True)
        for path in sorted(self.directory.glob("*" + JOURNAL_SUFFIX)):
            try:
                requests = read_journal(path)
                journaled_ns = int(path.name.partition("-")[0])
            except (OSError, pa.ArrowInvalid, ValueError, KeyError):
                log.warning("ingest journal %s unreadable; removed (its insert never started)", path.name)
                path.unlink(missing_ok=True)
                continue
            yield JournaledBatch(path, requests, journaled_ns)


class CommittedRequests:
    """Committed requests by digest, bounded in count and age, persisted as JSON lines in ``committed.log``."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, tuple[float, CommitOutcome]] = OrderedDict()
        self._lines = 0
        self._torn = False  # the last append failed: the file may end in a torn line
        if path is not None and path.exists():
            now = time.time()
            for line in path.read_bytes().splitlines():
                try:
                    doc = orjson.loads(line)
                    digest = bytes.fromhex(doc["d"])
                    outcome = CommitOutcome(COMMIT_COMMITTED, int(doc["a"]), int(doc["r"]), str(doc["m"]))
                    at = float(doc["t"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line after a crash
                if now - at <= REMEMBER_SECONDS:
                    self._put(digest, at, outcome)
            self._rewrite()

    def _put(self, digest: bytes, at: float, outcome: CommitOutcome) -> None:
        self._entries[digest] = (at, outcome)
        self._entries.move_to_end(digest)
        while len(self._entries) > REMEMBERED_REQUESTS:
            self._entries.popitem(last=False)

    def get(self, digest: bytes) -> CommitOutcome | None:
        with self._lock:
            entry = self._entries.get(digest)
        if entry is None or time.time() - entry[0] > REMEMBER_SECONDS:
            return None
        return entry[1]

    def add(self, items: Iterable[tuple[bytes, CommitOutcome]]) -> None:
        now = time.time()
        lines = []
        with self._lock:
            for digest, outcome in items:
                if not digest:
                    continue
                self._put(digest, now, outcome)
                lines.append(_line(digest, outcome, now))
            if self.path is None or not lines:
                return
            if self._torn:  # an append failed (a full disk): the file is written whole again, torn line gone
                self._rewrite_or_keep()
                return
            try:
                with self.path.open("ab") as fh:
                    fh.write(b"\n".join(lines) + b"\n")
            except OSError as exc:
                # the requests are stored already: they stay acknowledged, remembered in memory; the file is
                # rewritten whole at the next add that can (a retry after a restart meanwhile is stored again)
                log.error("ingest committed.log append failed (%s); rewritten once space allows", type(exc).__name__)
                self._torn = True
                return
            self._lines += len(lines)
            if self._lines > 2 * REMEMBERED_REQUESTS:
                self._rewrite_or_keep()

    def _rewrite_or_keep(self) -> None:
        try:
            self._rewrite()
            self._torn = False
        except OSError as exc:
            log.error("ingest committed.log rewrite failed (%s); retried at the next commit", type(exc).__name__)
            if self.path is not None:
                self.path.with_suffix(".tmp").unlink(missing_ok=True)
            self._torn = True

    def _rewrite(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            for digest, (at, outcome) in self._entries.items():
                fh.write(_line(digest, outcome, at) + b"\n")
        os.replace(tmp, self.path)
        self._lines = len(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _line(digest: bytes, outcome: CommitOutcome, at: float) -> bytes:
    return orjson.dumps({"d": digest.hex(), "a": outcome.accepted, "r": outcome.rejected, "m": outcome.error_message,
                         "t": at})
