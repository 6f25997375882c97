"""A read-only, ClickHouse-compatible HTTP endpoint over the embedded store, so Grafana's ClickHouse plugin (HTTP
protocol, through clickhouse-go) and clickhouse-connect can read the tables that live inside this process.

It speaks the part of ClickHouse's HTTP interface those clients use:

* the query by ``POST`` (body, or ``query`` parameter + body) or ``GET`` (``query`` parameter); ``/ping``;
* user ``default`` with the configured password, by ``Authorization: Basic``, ``X-ClickHouse-User`` /
  ``X-ClickHouse-Key`` or ``user`` / ``password`` parameters; a wrong one is ``516 AUTHENTICATION_FAILED``;
* the format of a trailing ``FORMAT`` clause, else ``default_format``, else ``X-ClickHouse-Format``, else
  TabSeparated; every format chDB writes (JSON, JSONCompact, JSONEachRow, TabSeparated*, CSV*,
  RowBinaryWithNamesAndTypes, Arrow, Parquet...), and Native framed for the ``client_protocol_version`` the
  client sends (:mod:`detector.api.native_format`);
* every other URL parameter as a setting (``param_<name>`` as a query parameter), applied before the query's own
  ``SETTINGS``, and ``readonly = 2`` after them (:mod:`detector.api.clickhouse_sql` says what else is refused);
* ``database``; ``query_id``; response compression with ``enable_http_compression=1`` and ``Accept-Encoding``
  (gzip, deflate, zstd, lz4 frame), request bodies with ``Content-Encoding``; ClickHouse's own block
  compression (``compress=1`` / ``decompress=1``) is refused with a clear error;
* the ``X-ClickHouse-Query-Id``, ``-Format``, ``-Timezone``, ``-Server-Display-Name``, ``-Summary`` headers, and
  errors as ClickHouse writes them: ``Code: N. DB::Exception: ... (NAME) (version V)``, with
  ``X-ClickHouse-Exception-Code`` and ClickHouse's HTTP status for the code (4xx; what ClickHouse would answer
  with a 5xx is a 400 here: the cause is the query).

With ``allow_writes`` (for tests only: never on by default) ``POST`` may also run INSERT (Arrow, ArrowStream and
Parquet through pyarrow, text formats as they are) and DDL: the server-store code path (clickhouse-connect) runs
against it in CI.
"""

from __future__ import annotations

import base64
import gzip
import hmac
import io
import logging
import re
import uuid
import zlib
from collections.abc import Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from detector.api.clickhouse_sql import ClickHouseError, check_ast, prepare
from detector.api.native_format import NativeTypeError, for_revision
from detector.settings.service_settings import ClickHouseHttpSettings
from detector.storage.transport import RawResult, Store, StoreError

__all__ = ["DISPLAY_NAME", "RESERVED_PARAMS", "USER", "create_clickhouse_http_app", "error_status"]

log = logging.getLogger("loop_detector.clickhouse_http")

USER = "default"
DISPLAY_NAME = "loop-detector"
# The insert settings the test-only write path applies, as a server would: the detector's retried writes carry a
# deduplication token, and a retry of an insert that reached the store (its answer lost) must be stored once.
INSERT_SETTINGS = frozenset({"insert_deduplication_token"})
# URL parameters of ClickHouse's HTTP handler that are not settings (HTTPHandler.cpp, reserved_param_names).
RESERVED_PARAMS = frozenset({
    "query", "compress", "decompress", "user", "password", "quota_key", "query_id", "stacktrace", "role",
    "buffer_size", "wait_end_of_query", "session_id", "session_timeout", "session_check", "client_protocol_version",
    "close_session", "database", "default_format", "http_response_headers", "roles",
})
MAX_QUERY_BODY = 16 * 1024 * 1024
MAX_INSERT_BODY = 256 * 1024 * 1024
_READ_WORDS = ("SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN")
_INSERT = re.compile(
    r"^\s*INSERT\s+INTO\s+(?P<table>[\w.`\"]+)\s*(?:\((?P<cols>[^)]*)\))?\s*(?:SETTINGS\s+[^\n]*?)?"
    r"FORMAT\s+(?P<fmt>\w+)[ \t]*(?:\r?\n)?", re.I | re.S)
_ERROR = re.compile(r"Code: (\d+)\. DB::Exception: ", re.S)
_ERROR_NAME = re.compile(r"\(([A-Z][A-Z0-9_]+)\)\s*$")

