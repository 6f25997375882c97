"""Soak: a steady 1,000 spans/s over 2,000 sessions for ``--soak-seconds``, then back to idle when it stops.

    .venv/bin/python bench/reliability.py --probes soak [--soak-seconds 600]

A real ``loop-detector serve`` in its own process (the default detection schedule, a short retention: see
:data:`SOAK_CONFIG`), and this process as the load: GenAI spans of 2,000 sessions taken in turn (two thirds ``chat``
with short messages, one third ``execute_tool``), 20 requests a second of 50 spans, half of them over OTLP/HTTP and
half over OTLP/gRPC, each request's spans ending at its scheduled send time. Senders behave like exporters: what is
refused with a retryable status is sent again (the same bytes) after a short pause.

Every :data:`WINDOW_SECONDS` the serve process is sampled from ``/proc``: resident memory, open files
(``/proc/pid/fd``), threads, CPU; the data directory's size; and the decision lag p99 of the requests sent in the
window (a request's lag: from its spans' end to the first ``/healthz`` poll, every :data:`POLL_SECONDS`, whose
watermark is past its acknowledgement, as ``bench/lag.py`` measures it). The slope of each figure is a least-squares
fit over the samples after the warm-up, as a percentage of its mean per hour.

Before the load, the idle figures of the fresh service (CPU % of a core, threads, detection cycles per second);
:data:`IDLE_AFTER_SECONDS` after the last span, the same figures again. After that the service is stopped (SIGTERM)
and its store read here: the spans acknowledged in the window the retention still keeps are all stored, once.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc
import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from lag import Planned, plan  # noqa: E402
from support.serve_process import ServeProcess  # noqa: E402

from detector.ingest.grpc_receiver import TRACES_METHOD  # noqa: E402
from probes.common import header, row  # noqa: E402

__all__ = ["ProcessSample", "idle_figures", "process_sample", "run", "slope_per_hour"]

RATE = 1000  # spans/s, the steady load
SESSIONS = 2000
WINDOW_SECONDS = 10.0  # one sample of the process (and one lag p99) per window
POLL_SECONDS = 0.05  # /healthz polls: a lag is measured to within this
PLAN_AHEAD_SECONDS = 10.0  # request bodies built one window ahead (an hour of bodies would be a gigabyte)
SENDERS = 32  # sender threads, each posting one request at a time (HTTP or gRPC by turn): 2,000 sessions are many exporters
RETRY_PAUSE_SECONDS = 0.05  # after a refusal, as an exporter's (short) backoff
IDLE_SETTLE_SECONDS = 10.0  # after start, before the idle figures (the schema and first cycles are done)
IDLE_MEASURE_SECONDS = 15.0  # the CPU of a core is averaged over this long
IDLE_AFTER_SECONDS = 60.0  # the target: idle within a minute of the last span
IDLE_CPU_TARGET = 5.0  # % of a core, the target
# A retention short enough that the soak sees it act: spans 10 minutes, the detector's rows 10 minutes. The TTLs are
# ClickHouse's (ttl_only_drop_parts on the span tables: a part goes once all its rows expired).
RETENTION = "10m"
SOAK_CONFIG = f"retention:\n  spans: {RETENTION}\n  detector: {RETENTION}\n"
TICK = os.sysconf("SC_CLK_TCK")
SELECT_STORED = """
SELECT count() AS rows, uniqExact(SpanId) AS spans FROM otel.otel_traces
WHERE ServiceName = 'lag-bench' AND Timestamp >= fromUnixTimestamp64Micro({since:Int64}) - INTERVAL 10 SECOND
  AND addNanoseconds(Timestamp, Duration) >= fromUnixTimestamp64Micro({since:Int64})
