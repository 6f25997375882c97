"""The LiteLLM proxy guardrail, for real: the ``litellm`` proxy (its own CLI, in a venv of its own: litellm[proxy]
brings ~100 packages and its own pins, and it is a gateway process, not part of the app) runs with
``LoopDetectorGuardrail`` from this checkout's SDK as a ``pre_call`` guardrail, in front of the local stub
model, with a live loop-detector service behind it. Apps send ordinary requests (httpx, the openai SDK):

* an exact repeat is answered 429 with ``Retry-After: 60`` and the spec's body fields in ``error``, and never
  reaches the model; the openai SDK raises its RateLimitError with that body;
* inject lands in the system prompt the model receives (chat completions, Responses API, Anthropic Messages);
* the session comes from the header, LiteLLM's ``litellm_session_id`` or ``metadata.session_id``.

The proxy runs with examples/litellm_proxy/config.yaml, and the example's client (an unmodified openai-SDK app)
is run against it.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from support.enforcement import admin_headers, agent, uid
from support.sdk import ROOT, SDK_PYTHON, cached_venv, run

REQUIREMENTS = ["litellm[proxy]>=1.80,<2"]
CONFIG = ROOT / "examples" / "litellm_proxy" / "config.yaml"  # the example's config, as documented
MODEL = "gpt-4o-mini"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def litellm_python() -> Path:
    return cached_venv("litellm-proxy", REQUIREMENTS)


@pytest.fixture(scope="module")
def proxy(litellm_python, svc, stub, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """The LiteLLM proxy on a free port; yields (base URL, master key)."""
    _, eps = svc
    url, _ = stub
    workdir = tmp_path_factory.mktemp("litellm-proxy")
    key = "sk-" + secrets.token_hex(32)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(SDK_PYTHON), "LITELLM_MASTER_KEY": key, "LOOP_DETECTOR_URL": eps.api,
           "MODEL_BASE_URL": url + "/v1", "MODEL_API_KEY": "sk-stub",  # what examples/litellm_proxy/config.yaml reads
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "NO_PROXY": "127.0.0.1,localhost"}
    log = open(workdir / "proxy.log", "w")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen([str(litellm_python.parent / "litellm"), "--config", str(CONFIG),
                             "--host", "127.0.0.1", "--port", str(port)], env=env, cwd=str(workdir), stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(base + "/health/liveliness", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the LiteLLM proxy did not start:\n" + (workdir / "proxy.log").read_text()[-3000:])
            time.sleep(0.2)
        yield base, key
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def post(proxy: tuple[str, str], path: str, body: dict, **headers: str) -> httpx.Response:
    base, key = proxy
    return httpx.post(base + path, json=body, headers={"authorization": f"Bearer {key}", **headers}, timeout=60)


def test_a_repeat_is_refused_with_the_spec_429_before_it_reaches_the_model(proxy, stub):
    _, requests = stub
    session = uid("gw")
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Deploy again."}]}
    mark = len(requests)
    for _ in range(3):
        r = post(proxy, "/v1/chat/completions", body, **{"x-loop-detector-session-id": session})
        assert r.status_code == 200, r.text
    r = post(proxy, "/v1/chat/completions", body, **{"x-loop-detector-session-id": session})
    assert r.status_code == 429 and r.headers["retry-after"] == "60"
    error = r.json()["error"]
    assert {k: error[k] for k in ("reason", "session_id", "enforcement_level")} == {
        "reason": "exact_prompt_repeat", "session_id": session, "enforcement_level": "hard_stop"}
    assert isinstance(error["confidence"], float) and error["dominant_signal"] == "none"
    assert error["message"].startswith("loop-detector refused the call")  # what OpenAI-style clients print
    assert len(requests) - mark == 3

    base, key = proxy
    client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0,
                           default_headers={"x-loop-detector-session-id": session})
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(**body)
    assert info.value.body["reason"] == "exact_prompt_repeat"  # the openai SDK's .body is the "error" object
    assert len(requests) - mark == 3


def test_the_example_client_is_refused_at_the_repeat(proxy):
    base, key = proxy
    out = run([sys.executable, str(ROOT / "examples" / "litellm_proxy" / "client.py"), "--proxy", base, "--key", key],
              timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert [line.split()[1] for line in lines[1:]] == ["200", "200", "200", "429"], out.stdout
    assert "Retry-After: 60" in lines[-1] and '"reason": "exact_prompt_repeat"' in lines[-1]


def test_the_session_from_litellm_fields_and_a_blocked_session(proxy, stub, svc):
    service, eps = svc
    _, requests = stub
    for field in ("litellm_session_id", "metadata"):
        session = uid("gw-blocked")
        assert httpx.post(f"{eps.api}/admin/loop-detection/sessions/{session}/block",
                          headers=admin_headers(service)).status_code == 200
        extra = {"litellm_session_id": session} if field == "litellm_session_id" else {
            "metadata": {"session_id": session}}
        mark = len(requests)
        r = post(proxy, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                                 **extra})
        assert r.status_code == 429 and r.json()["error"]["reason"] == "session_blocked", (field, r.text)
        assert r.json()["error"]["session_id"] == session and len(requests) == mark


def test_inject_reaches_the_model_through_each_api(proxy, stub, svc):
    _, eps = svc
    _, requests = stub
    session = uid("gw-inject")
    with agent(eps.otlp, eps.api, session) as a:
        a.drive_to("inject")
    headers = {"x-loop-detector-session-id": session}
    r = post(proxy, "/v1/chat/completions", {"model": MODEL, "messages": [
        {"role": "system", "content": "You deploy."}, {"role": "user", "content": "Go."}]}, **headers)
    assert r.status_code == 200, r.text
    assert requests[-1]["messages"][0]["content"].startswith("You deploy.\n\nLoop detected.")

    r = post(proxy, "/v1/responses", {"model": MODEL, "input": "Go.", "instructions": "You deploy."}, **headers)
    assert r.status_code == 200, r.text
    sent = requests[-1]
    system = sent.get("instructions") or sent["messages"][0]["content"]  # as the proxy forwards it
    assert system.startswith("You deploy.\n\nLoop detected.")

    r = post(proxy, "/v1/messages", {"model": MODEL, "max_tokens": 64, "system": "You deploy.",
                                     "messages": [{"role": "user", "content": "Go."}]}, **headers)
    assert r.status_code == 200, r.text
    sent = requests[-1]
    # the proxy translates Messages for an OpenAI model (here into a Responses request): the system prompt is
    # wherever the translation put it
    system = sent.get("instructions") or sent.get("system") or sent["messages"][0]["content"]
    assert isinstance(system, str) and system.startswith("You deploy.\n\nLoop detected."), system


def test_request_ids(litellm_python):
    """Where the guardrail finds a request's scopes (run in the proxy's environment, which has litellm)."""
    code = textwrap.dedent("""
        import json
        from types import SimpleNamespace
        from loop_detector_sdk.litellm_guardrail import request_ids, request_pending
        from loop_detector_sdk import request_fingerprint
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        key = SimpleNamespace(key_alias="team-a", token="hashed")
        cases = {
            "header": request_ids({"proxy_server_request": {"headers": {"X-Loop-Detector-Session-Id": "s1",
                                   "X-Loop-Detector-Feature": "f1", "traceparent": tp}}}, key),
            "litellm": request_ids({"litellm_session_id": "s2", "metadata": {"session_id": "s3"}}),
            "metadata": request_ids({"metadata": {"session_id": "s3", "feature": "f3"}}),
            "trace": request_ids({"proxy_server_request": {"headers": {"traceparent": tp}}}),
            "key": request_ids({}, SimpleNamespace(key_alias=None, token="abc")),
            "nothing": request_ids({}),
            "bad-trace": request_ids({"proxy_server_request": {"headers": {"traceparent": "garbage"}}}),
            "baggage": request_ids({"litellm_session_id": "s2", "proxy_server_request": {"headers": {"baggage":
                "other=1, loop_detector.session_id=run%2042;prop=x,loop_detector.feature=ci,loop_detector.virtual_key=k"}}},
                key),
        }
        cases["same_fp"] = request_pending({"model": "m", "messages": [{"role": "user", "content": "x"}]},
                                           "acompletion")["request_fingerprint"] == request_fingerprint(
                                           "m", [{"role": "user", "content": "x"}])
        print(json.dumps(cases))
    """)
    out = run([str(litellm_python), "-c", code], timeout=120, env={**os.environ, "PYTHONPATH": str(SDK_PYTHON)})
    assert out.returncode == 0, out.stderr[-2000:]
    cases = json.loads(out.stdout.strip().splitlines()[-1])
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert cases["header"] == {"session_id": "s1", "trace_id": trace, "virtual_key": "team-a", "feature": "f1"}
    assert cases["litellm"] == {"session_id": "s2"}
    assert cases["metadata"] == {"session_id": "s3", "feature": "f3"}
    assert cases["trace"] == {"session_id": trace, "trace_id": trace}
    assert cases["key"] == {"session_id": "key:abc", "virtual_key": "abc"}
    assert cases["nothing"] == {"session_id": "litellm-proxy"} and cases["bad-trace"] == cases["nothing"]
    assert cases["baggage"] == {"session_id": "run 42", "virtual_key": "k", "feature": "ci"}
    assert cases["same_fp"] is True
