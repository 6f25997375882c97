"""``POST /v1/check`` answers every input without a 5xx, and a block holds whatever the pending call carries
(issue 16, failure 3: an integer beyond 64 bits in ``pending.tool_arguments`` was a 500, and an SDK failing open
let a manually blocked session and an enforced blocking rule through, 5 of 5).

Tool arguments come from the model, so the hostile values are what a model can write: huge integers, deep
nesting, odd floats, any Unicode. Hypothesis generates them (a fixed number of examples, derandomized).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.enforcement import admin_headers, make_config, uid
from support.sdk import VECTORS

from detector.enforcement.preflight import canonical_arguments, tool_fingerprint
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


TOOL_VECTORS = json.loads(VECTORS.read_text(encoding="utf-8"))["tool_arguments"]


def test_tool_arguments_canonicalize_as_the_sdks_do():
    """The shared vectors (the SDKs' suites check the same ``canonical``): from the JSON text and from the value
    Python parses it to (``1.0`` a float, 2**70 an int), the same canonical text and so the same fingerprint."""
    assert len(TOOL_VECTORS) >= 5
    for v in TOOL_VECTORS:
        parsed = json.loads(v["json"])
        assert canonical_arguments(v["json"]) == v["canonical"], v["name"]
        assert canonical_arguments(parsed) == v["canonical"], v["name"]
        assert tool_fingerprint(v["tool_name"], parsed) == tool_fingerprint(v["tool_name"], v["canonical"])
    deep: object = 1
    for _ in range(5000):  # deeper than the recursive writer goes: still an answer
        deep = [deep]
    assert canonical_arguments(deep) == "[" * 5000 + "1" + "]" * 5000


def test_a_tool_call_is_one_call_whichever_language_wrote_its_numbers(svc):
    """The same tool call as Python writes it (``1.0``, every digit of 2**70), as JavaScript does (``1``, the
    nearest double), and as a JSON string: three times the same call, so the blocking rule refuses the third."""
    _, client, _ = svc
    for v in TOOL_VECTORS:
        ids = json.dumps({"session_id": uid("mixed"), "trace_id": uid("trace")})[:-1]
        name = json.dumps(v["tool_name"])
        bodies = [f'{ids}, "pending": {{"tool_name": {name}, "tool_arguments": {v["json"]}}}}}',
                  f'{ids}, "pending": {{"tool_name": {name}, "tool_arguments": {v["canonical"]}}}}}',
                  f'{ids}, "pending": {{"tool_name": {name}, "tool_arguments": {json.dumps(v["json"])}}}}}']
        codes = [client.post("/v1/check", content=b, headers={"content-type": "application/json"}).status_code
                 for b in bodies]
        assert codes == [200, 200, 429], (v["name"], codes)


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


def raw_request(api: str, head: bytes, body_chunks=()) -> bytes:
    """Send a request over a raw socket (the server may answer and close before the body is all sent: a
    client library would report the broken pipe instead of the answer) and return the response's first line."""
    parts = urlsplit(api)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(head)
        with contextlib.suppress(OSError):
            for chunk in body_chunks:
                sock.sendall(chunk)
        data = b""
        with contextlib.suppress(OSError):
            while b"\r\n" not in data:
                more = sock.recv(4096)
                if not more:
                    break
                data += more
    return data.split(b"\r\n", 1)[0]


def test_oversized_admin_body_is_413_before_it_is_parsed(svc):
    """Request bodies are bounded (api.max_body_bytes, 4 MiB by default), declared or streamed."""
    service, client, _ = svc
    eps_api = str(client.base_url).rstrip("/")
    token = service.admin_token
    head = (f"PUT /admin/loop-detection/rules HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n")
    declared = raw_request(eps_api, (head + f"Content-Length: {7 * 1024 * 1024}\r\n\r\n").encode())
    assert declared.startswith(b"HTTP/1.1 413"), declared
    chunk = b"[" * (64 * 1024)
    streamed = raw_request(eps_api, (head + "Transfer-Encoding: chunked\r\n\r\n").encode(),
                           (b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(100)))
    assert streamed.startswith(b"HTTP/1.1 413"), streamed
    assert client.get("/healthz").status_code == 200
