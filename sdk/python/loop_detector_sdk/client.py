"""``LoopGuard`` / ``AsyncLoopGuard``: ask loop-detector before each call, and apply the answer.

    guard = LoopGuard("http://127.0.0.1:8080")
    instruction = guard.before_call(session_id="run-42", pending=pending_request(model, messages))
    # allow/warn: None; throttle: slept the delay; inject: the text to add to the system prompt;
    # block: raised LoopBlockedError (its .body is the 429 body)

A check names a session, a trace (``trace_id``, else the current OpenTelemetry span's), or both: with a trace
alone the service uses the session it knows for that trace.

``api_key`` is the service's *API token* (``api.api_token`` in its config, ``$LOOP_DETECTOR_API_TOKEN`` or
``<data-dir>/api-token``), sent as ``Authorization: Bearer``; the service requires it whenever its API listens
beyond loopback. Not given, it is read from ``$LOOP_DETECTOR_API_TOKEN``; ``api_key=""`` sends none.

A background refresh keeps a local copy of the block list (``GET /v1/blocklist`` with ``ETag``), so a check
for a blocked scope is refused locally, with no round trip. ``blocklist_interval=None`` turns it off.

Fail safe, in this order:

1. the cached block list (while fresh: ``max_stale``) blocks the scope: refused locally, no request;
2. else the service's answer decides;
3. the check failed (unreachable, ``timeout``, a 5xx or other unexpected status, a body that does not
   decode, a 401/403): the cached block list is consulted again, *however stale*, and still refuses a
   blocked scope (an outage never lifts a block an admin or a rule made);
4. only then the fail mode: ``fail_open=True`` (the default) lets the call proceed, ``fail_open=False``
   refuses it (reason ``enforcement_unavailable``).

Failures are logged on ``loop_detector.sdk`` (a warning at most every 10 s per guard and kind, with the count
of further failures). A 401/403 is a configuration error, not an outage: it is logged as an error that says
the API token is missing or wrong (never the token), and then handled like an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from typing import Any

import httpx

from loop_detector_sdk.blocklist import LocalBlocklist
from loop_detector_sdk.context import current_ids, current_trace_id
from loop_detector_sdk.fingerprint import canonical_json
from loop_detector_sdk.models import (
    REASON_UNAVAILABLE,
    SOURCE_CACHE,
    SOURCE_FAIL_CLOSED,
    SOURCE_FAIL_OPEN,
    Decision,
    LoopBlockedError,
    block_body,
)

log = logging.getLogger("loop_detector.sdk")

DEFAULT_INSTRUCTION = (
    "Loop detected. You are repeating the same actions without progress. Stop the current approach, "
    "summarize what you have tried, and propose a fundamentally different strategy."
)
WARN_EVERY_SECONDS = 10.0
API_TOKEN_ENV = "LOOP_DETECTOR_API_TOKEN"  # the service reads its API token from the same variable

# The kinds of failure, each logged at most every WARN_EVERY_SECONDS.
OUTAGE = "outage"  # unreachable, timeout, 5xx, unexpected status, undecodable body
AUTH = "auth"  # 401/403: the API token is missing or wrong (a configuration error)


def _api_token(api_key: str | None) -> str | None:
    """``api_key`` when given (``""``: none), else ``$LOOP_DETECTOR_API_TOKEN``."""
    return (api_key if api_key is not None else os.environ.get(API_TOKEN_ENV)) or None


class _Undecodable(ValueError):
    """The service answered, but not with a body this SDK understands."""


class _GuardBase:
    """What both guards share. Parameters:

    * ``endpoint``: the service's API, e.g. ``http://127.0.0.1:8080``;
    * ``api_key``: the service's API token (``api.api_token``, ``$LOOP_DETECTOR_API_TOKEN`` or
      ``<data-dir>/api-token`` on the service's side; needed when its API listens beyond loopback), sent as
      ``Authorization: Bearer`` with every check and block list refresh; None: ``$LOOP_DETECTOR_API_TOKEN``
      if set; ``""``: none;
    * ``timeout``: seconds per connect or read phase of a check;
    * ``fail_open``: when the service cannot be asked and the cached block list does not block the scope,
      let the call proceed (True) or refuse it (False);
    * ``blocklist_interval``: seconds between block list refreshes (None: no cached block list);
    * ``max_stale``: seconds after which the cached list is no longer trusted *before* a check (default 10 x
      the interval); after a failed check it still blocks;
    * ``use_otel_trace``: default ``trace_id`` to the current OpenTelemetry span's.
    """

    def __init__(self, endpoint: str, api_key: str | None = None, timeout: float = 0.5, fail_open: bool = True,
                 blocklist_interval: float | None = 2.0, max_stale: float | None = None,
                 use_otel_trace: bool = True) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.fail_open = fail_open
        self.blocklist_interval = blocklist_interval
        self.use_otel_trace = use_otel_trace
        self.headers = {"content-type": "application/json"}
        token = _api_token(api_key)
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        stale = max_stale if max_stale is not None else 10 * (blocklist_interval or 3.0)
        self.blocklist = LocalBlocklist(max_stale=stale)
        self.failures = 0  # checks the service did not answer usably
        self.auth_failures = 0  # ... of them (and block list refreshes) refused for the API token: 401/403
        self._suppressed = {OUTAGE: 0, AUTH: 0}
        self._last_warned = {OUTAGE: -WARN_EVERY_SECONDS, AUTH: -WARN_EVERY_SECONDS}

    # -- request and answers ---------------------------------------------------------------------------
    def _body(self, session_id: str | None, trace_id: str | None, virtual_key: str | None, feature: str | None,
              pending: dict[str, Any] | None) -> dict[str, Any]:
        ids = current_ids()
        session_id = session_id or ids.session_id
        trace_id = trace_id or (current_trace_id() if self.use_otel_trace else None)
        if not session_id and not trace_id:
            raise ValueError("session_id or trace_id is required (pass one, run inside "
                             "loop_context(session_id=...), or inside an OpenTelemetry span)")
        body: dict[str, Any] = {}
        for name, value in (("session_id", session_id), ("trace_id", trace_id),
                            ("virtual_key", virtual_key or ids.virtual_key), ("feature", feature or ids.feature)):
            if value:
                body[name] = value
        if pending:
            body["pending"] = {k: v for k, v in pending.items() if v is not None}
        return body

    @staticmethod
    def _encode(body: dict[str, Any]) -> bytes:
        """The request body as the TypeScript SDK would send it: canonical JSON, so tool arguments reach the
        service as the same numbers (``1.0`` as ``1``), NaN as null, and a value JSON has no literal for (a
        pydantic model, a tuple, a set) converted instead of raising in the agent's code."""
        return canonical_json(body).encode()

    @staticmethod
    def _scope_id(body: dict[str, Any]) -> str:
        """The id a locally made answer names: the session, else the trace."""
        return str(body.get("session_id") or body.get("trace_id") or "")

    def _cached(self, body: dict[str, Any], stale_ok: bool = False) -> Decision | None:
        entry = self.blocklist.match(body.get("session_id"), body.get("trace_id"), body.get("virtual_key"),
                                     body.get("feature"), stale_ok=stale_ok)
        if entry is None:
            return None
        err = block_body(self._scope_id(body), entry.reason, scope=entry.scope, rule_name=entry.rule_name)
        return Decision.refused(err, source=SOURCE_CACHE)

    def _decode(self, response: httpx.Response, body: dict[str, Any]) -> Decision:
        warning = response.headers.get("x-loop-warning")
        status = response.status_code
        if status in (200, 429):
            try:
                data = response.json()
            except ValueError as exc:
                raise _Undecodable(f"HTTP {status}, a body that is not JSON") from exc
            if not isinstance(data, dict):
                raise _Undecodable(f"HTTP {status}, a body that is not a JSON object")
            if status == 200:
                return Decision.from_json(data, warning=warning)
            try:
                retry = float(response.headers.get("retry-after", 60))
            except ValueError:
                retry = 60.0
            return Decision.refused(data, retry_after=retry, warning=warning)
        if status in (401, 403):
            return self._unavailable(body, f"HTTP {status}", AUTH)
        return self._unavailable(body, f"HTTP {status}")

    def _unavailable(self, body: dict[str, Any], why: str, kind: str = OUTAGE) -> Decision:
        """The check failed: the cached block list (however stale), then the fail mode."""
        self.failures += 1
        if kind == AUTH:
            self.auth_failures += 1
        cached = self._cached(body, stale_ok=True)
        if cached is not None:
            mode = f"the cached block list still refuses the call ({cached.reason})"
        elif self.fail_open:
            mode = "fail open: the call proceeds"
        else:
            mode = "fail closed: the call is refused"
        self._log_failure(kind, why, mode, self._scope_id(body))
        if cached is not None:
            return cached
        scope_id = self._scope_id(body)
        if self.fail_open:
            return Decision(session_id=scope_id, source=SOURCE_FAIL_OPEN, reason=REASON_UNAVAILABLE)
        return Decision.refused(block_body(scope_id, REASON_UNAVAILABLE), source=SOURCE_FAIL_CLOSED,
                                retry_after=None)

    def _log_failure(self, kind: str, why: str, mode: str, scope_id: str = "") -> None:
        now = time.monotonic()
        if now - self._last_warned[kind] < WARN_EVERY_SECONDS:
            self._suppressed[kind] += 1
            return
        extra = {"endpoint": self.endpoint, "session_id": scope_id, "suppressed": self._suppressed[kind]}
        if kind == AUTH:
            given = "the API token it was sent" if "authorization" in self.headers else "a missing API token"
            log.error("loop-detector refused %s (%s): a configuration error, not an outage. Pass the service's "
                      "API token as api_key or set $%s (the service's api.api_token, $%s or <data-dir>/api-token); "
                      "until then: %s", given, why, API_TOKEN_ENV, API_TOKEN_ENV, mode, extra=extra)
        else:
            log.warning("loop-detector enforcement endpoint unavailable (%s); %s", why, mode, extra=extra)
        self._last_warned[kind], self._suppressed[kind] = now, 0

    def _apply_common(self, d: Decision) -> str | None:
        """Everything but the throttle sleep: raise on block, the instruction on inject."""
        if d.blocked:
            raise LoopBlockedError(d)
        if d.action == "warn" and d.warning:
            log.info("loop warning: %s", d.warning, extra={"session_id": d.session_id})
        if d.action == "inject":
            return d.instruction or DEFAULT_INSTRUCTION
        return None

    def _blocklist_answer(self, response: httpx.Response) -> bool:
        status = response.status_code
        if status in (401, 403):
            self.auth_failures += 1
            self._log_failure(AUTH, f"HTTP {status} for the block list", "the block list is not cached")
            return False
        body = response.json() if status == 200 else None
        return self.blocklist.apply(status, response.headers.get("etag"), body if isinstance(body, dict) else None)

    def _blocklist_headers(self) -> dict[str, str]:
        headers = {k: v for k, v in self.headers.items() if k != "content-type"}
        if self.blocklist.etag:
            headers["if-none-match"] = self.blocklist.etag
        return headers