# ClickHouse's exceptionCodeToHTTPStatus (src/Server/HTTPHandler.cpp), with its 5xx answers as 400 here.
_STATUS_BY_CODE = {
    194: 401,  # REQUIRED_PASSWORD
    192: 403, 193: 403, 516: 403,  # UNKNOWN_USER, WRONG_PASSWORD, AUTHENTICATION_FAILED
    164: 403, 497: 403,  # READONLY, ACCESS_DENIED
    60: 404, 46: 404, 47: 404, 50: 404, 56: 404, 81: 404, 115: 404, 73: 404, 62: 400, 202: 413,
}


def error_status(code: int) -> int:
    return _STATUS_BY_CODE.get(code, 400)


def _content_type(fmt: str) -> str:
    f = fmt.lower()
    if f.startswith(("tabseparated", "tsv")):
        return "text/tab-separated-values; charset=UTF-8"
    if f.startswith("csv"):
        return "text/csv; charset=UTF-8; header=absent"
    if f.startswith("json"):
        return "application/json; charset=UTF-8"
    if f.startswith(("native", "rowbinary", "arrow", "parquet", "orc", "avro", "msgpack", "protobuf", "capnproto")):
        return "application/octet-stream"
    return "text/plain; charset=UTF-8"


def _zstd() -> Any:
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14
    except ImportError:
        try:
            from backports import zstd  # type: ignore[import-not-found,no-redef]
        except ImportError:
            return None
    return zstd


def _codecs() -> dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]]:
    """Content codings we can (compress, decompress), by their HTTP name."""
    codecs: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
        "gzip": (lambda b: gzip.compress(b, 3), gzip.decompress),
        "deflate": (lambda b: zlib.compress(b, 3), zlib.decompress),
    }
    try:
        import lz4.frame

        codecs["lz4"] = (lz4.frame.compress, lz4.frame.decompress)
    except ImportError:  # pragma: no cover - lz4 comes with clickhouse-connect
        pass
    zstd = _zstd()
    if zstd is not None:
        codecs["zstd"] = (zstd.compress, zstd.decompress)
    return codecs


CODECS = _codecs()


def _error_from_store(exc: StoreError) -> ClickHouseError:
    text = str(exc).strip()
    matches = list(_ERROR.finditer(text))
    if not matches:
        return ClickHouseError(1001, "STD_EXCEPTION", text or "the store failed")
    code = int(matches[0].group(1))
    message = text[matches[-1].end():].strip()
    name = _ERROR_NAME.search(message)
    if name:
        message = message[:name.start()].rstrip()
    return ClickHouseError(code, name.group(1) if name else "UNKNOWN_EXCEPTION", message)


