"""``POST /v1/check`` answers every input without a 5xx, and a block holds whatever the pending call carries
(issue 16, failure 3: an integer beyond 64 bits in ``pending.tool_arguments`` was a 500, and an SDK failing open
let a manually blocked session and an enforced blocking rule through, 5 of 5).

Tool arguments come from the model, so the hostile values are what a model can write: huge integers, deep
nesting, odd floats, any Unicode. Hypothesis generates them (a fixed number of examples, derandomized).
"""

from __future__ import annotations

import os

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.enforcement import admin_headers, make_config, uid

from detector.service.process import running_service

RULES = [{"name": "stop-tool-loop", "detector": "failure_loop", "action": "block", "params": {"same_tool_repeats": 3}}]
BIG = 2**70


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    with running_service(make_config(rules=RULES), tmp_path_factory.mktemp("hostile")) as (service, eps):
        blocked = uid("blocked")
        r = httpx.post(f"{eps.api}/admin/loop-detection/sessions/{blocked}/block", headers=admin_headers(service),
                       json={"reason": "runaway"})
        assert r.status_code == 200
        with httpx.Client(base_url=eps.api, timeout=30) as client:
            yield service, client, blocked


def test_big_integer_argument_on_a_blocked_session_is_refused(svc):
    _, client, blocked = svc
    for i in range(5):
        r = client.post("/v1/check", json={"session_id": blocked, "pending": {
            "tool_name": "charge", "tool_arguments": {"amount": BIG + i, "nested": [[-BIG]]}}})
        assert r.status_code == 429, r.text
        assert r.json()["error"]["reason"] == "session_blocked"


def test_big_integer_arguments_still_trip_an_enforced_blocking_rule(svc):
    _, client, _ = svc
    session, trace = uid("loop"), uid("trace")
    codes = [client.post("/v1/check", json={"session_id": session, "trace_id": trace, "pending": {
        "tool_name": "charge", "tool_arguments": {"amount": BIG}}}).status_code for _ in range(5)]
    assert codes == [200, 200, 429, 429, 429]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30)


@settings(max_examples=60 * int(os.environ.get("LOOP_DETECTOR_FUZZ_SCALE", "1")), deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(arguments=json_values | st.text(max_size=50), depth=st.integers(0, 300))
def test_any_tool_arguments_never_a_5xx_and_never_unblock(svc, arguments, depth):
    _, client, blocked = svc
    for _ in range(depth):
        arguments = [arguments]
    for session in (blocked, uid("free")):
        r = client.post("/v1/check", json={"session_id": session, "pending": {
            "tool_name": "t", "tool_arguments": arguments}})
        assert r.status_code in (200, 413, 422, 429), (r.status_code, r.text[:300])
        if session == blocked:
            assert r.status_code != 200  # refused, or the body itself refused: never allowed through


def test_oversized_admin_body_is_413_before_it_is_parsed(svc):
    """Request bodies are bounded (api.max_body_bytes, 4 MiB by default), declared or streamed."""
    service, client, _ = svc
    headers = {**admin_headers(service), "Content-Type": "application/json"}
    huge = b'{"rules": [' + b'{"name": "x", "detector": "trace_cap"},' * 200_000 + b"]}"
    assert client.put("/admin/loop-detection/rules", content=huge, headers=headers).status_code == 413

    def chunks():
        for i in range(0, len(huge), 64 * 1024):
            yield huge[i:i + 64 * 1024]

    assert client.put("/admin/loop-detection/rules", content=chunks(), headers=headers).status_code == 413
    assert client.get("/healthz").status_code == 200
