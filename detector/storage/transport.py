"""The ClickHouse store: one small transport interface, two implementations.

Everything above this module speaks SQL with query parameters (``{name:Type}``) and JSONEachRow, and
hands bulk inserts over as Arrow tables (:meth:`insert_arrow`: the engine reads Arrow columns about ten
times faster than it parses the same rows as JSON).
:class:`ChdbStore` runs the ClickHouse engine in-process (the default, embedded mode);
:class:`ServerStore` talks to a ClickHouse server with clickhouse-connect (scaled mode). Only the
transport differs: the DDL files in ``clickhouse/`` and every query are the same for both.

chDB can open a data directory from one process only, and its session is not safe for concurrent
use, so :class:`ChdbStore` serialises every statement behind one lock. That also gives the
detector a clean watermark: an insert either committed before a cycle's read or after it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from detector.storage.reachability import Breaker, quiet_driver_tracebacks, transport_failure

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CLICKHOUSE_URL_ENV", "CONNECT_TIMEOUT_SECONDS", "ChdbStore", "MUTATION_WAIT_SECONDS", "QUERY_TIMEOUT_SECONDS",
    "RawResult", "SESSION_SETTINGS", "ServerStore", "Store", "StoreError", "StoreUnreachable",
    "chdb_holder", "chdb_param",
    "encode_rows", "insert_rows", "open_store", "redact_url",
]

CLICKHOUSE_URL_ENV = "LOOP_DETECTOR_CLICKHOUSE_URL"

# Settings every session gets: UTC everywhere, and 64-bit integers as JSON numbers (not strings).
SESSION_SETTINGS = {
    "session_timezone": "UTC",
    "output_format_json_quote_64bit_integers": 0,
    "date_time_input_format": "best_effort",
}


class StoreError(RuntimeError):
    """A statement failed in the store (syntax, type or engine error)."""


# chDB: a lightweight DELETE is a mutation, and by default the statement waits for it to be applied. With the disk
# full the mutation is never even scheduled (its part cannot reserve space), so the statement waited forever while it
# held the store: every insert and cycle behind it hung. DELETEs are issued asynchronously and then waited for here,
# at most this long (less than an exporter's 10 s timeout); past it the statement fails as the store's failure
# (ClickHouse code 341, UNFINISHED: retryable) and the mutation is applied once space comes back.
MUTATION_WAIT_SECONDS = 5.0
_MUTATION_POLL_SECONDS = 0.005
_ASYNC_DELETES = "lightweight_deletes_sync"
SELECT_UNFINISHED_MUTATIONS = """
SELECT count() AS n, max(latest_fail_reason) AS reason FROM system.mutations
WHERE database = {db:String} AND table = {table:String} AND NOT is_done
"""
class StoreUnreachable(StoreError):
    """The server store did not answer (refused, dropped, timed out), or is known not to since a recent failure."""


# Seconds (clickhouse-connect takes whole seconds); the configured values are store.connect_timeout_seconds and
# store.query_timeout_seconds (detector.settings.service_settings.StoreSettings says why these defaults).
CONNECT_TIMEOUT_SECONDS = 3
QUERY_TIMEOUT_SECONDS = 30


@dataclass(frozen=True, slots=True)
class RawResult:
    """A statement's output in the format asked for, with what the engine says it read."""

    data: bytes
    rows_read: int = 0
    bytes_read: int = 0
    elapsed_seconds: float = 0.0


class Store(Protocol):
    """What the rest of the code needs from ClickHouse."""

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None: ...

    def delete(self, table: str, where: str, params: Mapping[str, Any] | None = None) -> None:
        """``DELETE FROM table WHERE where``, applied before it returns (``table``: ``database.name``, one of ours;
        ``where`` a condition of ours, its values in ``params``)."""
        ...

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...

    def insert_json(self, table: str, payload: bytes) -> None: ...

    def insert_arrow(self, table: str, data: pa.Table, settings: Mapping[str, Any] | None = None) -> None:
        """Insert an Arrow table whose column names are (a subset of) the table's columns; ``settings`` are the
        insert's own (e.g. ``insert_deduplication_token``: the same insert twice is stored once)."""
        ...

    def arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
        """A query's result as an Arrow table (bulk reads: no per-row JSON to parse)."""
        ...

    def raw(self, sql: str, fmt: str, params: Mapping[str, str] | None = None,
            database: str | None = None) -> RawResult:
        """Any statement's output as bytes in ``fmt``; ``params`` are in ClickHouse's text form already (as HTTP
        clients send them), ``database`` is the one unqualified names resolve in."""
        ...

    def exclusive(self) -> AbstractContextManager[Any]:
        """Hold the store for a run of statements: nobody else's statement runs between them. The detector reads
        and writes a cycle's rows this way, so that its statements are not each queued behind an ingest insert
        (an insert runs the materialized view, a long statement; see docs/benchmarks.md)."""
        ...

    def close(self) -> None: ...