class _Endpoint:
    def __init__(self, store: Store, password: str, settings: ClickHouseHttpSettings) -> None:
        self.store = store
        self.password = password
        self.settings = settings
        rows = store.rows("SELECT version() AS v, timezone() AS tz, revision() AS r")
        self.version, self.timezone, self.revision = rows[0]["v"], rows[0]["tz"], int(rows[0]["r"])

    # -- errors -------------------------------------------------------------------------------------------------
    def error(self, err: ClickHouseError, query_id: str) -> Response:
        body = f"Code: {err.code}. DB::Exception: {err.message}. ({err.name}) (version {self.version})\n"
        return PlainTextResponse(body, status_code=error_status(err.code), headers={
            "X-ClickHouse-Exception-Code": str(err.code), "X-ClickHouse-Query-Id": query_id,
            "X-ClickHouse-Server-Display-Name": DISPLAY_NAME, "X-ClickHouse-Timezone": self.timezone})

    # -- authentication -----------------------------------------------------------------------------------------
    def authenticate(self, request: Request) -> None:
        params = request.query_params
        user, password = USER, ""
        auth = request.headers.get("authorization", "")
        if auth[:6].lower() == "basic ":
            try:
                user, _, password = base64.b64decode(auth[6:].strip()).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                user, password = "", ""
        elif "x-clickhouse-user" in request.headers or "x-clickhouse-key" in request.headers:
            user = request.headers.get("x-clickhouse-user", USER)
            password = request.headers.get("x-clickhouse-key", "")
        elif "user" in params or "password" in params:
            user, password = params.get("user", USER), params.get("password", "")
        ok = hmac.compare_digest(user.encode(), USER.encode()) & hmac.compare_digest(password.encode(),
                                                                                       self.password.encode())
        if not ok:
            raise ClickHouseError(516, "AUTHENTICATION_FAILED", f"{user[:64]}: Authentication failed: password is "
                                  "incorrect, or there is no user with such name")

    # -- one request --------------------------------------------------------------------------------------------
    async def __call__(self, request: Request) -> Response:
        params = request.query_params
        query_id = params.get("query_id") or str(uuid.uuid4())
        try:
            self.authenticate(request)
            for name in ("compress", "decompress"):
                if params.get(name, "0") not in ("0", ""):
                    raise ClickHouseError(48, "NOT_IMPLEMENTED", f"{name}=1 (ClickHouse's native block compression) "
                                          "is not supported here: use enable_http_compression=1 with Accept-Encoding")
            body = b""
            if request.method == "POST":
                body = await self._body(request)
            query = params.get("query", "")
            if request.method == "GET" and not query:
                return PlainTextResponse("Ok.\n")
            return await self._run(request, query, body, query_id)
        except ClickHouseError as err:
            return self.error(err, query_id)
        except Exception:  # a defect here: logged, and answered as ClickHouse answers an unexpected exception
            log.exception("ClickHouse HTTP endpoint failed", extra={"query_id": query_id})
            return self.error(ClickHouseError(1001, "STD_EXCEPTION", "unexpected error (see the service log)"),
                              query_id)

    async def _body(self, request: Request) -> bytes:
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise ClickHouseError(48, "NOT_IMPLEMENTED", "multipart/form-data (external tables) is not supported here: "
                                  "send the query in the body or the query parameter")
        limit = MAX_INSERT_BODY if self.settings.allow_writes else MAX_QUERY_BODY
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ClickHouseError(202, "QUERY_IS_TOO_LARGE", f"request body over {limit} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
        coding = request.headers.get("content-encoding", "").strip().lower()
        if coding and coding != "identity":
            if coding not in CODECS:
                raise ClickHouseError(48, "NOT_IMPLEMENTED", f"unsupported Content-Encoding {coding!r}")
            try:
                body = CODECS[coding][1](body)
            except Exception:
                raise ClickHouseError(271, "CANNOT_DECOMPRESS", f"cannot decompress the {coding} body") from None
        return body

    async def _run(self, request: Request, query: str, body: bytes, query_id: str) -> Response:
        params = request.query_params
        query_params = {k[6:]: v for k, v in params.items() if k.startswith("param_")}
        url_settings = {k: v for k, v in params.items() if k not in RESERVED_PARAMS and not k.startswith("param_")}
        compress = url_settings.get("enable_http_compression", "0") not in ("0", "false", "")
        head = (query + "\n" + body[:65536].decode("latin-1")) if query else body[:65536].decode("latin-1")
        first = head.lstrip().split(None, 1)[0].upper() if head.strip() else ""
        reads = first in _READ_WORDS or first.startswith("(")
        if self.settings.allow_writes and not reads:
            return await self._write(request, query, body, query_params, query_id)
        if first == "INSERT":
            raise ClickHouseError(164, "READONLY", "Cannot execute query in readonly mode: this endpoint only reads "
                                  "(SELECT, SHOW, DESCRIBE, EXISTS, EXPLAIN)")
        sql = f"{query}\n{body.decode('utf-8', 'replace')}" if query and body else query or body.decode("utf-8", "replace")
        prepared = prepare(sql, url_settings, read_only=True)
        fmt = prepared.fmt or params.get("default_format") or request.headers.get("x-clickhouse-format") \
            or "TabSeparated"
        database = params.get("database") or None
        try:
            ast = await run_in_threadpool(self.store.raw, "EXPLAIN AST " + prepared.sql, "TabSeparatedRaw",
                                          query_params, database)
            check_ast(ast.data.decode("utf-8", "replace"))
            result = await run_in_threadpool(self.store.raw, prepared.sql, fmt, query_params, database)
        except StoreError as exc:
            raise _error_from_store(exc) from None
        data = result.data
        if len(data) > self.settings.max_result_bytes:
            raise ClickHouseError(396, "TOO_MANY_ROWS_OR_BYTES", f"the result is over {self.settings.max_result_bytes}"
                                  " bytes (clickhouse_http.max_result_bytes): add a LIMIT")
        revision = int(params.get("client_protocol_version", "0") or 0) if params.get(
            "client_protocol_version", "").isdigit() else 0
        if fmt.lower() == "native" and revision:
            try:
                data = for_revision(data, min(revision, self.revision))
            except NativeTypeError as exc:
                raise ClickHouseError(48, "NOT_IMPLEMENTED", f"{exc}; ask for another format (FORMAT JSON, "
                                      "RowBinaryWithNamesAndTypes, Arrow...)") from None
        return self._respond(request, data, fmt, query_id, result, compress)

    def _respond(self, request: Request, data: bytes, fmt: str, query_id: str, result: RawResult,
                 compress: bool) -> Response:
        summary = {"read_rows": str(result.rows_read), "read_bytes": str(result.bytes_read), "written_rows": "0",
                   "written_bytes": "0", "total_rows_to_read": str(result.rows_read),
                   "result_bytes": str(len(data)), "elapsed_ns": str(int(result.elapsed_seconds * 1e9))}
        headers = {"X-ClickHouse-Query-Id": query_id, "X-ClickHouse-Format": fmt,
                   "X-ClickHouse-Timezone": self.timezone, "X-ClickHouse-Server-Display-Name": DISPLAY_NAME,
                   "X-ClickHouse-Summary": orjson.dumps(summary).decode()}
        if compress:
            for coding in (c.strip().split(";")[0].lower() for c in request.headers.get("accept-encoding", "").split(",")):
                if coding in CODECS:
                    data = CODECS[coding][0](data)
                    headers["Content-Encoding"] = coding
                    break
        return Response(data, headers=headers, media_type=_content_type(fmt))

    # -- writes (tests only) ------------------------------------------------------------------------------------
    async def _write(self, request: Request, query: str, body: bytes, query_params: dict[str, str],
                     query_id: str) -> Response:
        if request.method != "POST":
            raise ClickHouseError(164, "READONLY", "Cannot execute query in readonly mode. For queries over HTTP, "
                                  "method GET implies readonly. You should use method POST for modifying queries")
        text = (query + "\n").encode() + body if query else body
        m = _INSERT.match(text[:65536].decode("latin-1"))
        try:
            if m:
                data = text[len(m.group(0).encode("latin-1")):]
                settings = {k: v for k, v in request.query_params.items() if k in INSERT_SETTINGS}
                await run_in_threadpool(self._insert, m, data, query_params, settings)
            else:
                prepared = prepare(text.decode("utf-8", "replace"), {}, read_only=False)
                await run_in_threadpool(self.store.raw, prepared.sql, prepared.fmt or "TabSeparated", query_params,
                                        request.query_params.get("database") or None)
        except StoreError as exc:
            raise _error_from_store(exc) from None
        return self._respond(request, b"", "TabSeparated", query_id, RawResult(b""), False)

    def _insert(self, m: re.Match[str], data: bytes, query_params: dict[str, str],
                settings: dict[str, str] | None = None) -> None:
        table, fmt = m.group("table").replace("`", "").replace('"', ""), m.group("fmt")
        if fmt.lower() in ("arrow", "arrowstream", "parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            if fmt.lower() == "parquet":
                arrow = pq.read_table(io.BytesIO(data))
            elif fmt.lower() == "arrow":
                arrow = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            else:
                arrow = pa.ipc.open_stream(pa.BufferReader(data)).read_all()
            if arrow.num_rows:
                self.store.insert_arrow(table, arrow, settings or None)
            return
        if fmt.lower().startswith(("native", "rowbinary")):
            raise ClickHouseError(48, "NOT_IMPLEMENTED", f"INSERT in {fmt} is not supported here: use Arrow or a text "
                                  "format")
        cols = f" ({m.group('cols')})" if m.group("cols") else ""
        self.store.raw(f"INSERT INTO {table}{cols} FORMAT {fmt}\n" + data.decode("utf-8"), "TabSeparated",
                       query_params)


def create_clickhouse_http_app(store: Store, password: str, settings: ClickHouseHttpSettings) -> Starlette:
    endpoint = _Endpoint(store, password, settings)

    async def ping(_: Request) -> Response:
        return PlainTextResponse("Ok.\n")

    async def query(request: Request) -> Response:
        return await endpoint(request)

    return Starlette(routes=[
        Route("/ping", ping, methods=["GET", "HEAD"]),
        Route("/replicas_status", ping, methods=["GET", "HEAD"]),
        Route("/{path:path}", query, methods=["GET", "POST"]),
    ])
