"""``LoopGuard`` / ``AsyncLoopGuard``: ask loop-detector before each call, and apply the answer.

    guard = LoopGuard("http://127.0.0.1:8080")
    instruction = guard.before_call(session_id="run-42", pending=pending_request(model, messages))
    # allow/warn: None; throttle: slept the delay; inject: the text to add to the system prompt;
    # block: raised LoopBlockedError (its .body is the 429 body)

When the enforcement endpoint cannot be reached within ``timeout`` (down, slow, an unexpected status),
``fail_open=True`` (the default) lets the call proceed and ``fail_open=False`` refuses it; either way it is
logged (a warning at most every 10 s per guard, with the count of further failures).

A background refresh keeps a local copy of the block list (``GET /v1/blocklist`` with ``ETag``), so a check
for a blocked scope is refused locally, with no round trip. ``blocklist_interval=None`` turns it off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from typing import Any

import httpx

from loop_detector_sdk.blocklist import LocalBlocklist
from loop_detector_sdk.context import current_ids, current_trace_id
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


class _GuardBase:
    def __init__(self, endpoint: str, api_key: str | None = None, timeout: float = 0.5, fail_open: bool = True,
                 blocklist_interval: float | None = 2.0, max_stale: float | None = None,
                 use_otel_trace: bool = True) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.fail_open = fail_open
        self.blocklist_interval = blocklist_interval
        self.use_otel_trace = use_otel_trace
        self.headers = {"content-type": "application/json"}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        stale = max_stale if max_stale is not None else 10 * (blocklist_interval or 3.0)
        self.blocklist = LocalBlocklist(max_stale=stale)
        self.failures = 0
        self._suppressed = 0
        self._last_warned = 0.0

    # -- request and answers ---------------------------------------------------------------------------
    def _body(self, session_id: str | None, trace_id: str | None, virtual_key: str | None, feature: str | None,
              pending: dict[str, Any] | None) -> dict[str, Any]:
        ids = current_ids()
        session_id = session_id or ids.session_id
        if not session_id:
            raise ValueError("session_id is required (pass it, or run inside loop_context(session_id=...))")
        body: dict[str, Any] = {"session_id": session_id}
        trace_id = trace_id or (current_trace_id() if self.use_otel_trace else None)
        for name, value in (("trace_id", trace_id), ("virtual_key", virtual_key or ids.virtual_key),
                            ("feature", feature or ids.feature)):
            if value:
                body[name] = value
        if pending:
            body["pending"] = {k: v for k, v in pending.items() if v is not None}
        return body

    def _cached(self, body: dict[str, Any]) -> Decision | None:
        entry = self.blocklist.match(body["session_id"], body.get("trace_id"), body.get("virtual_key"),
                                     body.get("feature"))
        if entry is None:
            return None
        err = block_body(body["session_id"], entry.reason, scope=entry.scope, rule_name=entry.rule_name)
        return Decision.refused(err, source=SOURCE_CACHE)

    def _decode(self, response: httpx.Response, session_id: str) -> Decision:
        warning = response.headers.get("x-loop-warning")
        if response.status_code == 200:
            return Decision.from_json(response.json(), warning=warning)
        if response.status_code == 429:
            try:
                retry = float(response.headers.get("retry-after", 60))
            except ValueError:
                retry = 60.0
            return Decision.refused(response.json(), retry_after=retry, warning=warning)
        return self._unavailable(session_id, f"HTTP {response.status_code}")

    def _unavailable(self, session_id: str, why: str) -> Decision:
        self.failures += 1
        now = time.monotonic()
        mode = "fail open: the call proceeds" if self.fail_open else "fail closed: the call is refused"
        if now - self._last_warned >= WARN_EVERY_SECONDS:
            log.warning("loop-detector enforcement endpoint unavailable (%s); %s", why, mode,
                        extra={"endpoint": self.endpoint, "session_id": session_id, "suppressed": self._suppressed})
            self._last_warned, self._suppressed = now, 0
        else:
            self._suppressed += 1
        if self.fail_open:
            return Decision(session_id=session_id, source=SOURCE_FAIL_OPEN, reason=REASON_UNAVAILABLE)
        return Decision.refused(block_body(session_id, REASON_UNAVAILABLE), source=SOURCE_FAIL_CLOSED,
                                retry_after=None)

    def _apply_common(self, d: Decision) -> str | None:
        """Everything but the throttle sleep: raise on block, the instruction on inject."""
        if d.blocked:
            raise LoopBlockedError(d)
        if d.action == "warn" and d.warning:
            log.info("loop warning: %s", d.warning, extra={"session_id": d.session_id})
        if d.action == "inject":
            return d.instruction or DEFAULT_INSTRUCTION
        return None

    def _blocklist_answer(self, response: httpx.Response) -> None:
        body = response.json() if response.status_code == 200 else None
        self.blocklist.apply(response.status_code, response.headers.get("etag"), body)

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
            response = self._client.post(self.endpoint + "/v1/check", content=json.dumps(body), headers=self.headers)
            return self._decode(response, body["session_id"])
        except (httpx.HTTPError, ValueError) as exc:
            return self._unavailable(body["session_id"], type(exc).__name__)

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
            self._blocklist_answer(response)
            return response.status_code in (200, 304)
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
            response = await self._client.post(self.endpoint + "/v1/check", content=json.dumps(body),
                                               headers=self.headers)
            return self._decode(response, body["session_id"])
        except (httpx.HTTPError, ValueError) as exc:
            return self._unavailable(body["session_id"], type(exc).__name__)

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
            self._blocklist_answer(response)
            return response.status_code in (200, 304)
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
