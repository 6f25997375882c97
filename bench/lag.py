"""Decision lag under load: from a span's end to the decision that reflects it, at a sustained span rate.

    .venv/bin/python bench/lag.py [--rates 1000,5000,10000] [--sessions 2000] [--seconds 20] [--update-docs]

A real ``loop-detector serve`` (default configuration: a detection cycle every second) in its own process; this
process is the load: GenAI spans (two thirds ``chat`` with short messages, one third ``execute_tool``) of
``--sessions`` sessions taken in turn, posted as OTLP/HTTP protobuf by 8 sender threads, 20 requests a second
(``rate / 20`` spans each), for ``--seconds`` per rate after a warm-up. Every span of a request ends at the
request's scheduled send time (bodies are built beforehand, so the senders only move bytes; a sender that falls
behind schedule sends spans that ended earlier, and that backlog counts as lag).

When does a decision reflect a span? The detector updates the decisions the API serves *before* it advances its
watermark (``detector/detection/job.py``), and a cycle reads every call inserted up to its cutoff; a request is
acknowledged once its insert has committed, and the store runs one statement at a time, so the first cycle whose
cutoff is past the acknowledgement has read the request's calls. A monitor thread polls ``/healthz`` every 10 ms;
a span's lag is the first poll that shows a watermark past its request's acknowledgement, minus the span's end
(so it includes the poll interval: at most 10 ms too much). Each lag is also split in two: the acknowledgement
(scheduled send -> 200: ingest's queue, linger and insert) and the reflection (200 -> the decision: the wait for the
next cycle and its run).

That criterion is an upper bound: a cycle that starts after the commit but before the 200 reaches the sender (as one
nudged by the commit does) has read the request's calls too, and is not credited. So each lag is also measured
exactly, once ``serve`` has stopped: from the store, the time each request's insert ran (``genai_spans.inserted_at``,
the staged span's insertion, the watermark's own clock; the store runs one statement at a time, so a cycle whose
cutoff is past it normalized and read the calls), and the lag is the first poll whose watermark is past that, minus
the span's end.

The baseline, measured first in the same run: a trickle (20 spans/s), where the lag is one insert and the cycle
schedule.
The machine is shared: the 1-minute load average before each rate is printed beside it.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import re
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import httpx  # noqa: E402
from doc_sections import write_section  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.trace.v1 import trace_pb2  # noqa: E402
from otlp_attributes import key_value  # noqa: E402
from support.serve_process import ServeProcess  # noqa: E402

SECTION = "## Decision lag under load (bench/lag.py)"
SECOND = 1_000_000_000
REQUESTS_PER_SECOND = 20
SENDERS = 8
_SENTENCE = ("read the failing test then search the repository for the helper it calls and patch the off by one "
             "error before running the suite again")
WORDS = tuple(_SENTENCE.split(" "))
TOOLS = ("read_file", "search_code", "run_tests", "apply_patch")



@dataclass
class Planned:
    at: float  # scheduled send time (unix seconds): every span of the body ends then
    body: bytes
    spans: int
    span_id: str  # the first span's (the calls of one request are inserted together)
    acked: float = 0.0
    status: int = 0


def plan(rate: int, seconds: float, sessions: int, start: float, rng: random.Random, counter: list[int]) -> list[Planned]:
    per_request = max(1, rate // REQUESTS_PER_SECOND)
    out = []
    for k in range(int(seconds * REQUESTS_PER_SECOND)):
        first = ""
        at = start + k / REQUESTS_PER_SECOND
        end_ns = int(at * 1e9)
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.resource.attributes.extend([key_value("service.name", "lag-bench"), key_value("loop_detector.virtual_key", "vk-a")])
        ss = rs.scope_spans.add()
        ss.scope.name = "opentelemetry.instrumentation.openai_v2"
        for _ in range(per_request):
            n = counter[0]
            counter[0] += 1
            session = n % sessions
            span = ss.spans.add(trace_id=session.to_bytes(4, "big") + b"\x6c" * 12, span_id=rng.randbytes(8))
            first = first or span.span_id.hex()
            span.start_time_unix_nano, span.end_time_unix_nano = end_ns - rng.randrange(50, 2000) * 1_000_000, end_ns
            if n % 3 == 2:
                tool = TOOLS[n % len(TOOLS)]
                span.name, span.kind = f"execute_tool {tool}", trace_pb2.Span.SPAN_KIND_INTERNAL
                span.attributes.extend([key_value("gen_ai.operation.name", "execute_tool"), key_value("gen_ai.tool.name", tool),
                                        key_value("gen_ai.tool.call.arguments", json.dumps({"path": f"f{n % 7}.py"})),
                                        key_value("gen_ai.conversation.id", f"lag-{session}")])
            else:
                text = " ".join(rng.choice(WORDS) for _ in range(30))
                span.name, span.kind = "chat gpt-4o", trace_pb2.Span.SPAN_KIND_CLIENT
                span.attributes.extend([
                    key_value("gen_ai.operation.name", "chat"), key_value("gen_ai.request.model", "gpt-4o"),
                    key_value("gen_ai.usage.input_tokens", rng.randrange(200, 4000)),
                    key_value("gen_ai.usage.output_tokens", rng.randrange(10, 400)),
                    key_value("gen_ai.conversation.id", f"lag-{session}"),
                    key_value("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [
                        {"type": "text", "content": text}]}])),
                    key_value("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [
                        {"type": "text", "content": text[::-1]}], "finish_reason": "stop"}]))])
        out.append(Planned(at, req.SerializeToString(), per_request, first))
    return out


@dataclass
class Monitor:
    """Polls /healthz: (poll time, watermark seconds) pairs."""

    api: str
    samples: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                try:
                    watermark = client.get(self.api + "/healthz").json()["watermark_us"] / 1e6
                except httpx.HTTPError:
                    continue
                self.samples.append((time.time(), watermark))
                time.sleep(0.01)

    def reflected_at(self, acked: float) -> float | None:
        """The first poll time whose watermark is past ``acked`` (watermarks only grow)."""
        watermarks = [w for _, w in self.samples]
        i = bisect.bisect_left(watermarks, acked)
        return self.samples[i][0] if i < len(self.samples) else None


def send(otlp: str, planned: list[Planned]) -> None:
    cursor = [0]
    lock = threading.Lock()

    def worker() -> None:
        with httpx.Client(timeout=60) as client:
            while True:
                with lock:
                    if cursor[0] >= len(planned):
                        return
                    item = planned[cursor[0]]
                    cursor[0] += 1
                delay = item.at - time.time()
                if delay > 0:
                    time.sleep(delay)
                while True:
                    try:
                        r = client.post(otlp + "/v1/traces", content=item.body,
                                        headers={"Content-Type": "application/x-protobuf"})
                    except httpx.HTTPError:
                        time.sleep(0.05)
                        continue
                    item.status = r.status_code
                    if r.status_code == 200:
                        item.acked = time.time()
                        break
                    time.sleep(0.05)  # a 503: the exporter's retry

    threads = [threading.Thread(target=worker) for _ in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def cycle_seconds(api: str) -> tuple[float, float]:
    text = httpx.get(api + "/metrics", timeout=10).text
    total = float(re.search(r"^loop_detector_cycle_seconds_sum (\S+)$", text, re.M).group(1))
    count = float(re.search(r"^loop_detector_cycle_seconds_count (\S+)$", text, re.M).group(1))
    return total, count


def measure(proc: ServeProcess, monitor: Monitor, rate: int, seconds: float, sessions: int, rng: random.Random,
            counter: list[int], timed_out: list[list[Planned]]) -> dict[str, float]:
    """One rate's figures by the acknowledgement criterion; its requests are appended to ``timed_out`` for the exact
    one (:func:`exact`)."""
    load = os.getloadavg()[0]
    warm = plan(rate, 3, sessions, time.time() + 1.0, rng, counter)
    timed = plan(rate, seconds, sessions, warm[-1].at + 1 / REQUESTS_PER_SECOND, rng, counter)
    timed_out.append(timed)
    before = cycle_seconds(proc.api)
    send(proc.otlp, warm + timed)
    last = max(p.acked for p in timed)
    deadline = time.time() + 120
    while (not monitor.samples or monitor.samples[-1][1] < last) and time.time() < deadline:
        time.sleep(0.05)
    after = cycle_seconds(proc.api)
    lags, acks, reflections = [], [], []
    for p in timed:
        seen = monitor.reflected_at(p.acked)
        if seen is None:
            raise SystemExit(f"a request acknowledged at {p.acked} was never reflected")
        lags.append(seen - p.at)
        acks.append(p.acked - p.at)  # the ingest part: queued, inserted, answered
        reflections.append(seen - p.acked)  # the detection part: the next cycle's start and its run
    span_seconds = timed[-1].at - timed[0].at + 1 / REQUESTS_PER_SECOND
    return {"rate": rate, "achieved": sum(p.spans for p in timed) / max(span_seconds, max(p.acked for p in timed)
                                                                         - timed[0].at),
            **_percentiles("", lags), "max": max(lags), **_percentiles("ack_", acks),
            **_percentiles("reflect_", reflections),
            "cycle_mean": (after[0] - before[0]) / max(1.0, after[1] - before[1]), "load": load,
            "late": sum(1 for p in timed if p.acked - p.at > 1.0) / len(timed)}


SELECT_INSERTED = """
SELECT span_id, toUnixTimestamp64Micro(inserted_at) AS us FROM otel.genai_spans WHERE span_id IN {ids:Array(String)}
"""


def exact(data_dir: Path, monitor: Monitor, timed: list[Planned]) -> dict[str, float]:
    """The exact lag of one rate's requests (serve stopped: its store opened here): span end -> the first poll whose
    watermark is past the request's insert, split at the insert."""
    from detector.storage.transport import ChdbStore

    store = ChdbStore(data_dir)
    try:
        inserted = {r["span_id"]: r["us"] / 1e6 for r in store.rows(SELECT_INSERTED, {"ids": [p.span_id for p in timed]})}
    finally:
        store.close()
    lags, queued, reflections = [], [], []
    for p in timed:
        seen = monitor.reflected_at(inserted[p.span_id])
        if seen is None:
            raise SystemExit(f"a request inserted at {inserted[p.span_id]} was never reflected")
        lags.append(seen - p.at)
        queued.append(inserted[p.span_id] - p.at)
        reflections.append(seen - inserted[p.span_id])
    return {**_percentiles("exact_", lags), **_percentiles("queued_", queued), **_percentiles("inserted_", reflections)}


