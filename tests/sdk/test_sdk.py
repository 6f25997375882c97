"""The Python SDK (``detector.sdk``) against a real running service: each action applied (sync and async),
the pending-fingerprint pre-check refusing a repeat before it is sent (through ``guard_openai`` on a fake
client of the openai shape), endpoint down or slow (fail open, fail closed), the cached block list (ETag,
no round trip), and the span helpers (baggage -> attributes -> the store's resolved session/key/feature)."""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from loop_detector_sdk.evidence.fingerprints import tool_run_evidence
from pydantic import BaseModel
from support.enforcement import FAST_LEVELS, admin_headers, agent, make_config, uid, wait_for_watermark
from support.sdk import BUDGETS, RULES, VECTORS

from detector.sdk import (
    AsyncLoopGuard,
    LoopBlockedError,
    LoopGuard,
    canonical_json,
    current_ids,
    guard_openai,
    loop_context,
    pending_request,
    pending_tool,
    request_fingerprint,
    with_instruction,
)
from detector.service.process import running_service


def test_sdk_imports_without_the_server_or_chdb():
    code = textwrap.dedent("""
        import sys
        sys.modules["chdb"] = None  # any import of chdb now fails
        sys.modules["openai"] = None
        import detector.sdk
        from detector.sdk import LoopGuard, AsyncLoopGuard, guard_openai, loop_context
        loaded = [m for m in sys.modules if sys.modules[m] is not None]
        bad = [m for m in loaded if m.split(".")[0] in ("chdb", "fastapi", "uvicorn", "starlette", "apscheduler",
                                                         "clickhouse_connect", "opentelemetry", "openai")
               or m in ("detector.service.process", "detector.storage.transport", "detector.api.app.app", "detector.core.engine", "detector.settings.config")]
        assert not bad, bad
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# -- pure helpers ------------------------------------------------------------------------------------------
def test_the_shared_fingerprint_vectors():
    """sdk/test-vectors/fingerprints.json, which the TypeScript SDK's tests read too."""
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    assert len(vectors) >= 10
    for v in vectors:
        extra = v.get("extra") or {}
        payload = {"model": v["model"], "messages": v["messages"], **{k: x for k, x in extra.items() if x is not None}}
        assert canonical_json(payload) == v["canonical"], v["name"]
        assert request_fingerprint(v["model"], v["messages"], **extra) == v["sha256"], v["name"]


def test_the_shared_tool_argument_vectors():
    """``tool_arguments`` of the shared file: the arguments as Python's json reads them (``1.0`` a float, 2**70 an
    int), canonical as JavaScript writes them; the TypeScript suite and the service's pre-flight check the same."""
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["tool_arguments"]
    assert len(vectors) >= 5
    for v in vectors:
        assert canonical_json(json.loads(v["json"])) == v["canonical"], v["name"]
    assert canonical_json({"n": 1.0, "big": 2**70, "huge": 10**400}) == '{"big":1.1805916207174113e+21,"huge":null,"n":1}'


def test_canonical_json_of_python_values():
    """What JSON has no literal for is written the way JSON.stringify would see the same data."""
    class Color(enum.IntEnum):
        RED = 1

    class Mode(enum.StrEnum):
        FAST = "fast"

    class Part(BaseModel):
        type: str = "text"
        text: str
        cache: str | None = None

    assert canonical_json((1, 2.0, Color.RED, Mode.FAST)) == '[1,2,1,"fast"]'
    assert canonical_json({2: "a", "1": "b", None: 0, True: 1}) == '{"1":"b","2":"a","null":0,"true":1}'
    assert canonical_json([float("nan"), float("inf"), -0.0, 1e-7, 2**64]) == '[null,null,0,1e-7,18446744073709552000]'
    assert canonical_json(Part(text="hi")) == '{"text":"hi","type":"text"}'
    assert canonical_json([{"b", "a"}, b"\x00\xff"]) == '[["a","b"],"00ff"]'
    assert canonical_json("\ud83d\ude00 \udc00") == '"\U0001f600 \\udc00"'  # a pair joined, a lone one escaped
    # a tool call goes as its fingerprints, never its arguments; a value JSON has no literal for is converted
    assert pending_tool("sleep", 5) == {"tool_name": "sleep", "evidence": tool_run_evidence("sleep", "5")}
    assert pending_tool("read", ("a.py",)) == pending_tool("read", ["a.py"]) == pending_tool("read", '["a.py"]')
    assert request_fingerprint("m", [], system=None) == request_fingerprint("m", [])


def test_request_fingerprint_is_canonical():
    a = request_fingerprint("m", [{"role": "user", "content": "hi", "name": "x"}])
    assert a == request_fingerprint("m", [{"name": "x", "content": "hi", "role": "user"}])
    assert a != request_fingerprint("m2", [{"role": "user", "content": "hi", "name": "x"}])
    assert len(a) == 64 and pending_request("m", [])["request_fingerprint"] == request_fingerprint("m", [])
    tool = pending_tool("read", {"p": 1, "q": "a.py"})
    assert tool == pending_tool("read", '{"q": "a.py", "p": 1.0}') and set(tool) == {"tool_name", "evidence"}
    assert tool["evidence"]["tool"] != pending_tool("read", {"p": 2, "q": "a.py"})["evidence"]["tool"]


def test_with_instruction_appends_prepends_or_inserts():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "go"}]
    out = with_instruction(msgs, "STOP")
    assert out[0]["content"] == "Be brief.\n\nSTOP" and msgs[0]["content"] == "Be brief."  # caller's list untouched
    assert with_instruction(msgs, "STOP", "prepend")[0]["content"] == "STOP\n\nBe brief."
    parts = [{"role": "developer", "content": [{"type": "text", "text": "Rules"}]}]
    assert with_instruction(parts, "STOP")[0]["content"][-1] == {"type": "text", "text": "STOP"}
    assert with_instruction([{"role": "user", "content": "go"}], "STOP")[0] == {"role": "system", "content": "STOP"}


