"""The Python SDK while the service's store is away, and while the service itself cannot be reached (issue 32, part
2), against real services: what docs/sdk.md ("Fail safe", "A stale answer") says.

* The store unreachable (a service on the server store, its ClickHouse behind a proxy that stops listening): the
  service still answers, from its last decisions, and the guard applies the answer as it is (``source="server"``,
  never the fail mode): a session an admin blocked before the outage is refused, another is allowed; both say how
  old the decisions are (``stale_seconds``, growing).
* The service hung (its API behind a proxy that accepts and never answers): the check is bounded by the guard's
  ``timeout``, then the fail mode applies: ``fail_open=True`` allows (``source="fail_open"``), ``fail_open=False``
  refuses (``enforcement_unavailable``).
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
import pytest
from support.enforcement import admin_headers, make_config, uid
from support.tcp_fault import FaultProxy

from detector.sdk import LoopBlockedError, LoopGuard
from detector.service.process import running_service

pytestmark = pytest.mark.server

GUARD_TIMEOUT = 0.5  # the SDK's default timeout, per connect or read phase
STALE_AFTER = 3.0  # seconds the store stays away before the guard asks


def test_the_guard_applies_a_stale_answer_and_fails_open_or_closed_when_the_service_hangs(clickhouse_url, tmp_path):
    upstream = urlsplit(clickhouse_url)
    with FaultProxy(upstream.port or 8123, upstream.hostname or "127.0.0.1") as store_proxy:
        url = clickhouse_url.replace(f"@{upstream.hostname}:{upstream.port}", f"@127.0.0.1:{store_proxy.port}")
        config = make_config(store={"url": url, "query_timeout_seconds": 3})
        with running_service(config, tmp_path) as (service, eps):
            blocked, free = uid("blocked"), uid("free")
            r = httpx.post(f"{eps.api}/admin/loop-detection/sessions/{blocked}/block", headers=admin_headers(service))
            assert r.status_code == 200, r.text
            opts = {"timeout": GUARD_TIMEOUT, "blocklist_interval": None}
            open_guard, closed_guard = LoopGuard(eps.api, fail_open=True, **opts), LoopGuard(eps.api, fail_open=False,
                                                                                               **opts)
            assert open_guard.check(session_id=free).stale_seconds < 1.0

            store_proxy.set_mode("refuse")
            time.sleep(STALE_AFTER)
            for guard in (open_guard, closed_guard):
                d = guard.check(session_id=free)
                assert (d.action, d.source) == ("allow", "server") and d.stale_seconds > STALE_AFTER - 1, d
                with pytest.raises(LoopBlockedError) as info:
                    guard.before_call(session_id=blocked)
                assert info.value.reason == "session_blocked" and info.value.decision.source == "server"
                assert info.value.body["error"]["stale_seconds"] > STALE_AFTER - 1
                assert guard.failures == 0

            api = urlsplit(eps.api)
            with FaultProxy(api.port or 80, api.hostname or "127.0.0.1") as api_proxy:
                hung = f"http://127.0.0.1:{api_proxy.port}"
                open_hung = LoopGuard(hung, fail_open=True, **opts)
                closed_hung = LoopGuard(hung, fail_open=False, **opts)
                assert open_hung.check(session_id=free).source == "server"  # through the proxy: answered
                api_proxy.set_mode("blackhole")
                started = time.monotonic()
                d = open_hung.check(session_id=free)
                open_took = time.monotonic() - started
                started = time.monotonic()
                with pytest.raises(LoopBlockedError) as info:
                    closed_hung.before_call(session_id=free)
                closed_took = time.monotonic() - started
            store_proxy.set_mode("pass")
            for guard in (open_guard, closed_guard, open_hung, closed_hung):
                guard.close()

    assert (d.action, d.source, d.reason) == ("allow", "fail_open", "enforcement_unavailable")
    assert info.value.reason == "enforcement_unavailable" and info.value.decision.source == "fail_closed"
    # bounded by the timeout (connect + read phases), never hung: well under the seconds the service is away
    assert open_took < 4 * GUARD_TIMEOUT + 1 and closed_took < 4 * GUARD_TIMEOUT + 1, (open_took, closed_took)
