"""The TypeScript SDK (sdk/typescript): installed with ``npm ci`` (node_modules is kept while the lockfile is
unchanged), built with ``tsc``, and tested with node's own test runner against a real running service this
test starts on free ports, with sessions driven to each decision by real spans beforehand (warn, throttle,
inject, block), a session blocked by an admin, a revoked key, a $0 budget, and a trace whose first three identical
requests the Python SDK sent (the TypeScript side sends the fourth, with its own fingerprint of the same request).
A second service, ``loop-detector serve`` in a child process with ``api.require_api_token: always``, is there for
the API token tests; its token is in the node process's ``$LOOP_DETECTOR_API_TOKEN``, which the SDK reads. A
third, whose only rule is a blocking ``no_progress``, is there for the pre-flight progress test (the guards'
fingerprints alone, no telemetry).

Also: Python's ``js_number`` (the canonical fingerprint's numbers) against node's own ``String(x)`` on random
doubles. Skipped only when node or npm is missing."""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import shutil
import struct

import httpx
import pytest
from loop_detector_sdk import LoopGuard, pending_request, request_fingerprint
from loop_detector_sdk.fingerprint import js_number
from support.enforcement import FAST_LEVELS, admin_headers, agent, make_config, uid
from support.sdk import BUDGETS, RULES, SDK_TYPESCRIPT, npm_ci, run
from support.serve_process import ServeProcess

from detector.service.process import running_service

NODE, NPM = shutil.which("node"), shutil.which("npm")
pytestmark = pytest.mark.skipif(not (NODE and NPM), reason="node and npm are needed for the TypeScript SDK")


@pytest.fixture(scope="module")
def built() -> None:
    """``npm ci`` when the lockfile changed since the last install, then ``tsc``."""
    npm_ci(SDK_TYPESCRIPT, NPM)
    out = run([NPM, "run", "build", "--silent"], timeout=300, cwd=str(SDK_TYPESCRIPT))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


API_TOKEN = "ts-api-token-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def token_service(tmp_path_factory):
    """``loop-detector serve`` needing the API token (a child process: chDB opens one data directory per process)."""
    base = tmp_path_factory.mktemp("ts-token")
    config = base / "config.yaml"
    config.write_text(json.dumps({"api": {"require_api_token": "always"}}))  # JSON is YAML
    with ServeProcess(base / "data", config, env={"LOOP_DETECTOR_API_TOKEN": API_TOKEN}) as proc:
        assert httpx.get(proc.api + "/v1/blocklist").status_code == 401
        yield proc.api


NO_PROGRESS_ONLY = [{"name": "stop-no-progress", "detector": "no_progress", "action": "block",
                     "params": {"wasted_calls": 3, "min_evidence": "exact"}}]


@pytest.fixture(scope="module")
def preflight_service(tmp_path_factory):
    """``loop-detector serve`` whose only rule is a blocking ``no_progress`` (a child process), for the pre-flight
    progress test: no span reaches it, only the guards' checks and their fingerprints."""
    base = tmp_path_factory.mktemp("ts-preflight")
    config = base / "config.yaml"
    config.write_text(json.dumps({"rules": NO_PROGRESS_ONLY}))  # JSON is YAML
    with ServeProcess(base / "data", config) as proc:
        yield proc.api


@pytest.fixture(scope="module")
def fixture_file(tmp_path_factory, built, token_service, preflight_service):
    config = make_config(rules=RULES, budgets=BUDGETS, loop_detection=FAST_LEVELS)
    with running_service(config, tmp_path_factory.mktemp("ts")) as (service, eps):
        sessions, traces = {}, {}
        for action in ("warn", "throttle", "inject", "block"):
            sessions[action] = uid(f"ts-{action}")
            with agent(eps.otlp, eps.api, sessions[action]) as a:
                a.drive_to(action)
                traces[action] = a.trace_id
        sessions["adminBlocked"] = uid("ts-admin")
        r = httpx.post(f"{eps.api}/admin/loop-detection/sessions/{sessions['adminBlocked']}/block",
                       headers=admin_headers(service))
        assert r.status_code == 200
        revoked = uid("ts-revoked-key")
        r = httpx.post(f"{eps.api}/admin/loop-detection/keys/{revoked}/revoke", headers=admin_headers(service))
        assert r.status_code == 200

        # three identical requests through the Python SDK; the TypeScript test sends the fourth
        model, messages = "gpt-4o-mini", [{"role": "system", "content": "Tu répares des builds. 🛠"},
                                          {"role": "user", "content": "Encore une fois.", "temperature": 0.7}]
        cross = {"sessionId": uid("ts-cross"), "traceId": uid("trace"), "model": model, "messages": messages,
                 "fingerprint": request_fingerprint(model, messages)}
        with LoopGuard(eps.api, blocklist_interval=None) as guard:
            for _ in range(3):
                d = guard.check(session_id=cross["sessionId"], trace_id=cross["traceId"],
                                pending=pending_request(model, messages))
                assert not d.blocked  # (the third is a warn: the notify rule watch-repeat)
        path = tmp_path_factory.mktemp("ts-fixture") / "fixture.json"
        path.write_text(json.dumps({"api": eps.api, "sessions": sessions, "traces": traces, "revokedKey": revoked,
                                    "crossLanguage": cross, "tokenApi": token_service,
                                    "preflightApi": preflight_service}))
        yield path


def test_the_typescript_sdk_passes_its_tests_against_the_service(fixture_file):
    env = {**os.environ, "LOOP_DETECTOR_TS_FIXTURE": str(fixture_file), "NODE_OPTIONS": "",
           "LOOP_DETECTOR_API_TOKEN": API_TOKEN}
    out = run([NODE, "--test", "--test-reporter=tap", "test/"], timeout=600, cwd=str(SDK_TYPESCRIPT), env=env)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report[-6000:]
    counts = {k: int(v) for k, v in re.findall(r"^# (pass|fail|skipped|cancelled|todo) (\d+)$", report, re.M)}
    assert counts.get("fail") == 0 and counts.get("cancelled") == 0, counts
    assert counts.get("skipped") == 0, "a test was skipped: " + report[-4000:]
    assert counts.get("pass", 0) >= 30, counts
    assert re.search(r"^ok \d+ - fail safe against the live service$", report, re.M), report[-4000:]


def test_js_number_is_javascripts_number_to_string(built):
    """Python's rendering of doubles against node's, on edge cases and random bit patterns (every exponent)."""
    rng = random.Random(19)
    edge = [0.0, -0.0, 1.0, -1.0, 0.1, 1e21, 1e-7, 1e-6, 999999999999999900000.0, 1e20, 5e-324, 2.2250738585072014e-308,
            1.7976931348623157e308, 2.0**53, 2.0**53 + 2, 123456789.125, 1 / 3, -2.5e-8, 0.000001, 1.0000000000000002]
    values = edge + [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(4000)]
    values = [v for v in values if v == v and abs(v) != float("inf")]
    values += [rng.uniform(-1e6, 1e6) for _ in range(1000)] + [float(rng.randint(-10**18, 10**18)) for _ in range(500)]
    hexes = [struct.pack("<d", v).hex() for v in values]
    script = ("const hexes = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "console.log(JSON.stringify(hexes.map((h) => String(Buffer.from(h, 'hex').readDoubleLE(0)))));")
    out = run([NODE, "-e", script], timeout=120, input=json.dumps(hexes))
    assert out.returncode == 0, out.stderr
    expected = json.loads(out.stdout)
    mismatches = [(v, js_number(v), e) for v, e in zip(values, expected, strict=True) if js_number(v) != e]
    assert not mismatches, mismatches[:10]