def test_loop_context_nests_and_sets_defaults():
    assert current_ids().session_id is None
    with loop_context(session_id="s", feature="f"):
        with loop_context(virtual_key="k") as ids:
            assert (ids.session_id, ids.virtual_key, ids.feature) == ("s", "k", "f")
        assert current_ids().virtual_key is None
    assert current_ids().session_id is None


# -- a fake openai client ------------------------------------------------------------------------------------
class FakeCompletions:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def create(self, **kwargs: Any) -> dict[str, Any]:
        self.sent.append(kwargs)
        return {"id": f"chatcmpl-{len(self.sent)}", "choices": []}


class FakeAsyncCompletions(FakeCompletions):
    async def create(self, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return FakeCompletions.create(self, **kwargs)


def fake_client(async_: bool = False) -> Any:
    return SimpleNamespace(chat=SimpleNamespace(completions=FakeAsyncCompletions() if async_ else FakeCompletions()),
                           models="the models api")


# -- against a live service ------------------------------------------------------------------------------------
@pytest.fixture(scope="class")
def svc(tmp_path_factory):
    config = make_config(rules=RULES, budgets=BUDGETS, loop_detection=FAST_LEVELS)
    with running_service(config, tmp_path_factory.mktemp("sdk")) as (service, eps):
        yield service, eps


@pytest.fixture()
def slept(monkeypatch):
    calls: list[float] = []
    monkeypatch.setattr(LoopGuard, "sleep", staticmethod(calls.append))
    return calls


class CountingTransport(httpx.BaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return self.inner.handle_request(request)


class TestLiveService:
    def test_allow_for_an_unknown_session(self, svc):
        _, eps = svc
        with LoopGuard(eps.api, blocklist_interval=None) as guard:
            d = guard.check(session_id=uid("new"))
            assert d.action == "allow" and d.source == "server" and not d.blocked
            assert guard.before_call(session_id=uid("new")) is None
            with pytest.raises(ValueError):
                guard.check()  # no session id and no loop_context

    def test_each_action_applied(self, svc, slept):
        """warn -> throttle (sleeps the delay) -> inject (returns the instruction) -> block (raises)."""
        _, eps = svc
        session = uid("loop")
        with LoopGuard(eps.api, blocklist_interval=None) as guard, agent(eps.otlp, eps.api, session) as a:
            d = a.drive_to("warn")
            got = guard.check(session_id=session)
            assert got.action == "warn" and got.warning and got.warning.endswith(d["dominant_signal"])
            assert guard.before_call(session_id=session) is None and not slept

            a.call()
            assert guard.check(session_id=session).action == "throttle"
            assert guard.before_call(session_id=session) is None and slept == [1.0]

            a.call()
            instruction = guard.before_call(session_id=session)
            assert instruction and instruction.startswith("Loop detected.")

            a.call()
            with pytest.raises(LoopBlockedError) as info:
                guard.before_call(session_id=session)
            assert info.value.body["error"]["reason"] == "loop_detected"
            assert info.value.body["error"]["enforcement_level"] == "hard_stop"
            assert info.value.retry_after == 60 and info.value.decision.source == "server"

            async def async_side() -> None:
                async with AsyncLoopGuard(eps.api, blocklist_interval=None) as aguard:
                    assert (await aguard.check(session_id=session)).blocked
                    with pytest.raises(LoopBlockedError):
                        await aguard.before_call(session_id=session)
                    assert await aguard.before_call(session_id=uid("fresh")) is None

            asyncio.run(async_side())

    def test_async_throttle_and_inject(self, svc, monkeypatch):
        _, eps = svc
        session = uid("aloop")
        sleeps: list[float] = []

        async def fake_sleep(seconds: float) -> None:
            sleeps.append(seconds)

        monkeypatch.setattr(AsyncLoopGuard, "sleep", staticmethod(fake_sleep))
        with agent(eps.otlp, eps.api, session) as a:
            a.drive_to("throttle")

            async def throttled() -> None:
                async with AsyncLoopGuard(eps.api, blocklist_interval=None) as aguard:
                    assert await aguard.before_call(session_id=session) is None

            asyncio.run(throttled())
            assert sleeps == [1.0]
            a.call()
            client = fake_client(async_=True)

            async def injected() -> None:
                async with AsyncLoopGuard(eps.api, blocklist_interval=None) as aguard:
                    wrapped = guard_openai(client, aguard, session_id=session)
                    await wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])

            asyncio.run(injected())
            sent = client.chat.completions.sent[0]["messages"]
            assert sent[0]["role"] == "system" and sent[0]["content"].startswith("Loop detected.")

    def test_pending_fingerprint_refuses_the_repeat_before_it_is_sent(self, svc):
        _, eps = svc
        client = fake_client()
        with LoopGuard(eps.api, blocklist_interval=None) as guard:
            wrapped = guard_openai(client, guard, session_id=uid("openai"), trace_id=uid("trace"))
            messages = [{"role": "system", "content": "You fix builds."}, {"role": "user", "content": "retry"}]
            for _ in range(3):
                wrapped.chat.completions.create(model="gpt-4o-mini", messages=messages)
            with pytest.raises(LoopBlockedError) as info:
                wrapped.chat.completions.create(model="gpt-4o-mini", messages=messages)
            assert info.value.reason == "exact_prompt_repeat"
            assert len(client.chat.completions.sent) == 3  # the 4th identical request never left
            wrapped.chat.completions.create(model="gpt-4o-mini", messages=[*messages, {"role": "user", "content": "?"}])
            assert len(client.chat.completions.sent) == 4  # a different request goes through
            assert wrapped.models == "the models api"  # everything else passes through
            # tools: the same call three times back to back is refused before it runs
            tool = pending_tool("read_file", {"path": "a.py"})
            ids = {"session_id": uid("tools"), "trace_id": uid("trace")}
            assert guard.before_call(**ids, pending=tool) is None
            assert guard.before_call(**ids, pending=tool) is None
            with pytest.raises(LoopBlockedError) as info:
                guard.before_call(**ids, pending=tool)
            assert info.value.reason == "failure_loop"

    def test_inject_rewrites_the_system_message(self, svc, slept):
        _, eps = svc
        session = uid("inject")
        client = fake_client()
        with LoopGuard(eps.api, blocklist_interval=None) as guard, agent(eps.otlp, eps.api, session) as a:
            a.drive_to("inject")
            wrapped = guard_openai(client, guard, session_id=session)
            messages = [{"role": "system", "content": "You fix builds."}, {"role": "user", "content": "go"}]
            wrapped.chat.completions.create(model="m", messages=messages)
        sent = client.chat.completions.sent[0]["messages"]
        assert sent[0]["content"].startswith("You fix builds.\n\nLoop detected.")
        assert messages[0]["content"] == "You fix builds."

    def test_cached_block_list_answers_without_a_round_trip(self, svc):
        service, eps = svc
        session = uid("cached")
        transport = CountingTransport()
        r = httpx.post(f"{eps.api}/admin/loop-detection/sessions/{session}/block", headers=admin_headers(service))
        assert r.status_code == 200
        with LoopGuard(eps.api, blocklist_interval=None, transport=transport) as guard:
            assert guard.refresh_blocklist() and guard.blocklist.fetches == 1
            assert guard.refresh_blocklist() and guard.blocklist.not_modified == 1  # If-None-Match -> 304
            before = transport.paths.count("/v1/check")
            d = guard.check(session_id=session)
            assert d.blocked and d.source == "cache" and d.reason == "session_blocked"
            with pytest.raises(LoopBlockedError):
                guard.before_call(session_id=session)
            with pytest.raises(LoopBlockedError) as info:
                guard.before_call(session_id=uid("any"), feature="free")  # the $0 budget, also from the cache
            assert info.value.reason == "budget_exhausted" and info.value.decision.source == "cache"
            assert transport.paths.count("/v1/check") == before  # no round trip for any of them
            assert guard.check(session_id=uid("other")).source == "server"
            assert transport.paths.count("/v1/check") == before + 1
        httpx.post(f"{eps.api}/admin/loop-detection/sessions/{session}/unblock", headers=admin_headers(service))

    def test_background_refresh(self, svc):
        service, eps = svc
        session = uid("bg")
        httpx.post(f"{eps.api}/admin/loop-detection/sessions/{session}/block", headers=admin_headers(service))
        with LoopGuard(eps.api, blocklist_interval=0.05) as guard:
            guard.check(session_id=uid("warmup"))  # starts the refresher
            deadline = time.monotonic() + 10
            while guard.blocklist.fetches == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert guard.check(session_id=session).source == "cache"
            httpx.post(f"{eps.api}/admin/loop-detection/sessions/{session}/unblock", headers=admin_headers(service))
            fetched = guard.blocklist.fetches
            while guard.blocklist.fetches == fetched and time.monotonic() < deadline:
                time.sleep(0.02)
            assert guard.check(session_id=session).action == "allow"  # lifted: the next refresh saw it

        async def async_refresh() -> None:
            async with AsyncLoopGuard(eps.api, blocklist_interval=0.05) as aguard:
                await aguard.check(session_id=uid("warmup"))
                for _ in range(200):
                    if aguard.blocklist.fetches:
                        break
                    await asyncio.sleep(0.02)
                assert aguard.blocklist.fetches >= 1

        asyncio.run(async_refresh())

    def test_span_helpers_put_the_ids_on_stored_calls(self, svc):
        """loop_context + LoopAttributesSpanProcessor -> real OTLP -> the MV resolves session, key, feature."""
        from opentelemetry.trace import SpanKind

        from detector.evaluation.simulate import otlp_tracer
        from detector.sdk import LoopAttributesSpanProcessor

        service, eps = svc
        session, key, feature = uid("ctx"), uid("vk"), uid("feat")
        with otlp_tracer(eps.otlp) as (tracer, provider):
            provider.add_span_processor(LoopAttributesSpanProcessor())
            with loop_context(session_id=session, virtual_key=key, feature=feature), \
                    tracer.start_as_current_span("invoke_agent demo") as root:
                span = tracer.start_span("chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5})
                span.end()
                trace_id = format(root.get_span_context().trace_id, "032x")
                with LoopGuard(eps.api, blocklist_interval=None) as guard:
                    # ids from loop_context, trace id from the current span
                    body = guard._body(None, None, None, None, None)
                    assert body == {"session_id": session, "trace_id": trace_id, "virtual_key": key,
                                    "feature": feature}
                    assert guard.check().session_id == session
            provider.force_flush()
        wait_for_watermark(eps.api, time.time_ns() // 1000)
        rows = service.store.rows(
            "SELECT session_id, virtual_key, feature FROM otel.genai_calls WHERE trace_id = {t:String}",
            {"t": trace_id})
        assert {(r["session_id"], r["virtual_key"], r["feature"]) for r in rows} == {(session, key, feature)}


def test_processor_keeps_an_existing_conversation_id():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from detector.sdk import LoopAttributesSpanProcessor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(LoopAttributesSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with loop_context(session_id="s1", feature="f1"):
        tracer.start_span("a").end()
        tracer.start_span("b", attributes={"gen_ai.conversation.id": "conv-9"}).end()
    tracer.start_span("outside").end()
    spans = {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}
    assert spans["a"] == {"loop_detector.session_id": "s1", "loop_detector.feature": "f1",
                          "gen_ai.conversation.id": "s1"}
    assert spans["b"]["gen_ai.conversation.id"] == "conv-9" and spans["b"]["loop_detector.session_id"] == "s1"
    assert spans["outside"] == {}


# -- endpoint down or slow ---------------------------------------------------------------------------------------
def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


class SilentServer:
    """Accepts connections and never answers (a hung endpoint)."""

    def __enter__(self) -> str:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.conns: list[socket.socket] = []
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                continue

    def __exit__(self, *exc: object) -> None:
        self.stop = True
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.mark.parametrize("where", ["down", "hung"])
def test_fail_open_and_fail_closed(where, caplog):
    def run(endpoint: str) -> None:
        with caplog.at_level(logging.WARNING, logger="loop_detector.sdk"):
            with LoopGuard(endpoint, timeout=0.2, blocklist_interval=None) as guard:
                d = guard.check(session_id="s1")
                assert d.action == "allow" and d.source == "fail_open" and d.reason == "enforcement_unavailable"
                assert guard.before_call(session_id="s1") is None
            assert "fail open" in caplog.text
            with LoopGuard(endpoint, timeout=0.2, fail_open=False, blocklist_interval=None) as guard:
                d = guard.check(session_id="s1")
                assert d.blocked and d.source == "fail_closed"
                with pytest.raises(LoopBlockedError) as info:
                    guard.before_call(session_id="s1")
                assert info.value.body["error"]["reason"] == "enforcement_unavailable"
            assert "fail closed" in caplog.text

            async def async_side() -> None:
                async with AsyncLoopGuard(endpoint, timeout=0.2, blocklist_interval=None) as aguard:
                    assert (await aguard.check(session_id="s1")).source == "fail_open"
                async with AsyncLoopGuard(endpoint, timeout=0.2, fail_open=False, blocklist_interval=None) as aguard:
                    with pytest.raises(LoopBlockedError):
                        await aguard.before_call(session_id="s1")

            asyncio.run(async_side())

    if where == "down":
        run(closed_port())
    else:
        with SilentServer() as endpoint:
            run(endpoint)


def test_unexpected_status_is_unavailable():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="maintenance")

    guard = LoopGuard("http://loop.invalid", blocklist_interval=None, transport=httpx.MockTransport(handler))
    assert guard.check(session_id="s").source == "fail_open" and guard.failures == 1
    guard.close()
