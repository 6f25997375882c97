"""Fail safe in the Python SDK, against real services (issue 16, failure 3, SDK side; issue 17's trace-only checks).

* A block outlives an outage: a session blocked by an admin and a revoked key, on the guard's cached block list,
  are still refused when the service is then stopped, or sits behind a proxy answering 502 or garbage, however
  stale the copy, with ``fail_open=True``; a scope the list does not name fails open (or closed).
* Trace-only checks: a trace id alone (given, or the current OpenTelemetry span's) is enough.
* The API token (``api.require_api_token: always``): sent by the guard (from ``api_key`` or
  ``$LOOP_DETECTOR_API_TOKEN``) the checks and the block list pass; missing or wrong, a distinct configuration
  error is logged (never the token) and the fail mode applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from support.enforcement import FAST_LEVELS, admin_headers, agent, make_config, uid
from support.sdk import BUDGETS, RULES

from detector.sdk import AsyncLoopGuard, LoopBlockedError, LoopGuard, pending_tool
from detector.service.process import running_service

SDK_LOG = "loop_detector.sdk"


class Proxy:
    """A reverse proxy in front of the service (what nginx or a load balancer is), switchable to a broken
    upstream: ``forward`` passes requests through; ``502`` answers Bad Gateway (an HTML page); ``garbage``
    answers 200 with a body that is not JSON; ``array`` 200 with JSON that is not an object."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.mode = "forward"
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if proxy.mode == "502":
                    return self._answer(502, b"<html><h1>502 Bad Gateway</h1></html>", {"content-type": "text/html"})
                if proxy.mode == "garbage":
                    return self._answer(200, b"<html>maintenance</html>", {"content-type": "text/html"})
                if proxy.mode == "array":
                    return self._answer(200, b"[]", {"content-type": "application/json"})
                keep = ("authorization", "content-type", "if-none-match")
                r = httpx.request(self.command, proxy.upstream + self.path, content=body,
                                  headers={k: v for k, v in self.headers.items() if k.lower() in keep})
                keep_out = ("content-type", "etag", "retry-after", "x-loop-warning")
                self._answer(r.status_code, r.content, {k: v for k, v in r.headers.items() if k.lower() in keep_out})

            do_GET = do_POST = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Proxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def refused(guard: LoopGuard, **ids: Any) -> LoopBlockedError:
    with pytest.raises(LoopBlockedError) as info:
        guard.before_call(**ids)
    return info.value


def make_stale(*guards: LoopGuard | AsyncLoopGuard) -> None:
    """As if the copies were older than max_stale (the guards refresh only when asked: blocklist_interval=None)."""
    for g in guards:
        g.blocklist.fetched_at = time.monotonic() - g.blocklist.max_stale - 1


# first: services of their own, before the module's (chDB: one data directory per process at a time)
def test_a_block_outlives_the_service_going_down(tmp_path, caplog):
    """Blocked session and revoked key cached, then the service stops: still refused (fail open or not), with one
    failed round trip each; a scope the list does not name fails open (or closed)."""
    stack = contextlib.ExitStack()
    service, eps = stack.enter_context(running_service(make_config(rules=RULES, budgets=BUDGETS), tmp_path))
    blocked, key = uid("blocked"), uid("vk-revoked")
    try:
        for path in (f"sessions/{blocked}/block", f"keys/{key}/revoke"):
            r = httpx.post(f"{eps.api}/admin/loop-detection/{path}", headers=admin_headers(service))
            assert r.status_code == 200, r.text
        opts = {"timeout": 0.3, "blocklist_interval": None, "max_stale": 30.0}
        open_guard = LoopGuard(eps.api, fail_open=True, **opts)
        closed_guard = LoopGuard(eps.api, fail_open=False, **opts)
        aguard = AsyncLoopGuard(eps.api, fail_open=True, **opts)
        for g in (open_guard, closed_guard):
            assert g.refresh_blocklist() and len(g.blocklist) >= 2
        make_stale(open_guard)  # while the service is up, a stale copy is not trusted: the service is asked
        assert open_guard.check(session_id=blocked).source == "server"
        assert open_guard.refresh_blocklist()
    finally:
        stack.close()  # the service is gone: nothing listens on its port any more

    with caplog.at_level(logging.WARNING, logger=SDK_LOG):
        for g in (open_guard, closed_guard):
            err = refused(g, session_id=blocked)  # the copy is fresh: refused locally, no request at all
            assert err.reason == "session_blocked" and err.decision.source == "cache" and g.failures == 0
        make_stale(open_guard, closed_guard)  # and once it is stale, the failed check falls back on it anyway
        for g in (open_guard, closed_guard):
            err = refused(g, session_id=blocked)
            assert err.reason == "session_blocked" and err.decision.source == "cache", err.body
            assert err.body["error"]["session_id"] == blocked and g.failures == 1
            err = refused(g, session_id=uid("other"), virtual_key=key)
            assert err.reason == "key_revoked" and err.decision.scope == "key"
            err = refused(g, session_id=uid("any"), feature="free")  # the $0 budget's feature block
            assert err.reason == "budget_exhausted"
            assert g.failures == 3
        assert "the cached block list still refuses the call (session_blocked)" in caplog.text

        free = uid("free")
        d = open_guard.check(session_id=free)
        assert (d.action, d.source, d.reason, d.session_id) == ("allow", "fail_open", "enforcement_unavailable", free)
        assert open_guard.before_call(session_id=free) is None
        err = refused(closed_guard, session_id=free)
        assert err.reason == "enforcement_unavailable" and err.decision.source == "fail_closed"

    async def async_side() -> None:  # the async guard never fetched the list: only the fail mode is left
        d = await aguard.check(session_id=blocked)
        assert d.source == "fail_open"
        await aguard.aclose()

    asyncio.run(async_side())
    open_guard.close()
    closed_guard.close()


