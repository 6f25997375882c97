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

Where the lag goes (the "lag step" rows): ``serve`` runs with ``--log-level debug`` and logs, for each group commit,
when its requests were queued, when the group was taken and its commit ran (:mod:`detector.ingest.group_commit`); for
each cycle, its start and phases (:mod:`detector.service.cycle_loop`, ``CycleStats.phases``) and when its writes held
the store, served the decisions and moved the watermark (``DetectorJob._write``). Each request's exact lag is cut
at those instants (:data:`STEPS`; a tree that does not log them gets no step rows).

    .venv/bin/python bench/lag.py --rates "" --compare ../wt-base --tree . --tree ../wt-other --rounds 3

runs each tree's own ``serve`` (its code; its ``.venv`` if it has one, else this interpreter), the ``--compare`` tree
first, alternating, ``--rounds`` times, and prints each run's table and the key figures side by side with the ratio
of each tree's median to the first's.
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
    posted: float = 0.0  # when its sender began the post (the export delay: posted - at)


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
    """Polls /healthz: (answered at, watermark seconds, sent at) triples."""

    api: str
    samples: list[tuple[float, float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                sent = time.time()
                try:
                    watermark = client.get(self.api + "/healthz").json()["watermark_us"] / 1e6
                except httpx.HTTPError:
                    continue
                self.samples.append((time.time(), watermark, sent))
                time.sleep(0.01)

    def reflected_at(self, acked: float) -> float | None:
        """The first poll time whose watermark is past ``acked`` (watermarks only grow)."""
        sample = self.sample_past(acked)
        return sample[0] if sample is not None else None

    def sample_past(self, acked: float) -> tuple[float, float, float] | None:
        """The first poll whose watermark is past ``acked``."""
        watermarks = [w for _, w, _ in self.samples]
        i = bisect.bisect_left(watermarks, acked)
        return self.samples[i] if i < len(self.samples) else None


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
                item.posted = time.time()
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


def exact(data_dir: Path, monitor: Monitor, timed: list[Planned], log: ServeLog) -> dict[str, float]:
    """The exact lag of one rate's requests (serve stopped: its store opened here): span end -> the first poll whose
    watermark is past the request's insert, split at the insert, and into :data:`STEPS` where ``log`` has them."""
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
    return {**_percentiles("exact_", lags), **_percentiles("queued_", queued), **_percentiles("inserted_", reflections),
            **breakdown(log, monitor, timed, inserted)}


# Where a request's lag goes: the steps from its scheduled send to the first poll that shows its decision, each from
# the end of the one before (clamped so that none is negative: a cycle that started while the insert ran waited for
# the store, and that wait is counted in its first phase). The steps sum to the lag (exact criterion).
STEPS = (
    ("export", "scheduled -> posted (the sender)"),
    ("receive", "posted -> queued (HTTP, read, decode)"),
    ("linger", "queued -> group taken (the linger; the group before it committing)"),
    ("to_insert", "group taken -> insert (store held by a cycle, journal)"),
    ("insert", "insert -> committed (the insert, the nudge)"),
    ("next_cycle", "committed -> next cycle starts (min interval)"),
    ("transform", "cycle: store wait, now(), transform"),
    ("read", "cycle: read"),
    ("score", "cycle: score"),
    ("tables", "cycle: rows to tables, store wait"),
    ("writes", "cycle: writes until the decision is served (writing row, scores, events, decisions)"),
    ("watermark", "cycle: decision served -> the watermark shown moves"),
    ("poll", "watermark shown -> the poll that shows it is sent (10 ms polls)"),
    ("answer", "that poll sent -> answered (the API's response time)"),
)


@dataclass
class ServeLog:
    """The timings ``serve`` writes to its debug log: groups committed, cycles, cycles' writes (none from a tree
    without them: its breakdown is left out)."""

    groups: list[dict]
    cycles: list[dict]
    writes: dict[int, dict]

    @classmethod
    def parse(cls, lines: list[str]) -> ServeLog:
        groups, cycles, writes = [], [], {}
        for line in lines:
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            message = record.get("message")
            if message == "group committed":
                groups.append(record)
            elif message == "detection cycle" and record.get("phases"):
                cycles.append(record)
            elif message == "cycle written" and not record.get("replay"):
                writes[record["cutoff_us"]] = record
        groups.sort(key=lambda g: g["commit_started_at"])
        cycles.sort(key=lambda c: c["watermark_us"])
        return cls(groups, cycles, writes)


def breakdown(log: ServeLog, monitor: Monitor, timed: list[Planned], inserted: dict[str, float]) -> dict[str, float]:
    """Each step of :data:`STEPS`: mean, p50 and p99 over the requests (seconds), as ``step_<name>_<stat>``."""
    if not log.groups or not log.cycles:
        return {}
    starts = [g["commit_started_at"] for g in log.groups]
    marks = [c["watermark_us"] / 1e6 for c in log.cycles]
    members: dict[int, list[Planned]] = {}
    for p in timed:
        members.setdefault(max(0, bisect.bisect_right(starts, inserted[p.span_id]) - 1), []).append(p)
    queued: dict[str, float] = {}
    for index, requests in members.items():
        times = sorted(log.groups[index]["queued_at"])
        requests.sort(key=lambda p: p.posted)
        for p in requests:  # its own submission: the first after its post not taken by an earlier request
            i = bisect.bisect_left(times, p.posted)
            queued[p.span_id] = times.pop(i) if i < len(times) else log.groups[index]["gathered_at"]
    steps: dict[str, list[float]] = {name: [] for name, _ in STEPS}
    served: list[float] = []  # span end -> the decision in the book (/v1/check has it), on serve's clock
    for p in timed:
        ins = inserted[p.span_id]
        group = log.groups[max(0, bisect.bisect_right(starts, ins) - 1)]
        k = bisect.bisect_right(marks, ins)
        seen = monitor.sample_past(ins)
        if k >= len(log.cycles) or seen is None:
            continue
        cycle = log.cycles[k]
        written = log.writes.get(cycle["watermark_us"], {})
        phases, c0 = cycle["phases"], cycle["cycle_started_at"]
        scored = c0 + phases["transform"] + phases["read"] + phases["score"]
        chain = [p.at, p.posted, queued[p.span_id], group["gathered_at"], ins, group["commit_ended_at"], c0,
                 c0 + phases["transform"], c0 + phases["transform"] + phases["read"], scored,
                 written.get("held_at", scored), written.get("decided_at", scored),
                 written.get("watermark_at", scored + phases["write"]), seen[2], seen[0]]
        for i in range(1, len(chain)):
            chain[i] = max(chain[i], chain[i - 1])
        served.append(chain[11] - p.at)
        for (name, _), before, after in zip(STEPS, chain[:-1], chain[1:], strict=True):
            steps[name].append(after - before)
    out: dict[str, float] = _percentiles("served_", served) if served else {}
    for name, values in steps.items():
        if values:
            out[f"step_{name}_mean"] = statistics.fmean(values)
            out.update(_percentiles(f"step_{name}_", values))
    return out


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
    if "served_p50" in baseline:
        lines.append(f"| trickle (20 spans/s, baseline): lag to the decision served (in the book: /v1/check has it), "
                     f"p50 / p99 | {baseline['served_p50']:.2f} / {baseline['served_p99']:.2f} | s |  |")
    lines += _step_rows("trickle (20 spans/s, baseline)", baseline)
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
        if "served_p50" in r:
            lines.append(f"| {name}: lag to the decision served (in the book: /v1/check has it), p50 / p99 | "
                         f"{r['served_p50']:.2f} / {r['served_p99']:.2f} | s |  |")
        lines += _step_rows(name, r)
    return "\n".join(lines)


def _step_rows(name: str, r: dict[str, float]) -> list[str]:
    """The lag's steps (:data:`STEPS`), mean / p50 / p99 in ms (the means sum to the mean exact lag)."""
    return [f"| {name}: lag step {label}, mean / p50 / p99 | {r[f'step_{step}_mean'] * 1000:,.0f} / "
            f"{r[f'step_{step}_p50'] * 1000:,.0f} / {r[f'step_{step}_p99'] * 1000:,.0f} | ms |  |"
            for step, label in STEPS if f"step_{step}_mean" in r]


class TreeServe(ServeProcess):
    """``serve`` run from another checkout with its own virtualenv (``--compare``): its code, its interpreter."""

    def __init__(self, tree: Path, data_dir: Path, config_path: str | None) -> None:
        super().__init__(data_dir, config_path=config_path, extra_args=("--log-level", "debug"), cwd=tree)
        venv = tree / ".venv" / "bin" / "python"  # (a tree without one: this interpreter, the tree's code first)
        self.python = str(venv) if venv.exists() else sys.executable

    def start(self) -> ServeProcess:
        executable, sys.executable = sys.executable, self.python
        try:
            return super().start()
        finally:
            sys.executable = executable


def run_once(tree: Path, rates: list[int], args: argparse.Namespace, seed: int) -> tuple[dict, list[dict]]:
    """The trickle and each rate against one ``serve`` of ``tree``'s code: (trickle, rates) figures."""
    import tempfile

    rng = random.Random(seed)
    counter = [0]
    timed: list[list[Planned]] = []
    with tempfile.TemporaryDirectory(prefix="bench-lag-") as data:
        with TreeServe(tree, Path(data) / "data", args.config) as proc:
            monitor = Monitor(proc.api)
            thread = threading.Thread(target=monitor.run, daemon=True)
            thread.start()
            baseline = measure(proc, monitor, 20, args.seconds, args.sessions, rng, counter, timed)
            print(f"{tree.name} trickle: p50 {baseline['p50']:.2f} s, p99 {baseline['p99']:.2f} s", file=sys.stderr)
            results = []
            for rate in rates:
                results.append(measure(proc, monitor, rate, args.seconds, args.sessions, rng, counter, timed))
                print(f"{tree.name} {rate}: p50 {results[-1]['p50']:.2f} s, p99 {results[-1]['p99']:.2f} s",
                      file=sys.stderr)
            monitor.stop.set()
            proc.terminate()
            proc.wait(120)
            log = ServeLog.parse(proc.lines)
        for r, requests in zip([baseline, *results], timed, strict=True):
            r.update(exact(Path(data) / "data", monitor, requests, log))
    return baseline, results


COMPARED = (("lag p50", "p50"), ("lag p99", "p99"), ("exact lag p99", "exact_p99"),
            ("insert -> decision p50", "inserted_p50"), ("acknowledged / offered", "achieved"))


def comparison(runs: list[tuple[str, dict, list[dict]]], rates: list[int]) -> str:
    """The key figures of alternating runs of several trees, run by run, and the ratio of each tree's median to
    the first tree's (the baseline)."""
    trees = list(dict.fromkeys(name for name, _, _ in runs))
    lines = ["| figure | " + " | ".join(f"{name} run {k + 1}" for k, (name, _, _) in enumerate(runs)) + " | "
             + " | ".join(f"ratio {t} / {trees[0]} (medians)" for t in trees[1:]) + " |",
             "|---" * (len(runs) + len(trees)) + "|"]
    for rate_index, rate in enumerate([20, *rates]):
        for label, key in COMPARED:
            values = [(name, (trickle if rate_index == 0 else results[rate_index - 1])) for name, trickle, results in runs]
            figure = [r[key] / (r["rate"] if key == "achieved" else 1) for _, r in values]
            by_tree = {t: statistics.median([f for (n, _), f in zip(values, figure, strict=True) if n == t])
                       for t in trees}
            ratios = [by_tree[t] / by_tree[trees[0]] if by_tree[trees[0]] else float("nan") for t in trees[1:]]
            lines.append(f"| {rate:,} spans/s: {label} | " + " | ".join(f"{f:.2f}" for f in figure) + " | "
                         + " | ".join(f"{r:.2f}" for r in ratios) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,5000,10000", help="comma-separated; empty: the trickle only")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--config", help="the service's YAML config (default: the default configuration)")
    parser.add_argument("--compare", type=Path, help="another checkout with its own .venv (the code before): runs "
                        "alternate, that tree first, --rounds times each")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tree", type=Path, action="append", help="a checkout whose serve is measured (default: "
                        "this one; repeated: each, alternating after --compare's)")
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args()
    rates = [int(x) for x in args.rates.split(",") if x.strip()]
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    if args.compare is None:
        baseline, results = run_once(trees[0], rates, args, 16)
        out = table(baseline, results, args.sessions)
    else:
        runs = []
        for k in range(args.rounds):
            for tree in (args.compare.resolve(), *trees):
                baseline, results = run_once(tree, rates, args, 16 + k)
                runs.append((tree.name, baseline, results))
                print(f"### {tree.name}, run {k + 1}\n\n{table(baseline, results, args.sessions)}\n", flush=True)
        out = comparison(runs, rates)
    print(out)
    if args.update_docs and args.compare is None:
        command = (f"`.venv/bin/python bench/lag.py --rates {args.rates} --sessions {args.sessions} "
                   f"--seconds {args.seconds:g}`")
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, f"{command}\n\n{out}")


if __name__ == "__main__":
    main()
