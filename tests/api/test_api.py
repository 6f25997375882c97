"""The enforcement and admin API against a real running service (real OTLP spans, chDB, detector cycle).

Every endpoint and every error status: ``POST /v1/check`` (each action, the 429 body, the pending-call
pre-flight), ``GET /v1/decision``, ``GET /v1/blocklist`` (ETag / 304), ``GET /api/budgets/status``, the admin
API (401 / 403 / 404 / 409 / 422, sessions, reset, block, revoke, stats, rules and budgets overrides, reload),
persistence across a restart, and a schemathesis run over the OpenAPI schema (no 5xx).
"""

from __future__ import annotations

import logging
import os
import stat
import uuid

import httpx
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.enforcement import FAST_LEVELS, admin_headers, agent, make_config, repeat_step, uid

from detector.service.credentials import ADMIN_TOKEN_ENV, resolve_admin_token
from detector.service.process import running_service
from detector.settings.config import AppConfig

RULES = [
    # blocking exact repeat: 4 of the same request in a row (the notify rule below fires at 3 first)
    {"name": "stop-repeat", "detector": "exact_prompt_repeat", "action": "block", "mode": "enforce",
     "params": {"repeats": {1: 4}}},
    {"name": "watch-repeat", "detector": "exact_prompt_repeat", "action": "notify"},
    {"name": "dry-repeat", "detector": "exact_prompt_repeat", "action": "block", "mode": "dry_run",
     "params": {"repeats": {1: 2}}},
    {"name": "stop-tool-loop", "detector": "failure_loop", "action": "block", "params": {"same_tool_repeats": 3}},
]
BUDGETS = [
    {"name": "free-tier", "scope": "feature", "match": "free", "limit_usd": 0, "period": "month", "action": "block"},
    {"name": "per-run", "scope": "session", "match": "*", "limit_usd": 5, "period": "run", "action": "block"},
]


@pytest.fixture(scope="class")
def svc(tmp_path_factory):
    config = make_config(rules=RULES, budgets=BUDGETS, loop_detection=FAST_LEVELS)
    with running_service(config, tmp_path_factory.mktemp("api")) as (service, eps):
        yield service, eps


def check(api: str, **body):
    return httpx.post(f"{api}/v1/check", json=body)


