"""Overload: ten times the rate the service sustains, over OTLP/HTTP and over OTLP/gRPC, for ``--overload-seconds``
(60) each, against a real ``serve`` (default configuration).

    .venv/bin/python bench/reliability.py --probes overload

1. Idle: ``/v1/check`` latency and the process's memory (RSS) with nothing sent (the baselines).
2. Sustainable rate: 4 senders post unique 1,000-span requests back to back over OTLP/HTTP for 20 s, each waiting
   for its answer (and retrying a refusal after its ``Retry-After``); what is acknowledged per second is the rate
   the service sustains within its admission bounds.
3. Ten times that rate, offered on a schedule of unique 1,000-span requests (128 sender threads), over OTLP/HTTP,
   then over OTLP/gRPC: each request exported as the OpenTelemetry exporters do (a refusal retried after the delay
   it names, the same bytes, until the 10 s export deadline, then dropped; a request due while every thread is
   busy is dropped unsent, as a batch span processor's queue drops spans).

Meanwhile a separate process polls ``/v1/check`` every 50 ms (its latency), ``/healthz`` every 20 ms (the
detector's watermark) and the service's RSS every 0.5 s. A request's decision lag: from the send of the attempt
that was accepted (or from when it was due, the sender's view) to the first watermark past its acknowledgement (as
``bench/lag.py``). Once ``serve`` has stopped, its store is audited: acknowledged requests stored exactly once,
refused ones not at all, calls scored.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from support.overload_load import Bodies, Load, Sent, audit, grpc_target
from support.serve_process import ServeProcess

from probes.common import header, row

__all__ = ["run"]

SPANS = 1000  # spans per request (the overload: unique 1,000-span requests)
SESSIONS = 2000
SUSTAIN_SENDERS = 4
SUSTAIN_SECONDS = 20.0
FACTOR = 10  # offered = FACTOR x the sustainable rate
WORKERS = 128  # sender threads of the overload phases (each exports one request at a time, retries included)


def _monitor(api: str, pid: int, stop: Any, out: Connection) -> None:
    """In its own process: (time, check latency) every 50 ms, (time, watermark) every 20 ms, (time, RSS MB)."""
    checks: list[tuple[float, float]] = []
    marks: list[tuple[float, float]] = []
    rss: list[tuple[float, float]] = []
    next_check = next_rss = 0.0
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            now = time.time()
            try:
                if now >= next_check:
                    started = time.perf_counter()
                    client.post(api + "/v1/check", content=b'{"session_id":"ovl-7"}',
                                headers={"Content-Type": "application/json"})
                    checks.append((now, time.perf_counter() - started))
                    next_check = now + 0.05
                marks.append((time.time(), client.get(api + "/healthz").json()["watermark_us"] / 1e6))
            except httpx.HTTPError:
                pass
            if now >= next_rss:
                rss.append((now, _rss_mb(pid)))
                next_rss = now + 0.5
            time.sleep(0.02)
    out.send((checks, marks, rss))


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _metric(api: str, name: str) -> dict[str, float]:
    text = httpx.get(api + "/metrics", timeout=30).text
    return {m.group(1) or "": float(m.group(2)) for m in re.finditer(
        rf'^{name}(?:{{reason="([^"]*)"}})? (\S+)$', text, re.M)}


def _wait_drained(api: str, timeout: float = 120) -> None:
    """Until the detector's watermark is past now (what was acknowledged is scored)."""
    target, deadline = time.time(), time.monotonic() + timeout
    while httpx.get(api + "/healthz", timeout=10).json()["watermark_us"] / 1e6 < target:
        if time.monotonic() > deadline:
            raise SystemExit("the detector's watermark did not move")
        time.sleep(0.1)


class _Phase:
    def __init__(self, name: str, sent: list[Sent], start: float, end: float) -> None:
        self.name, self.sent, self.start, self.end = name, sent, start, end