def test_a_block_outlives_a_broken_upstream(tmp_path, caplog):
    """Behind a proxy: the service's answers pass through until the proxy answers 502, or 200 with a body that
    is not JSON (or not an object); every one of those is a failed check, and the stale copy still blocks."""
    with running_service(make_config(), tmp_path) as (service, eps), Proxy(eps.api) as proxy:
        blocked = uid("blocked")
        assert httpx.post(f"{eps.api}/admin/loop-detection/sessions/{blocked}/block",
                          headers=admin_headers(service)).status_code == 200
        guard = LoopGuard(proxy.url, timeout=2, blocklist_interval=None, max_stale=30.0)
        assert guard.refresh_blocklist() and guard.check(session_id=uid("ok")).source == "server"

        async def async_check(**ids: Any) -> Any:
            async with AsyncLoopGuard(proxy.url, timeout=2, blocklist_interval=None, max_stale=30.0) as aguard:
                assert await aguard.refresh_blocklist()
                proxy.mode = mode
                make_stale(aguard)
                return await aguard.check(**ids)

        with caplog.at_level(logging.WARNING, logger=SDK_LOG):
            for n, mode in enumerate(("502", "garbage", "array"), start=1):
                proxy.mode = mode
                make_stale(guard)
                err = refused(guard, session_id=blocked)
                assert err.reason == "session_blocked" and err.decision.source == "cache", mode
                d = guard.check(session_id=uid("free"))
                assert d.source == "fail_open", mode
                assert guard.failures == 2 * n
                assert guard.refresh_blocklist() is False  # the copy stays as it was
                proxy.mode = "forward"
                assert (asyncio.run(async_check(session_id=blocked))).source == "cache", mode
        assert "HTTP 502" in caplog.text and "a body that is not JSON" in caplog.text
        guard.close()


# -- a service that needs the API token ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exposed(tmp_path_factory):
    config = make_config(api={"require_api_token": "always"}, rules=RULES, loop_detection=FAST_LEVELS)
    with running_service(config, tmp_path_factory.mktemp("failsafe")) as (service, eps):
        yield service, eps


def test_the_api_token_is_sent_with_checks_and_block_list_refreshes(exposed, monkeypatch, caplog):
    service, eps = exposed
    blocked = uid("blocked")
    assert httpx.post(f"{eps.api}/admin/loop-detection/sessions/{blocked}/block",
                      headers=admin_headers(service)).status_code == 200
    monkeypatch.delenv("LOOP_DETECTOR_API_TOKEN", raising=False)
    with caplog.at_level(logging.DEBUG, logger=SDK_LOG):
        with LoopGuard(eps.api, api_key=service.api_token, blocklist_interval=None) as guard:
            assert guard.check(session_id=uid("ok")).source == "server"
            assert guard.refresh_blocklist() and guard.blocklist.fetches == 1
            assert guard.check(session_id=blocked).source == "cache"
            assert guard.refresh_blocklist() and guard.blocklist.not_modified == 1  # 304: the token is sent again
        monkeypatch.setenv("LOOP_DETECTOR_API_TOKEN", service.api_token)  # not given: from the environment
        with LoopGuard(eps.api, blocklist_interval=None) as guard:
            assert guard.check(session_id=uid("env")).source == "server" and guard.refresh_blocklist()
        assert guard.auth_failures == 0 and not caplog.records

        async def async_side() -> None:
            async with AsyncLoopGuard(eps.api, blocklist_interval=None) as aguard:
                assert (await aguard.check(session_id=uid("aenv"))).source == "server"
                assert await aguard.refresh_blocklist()

        asyncio.run(async_side())


