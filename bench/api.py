"""Benchmark: the enforcement API under load, the SDK's cached check, and how late a loop is stopped.

    .venv/bin/python bench/api.py [--requests 10000] [--concurrency 32] [--rounds 5] [--trials 3]

1. Throughput and latency of ``POST /v1/check`` (plain, and with a pending request fingerprint) under
   concurrent keep-alive load on loopback, beside a bare FastAPI endpoint that returns a constant JSON,
   measured in the same run, interleaved round by round (target: check / bare >= 0.8). Each server runs in
   its own process (``loop-detector serve``, and uvicorn with the same settings for the bare app); the load
   generator (raw HTTP/1.1 over asyncio, one request in flight per connection) runs in this process.
2. The SDK's check of a scope on its cached block list (no network), in microseconds, beside a check that
   goes to the API.
3. Overshoot: a looping agent sends the same request at 1 and at 10 calls/s, each call exported as a real
   GenAI span (OpenTelemetry SDK, OTLP/HTTP, batch delay 100 ms); before each call it asks ``/v1/check``,
   with or without the pending request fingerprint. The rule: exact_prompt_repeat, block, enforce (3 in a
   row); detector interval 1 s. The loop is defined by the 3rd identical call (sent or refused); overshoot
   is the number of calls sent after it until the agent is refused (targets: 0 with pending, <= 1 at 1
   call/s without).

Everything is bounded: fixed request counts, loopback only, fixed trial counts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from detector.sdk import LoopBlockedError, LoopGuard, pending_request  # noqa: E402
from detector.service.process import free_port  # noqa: E402

ADMIN_TOKEN = "bench-admin-token-0123456789"
REPEATS = 3

BARE_APP = textwrap.dedent("""
    import sys
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/bare")
    async def bare():
        return {"action": "allow", "level": "none", "confidence": 0.0}

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
""")


# -- processes ---------------------------------------------------------------------------------------------
def wait_ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"not ready: {url}")


def start_service(workdir: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    config = {
        "detector": {"interval_seconds": 1.0},
        "api": {"admin_token": ADMIN_TOKEN},
        "rules": [{"name": "stop-repeat", "detector": "exact_prompt_repeat", "action": "block", "mode": "enforce"}],
    }
    path = workdir / "bench.yaml"
    path.write_text(yaml.safe_dump(config))
    api_port, otlp_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "detector", "serve", "--config", str(path), "--data-dir", str(workdir / "data"),
         "--api-port", str(api_port), "--otlp-port", str(otlp_port), "--otlp-grpc-port", "0", "--log-level", "WARNING"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api, otlp = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{otlp_port}"
    wait_ready(api + "/healthz")
    wait_ready(otlp + "/healthz")
    return proc, api, otlp


def start_bare() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", BARE_APP, str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/docs")
    return proc, url


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


# -- load generator ----------------------------------------------------------------------------------------
def build_requests(path: str, port: int, bodies: list[bytes]) -> list[bytes]:
    return [(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(b)}\r\n\r\n").encode() + b for b in bodies]


async def _worker(port: int, requests: list[bytes], start: int, count: int, latencies: list[float],
                  errors: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in range(start, start + count):
            t0 = time.perf_counter()
            writer.write(requests[i % len(requests)])
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            if head[9:12] not in (b"200", b"429"):
                errors.append(int(head[9:12]))
    finally:
        writer.close()


async def _load(port: int, requests: list[bytes], total: int, concurrency: int) -> tuple[float, list[float], int]:
    latencies: list[float] = []
    errors: list[int] = []
    per = total // concurrency
    t0 = time.perf_counter()
    await asyncio.gather(*(_worker(port, requests, w * per, per, latencies, errors) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return len(latencies) / elapsed, latencies, len(errors)


def load(url: str, path: str, bodies: list[bytes], total: int, concurrency: int) -> tuple[float, list[float], int]:
    port = int(url.rsplit(":", 1)[1])
    requests = build_requests(path, port, bodies)
    try:
        import uvloop

        return uvloop.run(_load(port, requests, total, concurrency))  # type: ignore[no-any-return]
    except ImportError:
        return asyncio.run(_load(port, requests, total, concurrency))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- overshoot -----------------------------------------------------------------------------------------------
def overshoot_trial(api: str, otlp: str, rate: float, with_pending: bool, max_calls: int = 40) -> tuple[int, int]:
    """One looping agent; returns (calls sent, the attempt at which it was refused)."""
    import uuid

    from detector.evaluation.simulate import SimulatedStep, emit_step, otlp_tracer, start_run

    session = f"loop-{uuid.uuid4().hex[:8]}"
    messages = [{"role": "user", "content": "Deploy the service again."}]
    step = SimulatedStep(user_text=messages[0]["content"], output_text="Deploying.", input_tokens=400,
                         output_tokens=20, duration_s=0.01)
    sent, refused_at = 0, 0
    interval = 1.0 / rate
    with otlp_tracer(otlp) as (tracer, _provider), LoopGuard(api, timeout=2.0, blocklist_interval=None) as guard:
        root, ctx = start_run(tracer, agent_name="bench", session_id=session, start_ns=time.time_ns())
        trace_id = format(root.get_span_context().trace_id, "032x")
        next_at = time.monotonic()
        for attempt in range(1, max_calls + 1):
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += interval
            pending = pending_request("gpt-4o-mini", messages) if with_pending else None
            try:
                guard.before_call(session_id=session, trace_id=trace_id, pending=pending)
            except LoopBlockedError:
                refused_at = attempt
                break
            emit_step(tracer, step, session_id=session, start_ns=time.time_ns(), history=[], parent=ctx)
            sent += 1
        root.end()
    return sent, refused_at


# -- main ------------------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000, help="requests per target per round")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=3, help="overshoot trials per rate and mode")
    parser.add_argument("--cached-checks", type=int, default=200_000)
    args = parser.parse_args()

    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        service, api, otlp = start_service(Path(tmp))
        bare, bare_url = start_bare()
        try:
            plain = [f'{{"session_id":"s{i}"}}'.encode() for i in range(1000)]
            pending = [f'{{"session_id":"p{i % 1000}","trace_id":"t{i % 1000}","pending":{{"request_fingerprint":"fp{i}"}}}}'
                       .encode() for i in range(5000)]
            targets = [("bare FastAPI, constant JSON (baseline)", bare_url, "/bare", plain),
                       ("POST /v1/check", api, "/v1/check", plain),
                       ("POST /v1/check with pending fingerprint", api, "/v1/check", pending)]
            results: dict[str, tuple[list[float], list[float], int]] = {t[0]: ([], [], 0) for t in targets}
            for _name, url, path, bodies in targets:  # warm-up
                load(url, path, bodies, 2000, args.concurrency)
            for _ in range(args.rounds):
                for name, url, path, bodies in targets:
                    rps, lat, errors = load(url, path, bodies, args.requests, args.concurrency)
                    rates, lats, errs = results[name]
                    rates.append(rps)
                    lats.extend(lat)
                    results[name] = (rates, lats, errs + errors)
            base_rates = results[targets[0][0]][0]
            for name, _, _, _ in targets:
                rates, lats, errs = results[name]
                rps = statistics.median(rates)
                # the ratio of each round to the baseline measured just before it (robust to drift on a
                # shared machine), median over rounds
                ratio = statistics.median(r / b for r, b in zip(rates, base_rates, strict=True))
                rows.append((f"{name}: throughput", f"{rps:,.0f}", "req/s", f"{ratio:.2f}"))
                rows.append((f"{name}: latency p50", f"{pct(lats, 0.5) * 1000:.2f}", "ms", ""))
                rows.append((f"{name}: latency p99", f"{pct(lats, 0.99) * 1000:.2f}", "ms", ""))
                if errs:
                    rows.append((f"{name}: non-2xx/429 answers", str(errs), "", ""))

            # SDK: cached block list vs a network check
            blocked = "blocked-session"
            httpx.post(f"{api}/admin/loop-detection/sessions/{blocked}/block",
                       headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).raise_for_status()
            with LoopGuard(api, blocklist_interval=None) as guard:
                assert guard.refresh_blocklist()
                assert guard.check(session_id=blocked).source == "cache"
                t0 = time.perf_counter()
                for _ in range(args.cached_checks):
                    guard.check(session_id=blocked)
                cached_us = (time.perf_counter() - t0) / args.cached_checks * 1e6
                net = []
                for i in range(2000):
                    t0 = time.perf_counter()
                    guard.check(session_id=f"net{i}")
                    net.append(time.perf_counter() - t0)
                net_us = statistics.median(net) * 1e6
            rows.append(("SDK check, scope on the cached block list (no network)", f"{cached_us:.2f}", "us",
                         f"{cached_us / net_us:.3f}"))
            rows.append(("SDK check over the network, sequential (baseline), p50", f"{net_us:.0f}", "us", "1.000"))

            # overshoot
            for rate in (1.0, 10.0):
                for with_pending in (True, False):
                    trials = [overshoot_trial(api, otlp, rate, with_pending) for _ in range(args.trials)]
                    over = [max(0, sent - REPEATS) for sent, _ in trials]
                    label = f"overshoot at {rate:g} call/s, {'with' if with_pending else 'without'} pending"
                    detail = ", ".join(f"{sent} sent/refused at #{at}" for sent, at in trials)
                    rows.append((label, f"{max(over)}", "calls (max)",
                                 f"median {statistics.median(over):g}; trials: {detail}"))
        finally:
            stop(bare)
            stop(service)

    print(f"\n{os.cpu_count()} CPUs; {args.requests} requests x {args.rounds} rounds per target, "
          f"concurrency {args.concurrency}\n")
    print("| figure | value | unit | ratio vs baseline / notes |")
    print("|---|---|---|---|")
    for figure, value, unit, ratio in rows:
        print(f"| {figure} | {value} | {unit} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
