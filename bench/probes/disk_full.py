"""``diskfull``: the data directory's disk fills under load over OTLP/HTTP and OTLP/gRPC, stays full, then space
comes back (issue 32, item 1).

Each run: a real ``serve`` with its data directory on a 64 MiB tmpfs (``ingest.min_free_bytes`` 8 MiB, scaled to
it), 4 OTLP/HTTP and 4 OTLP/gRPC senders posting 100-span requests (each resent with the same bytes until
acknowledged, as exporters do); once some are acknowledged, a file beside the data directory grows until ENOSPC and
stays for 8 s; then it is removed. Reported: what was offered, acknowledged, stored, scored (the store's audit, after
a graceful stop), what the senders were told (per status), the longest answer while full against the answers
before the disk filled (the baseline), ``/v1/check`` and ``/healthz`` while full, how long ingestion took to resume,
and the service's resident memory before, while full and after. Root only (it mounts a tmpfs).

    .venv/bin/python bench/reliability.py --probes diskfull [--runs 6]    # runs // 2 runs (3)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from support.disk_full import (
    Answer,
    Filler,
    MemorySampler,
    TimedGrpcSenders,
    TimedHttpSenders,
    mount_refusal,
    small_tmpfs,
)
from support.otlp_load import Audit, audit_store
from support.serve_process import ServeProcess

from detector.storage.transport import ChdbStore
from probes.common import config_file, header, row

TMPFS_SIZE = "64m"
MIN_FREE_BYTES = 8 * 1024 * 1024  # scaled to the small disk (the default is 256 MiB)
CONFIG = f"detector:\n  interval_seconds: 0.5\ningest:\n  min_free_bytes: {MIN_FREE_BYTES}\n"
FULL_SECONDS = 8.0
SENDERS = 4  # per transport
REQUESTS = 30  # per sender
SPANS = 100  # per request


@dataclass
class RunResult:
    audit: Audit
    answers: list[Answer]
    fill_started: float  # time.monotonic() marks
    full_at: float
    freed: float
    checks: list[tuple[int, float]]  # /v1/check while full: status, seconds
    healths: list[dict[str, Any]]  # /healthz while full
    health_after: dict[str, Any]
    exit_code: int
    resumed: float  # seconds from freeing to the first acknowledgement
    memory: list[tuple[float, float]]  # (time.monotonic(), MiB)

    def answers_in(self, lo: float, hi: float) -> list[Answer]:
        return [a for a in self.answers if lo <= a.asked < hi]

    def memory_in(self, lo: float, hi: float) -> list[float]:
        return [m for t, m in self.memory if lo <= t < hi]


def _one_run(tmp: Path) -> RunResult:
    config = config_file(tmp, CONFIG)
    with small_tmpfs(tmp / "small", TMPFS_SIZE) as mount, ServeProcess(mount / "data", config) as proc, \
            MemorySampler(proc.pid) as memory:
        grpc_target = httpx.get(proc.api + "/healthz", timeout=10).json()["otlp_grpc"]
        http = TimedHttpSenders(lambda: proc.otlp, threads=SENDERS, requests=REQUESTS, spans=SPANS).start()
        grpc = TimedGrpcSenders(lambda: grpc_target, threads=SENDERS, requests=REQUESTS, spans=SPANS).start()
        senders = (http, grpc)
        try:
            while sum(len(s.acknowledged) for s in senders) < 4 * SENDERS:
                time.sleep(0.05)
            fill_started = time.monotonic()
            filler = Filler(mount / "filler").fill()
            checks, healths = [], []
            while time.monotonic() < filler.full_at + FULL_SECONDS:
                t = time.monotonic()
                check = httpx.post(proc.api + "/v1/check", json={"session_id": "disk-full"}, timeout=15)
                checks.append((check.status_code, time.monotonic() - t))
                healths.append(httpx.get(proc.api + "/healthz", timeout=15).json())
                time.sleep(0.25)
            filler.free()
            freed = time.monotonic()
            while any(len(s.acknowledged) < len(s.all) for s in senders):
                if time.monotonic() > freed + 300:
                    raise SystemExit("ingestion did not resume after space came back")
                time.sleep(0.05)
            health_after = httpx.get(proc.api + "/healthz", timeout=15).json()
            last_ack = max(r.acked_at for s in senders for r in s.all)
            while httpx.get(proc.api + "/healthz", timeout=15).json()["watermark_us"] < last_ack * 1e6:
                time.sleep(0.05)
        finally:
            for s in senders:
                s.stop()
        proc.terminate()
        exit_code = proc.wait(120)
        store = ChdbStore(mount / "data")
        try:
            audit = audit_store(store, [r for s in senders for r in s.all])
        finally:
            store.close()
    answers = [a for s in senders for a in s.log.answers]
    acked_after = [a for a in answers if a.asked >= freed and a.status in ("200", "OK")]
    return RunResult(audit, answers, fill_started, filler.full_at, freed, checks, healths, health_after, exit_code,
                     (min(a.asked + a.seconds for a in acked_after) - freed) if acked_after else float("nan"),
                     memory.samples)


def _told(answers: list[Answer]) -> str:
    counts = Counter(f"{a.transport} {a.status}" for a in answers)
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) or "none"


def _reasons(refused: list[Answer]) -> str:
    counts = Counter(a.message.split(":")[0][:60] if "min_free_bytes" not in a.message else "below min_free_bytes"
                     for a in refused)
    return "; ".join(f"{k} {v:,}" for k, v in counts.most_common()) or "none"


def run(args: argparse.Namespace) -> list[str]:
    runs = max(1, args.runs // 2)
    title = f"disk full under load: {runs} runs, {SENDERS} HTTP + {SENDERS} gRPC senders, {SPANS}-span requests"
    refusal = mount_refusal()
    if refusal:
        return [*header(title), row("skipped", refusal)]
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="rel-diskfull-") as tmp:
            results.append(_one_run(Path(tmp)))
    inf = float("inf")
    audits = [r.audit for r in results]
    before = [a for r in results for a in r.answers_in(-inf, r.fill_started)]
    filling = [a for r in results for a in r.answers_in(r.fill_started, r.full_at)]
    full = [a for r in results for a in r.answers_in(r.full_at, r.freed)]
    after = [a for r in results for a in r.answers_in(r.freed, inf)]
    refused = [a for a in full if a.status not in ("200", "OK")]
    base = max(a.seconds for a in before)
    base_median = statistics.median(a.seconds for a in before)
    longest_full = max(a.seconds for a in full)
    checks = [c for r in results for c in r.checks]
    healths = [h for r in results for h in r.healths]
    degraded = sum(1 for h in healths if h["status"] == "degraded")
    mem_before = [m for r in results for m in r.memory_in(-inf, r.full_at)]
    mem_full = [m for r in results for m in r.memory_in(r.full_at, r.freed)]
    mem_after = [m for r in results for m in r.memory_in(r.freed, inf)]
    exact = sum(1 for a in audits if a.exact and a.scored_once)
    return [
        *header(title),
        row("runs with acknowledged = stored = scored, exactly once", f"{exact} of {runs}"),
        row("offered (every request eventually acknowledged)",
            f"{sum(a.requests for a in audits):,} requests, {sum(a.spans_sent for a in audits):,} spans"),
        row("stored in otel_traces (distinct / rows)",
            f"{sum(a.stored_spans for a in audits):,} / {sum(a.stored_rows for a in audits):,}", "spans"),
        row("scored (distinct scope x call / LLM calls x 2)",
            f"{sum(a.scored_distinct for a in audits):,} / {2 * sum(a.llm_calls for a in audits):,}", "scores"),
        row("told before the disk filled", _told(before)),
        row("told while the disk filled (the file growing)", _told(filling)),
        row("told while full", _told(full)),
        row("told after space came back", _told(after)),
        row("refusals while full that said when to retry (Retry-After / RetryInfo)",
            f"{sum(1 for a in refused if a.retry_hint):,} of {len(refused):,}"),
        row("refusals after space came back, by reason", _reasons([a for a in after if a.status not in ("200", "OK")])),
        row("refusals while full naming ingest.min_free_bytes",
            f"{sum(1 for a in refused if 'min_free_bytes' in a.message):,} of {len(refused):,}"),
        row("client timeouts (15 s) or transport errors", sum(1 for a in full + filling + before + after
                                                              if a.status not in ("200", "OK", "503", "UNAVAILABLE",
                                                                                  "RESOURCE_EXHAUSTED")), "answers"),
        row("answer time before the disk filled (baseline), longest", base, "s", "1.00"),
        row("answer time before the disk filled, median", base_median, "s", f"{base_median / base:.2f}"),
        row("answer time while the disk filled, longest", max(a.seconds for a in filling), "s",
            f"{max(a.seconds for a in filling) / base:.2f}"),
        row("answer time while full, longest", longest_full, "s", f"{longest_full / base:.2f}"),
        row("answer time while full, median", statistics.median(a.seconds for a in full), "s",
            f"{statistics.median(a.seconds for a in full) / base:.2f}"),
        row("/v1/check while full: answered 200 / asked, longest",
            f"{sum(1 for c, _ in checks if c == 200)} / {len(checks)}, {max(s for _, s in checks):.3f} s"),
        row("/healthz while full: degraded / asked", f"{degraded} / {len(healths)}"),
        row("/healthz after space came back", ", ".join(sorted({str(r.health_after["status"]) for r in results}))),
        row("ingestion resumed after space came back (first acknowledgement), median",
            statistics.median(r.resumed for r in results), "s"),
        row("exit codes of the graceful stops", ", ".join(str(r.exit_code) for r in results)),
        row("resident memory before the disk filled, median", statistics.median(mem_before), "MiB", "1.00"),
        row("resident memory while full, max", max(mem_full), "MiB", f"{max(mem_full) / statistics.median(mem_before):.2f}"),
        row("resident memory after space came back, max", max(mem_after), "MiB",
            f"{max(mem_after) / statistics.median(mem_before):.2f}"),
    ]
