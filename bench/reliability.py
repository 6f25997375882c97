"""The reliability probes of issue 16, re-run: crashes, hostile input, exposure and load. Prints one table per probe
(figure | value | unit | ratio vs a baseline measured in the same run).

    .venv/bin/python bench/reliability.py [--probes kill9,sigterm,poison,cardinality,slow,fuzz] [--runs 6]
                                          [--update-docs]

- ``kill9``: ``--runs`` times, a real ``serve`` under 8 concurrent senders (500-span requests with content) is
  killed with SIGKILL at a random moment; the store is opened to count what the kill left half stored; ``serve``
  restarts on the same data directory (its start repairs the journal), every sender resends what was not
  acknowledged (the same bytes, as exporters do), and the audit checks acknowledged = stored (once in otel_traces,
  once staged in genai_spans, once normalized in genai_calls)
  = scored (once). Baseline: the first start's time to ready.
- ``sigterm``: ``--runs`` // 2 times, SIGTERM under the same load: exit code, time to exit, the final checkpoint
  against the watermark, acknowledged = stored = scored. Baseline: the graceful-shutdown bound.
- ``poison``: 20 rounds of 1 poisoned request beside 6 valid ones, sent at once; the poison is a span ending past
  DateTime64(9) (refused by the decoder), then a span refused by a materialized view an operator added
  (``throwIf``, refused by the store: the commit path's isolation). Baseline: the same rounds without poison (latency of the valid requests).
- ``cardinality``: 50,000 distinct virtual keys in real spans through ``serve``: the scrape's size and time, the
  process's memory. Baseline: the same after one key.
- ``slow``: 600 connections that send nothing, half a header or a body a byte at a time, against ``serve`` with
  the default deadlines; how many are still open after each deadline, and the latency of normal requests meanwhile.
  Baseline: that latency without them.
- ``fuzz``: the CI fuzz tests (OTLP decoder, mutated protobuf, hostile OTLP/JSON, the receiver end to end,
  ``/v1/check`` arguments, schemathesis over the OpenAPI schema) with 20 times their examples.

The machine is shared: the load average before each probe is printed with it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import httpx  # noqa: E402
from doc_sections import write_section  # noqa: E402
from probes.common import FAST, config_file, header, row  # noqa: E402
from support.otlp_load import HALF_STORED, Senders, audit_store  # noqa: E402
from support.otlp_senders import chat_spans, encode, new_conversation, post_body  # noqa: E402
from support.serve_process import ServeProcess  # noqa: E402

from detector.ingest.journal import read_journal  # noqa: E402
from detector.storage.transport import ChdbStore  # noqa: E402

SECTION = "## Reliability probes (bench/reliability.py)"
SPANS_IN = "SELECT count() AS n FROM otel.otel_traces WHERE (TraceId, SpanId) IN {k:Array(Tuple(String, String))}"
STAGED_IN = "SELECT count() AS n FROM otel.genai_spans WHERE (trace_id, span_id) IN {k:Array(Tuple(String, String))}"


def wait_past(api: str, when: float, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(api + "/healthz", timeout=10).json()["watermark_us"] < when * 1e6:
        if time.monotonic() > deadline:
            raise SystemExit("the detector's watermark did not move")
        time.sleep(0.05)


def timed_start(data: Path, config: Path) -> tuple[ServeProcess, float]:
    t = time.perf_counter()
    proc = ServeProcess(data, config).start()
    return proc, time.perf_counter() - t


# -- kill -9 -------------------------------------------------------------------------------------------------------

def probe_kill9(runs: int) -> list[str]:
    rng = random.Random(16)
    totals = {"sent": 0, "acked_before": 0, "half": 0, "journals": 0, "lost": 0, "dupes": 0, "half_after": 0,
              "scored_twice": 0, "unscored": 0, "journaled_spans": 0, "journaled_in_traces": 0, "journaled_staged": 0}
    first, restarts = [], []
    exact_runs = 0
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="rel-kill9-") as tmp:
            tmp_path = Path(tmp)
            data, config = tmp_path / "data", config_file(tmp_path)
            proc, started = timed_start(data, config)
            first.append(started)
            current = {"url": proc.otlp}
            senders = Senders(lambda c=current: c["url"], threads=8, requests=15, spans=500).start()
            try:
                senders.wait_acknowledged(rng.randrange(8, 40), timeout=600)
                time.sleep(rng.uniform(0, 0.5))
                proc.kill9()
                proc.wait(60)
                senders.stop()
                acked_before = sum(r.spans for r in senders.acknowledged)
                store = ChdbStore(data)
                half = int(store.rows(HALF_STORED)[0]["n"])
                journaled = [read_journal(path) for path in (data / "ingest-journal").glob("*.arrow")]
                journals = len(journaled)
                for batch in journaled:  # what the kill left of the interrupted inserts' spans
                    for request in batch:
                        keys = list(zip(request.rows.column("TraceId").to_pylist(),
                                        request.rows.column("SpanId").to_pylist(), strict=True))
                        in_traces = int(store.rows(SPANS_IN, {"k": keys})[0]["n"])
                        in_staged = int(store.rows(STAGED_IN, {"k": keys})[0]["n"])
                        totals["journaled_spans"] += len(keys)
                        totals["journaled_in_traces"] += in_traces
                        totals["journaled_staged"] += in_staged
                store.close()
                proc, started = timed_start(data, config)
                restarts.append(started)
                current["url"] = proc.otlp
                senders.resend_unacknowledged()
                wait_past(proc.api, max(r.acked_at for r in senders.all) + 0.01)
                proc.terminate()
                proc.wait(120)
            finally:
                senders.stop()
                if proc.proc is not None and proc.proc.poll() is None:
                    proc.kill9()
            store = ChdbStore(data)
            audit = audit_store(store, senders.all)
            store.close()
            exact_runs += audit.exact and audit.scored_once
            totals["sent"] += audit.spans_sent
            totals["acked_before"] += acked_before
            totals["half"] += half
            totals["journals"] += journals
            totals["lost"] += audit.spans_sent - audit.stored_spans
            totals["dupes"] += ((audit.stored_rows - audit.stored_spans) + (audit.staged_rows - audit.staged)
                                + (audit.call_rows - audit.calls))
            totals["half_after"] += audit.orphans
            totals["scored_twice"] += (audit.scored_session + audit.scored_trace) - audit.scored_distinct
            totals["unscored"] += 2 * audit.llm_calls - audit.scored_distinct
    base = statistics.median(first)
    return [*header(f"kill -9 under load: {runs} runs, 8 senders, 500-span requests"),
            row("runs with acknowledged = stored = scored, exactly once", f"{exact_runs} of {runs}"),
            row("spans sent (every request eventually acknowledged)", totals["sent"], "spans"),
            row("spans acknowledged before the kill", totals["acked_before"], "spans"),
            row("half-stored spans the kills left (otel_traces without genai_spans)", totals["half"], "spans"),
            row("journaled batches found at restart (repaired)", totals["journals"], "batches"),
            row("their spans, and how many were in otel_traces / genai_spans when the process died",
                f"{totals['journaled_spans']:,}: {totals['journaled_in_traces']:,} / {totals['journaled_staged']:,}",
                "spans"),
            row("after restart and retries: spans lost", totals["lost"], "spans"),
            row("after restart and retries: duplicate rows (otel_traces, genai_spans, genai_calls)", totals["dupes"],
                "rows"),
            row("after restart and retries: half-stored spans", totals["half_after"], "spans"),
            row("calls scored twice / not scored", f"{totals['scored_twice']} / {totals['unscored']}", "scores"),
            row("first start to ready (baseline), median", base, "s", "1.00"),
            row("restart to ready (journal repair included), median", statistics.median(restarts), "s",
                f"{statistics.median(restarts) / base:.2f}")]


# -- SIGTERM -------------------------------------------------------------------------------------------------------

def probe_sigterm(runs: int) -> list[str]:
    codes, exits, lags, exact = [], [], [], 0
    bound = 10.0  # http.graceful_shutdown_seconds, the default
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="rel-term-") as tmp:
            tmp_path = Path(tmp)
            data = tmp_path / "data"
            proc = ServeProcess(data, config_file(tmp_path, FAST + "  checkpoint_seconds: 600\n")).start()
            senders = Senders(lambda p=proc: p.otlp, threads=8, requests=10, spans=500).start()
            try:
                senders.wait_acknowledged(12, timeout=600)
                t = time.perf_counter()
                proc.terminate()
                codes.append(proc.wait(300))
                exits.append(time.perf_counter() - t)
            finally:
                senders.stop()
            store = ChdbStore(data)
            meta = {r["key"]: int(r["value"]) for r in store.rows(
                "SELECT key, value FROM otel.loop_meta FINAL WHERE key IN ('watermark:0/1', 'checkpoint:0/1')")}
            audit = audit_store(store, senders.acknowledged)
            store.close()
            lags.append((meta.get("watermark:0/1", 0) - meta.get("checkpoint:0/1", 0)) / 1e6)
            exact += audit.exact and audit.scored_once
    return [*header(f"SIGTERM under load: {runs} runs, 8 senders"),
            row("exit codes", ", ".join(str(c) for c in codes)),
            row("runs with acknowledged = stored = scored, exactly once", f"{exact} of {runs}"),
            row("final checkpoint behind the watermark, max", max(lags), "s"),
            row("graceful-shutdown bound (baseline)", bound, "s", "1.00"),
            row("SIGTERM to exit, median", statistics.median(exits), "s", f"{statistics.median(exits) / bound:.2f}"),
            row("SIGTERM to exit, max", max(exits), "s", f"{max(exits) / bound:.2f}")]


# -- poison --------------------------------------------------------------------------------------------------------

def probe_poison(rounds: int = 20) -> list[str]:
    import concurrent.futures

    from support.servers import serve_app

    from detector.ingest.counters import IngestMetrics
    from detector.ingest.receiver import create_otlp_app
    from detector.settings.service_settings import IngestSettings
    from detector.storage.schema import apply_schema

    def run(url: str, poison_of) -> tuple[list[float], int, int, int]:
        latencies, ok, unavailable, poison_ok = [], 0, 0, 0

        def send(body: bytes) -> tuple[int, float]:
            with httpx.Client(base_url=url, timeout=120) as client:
                t = time.perf_counter()
                return post_body(client, body).status_code, time.perf_counter() - t

        for _ in range(rounds):
            bodies = [encode(chat_spans(50, new_conversation())) for _ in range(6)]
            poison = poison_of()
            with concurrent.futures.ThreadPoolExecutor(7) as pool:
                answers = list(pool.map(send, ([poison] if poison else []) + bodies))
            if poison:
                poison_ok += answers[0][0] == 200
                answers = answers[1:]
            for status, latency in answers:
                ok += status == 200
                unavailable += status == 503
                latencies.append(latency)
        return latencies, ok, unavailable, poison_ok

    lines = header(f"one poisoned sender beside 6 valid ones: {rounds} rounds")
    with tempfile.TemporaryDirectory(prefix="rel-poison-") as tmp:
        store = ChdbStore(tmp)
        apply_schema(store)
        store.command("CREATE TABLE otel.poison_sink (x UInt8) ENGINE = Null")
        store.command("CREATE MATERIALIZED VIEW otel.poison_mv TO otel.poison_sink AS SELECT "
                      "throwIf(SpanAttributes['test.poison'] = '1', 'poisoned span') AS x FROM otel.otel_traces")
        metrics = IngestMetrics()
        with serve_app(create_otlp_app(store, IngestSettings(), metrics)) as url:
            base, base_ok, _, _ = run(url, lambda: None)
            end, end_ok, end_503, end_poison = run(url, lambda: encode(chat_spans(5, new_conversation(),
                                                                                    end_times={2: 2**63 + 5})))
            mv, mv_ok, mv_503, mv_poison = run(url, lambda: encode(chat_spans(5, new_conversation(),
                                                                               attributes={2: {"test.poison": "1"}})))
        store.close()
    total = 6 * rounds
    p50 = statistics.median(base)
    lines += [row("valid requests answered 200, no poison (baseline)", f"{base_ok} of {total}"),
              row("valid requests answered 200, poison ending past DateTime64(9)", f"{end_ok} of {total}"),
              row("valid requests answered 503, poison ending past DateTime64(9)", end_503, "requests"),
              row("poisoned requests answered 200 (the poisoned span rejected, the rest stored)",
                  f"{end_poison} of {rounds}"),
              row("valid requests answered 200, poison a view refuses (store-side)", f"{mv_ok} of {total}"),
              row("valid requests answered 503, poison a view refuses", mv_503, "requests"),
              row("poisoned requests answered 200 (the store's refusal isolated to its span)", f"{mv_poison} of {rounds}"),
              row("failed group inserts resolved request by request", metrics.failed_inserts, "inserts"),
              row("valid request latency p50, no poison (baseline)", p50 * 1000, "ms", "1.00"),
              row("valid request latency p50, decoder-refused poison", statistics.median(end) * 1000, "ms",
                  f"{statistics.median(end) / p50:.2f}"),
              row("valid request latency p50, store-refused poison", statistics.median(mv) * 1000, "ms",
                  f"{statistics.median(mv) / p50:.2f}")]
    return lines


# -- cardinality ---------------------------------------------------------------------------------------------------

def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scrape(api: str) -> tuple[int, float, int]:
    t = time.perf_counter()
    text = httpx.get(api + "/metrics", timeout=120).text
    return len(text), time.perf_counter() - t, len({m.group(1) for m in re.finditer(r'virtual_key="([^"]*)"', text)})


def probe_cardinality(keys: int = 50_000) -> list[str]:
    lines = header(f"{keys:,} distinct virtual keys in real spans")
    with tempfile.TemporaryDirectory(prefix="rel-keys-") as tmp:
        tmp_path = Path(tmp)
        proc = ServeProcess(tmp_path / "data", config_file(tmp_path)).start()
        try:
            with httpx.Client(base_url=proc.otlp, timeout=120) as client:
                assert post_body(client, encode(chat_spans(1, new_conversation()))).status_code == 200
                wait_past(proc.api, time.time())
                base_size, base_time, base_keys = scrape(proc.api)
                base_rss = rss_mb(proc.pid)
                per = 500
                for start in range(0, keys, per):
                    spans = chat_spans(per, new_conversation(),
                                       attributes={i: {"loop_detector.virtual_key": f"vk-{start + i}"} for i in range(per)})
                    assert post_body(client, encode(spans)).status_code == 200
            wait_past(proc.api, time.time())
            size, took, label_values = scrape(proc.api)
            rss = rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(120)
    return [*lines,
            row("/metrics after 1 key (baseline)", base_size / 1024, "KiB", "1.00"),
            row(f"/metrics after {keys:,} keys", size / 1024, "KiB", f"{size / base_size:.2f}"),
            row("virtual_key label values after 1 key / after all", f"{base_keys} / {label_values}"),
            row("scrape time after 1 key (baseline)", base_time * 1000, "ms", "1.00"),
            row(f"scrape time after {keys:,} keys", took * 1000, "ms", f"{took / base_time:.2f}"),
            row(f"process memory (RSS) growth over the {keys:,} keys", rss - base_rss, "MB",
                f"{rss / base_rss:.2f} x the RSS before")]


# -- slow clients --------------------------------------------------------------------------------------------------

def probe_slow(count: int = 600) -> list[str]:
    lines = header(f"{count} slow or silent connections, default deadlines (header 10 s, body 60 s)")

    def latencies(url: str, n: int = 40) -> list[float]:
        out = []
        with httpx.Client(timeout=30) as client:
            for _ in range(n):
                t = time.perf_counter()
                assert client.get(url + "/healthz").status_code == 200
                out.append(time.perf_counter() - t)
        return out

    def still_open(socks: list[socket.socket]) -> int:
        alive = 0
        for s in socks:
            try:
                s.setblocking(False)
                data = s.recv(1, socket.MSG_PEEK)
                alive += data != b""
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
        return alive

    with tempfile.TemporaryDirectory(prefix="rel-slow-") as tmp:
        tmp_path = Path(tmp)
        proc = ServeProcess(tmp_path / "data", config_file(tmp_path)).start()
        try:
            base = latencies(proc.api)
            parts = urlsplit(proc.otlp)
            socks = []
            t0 = time.monotonic()
            for i in range(count):
                s = socket.create_connection((parts.hostname, parts.port), timeout=10)
                if i % 3 == 1:
                    s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Ty")
                elif i % 3 == 2:
                    s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                              b"Content-Length: 1000000\r\n\r\n\x0a")
                socks.append(s)
            stop = threading.Event()

            def trickle() -> None:  # the slow bodies: one byte every 2 s
                while not stop.wait(2.0):
                    for s in socks[2::3]:
                        with contextlib.suppress(OSError):
                            s.send(b"\x00")

            threading.Thread(target=trickle, daemon=True).start()
            during = latencies(proc.api)
            time.sleep(max(0.0, 15 - (time.monotonic() - t0)))
            after_header = still_open(socks)
            time.sleep(max(0.0, 70 - (time.monotonic() - t0)))
            after_body = still_open(socks)
            stop.set()
            for s in socks:
                s.close()
        finally:
            proc.terminate()
            proc.wait(120)
    p50 = statistics.median(base)
    return [*lines,
            row("connections opened", count),
            row("still open 15 s later (past the header deadline)", after_header, "connections"),
            row("still open 70 s later (past the body deadline)", after_body, "connections"),
            row("API /healthz latency p50, no slow clients (baseline)", p50 * 1000, "ms", "1.00"),
            row("API /healthz latency p50, with them", statistics.median(during) * 1000, "ms",
                f"{statistics.median(during) / p50:.2f}")]


# -- fuzz ----------------------------------------------------------------------------------------------------------

def probe_fuzz(scale: int = 20) -> list[str]:
    targets = ["tests/ingest/test_fuzz_otlp.py", "tests/api/test_hostile_checks.py",
               "tests/api/test_api.py::test_openapi_fuzz_finds_no_server_errors"]
    lines = header(f"fuzzing with {scale} x the CI examples (hypothesis, schemathesis)")
    results = []
    for target in [None, *targets]:
        if target is None:  # the baseline: the same tests at the CI scale
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets],
                                  cwd=ROOT, capture_output=True, text=True)
            base = time.perf_counter() - t
            results.append(("the three suites at the CI scale (baseline)", proc.returncode, base))
            continue
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target], cwd=ROOT,
                              capture_output=True, text=True, env={**os.environ, "LOOP_DETECTOR_FUZZ_SCALE": str(scale)})
        results.append((target, proc.returncode, time.perf_counter() - t))
        if proc.returncode:
            print(proc.stdout[-3000:], file=sys.stderr)
    for name, code, seconds in results:
        lines.append(row(f"{name}: {'passed' if code == 0 else 'FAILED'}", seconds, "s",
                         f"{seconds / results[0][2]:.2f}"))
    return lines


PROBES = {"kill9": probe_kill9, "sigterm": probe_sigterm, "poison": probe_poison, "cardinality": probe_cardinality,
          "slow": probe_slow, "fuzz": probe_fuzz}
# Probes in their own modules under bench/probes/ (each ``run(args) -> list[str]``): name -> module.
MODULE_PROBES: dict[str, str] = {
    "diskfull": "probes.disk_full",
    "overload": "probes.overload",
    "outage": "probes.store_outage",
    "soak": "probes.soak",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", default=",".join([*PROBES, *MODULE_PROBES]))
    parser.add_argument("--runs", type=int, default=6, help="kill -9 runs (SIGTERM: half as many)")
    parser.add_argument("--update-docs", action="store_true", help="write the tables into docs/reliability.md")
    parser.add_argument("--overload-seconds", type=float, default=60, help="overload: seconds offered per transport")
    parser.add_argument("--soak-seconds", type=float, default=600.0, help="soak: seconds of steady load (3600: the hour)")
    args = parser.parse_args()
    tables = []
    for name in args.probes.split(","):
        if name == "kill9":
            lines = probe_kill9(args.runs)
        elif name == "sigterm":
            lines = probe_sigterm(max(1, args.runs // 2))
        elif name in MODULE_PROBES:
            lines = importlib.import_module(MODULE_PROBES[name]).run(args)
        else:
            lines = PROBES[name]()
        tables.append("\n".join(lines))
        print(tables[-1] + "\n", flush=True)
    if args.update_docs:
        command = f"`.venv/bin/python bench/reliability.py --probes {args.probes} --runs {args.runs}`"
        write_section(ROOT / "docs" / "reliability.md", SECTION, f"{command}\n\n" + "\n\n".join(tables))


if __name__ == "__main__":
    main()