@pytest.mark.parametrize("token", ["", "not-the-api-token-0123456789"], ids=["missing", "wrong"])
def test_without_the_api_token_a_distinct_configuration_error_then_the_fail_mode(exposed, monkeypatch, caplog,
                                                                                  token):
    service, eps = exposed
    monkeypatch.setenv("LOOP_DETECTOR_API_TOKEN", service.api_token)  # api_key="" means none, not the env's
    status = "HTTP 401" if not token else "HTTP 403"
    with caplog.at_level(logging.WARNING, logger=SDK_LOG):
        with LoopGuard(eps.api, api_key=token, blocklist_interval=None) as guard:
            assert "authorization" not in guard.headers if not token else guard.headers["authorization"]
            d = guard.check(session_id=uid("s"))
            assert (d.action, d.source, d.reason) == ("allow", "fail_open", "enforcement_unavailable")
            assert guard.failures == 1 and guard.auth_failures == 1
            assert guard.refresh_blocklist() is False and guard.auth_failures == 2
        with LoopGuard(eps.api, api_key=token, fail_open=False, blocklist_interval=None) as guard:
            assert refused(guard, session_id=uid("s")).decision.source == "fail_closed"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and all("configuration error, not an outage" in r.getMessage() for r in errors)
    assert status in errors[0].getMessage() and "LOOP_DETECTOR_API_TOKEN" in errors[0].getMessage()
    assert ("a missing API token" if not token else "the API token it was sent") in errors[0].getMessage()
    assert "fail open: the call proceeds" in errors[0].getMessage()
    assert not [r for r in caplog.records if "unavailable (" in r.getMessage()]  # not reported as an outage
    assert service.api_token not in caplog.text and (not token or token not in caplog.text)


# -- trace-only checks ---------------------------------------------------------------------------------------------
def test_a_trace_id_alone_is_enough(exposed):
    service, eps = exposed
    token = {"authorization": f"Bearer {service.api_token}"}
    session = uid("traced")
    with LoopGuard(eps.api, api_key=service.api_token, blocklist_interval=None) as guard:
        with pytest.raises(ValueError, match="session_id or trace_id"):
            guard.check()
        unknown = uid("trace")
        d = guard.check(trace_id=unknown)  # a trace the service has not seen: its own session
        assert (d.action, d.source, d.session_id) == ("allow", "server", unknown)

        # a trace the detector has scored: its decision, under the session the service knows for it
        with agent(eps.otlp, eps.api, session, api_headers=token) as a:
            a.drive_to("block")
            d = guard.check(trace_id=a.trace_id)
            assert d.blocked and d.source == "server" and d.session_id == session, d

        # pending calls of a trace are a window of their own: the same tool call three times, the third refused
        trace = uid("trace")
        tool = pending_tool("read_file", {"path": "a.py", "line": 1.0})
        assert guard.before_call(trace_id=trace, pending=tool) is None
        assert guard.before_call(trace_id=trace, pending=pending_tool("read_file", {"line": 1, "path": "a.py"})) is None
        err = refused(guard, trace_id=trace, pending=tool)
        assert err.reason == "failure_loop" and err.body["error"]["session_id"] == trace

    # the trace of the current OpenTelemetry span, when no id is given
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("failsafe")
    with tracer.start_as_current_span("invoke_agent") as span, \
            LoopGuard(eps.api, api_key=service.api_token, blocklist_interval=None) as guard:
        trace_id = format(span.get_span_context().trace_id, "032x")
        assert guard._body(None, None, None, None, None) == {"trace_id": trace_id}
        assert guard.check().session_id == trace_id

    with LoopGuard(f"http://127.0.0.1:{_closed_port()}", timeout=0.2, fail_open=False,
                   blocklist_interval=None) as guard:
        err = refused(guard, trace_id="t-down")  # down: the fail mode names the trace
        assert err.body["error"]["session_id"] == "t-down" and err.decision.source == "fail_closed"


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