def _lags(phase: _Phase, marks: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """(service lags from the accepted attempt, sender lags from when due) of the phase's acknowledged requests."""
    import bisect

    watermarks = [w for _, w in marks]
    service, sender = [], []
    for item in phase.sent:
        if not item.acked_at:
            continue
        i = bisect.bisect_left(watermarks, item.acked_at)
        if i >= len(marks):
            continue
        service.append(marks[i][0] - item.accepted_at)
        sender.append(marks[i][0] - item.due)
    return service, sender


def run(args: argparse.Namespace) -> list[str]:
    seconds = float(getattr(args, "overload_seconds", 60) or 60)
    lines = header(f"overload: {FACTOR} x the sustainable rate over OTLP/HTTP, then OTLP/gRPC, {seconds:g} s each")
    bodies = Bodies(SPANS, SESSIONS)
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="rel-overload-") as tmp:
        data = Path(tmp) / "data"
        proc = ServeProcess(data).start()
        stop = ctx.Event()
        receive, send = ctx.Pipe(duplex=False)
        monitor = ctx.Process(target=_monitor, args=(proc.api, proc.pid, stop, send), daemon=True)
        monitor.start()
        phases: list[_Phase] = []
        try:
            limit = _metric(proc.api, "loop_ingest_inflight_limit_bytes")[""]
            time.sleep(5)
            idle_end = time.time()
            t0 = time.time()
            load = Load(bodies, "http", proc.otlp)
            sent = load.closed(SUSTAIN_SENDERS, SUSTAIN_SECONDS)
            phases.append(_Phase("sustainable (4 senders back to back, OTLP/HTTP)", sent, t0, time.time()))
            acked = sum(s.spans for s in sent if s.acked_at)
            rate = acked / SUSTAIN_SECONDS
            _wait_drained(proc.api)
            time.sleep(2)
            offered = FACTOR * rate / SPANS  # requests per second
            for transport, target in (("http", proc.otlp), ("grpc", grpc_target(proc.lines))):
                t0 = time.time()
                load = Load(bodies, transport, target)  # type: ignore[arg-type]
                sent = load.open(offered, seconds, WORKERS)
                phases.append(_Phase(f"{FACTOR} x over OTLP/{transport.upper() if transport == 'http' else 'gRPC'}",
                                     sent, t0, time.time()))
                phases[-1].answers = load.answers  # type: ignore[attr-defined]
                _wait_drained(proc.api)
                time.sleep(2)
            refused = _metric(proc.api, "loop_ingest_refused_total")
            peak = _metric(proc.api, "loop_ingest_inflight_peak_bytes")[""]
        finally:
            stop.set()
            checks, marks, rss = receive.recv() if receive.poll(60) else ([], [], [])
            monitor.join(30)
            proc.terminate()
            proc.wait(180)
        from detector.storage.transport import ChdbStore

        store = ChdbStore(data)
        try:
            audited = audit(store, [s for p in phases for s in p.sent])
        finally:
            store.close()

    idle_checks = [lat for t, lat in checks if t < idle_end]
    idle_rss = max((m for t, m in rss if t < idle_end), default=0.0)
    base_p99 = _p(idle_checks, 0.99)
    lines += [row("idle: /v1/check p99 (baseline)", base_p99 * 1000, "ms", "1.00"),
              row("idle: RSS (baseline)", idle_rss, "MB", "1.00"),
              row("ingest.max_inflight_bytes (the bound)", limit / 2**20, "MiB", ""),
              row("sustainable rate: spans acknowledged per second", rate, "spans/s", "1.00")]
    for phase in phases:
        during = [lat for t, lat in checks if phase.start <= t <= phase.end]
        mem = [m for t, m in rss if phase.start <= t <= phase.end]
        service, sender = _lags(phase, marks)
        duration = phase.end - phase.start
        got = [s for s in phase.sent if s.acked_at]
        acked_rate = sum(s.spans for s in got) / duration
        answers = getattr(phase, "answers", None)
        name = phase.name
        if answers is not None:
            offered_rate = sum(s.spans for s in phase.sent) / seconds  # due within the offering window
            lines.append(row(f"{name}: offered (unique 1,000-span requests due over {seconds:g} s)", offered_rate,
                             "spans/s",
                             f"{offered_rate / rate:.1f} x sustainable"))
            unsent = sum(1 for s in phase.sent if s.unsent)
            lines.append(row(f"{name}: of which never sent (all {WORKERS} sender threads busy retrying)", unsent,
                             "requests", f"of {len(phase.sent):,}"))
            shown = ", ".join(f"{k}: {v:,}" for k, v in sorted(answers.items(), key=lambda kv: -kv[1]))
            lines.append(row(f"{name}: answers (every attempt)", shown))
            lines.append(row(f"{name}: requests dropped by the sender (still refused at its 10 s deadline)",
                             sum(1 for s in phase.sent if s.gave_up), "requests",
                             f"of {len(phase.sent):,}"))
            lines.append(row(f"{name}: answers neither 200 nor a retryable refusal (timeouts, other 5xx)",
                             sum(len(s.invalid) for s in phase.sent), "", ""))
        lines += [row(f"{name}: acknowledged (over the phase, {duration:.0f} s with the last retries)", acked_rate,
                      "spans/s", f"{acked_rate / rate:.2f}"),
                  row(f"{name}: decision lag p99, accepted attempt -> decision", _p(service, 0.99), "s",
                      f"{_p(service, 0.99) / 2:.2f} x the 2 s target"),
                  row(f"{name}: decision lag p99, due -> decision (retries included)", _p(sender, 0.99), "s", ""),
                  row(f"{name}: /v1/check p99 during", _p(during, 0.99) * 1000, "ms",
                      f"{_p(during, 0.99) / base_p99:.2f}"),
                  row(f"{name}: RSS max", max(mem, default=0.0), "MB",
                      f"{max(mem, default=0.0) / idle_rss:.2f}" if idle_rss else "")]
    lines += [row("refused for overload, by reason (both transports)",
                  ", ".join(f"{k}: {int(v):,}" for k, v in refused.items())),
              row("admitted bytes in flight: peak vs the bound", peak / 2**20, "MiB", f"{peak / limit:.2f} x bound"),
              row("RSS max over the run - idle RSS", max((m for _, m in rss), default=0.0) - idle_rss, "MB",
                  f"{(max((m for _, m in rss), default=0.0) - idle_rss) * 2**20 / limit:.2f} x bound"),
              row("audit: acknowledged requests stored exactly once / otherwise",
                  f"{audited.get('acked_exact', 0):,} / {audited.get('acked_wrong', 0):,}"),
              row("audit: refused (never acknowledged) requests of which something was stored",
                  audited.get("unacked_stored", 0)),
              row("audit: LLM calls acknowledged / scored (session scope)",
                  f"{audited.get('llm_calls', 0):,} / {audited.get('scored', 0):,}")]
    return lines