def _percentiles(prefix: str, values: list[float]) -> dict[str, float]:
    """``{prefix}p50`` and ``{prefix}p99`` of ``values``."""
    ordered = sorted(values)
    return {f"{prefix}p50": statistics.median(ordered),
            f"{prefix}p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]}


def table(baseline: dict[str, float], results: list[dict[str, float]], sessions: int) -> str:
    lines = ["| figure | value | unit | ratio vs baseline |", "|---|---|---|---|",
             f"| trickle (20 spans/s, baseline): lag p50 | {baseline['p50']:.2f} | s | 1.00 |",
             f"| trickle (20 spans/s, baseline): lag p99 | {baseline['p99']:.2f} | s | 1.00 |",
             f"| trickle (20 spans/s, baseline): exact lag p50 / p99 | {baseline['exact_p50']:.2f} / {baseline['exact_p99']:.2f} | s | 1.00 (p99) |",
             f"| trickle (20 spans/s, baseline): of which sent -> insert / insert -> decision, p50 | {baseline['queued_p50']:.2f} / {baseline['inserted_p50']:.2f} | s |  |"]
    for r in results:
        name = f"{r['rate']:,} spans/s over {sessions:,} sessions"
        lines += [
            f"| {name}: lag p50 | {r['p50']:.2f} | s | {r['p50'] / baseline['p50']:.2f} |",
            f"| {name}: lag p99 | {r['p99']:.2f} | s | {r['p99'] / baseline['p99']:.2f} |",
            f"| {name}: lag max | {r['max']:.2f} | s |  |",
            f"| {name}: of which acknowledgement (sent -> 200) p50 / p99 | {r['ack_p50']:.2f} / {r['ack_p99']:.2f} | s |  |",
            f"| {name}: of which reflection (200 -> decision) p50 / p99 | {r['reflect_p50']:.2f} / {r['reflect_p99']:.2f} | s |  |",
            f"| {name}: exact lag (to the first watermark past the insert) p50 / p99 | {r['exact_p50']:.2f} / {r['exact_p99']:.2f} | s | {r['exact_p99'] / baseline['exact_p99']:.2f} (p99) |",
            f"| {name}: of which sent -> insert / insert -> decision, p99 | {r['queued_p99']:.2f} / {r['inserted_p99']:.2f} | s |  |",
            f"| {name}: spans acknowledged per second | {r['achieved']:,.0f} | spans/s | {r['achieved'] / r['rate']:.2f} x target |",
            f"| {name}: mean detection cycle | {r['cycle_mean'] * 1000:,.0f} | ms |  |",
            f"| {name}: load average (1 min) before | {r['load']:.1f} | (2 CPUs) |  |",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,5000,10000")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--config", help="the service's YAML config (default: the default configuration)")
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args()
    rates = [int(x) for x in args.rates.split(",")]
    rng = random.Random(16)
    counter = [0]
    import tempfile

    timed: list[list[Planned]] = []
    with tempfile.TemporaryDirectory(prefix="bench-lag-") as data:
        with ServeProcess(Path(data) / "data", config_path=args.config) as proc:
            monitor = Monitor(proc.api)
            thread = threading.Thread(target=monitor.run, daemon=True)
            thread.start()
            baseline = measure(proc, monitor, 20, args.seconds, args.sessions, rng, counter, timed)
            results = []
            for rate in rates:
                results.append(measure(proc, monitor, rate, args.seconds, args.sessions, rng, counter, timed))
                print(f"{rate}: p50 {results[-1]['p50']:.2f} s, p99 {results[-1]['p99']:.2f} s", file=sys.stderr)
            monitor.stop.set()
            proc.terminate()
            proc.wait(120)
        for r, requests in zip([baseline, *results], timed, strict=True):
            r.update(exact(Path(data) / "data", monitor, requests))
    out = table(baseline, results, args.sessions)
    print(out)
    if args.update_docs:
        command = (f"`.venv/bin/python bench/lag.py --rates {args.rates} --sessions {args.sessions} "
                   f"--seconds {args.seconds:g}`")
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, f"{command}\n\n{out}")


if __name__ == "__main__":
    main()