class TestLiveService:
    """One service for every test of this class (chDB: one data directory per process at a time, so the
    tests that need a service of their own run after it is closed)."""

    # -- POST /v1/check ------------------------------------------------------------------------------------------
    def test_unknown_session_is_allow_without_warning(self, svc):
        _, eps = svc
        r = check(eps.api, session_id=uid("never"))
        assert r.status_code == 200
        assert r.json()["action"] == "allow" and r.json()["level"] == "none"
        assert "x-loop-warning" not in r.headers


    @pytest.mark.parametrize("body", [
        {},
        {"session_id": ""},
        {"session_id": "x" * 513},
        {"session_id": "s", "trace_id": "t" * 65},
        {"session_id": "s", "virtual_key": "k" * 513},
        {"session_id": "s", "unexpected": 1},
        {"session_id": "s", "pending": {"tool_arguments": {"a": 1}}},
        {"session_id": "s", "pending": {"request_fingerprint": "f" * 257}},
        {"session_id": "s", "pending": {"tool_name": "t", "tool_arguments": "x" * 20_000}},
        {"session_id": 5},
    ], ids=["empty", "blank-id", "long-id", "long-trace", "long-key", "extra-field", "args-without-tool", "long-fp",
            "huge-args", "wrong-type"])
    def test_invalid_check_bodies_are_422(self, svc, body):
        _, eps = svc
        assert check(eps.api, **body).status_code == 422


    def test_a_trace_id_alone_is_enough(self, svc):
        _, eps = svc
        trace = uuid.uuid4().hex
        r = check(eps.api, trace_id=trace)
        assert r.status_code == 200 and r.json()["action"] == "allow"
        assert r.json()["session_id"] == trace  # a trace without a known session is its own session
        r = httpx.get(f"{eps.api}/v1/decision", params={"trace_id": trace})
        assert r.status_code == 200 and r.json()["session_id"] == trace
        r = httpx.get(f"{eps.api}/v1/decision")
        assert r.status_code == 422 and "session_id or trace_id" in r.text
        assert check(eps.api, virtual_key="k").status_code == 422

    def test_oversized_body_is_413(self, svc):
        _, eps = svc
        body = b'{"session_id": "s", "pad": "' + b"x" * 70_000 + b'"}'
        r = httpx.post(f"{eps.api}/v1/check", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413

    def test_malformed_json_is_422(self, svc):
        _, eps = svc
        r = httpx.post(f"{eps.api}/v1/check", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422


    def test_every_action_through_real_spans(self, svc):
        """A looping agent's real spans move the session one level per call: each answer is checked."""
        _, eps = svc
        session = uid("loop")
        with agent(eps.otlp, eps.api, session) as a:
            seen = {}
            for _ in range(8):
                a.call()
                r = check(eps.api, session_id=session)
                action = r.json()["action"] if r.status_code == 200 else "block"
                seen.setdefault(action, r)
                if action == "block":
                    break
        assert {"warn", "throttle", "inject", "block"} <= set(seen), list(seen)
        warn = seen["warn"]
        assert warn.headers["x-loop-warning"].endswith(f"dominant_signal={warn.json()['dominant_signal']}")
        assert warn.headers["x-loop-warning"].split(";")[0] == f"{warn.json()['confidence']:.3f}"
        assert seen["throttle"].json()["delay_seconds"] == 1.0
        assert "x-loop-warning" in seen["throttle"].headers
        assert seen["inject"].json()["instruction"].startswith("Loop detected.")
        blocked = seen["block"]
        assert blocked.status_code == 429 and blocked.headers["retry-after"] == "60"
        assert "x-loop-warning" in blocked.headers
        err = blocked.json()["error"]
        assert err["reason"] == "loop_detected" and err["enforcement_level"] == "hard_stop"
        assert err["session_id"] == session and err["confidence"] > 0 and err["dominant_signal"] != "none"
        # the plain read gives the same decision, with 200
        plain = httpx.get(f"{eps.api}/v1/decision", params={"session_id": session})
        assert plain.status_code == 200 and plain.json()["action"] == "block"


    def test_blocking_rule_on_real_spans_refuses_the_trace(self, svc):
        _, eps = svc
        session = uid("repeat")
        with agent(eps.otlp, eps.api, session, step=repeat_step) as a:
            for _ in range(4):
                a.call(fresh_history=True)
            r = check(eps.api, session_id=session, trace_id=a.trace_id)
        assert r.status_code == 429
        assert r.json()["error"]["reason"] == "exact_prompt_repeat"
        assert r.json()["error"]["rule_name"] == "stop-repeat"
        # another trace of the same session is not refused by a trace rule
        other = check(eps.api, session_id=uid("other"), trace_id="0" * 32)
        assert other.status_code == 200


    def test_pending_exact_repeat_is_refused_before_it_is_sent(self, svc):
        _, eps = svc
        session, trace = uid("pending"), uid("trace")
        answers = []
        for _ in range(5):
            r = check(eps.api, session_id=session, trace_id=trace, pending={"request_fingerprint": "sha256:abc"})
            answers.append(r.json()["action"] if r.status_code == 200 else r.json()["error"]["reason"])
        # 3rd: the notify rule warns; 4th: the blocking rule refuses (before the call is made); dry run: nothing
        assert answers == ["allow", "allow", "warn", "exact_prompt_repeat", "exact_prompt_repeat"]
        # another request in the same trace is fine; the cycle is broken
        assert check(eps.api, session_id=session, trace_id=trace,
                     pending={"request_fingerprint": "sha256:def"}).status_code == 200


    def test_pending_two_step_cycle_in_a_session_window(self, svc):
        _, eps = svc
        session = uid("cycle")  # no trace: the window is the session's
        codes = [check(eps.api, session_id=session, pending={"request_fingerprint": fp}).status_code
                 for fp in ["a", "b", "a", "b"]]
        assert codes == [200, 200, 200, 429]  # a 2-step cycle twice (the blocking rule's default for length 2)
        # windows are per trace: the same session under a trace starts a window of its own
        assert check(eps.api, session_id=session, trace_id="f" * 32, pending={"request_fingerprint": "b"}).status_code == 200


    def test_pending_tool_call_repeats(self, svc):
        _, eps = svc
        session, trace = uid("tools"), uid("trace")
        args = [{"path": "a.py", "mode": "r"}, '{"mode": "r", "path": "a.py"}', {"mode": "r", "path": "a.py"}]
        codes = [check(eps.api, session_id=session, trace_id=trace,
                       pending={"tool_name": "read_file", "tool_arguments": a}).status_code for a in args]
        assert codes == [200, 200, 429]  # same call three times (argument order and encoding do not matter)
        r = check(eps.api, session_id=session, trace_id=trace,
                  pending={"tool_name": "read_file", "tool_arguments": {"path": "b.py"}})
        assert r.status_code == 200


    EVIDENCE = {"version": 1, "request": "18446744073709551615", "input": "0", "input_simhash": "2722205540",
                "input_empty": False, "input_chars": 120}

    def test_pending_evidence_is_accepted_beside_the_old_fields(self, svc):
        """The app's fingerprints (``pending.evidence``) of a model call and of a tool run; a client that sends
        none is answered as before."""
        _, eps = svc
        session = uid("evidence")
        r = check(eps.api, session_id=session, pending={"request_fingerprint": "abc", "evidence": self.EVIDENCE})
        assert r.status_code == 200 and r.json()["action"] == "allow"
        tool = {"version": 1, "tool": "42", "tool_args": "7", "tool_args_simhash": "0"}
        assert check(eps.api, session_id=session, pending={"tool_name": "t", "evidence": tool}).status_code == 200
        assert check(eps.api, session_id=session, pending={"evidence": {"version": 1}}).status_code == 200
        v2 = {**self.EVIDENCE, "version": 2, "input_failed": True, "input_shape": "18446744073709551615",
              "input_pending": False}
        assert check(eps.api, session_id=session, pending={"evidence": v2}).status_code == 200
        v3 = {**v2, "version": 3, "input_ack": True}
        assert check(eps.api, session_id=session, pending={"evidence": v3}).status_code == 200

    @pytest.mark.parametrize(("evidence", "field", "says"), [
        ({"version": 4}, "version", "1, 2 or 3"),
        ({}, "version", "required"),
        ({"version": 1, "request": 5}, "request", "string"),
        ({"version": 1, "request": "-1"}, "request", "pattern"),
        ({"version": 1, "input": "0x1f"}, "input", "pattern"),
        ({"version": 1, "input": "007"}, "input", "pattern"),
        ({"version": 1, "input_simhash": "18446744073709551616"}, "input_simhash", "2**64 - 1"),
        ({"version": 1, "input_simhash": "1" * 21}, "input_simhash", "20"),
        ({"version": 1, "input_chars": -1}, "input_chars", "greater than or equal"),
        ({"version": 1, "input_empty": "maybe"}, "input_empty", "bool"),
        ({"version": 1, "text": "the prompt"}, "text", "Extra inputs"),
        ({"version": 2, "input_shape": "-3"}, "input_shape", "pattern"),
        ({"version": 2, "input_failed": "yes please"}, "input_failed", "bool"),
        ({"version": 3, "input_ack": "sure"}, "input_ack", "bool"),
    ], ids=["version", "no-version", "number", "negative", "hex", "leading-zero", "beyond-64-bits", "too-long",
            "negative-size", "not-bool", "extra-field", "shape-negative", "failed-not-bool", "ack-not-bool"])
    def test_invalid_evidence_is_a_precise_422(self, svc, evidence, field, says):
        _, eps = svc
        r = check(eps.api, session_id="s", pending={"request_fingerprint": "x", "evidence": evidence})
        assert r.status_code == 422, r.text
        errors = r.json()["detail"]
        assert any(e["loc"][:3] == ["pending", "evidence", field] and says in e["msg"] for e in errors), errors

    def test_tool_evidence_needs_a_tool_name(self, svc):
        _, eps = svc
        r = check(eps.api, session_id="s", pending={"evidence": {"version": 1, "tool": "42"}})
        assert r.status_code == 422 and "needs tool_name" in r.text

    def test_pending_tool_call_repeats_by_its_fingerprint_alone(self, svc):
        """A guard sends the tool's fingerprint, not its arguments: the same call back to back still trips the
        failure-loop rule before it runs."""
        _, eps = svc
        session, trace = uid("tool-evidence"), uid("trace")
        pending = {"tool_name": "read_file", "evidence": {"version": 1, "tool": "123456789"}}
        codes = [check(eps.api, session_id=session, trace_id=trace, pending=pending).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        other = {"tool_name": "read_file", "evidence": {"version": 1, "tool": "987654321"}}
        assert check(eps.api, session_id=session, trace_id=trace, pending=other).status_code == 200

    def test_the_openapi_schema_documents_the_evidence(self, svc):
        _, eps = svc
        schemas = httpx.get(f"{eps.api}/openapi.json").json()["components"]["schemas"]
        evidence = schemas["PendingEvidence"]
        assert set(evidence["properties"]) == {"version", "request", "input", "input_simhash", "input_empty",
                                               "input_chars", "input_failed", "input_shape", "input_pending",
                                               "input_ack", "tool", "tool_args", "tool_args_simhash"}
        assert evidence["required"] == ["version"] and evidence["additionalProperties"] is False
        assert "evidence" in schemas["Pending"]["properties"]

    # -- manual actions, block list, budget status ---------------------------------------------------------------
    def test_manual_block_and_revoke_and_blocklist_etag(self, svc):
        service, eps = svc
        h = admin_headers(service)
        session, key = uid("blocked"), uid("key")
        base = f"{eps.api}/admin/loop-detection"
        r = httpx.post(f"{base}/sessions/{session}/block", headers=h, json={"reason": "runaway", "ttl_seconds": 3600})
        assert r.status_code == 200 and r.json()["active"] and r.json()["expires_at"] is not None
        r = check(eps.api, session_id=session)
        assert r.status_code == 429 and r.json()["error"]["reason"] == "session_blocked"
        assert httpx.post(f"{base}/keys/{key}/revoke", headers=h).json()["active"]
        r = check(eps.api, session_id=uid("any"), virtual_key=key)
        assert r.status_code == 429 and r.json()["error"]["reason"] == "key_revoked"
        r = check(eps.api, session_id=uid("any"), feature="free")
        assert r.status_code == 429 and r.json()["error"]["reason"] == "budget_exhausted"
        assert r.json()["error"]["rule_name"] == "free-tier"

        bl = httpx.get(f"{eps.api}/v1/blocklist")
        assert bl.status_code == 200 and bl.headers["etag"]
        body = bl.json()
        assert {e["id"] for e in body["sessions"]} >= {session}
        assert [e for e in body["sessions"] if e["id"] == session][0]["expires_at"] > 0
        assert key in {e["id"] for e in body["keys"]}
        assert [e for e in body["features"] if e["id"] == "free"][0]["reason"] == "budget_exhausted"
        assert body["count"] == sum(len(body[g]) for g in ("sessions", "traces", "keys", "features"))
        same = httpx.get(f"{eps.api}/v1/blocklist", headers={"If-None-Match": bl.headers["etag"]})
        assert same.status_code == 304 and same.headers["etag"] == bl.headers["etag"] and not same.content
        assert httpx.get(f"{eps.api}/v1/blocklist", headers={"If-None-Match": '"stale"'}).status_code == 200

        assert not httpx.post(f"{base}/sessions/{session}/unblock", headers=h).json()["active"]
        assert not httpx.post(f"{base}/keys/{key}/restore", headers=h).json()["active"]
        assert check(eps.api, session_id=session).status_code == 200
        assert check(eps.api, session_id=uid("any"), virtual_key=key).status_code == 200
        changed = httpx.get(f"{eps.api}/v1/blocklist", headers={"If-None-Match": bl.headers["etag"]})
        assert changed.status_code == 200 and session not in {e["id"] for e in changed.json()["sessions"]}
        events = service.store.rows("SELECT scope, action, detector FROM otel.loop_events WHERE kind = 'manual' "
                                    "AND scope_id IN ({s:String}, {k:String}) ORDER BY ts", {"s": session, "k": key})
        assert [(e["scope"], e["action"]) for e in events] == [("session", "block"), ("key", "block"),
                                                               ("session", "allow"), ("key", "allow")]


    def test_budget_status(self, svc):
        _, eps = svc
        r = httpx.get(f"{eps.api}/api/budgets/status", headers={"X-Cost-Feature": "free", "X-Cost-Session": uid("s")})
        body = r.json()
        assert r.status_code == 200 and body["can_proceed"] is False and body["reason"] == "budget_exhausted"
        by_name = {b["name"]: b for b in body["budgets"]}
        assert by_name["free-tier"]["exhausted"] and by_name["free-tier"]["limit_usd"] == 0
        assert by_name["per-run"] == {**by_name["per-run"], "scope": "session", "period": "run", "spent_usd": 0.0,
                                      "exhausted": False, "action": "block"}
        ok = httpx.get(f"{eps.api}/api/budgets/status", headers={"X-Cost-Feature": "paid"}).json()
        assert ok == {"can_proceed": True, "reason": "", "budgets": []}
        assert httpx.get(f"{eps.api}/api/budgets/status", headers={"X-Cost-Session": "s" * 600}).status_code == 422


    # -- admin ---------------------------------------------------------------------------------------------------
    ADMIN_GETS = ["/admin/loop-detection/sessions", "/admin/loop-detection/stats", "/admin/loop-detection/rules",
                  "/admin/loop-detection/budgets", "/admin/loop-detection/sessions/x"]


    @pytest.mark.parametrize("path", ADMIN_GETS)
    def test_admin_requires_the_bearer_token(self, svc, path):
        _, eps = svc
        assert httpx.get(eps.api + path).status_code == 401
        assert httpx.get(eps.api + path).headers["www-authenticate"] == "Bearer"
        assert httpx.get(eps.api + path, headers={"Authorization": "Basic abc"}).status_code == 401
        assert httpx.get(eps.api + path, headers={"Authorization": "Bearer wrong-token"}).status_code == 403
        assert httpx.post(f"{eps.api}/admin/config/reload", headers={"Authorization": "Bearer nope"}).status_code == 403


    def test_admin_sessions_detail_reset_and_stats(self, svc):
        service, eps = svc
        h = admin_headers(service)
        base = f"{eps.api}/admin/loop-detection"
        session = uid("admin")
        with agent(eps.otlp, eps.api, session, step=repeat_step) as a:
            for _ in range(4):
                a.call(fresh_history=True)
            trace = a.trace_id
        assert check(eps.api, session_id=session, trace_id=trace).status_code == 429
        service.job.checkpoint()
        listed = httpx.get(f"{base}/sessions", params={"limit": 500}, headers=h).json()
        assert session in {s["session_id"] for s in listed["sessions"]} and listed["total"] >= 1
        assert httpx.get(f"{base}/sessions", params={"limit": 0}, headers=h).status_code == 422
        assert httpx.get(f"{base}/sessions", params={"offset": -1}, headers=h).status_code == 422
        detail = httpx.get(f"{base}/sessions/{session}", headers=h).json()
        assert detail["session_id"] == session and detail["request_count"] == 4 and detail["recent_request_hashes"]
        assert httpx.get(f"{base}/sessions/{uid('nope')}", headers=h).status_code == 404

        r = httpx.post(f"{base}/sessions/{session}/reset", headers=h)
        assert r.status_code == 200 and r.json() == {"session_id": session, "reset": True, "traces_reset": 1}
        assert check(eps.api, session_id=session, trace_id=trace).json()["action"] == "allow"
        state = service.job.engine.states[("session", session)]
        assert state.calls == 0 and state.level == "none"  # the session still exists, fresh
        assert httpx.get(f"{base}/sessions/{session}", headers=h).status_code == 200
        assert httpx.post(f"{base}/sessions/{uid('nope')}/reset", headers=h).status_code == 404
        assert service.store.rows("SELECT count() AS n FROM otel.loop_events WHERE kind = 'manual' AND action = 'reset' "
                                  "AND scope_id = {s:String}", {"s": session})[0]["n"] == 1

        stats = httpx.get(f"{base}/stats", headers=h).json()
        assert stats["active_sessions"] >= 1 and stats["estimated_memory_bytes"] > 1000
        assert set(stats["level_distribution"]) == {"none", "warn", "throttle", "inject", "hard_stop"}
        assert {"top_sessions", "average_confidence", "evictions_total", "dominant_signal_distribution"} <= set(stats)


    def test_admin_block_validation(self, svc):
        service, eps = svc
        h = admin_headers(service)
        base = f"{eps.api}/admin/loop-detection"
        assert httpx.post(f"{base}/sessions/s/block", headers=h, json={"ttl_seconds": -1}).status_code == 422
        assert httpx.post(f"{base}/sessions/s/block", headers=h, json={"bogus": 1}).status_code == 422
        assert httpx.post(f"{base}/sessions/{'x' * 600}/block", headers=h).status_code == 422
        assert httpx.post(f"{base}/config/reload", headers=h).status_code == 404  # not under loop-detection
        assert httpx.post(f"{eps.api}/admin/config/reload", headers=h).status_code == 409  # started without a file


# -- rules, budgets, reload, persistence: a service of their own -----------------------------------------------
def test_rules_budgets_reload_and_restart(tmp_path):
    cfg_path = tmp_path / "loop.yaml"
    file_rules = [{"name": "file-rule", "detector": "exact_prompt_repeat", "action": "notify"}]
    cfg_path.write_text(yaml.safe_dump({"detector": {"interval_seconds": 0.1, "checkpoint_seconds": 0},
                                        "rules": file_rules}))
    config = make_config(rules=file_rules)
    data = tmp_path / "data"
    api_rules = [{"name": "api-block", "detector": "exact_prompt_repeat", "action": "block", "mode": "enforce"}]
    with running_service(config, data, config_path=str(cfg_path)) as (service, eps):
        h = admin_headers(service)
        base = f"{eps.api}/admin/loop-detection"
        got = httpx.get(f"{base}/rules", headers=h).json()
        assert got["source"] == "file" and [r["name"] for r in got["rules"]] == ["file-rule"]
        bad = httpx.put(f"{base}/rules", headers=h, json={"rules": [
            {"name": "x", "detector": "exact_prompt_repeat", "params": {"window": 500}}]})
        assert bad.status_code == 422
        dup = httpx.put(f"{base}/rules", headers=h, json={"rules": api_rules * 2})
        assert dup.status_code == 422 and "duplicate" in str(dup.json()["detail"])
        put = httpx.put(f"{base}/rules", headers=h, json={"rules": api_rules})
        assert put.status_code == 200 and put.json()["source"] == "api"
        assert [r.name for r in service.config.rules] == ["api-block"]
        codes = [check(eps.api, session_id="r", trace_id="t", pending={"request_fingerprint": "x"}).status_code
                 for _ in range(3)]
        assert codes == [200, 200, 429]  # applied to the running service at once

        budgets = [{"name": "daily", "scope": "key", "match": "k1", "limit_usd": 0, "period": "day",
                    "action": "block"}]
        assert httpx.put(f"{base}/budgets", headers=h, json={"budgets": budgets * 2}).status_code == 422
        assert httpx.put(f"{base}/budgets", headers=h, json={"budgets": [{**budgets[0], "scope": "team"}]}
                         ).status_code == 422
        assert httpx.put(f"{base}/budgets", headers=h, json={"budgets": budgets}).json()["source"] == "api"
        assert check(eps.api, session_id="b", virtual_key="k1").status_code == 429

        # reload: an invalid file is refused with every error listed, the old config kept
        cfg_path.write_text(yaml.safe_dump({"loop_detection": {"history_depth": 99, "ema_alpha": 5}}))
        r = httpx.post(f"{eps.api}/admin/config/reload", headers=h)
        assert r.status_code == 422 and len(r.json()["detail"]["errors"]) == 2
        assert service.config.loop_detection.history_depth == 5
        cfg_path.write_text(yaml.safe_dump({"detector": {"interval_seconds": 0.1}, "rules": file_rules,
                                            "loop_detection": {"history_depth": 7}}))
        assert httpx.post(f"{eps.api}/admin/config/reload", headers=h).json() == {"status": "ok"}
        assert service.config.loop_detection.history_depth == 7
        assert [r.name for r in service.config.rules] == ["api-block"]  # the API's list still wins

    with running_service(make_config(rules=file_rules), data, config_path=str(cfg_path)) as (service, eps):
        h = admin_headers(service)
        base = f"{eps.api}/admin/loop-detection"
        assert [r["name"] for r in httpx.get(f"{base}/rules", headers=h).json()["rules"]] == ["api-block"]
        assert httpx.get(f"{base}/budgets", headers=h).json()["budgets"][0]["name"] == "daily"
        assert check(eps.api, session_id="b", virtual_key="k1").status_code == 429
        got = httpx.delete(f"{base}/rules", headers=h).json()
        assert got["source"] == "file" and [r["name"] for r in got["rules"]] == ["file-rule"]
        assert httpx.delete(f"{base}/budgets", headers=h).json() == {"source": "file", "budgets": []}
        assert check(eps.api, session_id="b", virtual_key="k1").status_code == 200


def test_manual_actions_survive_restart(tmp_path):
    session = uid("persist")
    with running_service(make_config(), tmp_path) as (service, eps):
        httpx.post(f"{eps.api}/admin/loop-detection/sessions/{session}/block", headers=admin_headers(service))
        httpx.post(f"{eps.api}/admin/loop-detection/keys/k9/revoke", headers=admin_headers(service))
        httpx.post(f"{eps.api}/admin/loop-detection/keys/k9/restore", headers=admin_headers(service))
    with running_service(make_config(), tmp_path) as (service, eps):
        assert check(eps.api, session_id=session).json()["error"]["reason"] == "session_blocked"
        assert check(eps.api, session_id=session + "x", virtual_key="k9").status_code == 200


# -- the admin token -----------------------------------------------------------------------------------------
def test_admin_token_resolution(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
    configured = AppConfig.model_validate({"api": {"admin_token": "c" * 20}})
    assert resolve_admin_token(configured, tmp_path) == "c" * 20
    assert not (tmp_path / "admin-token").exists()
    monkeypatch.setenv(ADMIN_TOKEN_ENV, "from-the-environment")
    assert resolve_admin_token(AppConfig(), tmp_path) == "from-the-environment"
    monkeypatch.delenv(ADMIN_TOKEN_ENV)
    with caplog.at_level(logging.INFO, logger="loop_detector"):
        token = resolve_admin_token(AppConfig(), tmp_path)
    path = tmp_path / "admin-token"
    assert path.read_text().strip() == token and len(token) >= 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert str(path) in caplog.text and token not in caplog.text  # the path is logged, never the token
    assert resolve_admin_token(AppConfig(), tmp_path) == token  # stable across restarts


def test_service_uses_the_token_file(tmp_path, monkeypatch):
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
    with running_service(make_config(), tmp_path) as (service, eps):
        token = (tmp_path / "admin-token").read_text().strip()
        assert service.admin_token == token
        ok = httpx.get(f"{eps.api}/admin/loop-detection/stats", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200


# -- schemathesis: no 5xx anywhere in the schema ----------------------------------------------------------------
def fuzz(operation, base_url: str, headers: dict[str, str], failures: list[str]) -> None:
    """Up to 20 generated requests for one operation (with the admin token on admin paths); 5xx recorded."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=20 * int(os.environ.get("LOOP_DETECTOR_FUZZ_SCALE", "1")), deadline=None, database=None, suppress_health_check=list(HealthCheck),
              derandomize=True)
    @given(case=operation.as_strategy())
    def run(case):
        case.headers = {**(case.headers or {}), **headers}
        response = case.call(base_url=base_url, timeout=10)
        if response.status_code >= 500:
            failures.append(f"{operation.method.upper()} {operation.path}: {response.status_code} {response.text[:200]}")

    run()


def test_openapi_fuzz_finds_no_server_errors(tmp_path):
    schemathesis = pytest.importorskip("schemathesis")

    config = make_config(rules=RULES, budgets=BUDGETS)
    with running_service(config, tmp_path) as (service, eps):
        spec = httpx.get(f"{eps.api}/openapi.json").json()
        schema = schemathesis.openapi.from_dict(spec)
        headers = admin_headers(service)
        failures: list[str] = []
        operations = [op.ok() for op in schema.get_all_operations()]
        assert len(operations) >= 15
        for operation in operations:
            fuzz(operation, eps.api, headers if operation.path.startswith("/admin") else {}, failures)
        assert not failures, failures


# -- the pre-flight window, pure ---------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(seq=st.lists(st.integers(0, 3), max_size=30), window=st.integers(1, 100), max_cycle=st.integers(1, 5),
       rep1=st.integers(2, 4))
def test_preflight_window_agrees_with_find_repeat(seq, window, max_cycle, rep1):
    from detector.core.rules import find_repeat
    from detector.detection.engine_config import planned_rule
    from detector.enforcement.preflight import PendingWindows, fingerprint_int
    from detector.settings.loop_settings import Rule
    from detector.settings.rule_params import ExactRepeatParams

    params = {"window": window, "max_cycle_length": max_cycle, "repeats": {1: rep1}}
    rule = planned_rule(Rule(name="r", detector="exact_prompt_repeat", action="block", params=params))
    windows = PendingWindows()
    fps: list[int] = []
    for x in seq:
        fps.append(fingerprint_int(str(x)))
        got = windows.evaluate(session_id="s", trace_id="t", rules=[rule], now_us=0, request_fingerprint=str(x))
        parsed = ExactRepeatParams(**params)
        expected = find_repeat(fps, parsed.window, parsed.repeat_counts()) is not None
        assert bool(got) == expected


def test_preflight_windows_are_bounded_and_evicted_with_their_session():
    from detector.detection.engine_config import planned_rule
    from detector.enforcement.preflight import PendingWindows
    from detector.settings.loop_settings import Rule

    rule = planned_rule(Rule(name="r", detector="exact_prompt_repeat", action="block"))
    windows = PendingWindows(max_windows=3)
    for i in range(5):
        windows.evaluate(session_id=f"s{i}", trace_id=f"t{i}", rules=[rule], now_us=i, request_fingerprint="x")
    assert len(windows) == 3  # least recently used dropped first
    windows.evaluate(session_id="s4", trace_id=None, rules=[rule], now_us=10, request_fingerprint="x")
    assert windows.forget_sessions(["s4"]) == 2  # the session's own window and its trace's
    assert windows.evict_idle(cutoff_us=4) == 1 and len(windows) == 0  # t3 was idle since 3