class LoopGuard(_GuardBase):
    """Synchronous guard (``httpx.Client``); thread-safe. Use as a context manager or call :meth:`close`."""

    sleep = staticmethod(time.sleep)  # how a throttle waits (replaceable, e.g. in tests)

    def __init__(self, endpoint: str, api_key: str | None = None, timeout: float = 0.5, fail_open: bool = True,
                 blocklist_interval: float | None = 2.0, max_stale: float | None = None, use_otel_trace: bool = True,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(endpoint, api_key, timeout, fail_open, blocklist_interval, max_stale, use_otel_trace)
        self._client = httpx.Client(timeout=timeout, transport=transport)
        self._transport = transport
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()

    def check(self, session_id: str | None = None, trace_id: str | None = None, virtual_key: str | None = None,
              feature: str | None = None, pending: dict[str, Any] | None = None) -> Decision:
        """The decision for the call about to be made (never raises for a block: see :meth:`before_call`)."""
        body = self._body(session_id, trace_id, virtual_key, feature, pending)
        self._ensure_refresher()
        cached = self._cached(body)
        if cached is not None:
            return cached
        try:
            response = self._client.post(self.endpoint + "/v1/check", content=self._encode(body), headers=self.headers)
            return self._decode(response, body)
        except _Undecodable as exc:
            return self._unavailable(body, str(exc))
        except (httpx.HTTPError, ValueError, TypeError) as exc:
            return self._unavailable(body, type(exc).__name__)

    def before_call(self, session_id: str | None = None, trace_id: str | None = None, virtual_key: str | None = None,
                    feature: str | None = None, pending: dict[str, Any] | None = None) -> str | None:
        """Check and apply: raises :class:`LoopBlockedError` on block, sleeps the delay on throttle, returns the
        instruction to add to the system prompt on inject (else None)."""
        return self.apply(self.check(session_id, trace_id, virtual_key, feature, pending))

    def apply(self, d: Decision) -> str | None:
        if d.action == "throttle" and d.delay_seconds > 0:
            self.sleep(d.delay_seconds)
        return self._apply_common(d)

    # -- the block list ----------------------------------------------------------------------------------
    def refresh_blocklist(self, client: httpx.Client | None = None) -> bool:
        """Fetch the block list now (``If-None-Match``); False when the service could not be reached."""
        try:
            response = (client or self._client).get(self.endpoint + "/v1/blocklist",
                                                    headers=self._blocklist_headers())
            return self._blocklist_answer(response)
        except (httpx.HTTPError, ValueError):
            return False

    def _ensure_refresher(self) -> None:
        if self.blocklist_interval is None or self._thread is not None or self._stop.is_set():
            return
        with self._thread_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._refresh_loop, name="loop-guard-blocklist", daemon=True)
                self._thread.start()

    def _refresh_loop(self) -> None:
        assert self.blocklist_interval is not None
        with httpx.Client(timeout=max(1.0, self.timeout), transport=self._transport) as client:
            while not self._stop.is_set():
                self.refresh_blocklist(client)
                if self._stop.wait(self.blocklist_interval):
                    break

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._client.close()

    def __enter__(self) -> LoopGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncLoopGuard(_GuardBase):
    """Asynchronous guard (``httpx.AsyncClient``). Use ``async with`` or call :meth:`aclose`."""

    sleep = staticmethod(asyncio.sleep)  # how a throttle waits (replaceable, e.g. in tests)

    def __init__(self, endpoint: str, api_key: str | None = None, timeout: float = 0.5, fail_open: bool = True,
                 blocklist_interval: float | None = 2.0, max_stale: float | None = None, use_otel_trace: bool = True,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(endpoint, api_key, timeout, fail_open, blocklist_interval, max_stale, use_otel_trace)
        self._client = httpx.AsyncClient(timeout=timeout, transport=transport)
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def check(self, session_id: str | None = None, trace_id: str | None = None,
                    virtual_key: str | None = None, feature: str | None = None,
                    pending: dict[str, Any] | None = None) -> Decision:
        body = self._body(session_id, trace_id, virtual_key, feature, pending)
        self._ensure_refresher()
        cached = self._cached(body)
        if cached is not None:
            return cached
        try:
            response = await self._client.post(self.endpoint + "/v1/check", content=self._encode(body),
                                               headers=self.headers)
            return self._decode(response, body)
        except _Undecodable as exc:
            return self._unavailable(body, str(exc))
        except (httpx.HTTPError, ValueError, TypeError) as exc:
            return self._unavailable(body, type(exc).__name__)

    async def before_call(self, session_id: str | None = None, trace_id: str | None = None,
                          virtual_key: str | None = None, feature: str | None = None,
                          pending: dict[str, Any] | None = None) -> str | None:
        return await self.apply(await self.check(session_id, trace_id, virtual_key, feature, pending))

    async def apply(self, d: Decision) -> str | None:
        if d.action == "throttle" and d.delay_seconds > 0:
            await self.sleep(d.delay_seconds)
        return self._apply_common(d)

    async def refresh_blocklist(self) -> bool:
        try:
            response = await self._client.get(self.endpoint + "/v1/blocklist", headers=self._blocklist_headers(),
                                              timeout=max(1.0, self.timeout))
            return self._blocklist_answer(response)
        except (httpx.HTTPError, ValueError):
            return False

    def _ensure_refresher(self) -> None:
        if self.blocklist_interval is None or self._task is not None or self._closed:
            return
        self._task = asyncio.get_running_loop().create_task(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        assert self.blocklist_interval is not None
        while True:
            await self.refresh_blocklist()
            await asyncio.sleep(self.blocklist_interval)

    async def aclose(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._client.aclose()

    async def __aenter__(self) -> AsyncLoopGuard:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