"""  # by the span's end, the request's scheduled time (its start is up to 2 s earlier)


# -- the process, from /proc -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ProcessSample:
    at: float  # time.time()
    cpu_seconds: float  # user + system, all threads
    rss_bytes: int
    threads: int
    open_files: int


def process_sample(pid: int) -> ProcessSample:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return ProcessSample(at=time.time(), cpu_seconds=(int(fields[11]) + int(fields[12])) / TICK,
                         rss_bytes=int(status["VmRSS"].split()[0]) * 1024, threads=int(status["Threads"]),
                         open_files=len(os.listdir(f"/proc/{pid}/fd")))


def cpu_percent(a: ProcessSample, b: ProcessSample) -> float:
    """CPU between two samples, in % of one core."""
    return 100.0 * (b.cpu_seconds - a.cpu_seconds) / max(1e-9, b.at - a.at)


def directory_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a part merged away while walking
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def cycles_run(api: str) -> float:
    """Detection cycles run so far (the cycle-duration histogram's count)."""
    text = httpx.get(api + "/metrics", timeout=10).text
    match = re.search(r"^loop_detector_cycle_seconds_count (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


@dataclass(frozen=True, slots=True)
class Idle:
    cpu_percent: float
    threads: int
    cycles_per_second: float


def idle_figures(pid: int, api: str, seconds: float = IDLE_MEASURE_SECONDS) -> Idle:
    before, cycles = process_sample(pid), cycles_run(api)
    time.sleep(seconds)
    after = process_sample(pid)
    return Idle(cpu_percent(before, after), after.threads, (cycles_run(api) - cycles) / (after.at - before.at))


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (time, value) points, in % of the values' mean per hour (0 when flat or too few)."""
    if len(points) < 3:
        return 0.0
    ts, vs = [t for t, _ in points], [v for _, v in points]
    mt, mv = statistics.fmean(ts), statistics.fmean(vs)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0 or mv == 0:
        return 0.0
    slope = sum((t - mt) * (v - mv) for t, v in points) / var
    return 100.0 * slope * 3600 / mv


# -- the load --------------------------------------------------------------------------------------------------------

@dataclass
class Watermarks:
    """Polls ``/healthz``: (poll time, watermark seconds), watermarks only grow."""

    api: str
    times: list[float] = field(default_factory=list)
    marks: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                try:
                    mark = client.get(self.api + "/healthz").json()["watermark_us"] / 1e6
                except (httpx.HTTPError, ValueError, KeyError):
                    time.sleep(POLL_SECONDS)
                    continue
                self.times.append(time.time())
                self.marks.append(mark)
                time.sleep(POLL_SECONDS)

    def reflected_at(self, acked: float) -> float | None:
        i = bisect.bisect_left(self.marks, acked)
        return self.times[i] if i < len(self.times) else None


@dataclass
class Load:
    """Paced senders over both transports; ``sent`` keeps every request (its body dropped once acknowledged)."""

    otlp: str
    grpc_target: str
    seconds: float
    sent: list[Planned] = field(default_factory=list)
    refusals: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def planned(self, start: float) -> Iterator[Planned]:
        rng, counter = random.Random(32), [0]
        at = start
        while at < start + self.seconds:
            chunk = min(PLAN_AHEAD_SECONDS, start + self.seconds - at)
            yield from plan(RATE, chunk, SESSIONS, at, rng, counter)
            at += chunk

    def run(self, start: float) -> None:
        source = self.planned(start)
        source_lock = threading.Lock()
        threads = [threading.Thread(target=self._worker, args=(source, source_lock, k), daemon=True)
                   for k in range(SENDERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _refused(self, what: str) -> None:
        with self._lock:
            self.refusals[what] = self.refusals.get(what, 0) + 1
        time.sleep(RETRY_PAUSE_SECONDS)

    def _worker(self, source: Iterator[Planned], source_lock: threading.Lock, k: int) -> None:
        with httpx.Client(timeout=60) as client, grpc.insecure_channel(self.grpc_target) as channel:
            export = channel.unary_unary(TRACES_METHOD, request_serializer=None, response_deserializer=None)
            n = 0
            while True:
                with source_lock:
                    item = next(source, None)
                    if item is None:
                        return
                    self.sent.append(item)
                n += 1
                over_grpc = (n + k) % 2 == 0  # half the requests over each transport
                if (delay := item.at - time.time()) > 0:
                    time.sleep(delay)
                while not item.acked:
                    if over_grpc:
                        self._send_grpc(export, item)
                    else:
                        self._send_http(client, item)
                item.body = b""

    def _send_http(self, client: httpx.Client, item: Planned) -> None:
        try:
            response = client.post(self.otlp + "/v1/traces", content=item.body,
                                   headers={"Content-Type": "application/x-protobuf"})
        except httpx.HTTPError:
            return self._refused("HTTP: no answer")
        if response.status_code == 200:
            item.acked, item.status = time.time(), 200
        else:
            self._refused(f"HTTP {response.status_code}")

    def _send_grpc(self, export: Callable[..., bytes], item: Planned) -> None:
        try:
            export(item.body, timeout=60)
        except grpc.RpcError as exc:
            return self._refused(f"gRPC {exc.code().name}")  # type: ignore[attr-defined]
        item.acked, item.status = time.time(), 0


# -- the probe -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Window:
    sample: ProcessSample
    cpu_percent: float
    data_bytes: int
    lag_p99: float | None  # None: no request of the window reflected yet (or none sent)
    ack_p99: float | None  # of which the acknowledgement: scheduled send -> 200 (senders' backlog, queue, insert)
    requests: int
    scheduled_from: float  # the window: its requests are those scheduled in [scheduled_from, + WINDOW_SECONDS)


def grpc_endpoint(proc: ServeProcess) -> str:
    for line in proc.lines:
        if match := re.search(r"OTLP/gRPC on (\S+) ", line):
            return match.group(1)
    raise RuntimeError("serve announced no OTLP/gRPC endpoint")


def window_lag(load: Load, marks: Watermarks, start: float, end: float) -> tuple[float | None, float | None, int]:
    """Decision lag p99 and acknowledgement p99 of the requests scheduled in [start, end), and how many."""
    with load._lock:
        items = [p for p in list(load.sent) if start <= p.at < end and p.acked]
    lags = [seen - p.at for p in items if (seen := marks.reflected_at(p.acked)) is not None]
    if not lags:
        return None, None, len(items)
    return _p99(lags), _p99([p.acked - p.at for p in items]), len(items)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def run(args: argparse.Namespace) -> list[str]:
    seconds = float(getattr(args, "soak_seconds", 600.0))
    warmup = min(600.0, seconds / 4)
    load_before = os.getloadavg()[0]
    title = header(f"soak: {RATE:,} spans/s over {SESSIONS:,} sessions for {seconds:g} s, half OTLP/HTTP and half "
                   f"OTLP/gRPC, retention {RETENTION}")  # (it reads the load average now, before the load)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        config = Path(tmp) / "soak.yaml"
        config.write_text(SOAK_CONFIG)
        data = Path(tmp) / "data"
        with ServeProcess(data, config) as proc:
            time.sleep(IDLE_SETTLE_SECONDS)
            idle_before = idle_figures(proc.pid, proc.api)
            marks = Watermarks(proc.api)
            threading.Thread(target=marks.run, daemon=True).start()
            load = Load(proc.otlp, grpc_endpoint(proc), seconds)
            start = time.time() + 1.0
            sender = threading.Thread(target=load.run, args=(start,), daemon=True)
            sender.start()
            windows: list[Window] = []
            previous = process_sample(proc.pid)
            edge = start
            while sender.is_alive() or edge < start + seconds:
                time.sleep(max(0.0, edge + WINDOW_SECONDS - time.time()))
                sample = process_sample(proc.pid)
                # the window before this one: its requests have had a window's time to be reflected
                lag, ack, count = window_lag(load, marks, edge - WINDOW_SECONDS, edge)
                windows.append(Window(sample, cpu_percent(previous, sample), directory_bytes(data), lag, ack, count,
                                      edge))
                print(f"soak {sample.at - start:6.0f}s rss {sample.rss_bytes / 2**20:6.0f} MB threads "
                      f"{sample.threads} fds {sample.open_files} cpu {windows[-1].cpu_percent:5.1f}% "
                      f"data {windows[-1].data_bytes / 2**20:6.0f} MB lag p99 {lag} ack p99 {ack} "
                      f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
                previous, edge = sample, edge + WINDOW_SECONDS
                if edge > start + seconds + 300:  # a sender far behind: stop measuring, the table says it
                    break
            sender.join()
            last_ack = max((p.acked for p in load.sent), default=time.time())
            deadline = time.time() + 120
            while (not marks.marks or marks.marks[-1] < last_ack) and time.time() < deadline:
                time.sleep(0.1)
            # each window's lag again, now that every request is acknowledged and reflected (a window whose requests
            # were still queued in the senders when it was sampled had none)
            windows = [replace(w, **dict(zip(("lag_p99", "ack_p99", "requests"), window_lag(
                load, marks, w.scheduled_from, w.scheduled_from + WINDOW_SECONDS), strict=True)))
                for w in windows]
            time.sleep(max(0.0, last_ack + IDLE_AFTER_SECONDS - IDLE_MEASURE_SECONDS - time.time()))
            idle_after = idle_figures(proc.pid, proc.api)
            marks.stop.set()
            proc.terminate()
            proc.wait(180)
        kept_since = time.time() - _seconds(RETENTION) + 120  # what the retention still keeps, with a margin
        acked = sum(p.spans for p in load.sent if p.acked and p.at >= kept_since)
        from detector.storage.transport import ChdbStore

        store = ChdbStore(data)
        try:
            stored = store.rows(SELECT_STORED, {"since": int(kept_since * 1e6)})[0]
        finally:
            store.close()
        data_end = directory_bytes(data)
    return _table(title, warmup, load_before, load, windows, idle_before, idle_after, acked, stored, data_end)


def _seconds(duration: str) -> float:
    return float(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def _table(title: list[str], warmup: float, load_before: float, load: Load, windows: list[Window], idle_before: Idle,
           idle_after: Idle, acked: int, stored: dict[str, int], data_end: int) -> list[str]:
    first = windows[0].sample.at - WINDOW_SECONDS
    steady = [w for w in windows if w.sample.at - first >= warmup] or windows
    spans = sum(p.spans for p in load.sent if p.acked)
    offered = sum(p.spans for p in load.sent)
    lags = [w.lag_p99 for w in steady if w.lag_p99 is not None]
    lines = list(title)
    lines.append(row("load average (1 min) before / at the end", f"{load_before:.1f} / {os.getloadavg()[0]:.1f}",
                     "(2 CPUs, shared)"))
    lines.append(row("spans offered / acknowledged", f"{offered:,} / {spans:,}", "spans",
                     f"{spans / max(1, offered):.3f}"))
    sending = max((p.acked for p in load.sent if p.acked), default=first) - first  # the first send to the last 200
    lines.append(row("spans acknowledged per second, first send to last acknowledgement", spans / sending,
                     "spans/s", f"{spans / sending / RATE:.2f} x target"))
    lines.append(row("refusals (retried by the senders)", ", ".join(f"{k}: {v}" for k, v in sorted(
        load.refusals.items())) or "none", ""))
    lines.append(row(f"stored in otel_traces, of the spans acknowledged in the last {_seconds(RETENTION) / 60 - 2:g} "
                     "min (rows / distinct / acknowledged)",
                     f"{stored['rows']:,} / {stored['spans']:,} / {acked:,}", "spans",
                     f"{stored['spans'] / max(1, acked):.3f}"))
    for name, unit, value in (("resident memory", "MB", lambda w: w.sample.rss_bytes / 2**20),
                              ("open files", "fds", lambda w: float(w.sample.open_files)),
                              ("threads", "threads", lambda w: float(w.sample.threads)),
                              ("data directory", "MB", lambda w: w.data_bytes / 2**20)):
        values = [value(w) for w in steady]
        slope = slope_per_hour([(w.sample.at, value(w)) for w in steady])
        lines.append(row(f"{name}: after warm-up ({warmup:g} s) first / last / max", f"{values[0]:,.0f} / "
                         f"{values[-1]:,.0f} / {max(values):,.0f}", unit, f"{values[-1] / max(1e-9, values[0]):.2f}"))
        lines.append(row(f"{name}: slope after warm-up", f"{slope:+.1f}", "% per hour",
                         "flat (< 5%/h)" if abs(slope) < 5 else "GROWS" if slope > 0 else "shrinks"))
    if lags:
        slope = slope_per_hour([(w.sample.at, w.lag_p99) for w in steady if w.lag_p99 is not None])
        lines.append(row("decision lag p99 per window: first / median / max after warm-up",
                         f"{lags[0]:.2f} / {statistics.median(lags):.2f} / {max(lags):.2f}", "s",
                         f"{max(lags) / max(1e-9, lags[0]):.2f}"))
        lines.append(row("decision lag p99: slope after warm-up", f"{slope:+.1f}", "% per hour", ""))
        acks = [w.ack_p99 for w in steady if w.ack_p99 is not None]
        lines.append(row("of which the acknowledgement (scheduled send -> 200) p99: median / max of the windows",
                         f"{statistics.median(acks):.2f} / {max(acks):.2f}", "s", ""))
    lines.append(row("CPU under load (mean of the windows after warm-up)",
                     statistics.fmean(w.cpu_percent for w in steady), "% of a core", ""))
    lines.append(row("data directory after the stop", data_end / 2**20, "MB", ""))
    lines.append(row("idle before the load (baseline): CPU", idle_before.cpu_percent, "% of a core", "1.00"))
    lines.append(row(f"idle {IDLE_AFTER_SECONDS:g} s after the last span: CPU", idle_after.cpu_percent,
                     "% of a core", f"{idle_after.cpu_percent / max(1e-9, idle_before.cpu_percent):.2f} "
                     f"({'under' if idle_after.cpu_percent < IDLE_CPU_TARGET else 'OVER'} the 5% target)"))
    lines.append(row("idle before the load (baseline): threads", idle_before.threads, "threads", "1.00"))
    lines.append(row(f"idle {IDLE_AFTER_SECONDS:g} s after the last span: threads", idle_after.threads, "threads",
                     f"{idle_after.threads / max(1, idle_before.threads):.2f}"))
    lines.append(row("detection cycles per second: idle before / idle after",
                     f"{idle_before.cycles_per_second:.2f} / {idle_after.cycles_per_second:.2f}", "cycles/s", ""))
    return lines
