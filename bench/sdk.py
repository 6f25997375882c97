"""Benchmark: the SDKs' added latency per call, Python and TypeScript, against a running service; and the cost of
the completion hook (the app's fingerprints on every model call's span) per call.

    .venv/bin/python bench/sdk.py [--rounds 5] [--calls 1000] [--cached 20000] [--hook-calls 2000] [--hook-only]

One ``loop-detector serve`` process (loopback); in this process the Python SDK, in a node process the
TypeScript SDK (``sdk/typescript/dist``: run ``npm ci`` there first). For each language, per call, sequential,
keep-alive, the median of each round, rounds interleaved so that drift hits every figure alike:

* baseline: a bare ``httpx.Client.post`` / ``fetch`` of ``POST /v1/check`` (the same request the SDK sends,
  without the SDK); and the same with a ``pending`` fingerprint in the body. Each SDK call is timed right after
  its baseline call, pair by pair, and "added" is the median of the per-pair differences;
* the SDK's ``check`` (network), and ``before_call`` with ``pending_request(model, messages)`` of a
  12-message agent conversation (~6 kB: fingerprint + check + applying the decision);
* the fingerprint alone, and a check refused from the cached block list (no network).

The completion hook (no network, no service): ``LoopDetectorHook.on_completion`` as util-genai calls it at the end
of a model call whose input is a 20-message agent conversation (system, user, 9 tool calls and their results:
~8 kB), on a real recording span, median per round. Baseline: what content capture would cost for the same call,
util-genai's serialization of its inputs and outputs into the span's ``gen_ai.input.messages`` /
``gen_ai.output.messages`` (the hook gives the detector what it needs from them with content off). Two figures:
every call with a new tool result and tool call (as an agent that makes progress: the history is fingerprinted
once, the new content each call), and the same call again (an agent in a loop: its texts are cached).

The ratio column is each figure over its language's bare request of the same kind (the hook: over the
serialization baseline), per round, median over rounds. Everything is bounded: fixed call counts, loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from api import ADMIN_TOKEN, start_service, stop  # noqa: E402
from loop_detector_sdk import AsyncLoopGuard, LoopGuard, pending_request, request_fingerprint  # noqa: E402

MODEL = "gpt-4o-mini"


def conversation() -> list[dict]:
    """A 12-message tool-calling conversation (system, user, 5 assistant tool calls with their results)."""
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent. Fix the failing build. " * 8},
                            {"role": "user", "content": "The CI job fails on test_config; please fix it."}]
    for i in range(5):
        call = {"id": f"call_{i:04d}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/module_{i}.py"})}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"def f{i}():\n    return {i}\n" * 40})
    return messages


def paired(n: int, base, fn) -> tuple[float, float, float]:
    """``base(i)`` and ``fn(i)`` timed alternately, call by call (drift hits both alike): their medians and the
    median of the per-pair difference, in microseconds."""
    a, b, d = [], [], []
    for i in range(n):
        t0 = time.perf_counter()
        base(i)
        t1 = time.perf_counter()
        fn(i)
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
        d.append((t2 - t1) - (t1 - t0))
    return statistics.median(a) * 1e6, statistics.median(b) * 1e6, statistics.median(d) * 1e6


async def apaired(n: int, base, fn) -> tuple[float, float, float]:
    a, b, d = [], [], []
    for i in range(n):
        t0 = time.perf_counter()
        await base(i)
        t1 = time.perf_counter()
        await fn(i)
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
        d.append((t2 - t1) - (t1 - t0))
    return statistics.median(a) * 1e6, statistics.median(b) * 1e6, statistics.median(d) * 1e6


def python_rounds(api: str, blocked: str, rounds: int, n: int, cached: int, messages: list[dict]) -> dict:
    res: dict[str, list[float]] = {}

    def keep(prefix: str, triple: tuple[float, float, float], base: str) -> None:
        for key, value in zip((base, prefix, prefix + "Added"), triple, strict=True):
            res.setdefault(key, []).append(value)

    headers = {"content-type": "application/json"}
    pending_body = {"request_fingerprint": "f" * 64}
    with httpx.Client(timeout=5) as http, LoopGuard(api, blocklist_interval=None, timeout=2) as guard:
        for i in range(200):  # warm-up
            http.post(f"{api}/v1/check", content=json.dumps({"session_id": f"w{i}"}), headers=headers)
            guard.check(session_id=f"warm-{i}")

        async def async_round(r: int) -> tuple[float, float, float]:
            async with httpx.AsyncClient(timeout=5) as ahttp, AsyncLoopGuard(api, blocklist_interval=None,
                                                                              timeout=2) as aguard:
                for i in range(100):
                    await aguard.check(session_id=f"awarm-{i}")
                    await ahttp.post(f"{api}/v1/check", content=json.dumps({"session_id": f"aw{i}"}), headers=headers)

                async def abare(i: int) -> None:
                    await ahttp.post(f"{api}/v1/check", content=json.dumps({"session_id": f"ab-{r}-{i}"}),
                                     headers=headers)

                async def acheck(i: int) -> None:
                    await aguard.check(session_id=f"ac-{r}-{i}")

                return await apaired(n, abare, acheck)

        for r in range(rounds):
            keep("check", paired(n, lambda i, r=r: http.post(
                f"{api}/v1/check", content=json.dumps({"session_id": f"b-{r}-{i}"}), headers=headers),
                lambda i, r=r: guard.check(session_id=f"c-{r}-{i}")), "bare")
            keep("beforeCallPending", paired(n, lambda i, r=r: http.post(
                f"{api}/v1/check", content=json.dumps({"session_id": f"pb-{r}-{i}", "pending": pending_body}),
                headers=headers), lambda i, r=r: guard.before_call(
                session_id=f"p-{r}-{i}", pending=pending_request(MODEL, messages))), "pendingBare")
            fps = []
            for _ in range(n):
                t0 = time.perf_counter()
                request_fingerprint(MODEL, messages)
                fps.append(time.perf_counter() - t0)
            res.setdefault("fingerprint", []).append(statistics.median(fps) * 1e6)
            assert guard.refresh_blocklist()  # a fresh copy: older than max_stale, it would be ignored
            t0 = time.perf_counter()
            for _ in range(cached):
                guard.check(session_id=blocked)
            res.setdefault("cached", []).append((time.perf_counter() - t0) / cached * 1e6)
            assert guard.check(session_id=blocked).source == "cache"
            keep("acheck", asyncio.run(async_round(r)), "abare")
    return res


def hook_conversation(i: int) -> tuple[list, list]:
    """util-genai's inputs and outputs of the model call of a 20-message conversation (the hook's arguments):
    the history is the same every time (as in an agent's run), the last tool result and the reply's tool call are
    the ``i``-th's (new content each call)."""
    from opentelemetry.util.genai.types import InputMessage, OutputMessage, Text, ToolCallRequest, ToolCallResponse

    inputs = [InputMessage("system", [Text(SYSTEM_PROMPT)]), InputMessage("user", [Text(USER_TASK)])]
    for k, (args, result) in enumerate(HISTORY):
        inputs.append(InputMessage("assistant", [ToolCallRequest(dict(args), "read_file", f"call_{k:04d}")]))
        last = k == len(HISTORY) - 1
        inputs.append(InputMessage("tool", [ToolCallResponse(result + (f"\n# run {i}" if last else ""),
                                                             f"call_{k:04d}")]))
    outputs = [OutputMessage("assistant", [ToolCallRequest({"path": f"src/module_{i}.py", "offset": i * 40},
                                                           "read_file", f"call_next_{i}")], "tool_calls")]
    return inputs, outputs


SYSTEM_PROMPT = ("You are a coding agent working in a Python repository. Read files, run the tests, and edit code "
                 "until the failing CI job passes. Explain each step briefly. ") * 3
USER_TASK = "The CI job fails on tests/test_config.py::test_reload (KeyError: 'port'); please fix it."
HISTORY = [({"path": f"src/module_{k}.py"},
            "".join(f"def handler_{k}_{j}(request):\n    value = request.get('key_{j}')\n    return value * {j}\n"
                    for j in range(8))) for k in range(9)]


def hook_rounds(rounds: int, n: int) -> dict[str, list[float]]:
    from dataclasses import asdict

    from loop_detector_sdk.completion_hook import LoopDetectorHook
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.util.genai.utils import gen_ai_json_dumps

    hook = LoopDetectorHook()
    tracer = TracerProvider().get_tracer("bench")
    res: dict[str, list[float]] = {}
    calls = [hook_conversation(i) for i in range(n)]

    def serialize(inputs: list, outputs: list) -> None:  # content capture's work for the same call
        gen_ai_json_dumps([asdict(m) for m in inputs])
        gen_ai_json_dumps([asdict(m) for m in outputs])

    def timed(fn, pairs) -> float:
        spans = [tracer.start_span("chat gpt-4o-mini", attributes={"gen_ai.request.model": "gpt-4o-mini"})
                 for _ in pairs]
        times = []
        for span, (inputs, outputs) in zip(spans, pairs, strict=True):
            t0 = time.perf_counter()
            fn(inputs, outputs, span)
            times.append(time.perf_counter() - t0)
        for span in spans:
            span.end()
        return statistics.median(times) * 1e6

    def on_completion(inputs: list, outputs: list, span) -> None:
        hook.on_completion(inputs=inputs, outputs=outputs, system_instruction=[], span=span)

    for r in range(rounds):
        novel = [hook_conversation(r * n + i + 10**6) for i in range(n)]  # not seen before: the caches miss
        res.setdefault("serialize", []).append(timed(lambda i, o, _s: serialize(i, o), calls))
        res.setdefault("hookNovel", []).append(timed(on_completion, novel))
        res.setdefault("hookRepeat", []).append(timed(on_completion, [calls[0]] * n))
    size = len(gen_ai_json_dumps([asdict(m) for m in calls[0][0]]))
    res["_size"] = [size]
    return res


def hook_rows(res: dict[str, list[float]]) -> list[tuple[str, str, str, str]]:
    def med(key: str) -> float:
        return statistics.median(res[key])

    def ratio(key: str) -> str:
        return f"{statistics.median(v / b for v, b in zip(res[key], res['serialize'], strict=True)):.3f}"

    size = int(res["_size"][0])
    return [
        (f"Python: util-genai's serialization of a 20-message call's content ({size:,} B; content capture's work, "
         "baseline)", f"{med('serialize'):,.1f}", "us", "1.000"),
        ("Python: completion hook on_completion, the same call with a new tool result and tool call, p50",
         f"{med('hookNovel'):,.1f}", "us", ratio("hookNovel")),
        ("Python: completion hook on_completion, the same call repeated (a loop: cached), p50",
         f"{med('hookRepeat'):,.1f}", "us", ratio("hookRepeat")),
    ]


def rows_for(lang: str, res: dict[str, list[float]]) -> list[tuple[str, str, str, str]]:
    def med(key: str) -> float:
        return statistics.median(res[key])

    def baseline(figure: str, key: str) -> tuple[str, str, str, str]:
        return figure, f"{med(key):,.1f}", "us", "1.000"

    def versus(figure: str, key: str, base: str) -> tuple[str, str, str, str]:
        ratio = statistics.median(v / b for v, b in zip(res[key], res[base], strict=True))
        added = f"; added {med(key + 'Added'):+,.1f} us (median of paired differences)" if key + "Added" in res else ""
        return figure, f"{med(key):,.1f}", "us", f"{ratio:.3f}{added}"

    rows = [baseline(f"{lang}: bare POST /v1/check, p50 (baseline)", "bare"),
            versus(f"{lang}: SDK check, p50", "check", "bare")]
    if "abare" in res:
        rows += [baseline(f"{lang} async: bare AsyncClient POST /v1/check, p50 (baseline)", "abare"),
                 versus(f"{lang} async: AsyncLoopGuard check, p50", "acheck", "abare")]
    rows += [baseline(f"{lang}: bare POST /v1/check with a pending fingerprint, p50 (baseline)", "pendingBare"),
             versus(f"{lang}: SDK before_call with the fingerprint of a 12-message request, p50", "beforeCallPending",
                    "pendingBare"),
             versus(f"{lang}: that fingerprint alone, p50", "fingerprint", "pendingBare"),
             versus(f"{lang}: SDK check refused from the cached block list (no network), mean", "cached", "bare")]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000, help="network calls per figure per round")
    parser.add_argument("--cached", type=int, default=20000, help="cached checks per round")
    parser.add_argument("--hook-calls", type=int, default=2000, help="completion hook calls per figure per round")
    parser.add_argument("--hook-only", action="store_true", help="only the completion hook (no service)")
    args = parser.parse_args()
    messages = conversation()
    if args.hook_only:
        print_table(hook_rows(hook_rounds(args.rounds, args.hook_calls)),
                    f"{os.cpu_count()} CPUs; {args.rounds} rounds x {args.hook_calls} hook calls per figure")
        return 0
    node = shutil.which("node")
    dist = ROOT / "sdk" / "typescript" / "dist" / "index.js"
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as tmp:
        service, api, _ = start_service(Path(tmp))
        try:
            blocked = "bench-blocked-session"
            httpx.post(f"{api}/admin/loop-detection/sessions/{blocked}/block",
                       headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).raise_for_status()
            rows += rows_for("Python", python_rounds(api, blocked, args.rounds, args.calls, args.cached, messages))
            if node and dist.exists():
                out = subprocess.run([node, str(ROOT / "bench" / "sdk_ts.mjs"), api, blocked, str(args.rounds),
                                      str(args.calls), str(args.cached)], capture_output=True, text=True, timeout=1800,
                                     env={**os.environ, "BENCH_MESSAGES": json.dumps(messages)})
                if out.returncode != 0:
                    raise RuntimeError(out.stderr[-3000:])
                ts = json.loads(out.stdout.strip().splitlines()[-1])
                node_version = ts.pop("node")
                rows += rows_for(f"TypeScript (node {node_version})", ts)
            else:
                print("(TypeScript skipped: node missing or sdk/typescript not built: cd sdk/typescript && npm ci)")
        finally:
            stop(service)
    rows += hook_rows(hook_rounds(args.rounds, args.hook_calls))
    size = len(json.dumps(messages))
    print_table(rows, f"{os.cpu_count()} CPUs; {args.rounds} rounds x {args.calls} network calls per figure, "
                      f"{args.cached} cached checks per round, {args.hook_calls} hook calls per figure; the "
                      f"fingerprinted request is {len(messages)} messages, {size:,} bytes of JSON")
    return 0


def print_table(rows: list[tuple[str, str, str, str]], header: str) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{header}; load average {load:.1f} at the end\n")
    print("| figure | value | unit | ratio vs baseline |")
    print("|---|---|---|---|")
    for figure, value, unit, ratio in rows:
        print(f"| {figure} | {value} | {unit} | {ratio} |")


if __name__ == "__main__":
    raise SystemExit(main())
