"""Overload (issue 32): more load than the service stores, over OTLP/HTTP and OTLP/gRPC at once, against a real
``serve`` with a small ``ingest.max_inflight_bytes``. Every answer is a success or a retryable refusal (HTTP 503 with
``Retry-After``, gRPC ``RESOURCE_EXHAUSTED`` with ``RetryInfo``), none hangs, some are refused, the admitted bytes in
flight never pass the bound, memory stays bounded, and every acknowledged span is stored (and scored) exactly once
while nothing refused is stored at all. The probe with the figures: ``bench/reliability.py --probes overload``."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import httpx
from support.overload_load import Bodies, Load, audit, grpc_target
from support.serve_process import ServeProcess

from detector.storage.transport import ChdbStore

BOUND = 2 * 1024 * 1024  # ingest.max_inflight_bytes: a few dozen 100-span requests (each ~60 KB + its rows)
SENDERS = 12  # per transport, each sending unique requests back to back
SECONDS = 8.0
RSS_GROWTH_MB = 600  # far above what the bound admits, far below what 24 unbounded senders grew it by (issue 32)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def metric(api: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", httpx.get(api + "/metrics", timeout=10).text, re.M)
    return float(found.group(1)) if found else 0.0


def test_overload_is_refused_retryably_memory_stays_bounded_and_what_is_acknowledged_is_stored_once(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"ingest:\n  max_inflight_bytes: {BOUND}\n")
    bodies = Bodies(spans=100, sessions=200)
    with ServeProcess(tmp_path / "data", config) as proc:
        loads = [Load(bodies, "http", proc.otlp, deadline_seconds=5),
                 Load(bodies, "grpc", grpc_target(proc.lines), deadline_seconds=5)]
        start_rss, peak_rss, done = rss_mb(proc.pid), [0.0], threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                peak_rss[0] = max(peak_rss[0], rss_mb(proc.pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        senders = [threading.Thread(target=load.closed, args=(SENDERS, SECONDS)) for load in loads]
        for t in senders:
            t.start()
        for t in senders:
            t.join(60)
        done.set()
        sampler.join()
        assert not any(t.is_alive() for t in senders), "a sender hung"
        peak_inflight = metric(proc.api, "loop_ingest_inflight_peak_bytes")
        refused_metric = sum(float(v) for v in re.findall(r'^loop_ingest_refused_total\{reason="\w+"\} (\S+)$',
                                                         httpx.get(proc.api + "/metrics", timeout=10).text, re.M))
        proc.terminate()  # graceful: a final cycle scores what was acknowledged
        assert proc.wait(120) == 0
    http, grpc_ = (load.answers for load in loads)
    assert set(http) <= {"200", "503"} and set(grpc_) <= {"200", "RESOURCE_EXHAUSTED"}, (http, grpc_)
    sent = [s for load in loads for s in load.sent]
    assert not [s.invalid for s in sent if s.invalid]  # every 503 had Retry-After, every refusal RetryInfo
    assert http["200"] and grpc_["200"]
    assert http["503"] + grpc_["RESOURCE_EXHAUSTED"] > 0 and refused_metric > 0  # load was shed
    assert 0 < peak_inflight <= BOUND
    assert peak_rss[0] - start_rss < RSS_GROWTH_MB, (start_rss, peak_rss[0])
    store = ChdbStore(tmp_path / "data")
    try:
        audited = audit(store, sent)
    finally:
        store.close()
    acked = sum(1 for s in sent if s.acked_at)
    assert audited.get("acked_exact", 0) == acked and not audited.get("acked_wrong")
    assert not audited.get("unacked_stored")  # a refusal stores nothing
    assert audited["scored"] == audited["llm_calls"]  # and each acknowledged call is scored once