def encode_rows(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """Rows as JSONEachRow bytes (the fast insert path: never build VALUES strings)."""
    return b"\n".join(orjson.dumps(r) for r in rows)


def insert_rows(store: Store, table: str, rows: Iterable[Mapping[str, Any]]) -> int:
    payload = encode_rows(rows)
    if not payload:
        return 0
    store.insert_json(table, payload)
    return payload.count(b"\n") + 1


def _quote(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):
        inner = ",".join(_quote(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def chdb_param(value: Any) -> Any:
    """A query parameter in the text form ClickHouse parses (chDB passes strings through as they are,
    so arrays and tuples must be spelled as quoted literals)."""
    if isinstance(value, (list, tuple)):
        return _quote(value)
    if isinstance(value, str):
        # parameter values are parsed in ClickHouse's escaped text format: backslashes, tabs and
        # newlines must be escaped or they would be read as escape sequences
        return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return value


def _settings_clause(settings: Mapping[str, Any] | None) -> str:
    """``SETTINGS name = value, ...`` for an INSERT (names are ours; values quoted as ClickHouse literals)."""
    if not settings:
        return ""
    for name in settings:
        if not re.fullmatch(r"[a-z_]+", name):
            raise StoreError(f"invalid setting name {name!r}")
    return "SETTINGS " + ", ".join(f"{name} = {_quote(value)}" for name, value in settings.items()) + " "


def _parse_json_lines(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in data.splitlines() if line]


def chdb_holder(path: Path) -> str | None:
    """The process that has the chDB directory ``path`` open, or None. chDB (the ClickHouse server inside it) writes
    its pid and start time into ``status`` and holds an exclusive ``flock`` on it while it runs; opening the
    directory from a second process fails, with the reason only on chDB's stderr. Asked first, it can be named."""
    try:
        fd = os.open(path / "status", os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        fields = dict(line.split(": ", 1) for line in os.read(fd, 4096).decode(errors="replace").splitlines()
                      if ": " in line)
        started = f", started {fields['Started at']}" if "Started at" in fields else ""
        return f"process {fields.get('PID', '?')}{started}"
    except OSError:
        return None
    finally:
        os.close(fd)  # releases the shared lock, if it was taken
    return None


class ChdbStore:
    """The embedded store: chDB over a persistent data directory, one lock for every statement (reentrant: a run
    of statements may hold it, :meth:`exclusive`)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        from chdb import session as chdb_session

        self.path = Path(data_dir) / "chdb"
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        holder = chdb_holder(self.path)
        if holder is not None:
            raise StoreError(f"the chDB data directory {self.path} is in use by {holder} (chDB opens a directory from "
                             "one process at a time): stop it, or use another data directory")
        try:
            self._session = chdb_session.Session(str(self.path))
        except Exception as exc:  # chDB raises plain RuntimeErrors
            raise StoreError(f"cannot open chDB data directory {self.path}: {exc}") from exc
        for name, value in SESSION_SETTINGS.items():
            self._session.query(f"SET {name} = {value!r}" if isinstance(value, str) else f"SET {name} = {value}")
        self._session.query(f"SET {_ASYNC_DELETES} = 0")  # waited for by _wait_mutations, with a deadline
        self.mutation_wait_seconds = MUTATION_WAIT_SECONDS

    def _query(self, sql: str, fmt: str, params: Mapping[str, Any] | None) -> bytes:
        with self._lock:
            try:
                result = self._session.query(
                    sql, fmt, params={k: chdb_param(v) for k, v in params.items()} if params else None
                )
            except Exception as exc:
                raise StoreError(str(exc)) from exc
        return result.bytes()

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        with self._lock:
            self._query(sql, "CSV", params)

    def delete(self, table: str, where: str, params: Mapping[str, Any] | None = None) -> None:
        database, _, name = table.rpartition(".")
        with self._lock:
            self._query(f"DELETE FROM {table} WHERE {where}", "CSV", params)
            # applied before the store is let go, as a synchronous DELETE was (but not forever)
            self._wait_mutations(database or "default", name)

    def _wait_mutations(self, database: str, table: str) -> None:
        deadline = time.monotonic() + self.mutation_wait_seconds
        while True:
            row = self.rows(SELECT_UNFINISHED_MUTATIONS, {"db": database, "table": table})[0]
            if not int(row["n"]):
                return
            if row["reason"]:  # its code only: an engine message may quote values
                code = re.search(r"Code: (\d+)", str(row["reason"]))
                raise StoreError(f"Code: {code.group(1) if code else 341}. DELETE on {database}.{table} failed")
            if time.monotonic() > deadline:
                raise StoreError(f"Code: 341. DELETE on {database}.{table} not applied within "
                                 f"{self.mutation_wait_seconds:g} s (UNFINISHED: is the disk full?); it is applied "
                                 "once the store can")
            time.sleep(_MUTATION_POLL_SECONDS)

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return _parse_json_lines(self._query(sql, "JSONEachRow", params))

    def insert_json(self, table: str, payload: bytes) -> None:
        # The payload is JSON produced by orjson, never SQL; the table name is one of ours.
        self._query(f"INSERT INTO {table} FORMAT JSONEachRow\n" + payload.decode(), "CSV", None)

    def insert_arrow(self, table: str, data: pa.Table, settings: Mapping[str, Any] | None = None) -> None:
        # chDB's Python() table function reads the Arrow table in place; it finds it by its variable
        # name in the calling frame, so the query runs here, where `arrow_rows` is a local.
        arrow_rows = data  # noqa: F841 (read by name inside chDB)
        columns = ", ".join(f"`{name}`" for name in data.column_names)
        sql = f"INSERT INTO {table} ({columns}) {_settings_clause(settings)}SELECT {columns} FROM Python(arrow_rows)"
        with self._lock:
            try:
                self._session.query(sql, "CSV")
            except Exception as exc:
                raise StoreError(str(exc)) from exc

    def arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
        with self._lock:
            try:
                return self._session.query(
                    sql, "ArrowTable", params={k: chdb_param(v) for k, v in params.items()} if params else None
                )
            except Exception as exc:
                raise StoreError(str(exc)) from exc

    def raw(self, sql: str, fmt: str, params: Mapping[str, str] | None = None,
            database: str | None = None) -> RawResult:
        with self._lock:
            switched = False
            try:
                if database and database != "default":
                    # one session for the whole process: switch for this statement only, and back
                    self._session.query(f"USE `{database.replace('`', '')}`", "CSV")
                    switched = True
                result = self._session.query(sql, fmt, params=dict(params) if params else None)
                return RawResult(result.bytes(), int(result.rows_read()), int(result.bytes_read()),
                                 float(result.elapsed()))
            except Exception as exc:
                raise StoreError(str(exc)) from exc
            finally:
                if switched:
                    self._session.query("USE default", "CSV")

    def exclusive(self) -> AbstractContextManager[Any]:
        return self._lock

    def close(self) -> None:
        with self._lock:
            self._session.close()


class ServerStore:
    """A ClickHouse server (or cluster) through clickhouse-connect's HTTP interface. Every wait is bounded
    (``connect_timeout``, ``query_timeout``: seconds), and while the server is unreachable statements fail at once
    (:mod:`detector.storage.reachability`)."""

    def __init__(self, url: str, connect_timeout: int = CONNECT_TIMEOUT_SECONDS,
                 query_timeout: int = QUERY_TIMEOUT_SECONDS) -> None:
        import clickhouse_connect

        self.url = url
        # the driver's and urllib3's warnings about a failed first request would only repeat the error below
        quiet = {name: logging.getLogger(name) for name in ("clickhouse_connect", "urllib3")}
        levels = {name: logger.level for name, logger in quiet.items()}
        for logger in quiet.values():
            logger.setLevel(logging.ERROR)
        try:
            self._client = clickhouse_connect.get_client(dsn=url, settings=dict(SESSION_SETTINGS),
                                                         connect_timeout=connect_timeout,
                                                         send_receive_timeout=query_timeout)
        except Exception as exc:
            raise StoreError(f"cannot reach ClickHouse at {redact_url(url)}: {_root_reason(exc)}") from exc
        finally:
            for name, logger in quiet.items():
                logger.setLevel(levels[name])
        quiet_driver_tracebacks()
        self._lock = threading.RLock()  # one client, one statement at a time (reentrant: exclusive())
        self.breaker = Breaker(lambda timeout: bool(self._client.ping(timeout)))

    @contextmanager
    def _statement(self) -> Iterator[None]:
        """Around one statement: fail at once while the server is unreachable; a failure on the transport marks it
        so, an answer marks it reachable; every failure is a StoreError."""
        refused = self.breaker.admit()
        if refused is not None:
            raise StoreUnreachable(f"ClickHouse unreachable: {refused}")
        try:
            with self._lock:
                yield
        except Exception as exc:
            if transport_failure(exc):
                reason = _root_reason(exc)
                self.breaker.opened(reason)
                raise StoreUnreachable(f"ClickHouse unreachable: {reason}") from exc
            self.breaker.closed()
            raise StoreError(str(exc)) from exc
        self.breaker.closed()

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        with self._statement():
            self._client.command(sql, parameters=dict(params) if params else None)

    def delete(self, table: str, where: str, params: Mapping[str, Any] | None = None) -> None:
        self.command(f"DELETE FROM {table} WHERE {where}", params)  # (a server applies it before answering)

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        with self._statement():
            data = self._client.raw_query(sql, parameters=dict(params) if params else None, fmt="JSONEachRow")
        return _parse_json_lines(data)

    def insert_json(self, table: str, payload: bytes) -> None:
        with self._statement():
            self._client.raw_insert(table, insert_block=payload, fmt="JSONEachRow")

    def insert_arrow(self, table: str, data: pa.Table, settings: Mapping[str, Any] | None = None) -> None:
        with self._statement():
            self._client.insert_arrow(table, data, settings=dict(settings) if settings else None)

    def arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
        with self._statement():
            table: pa.Table = self._client.query_arrow(sql, parameters=dict(params) if params else None,
                                                       use_strings=True)
        return table

    def raw(self, sql: str, fmt: str, params: Mapping[str, str] | None = None,
            database: str | None = None) -> RawResult:
        if database and database != self._client.database:
            raise StoreError("the server store reads in its own database (Grafana connects to the server itself)")
        with self._statement():
            data = self._client.raw_query(sql, parameters=dict(params) if params else None, fmt=fmt)
        return RawResult(data)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        # (fails at once while the server is unreachable, rather than queueing behind a statement that waits for it)
        refused = self.breaker.admit()
        if refused is not None:
            raise StoreUnreachable(f"ClickHouse unreachable: {refused}")
        with self._lock:
            yield

    def close(self) -> None:
        self._client.close()


def _root_reason(exc: BaseException) -> str:
    """The innermost operating-system reason of a chain of wrapped errors (``Connection refused``, a name that does
    not resolve), else the first line of the outermost message: what a person can act on, in one line."""
    seen: BaseException | None = exc
    reason = ""
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            reason = seen.strerror
        seen = seen.__cause__ or seen.__context__
    if not reason:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return redact_url(reason)


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", url)


def open_store(data_dir: str | os.PathLike[str], url: str | None = None,
               connect_timeout: int = CONNECT_TIMEOUT_SECONDS, query_timeout: int = QUERY_TIMEOUT_SECONDS) -> Store:
    """The server store when a URL is configured (or in the environment), else the embedded one."""
    url = url or os.environ.get(CLICKHOUSE_URL_ENV)
    if url:
        return ServerStore(url, connect_timeout, query_timeout)
    return ChdbStore(data_dir)
