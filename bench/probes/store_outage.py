"""``outage``: the ClickHouse server of a scaled deployment away for 60 s, then back (issue 32, part 2).

A real ``serve`` on the server store (clickhouse-connect), whose ClickHouse is the tests' stand-in (loop-detector's
own ClickHouse-compatible endpoint over chDB with writes enabled, in this process) behind a TCP proxy
(``tests/support/tcp_fault.py``). Twice: the server *stopped* (the proxy closes its port: connection refused), then
*hung* (connections accepted, never answered). Each time: 20 s of steady load (the baseline), 60 s away, then back
until every span the senders were told was stored is scored.

The senders behave as OTLP exporters do: one request at a time each (50 spans, a new conversation), the same bytes
again 1 s after a refusal or a timeout (15 s), the next request once acknowledged. A poller asks ``/v1/check`` every
50 ms throughout. Reported: spans offered / acknowledged / stored / scored (audited in the store, each call once per
scope), what the senders and the ``/v1/check`` callers were told, ``stale_seconds`` at its highest, the time from
the server's return to every acknowledged call scored and fresh decisions, the log lines the outage cost, and
``/v1/check``'s p99 during the outage against the baseline before it.

    .venv/bin/python bench/reliability.py --probes outage
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
from support.clickhouse_server import PASSWORD
from support.otlp_load import Request, audit_store
from support.otlp_senders import PROTOBUF, chat_spans, encode, new_conversation, trace_hex
from support.serve_process import ServeProcess
from support.servers import serve_app
from support.tcp_fault import FaultProxy, Mode

from detector.api.clickhouse_http import create_clickhouse_http_app
from detector.settings.service_settings import ClickHouseHttpSettings
from detector.storage.transport import ChdbStore
from probes.common import config_file, header, row

__all__ = ["run"]

BASELINE_SECONDS = 20.0
OUTAGE_SECONDS = 60.0
SENDERS = 4
SPANS_PER_REQUEST = 50
RETRY_SECONDS = 1.0  # an exporter's first backoff
SEND_TIMEOUT = 15.0  # longer than an exporter's 10 s: a timeout here is a hang, not a slow answer
CHECK_EVERY = 0.05
CATCH_UP_LIMIT = 300.0
QUERY_TIMEOUT = 5  # store.query_timeout_seconds: what a hung server costs the statement that meets it first
CONFIG = """detector:
  interval_seconds: 0.5
store:
  url: {url}
  query_timeout_seconds: {timeout}
"""


@dataclass
class Phase:
    check_ms: list[float] = field(default_factory=list)
    check_status: dict[int, int] = field(default_factory=dict)
    stale_max: float = 0.0
    send_status: dict[str, int] = field(default_factory=dict)
    offered_spans: int = 0


class Load:
    """The senders and the /v1/check poller; ``phase`` names where their figures go."""

    def __init__(self, otlp: str, api: str) -> None:
        self.otlp, self.api = otlp, api
        self.phases: dict[str, Phase] = {"before": Phase(), "outage": Phase(), "after": Phase()}
        self.phase = "before"
        self.requests: list[Request] = []
        self.session = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._send, daemon=True) for _ in range(SENDERS)]
        self._threads.append(threading.Thread(target=self._check, daemon=True))

    def start(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(SEND_TIMEOUT + 5)

    def _count(self, what: str) -> None:
        with self._lock:
            counts = self.phases[self.phase].send_status
            counts[what] = counts.get(what, 0) + 1

    def _send(self) -> None:
        with httpx.Client(timeout=SEND_TIMEOUT) as client:
            while not self._stop.is_set():
                conversation = new_conversation()
                spans = chat_spans(SPANS_PER_REQUEST, conversation, tool_every=4)
                tools = sum(1 for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool")
                request = Request(encode(spans), trace_hex(spans), len(spans), len(spans) - tools)
                with self._lock:
                    self.requests.append(request)
                    self.phases[self.phase].offered_spans += request.spans
                    self.session = self.session or conversation
                while not request.acked_at and not self._stop.is_set():
                    try:
                        response = client.post(self.otlp + "/v1/traces", content=request.body,
                                               headers={"Content-Type": PROTOBUF})
                    except httpx.TimeoutException:
                        self._count("timeout")
                    except httpx.HTTPError:
                        self._count("connection error")
                    else:
                        retry = response.headers.get("Retry-After")
                        self._count(f"{response.status_code}{' + Retry-After' if retry else ''}")
                        if response.status_code == 200:
                            request.acked_at = time.time()
                            continue
                    self._stop.wait(RETRY_SECONDS)

    def _check(self) -> None:
        with httpx.Client(timeout=SEND_TIMEOUT) as client:
            while not self._stop.is_set():
                phase = self.phases[self.phase]
                started = time.perf_counter()
                try:
                    response = client.post(self.api + "/v1/check", json={"session_id": self.session or "probe"})
                    status = response.status_code
                    stale = float(response.json().get("stale_seconds", 0.0)) if status == 200 else 0.0
                except httpx.HTTPError:
                    status, stale = 0, 0.0
                phase.check_ms.append((time.perf_counter() - started) * 1000)
                phase.check_status[status] = phase.check_status.get(status, 0) + 1
                phase.stale_max = max(phase.stale_max, stale)
                self._stop.wait(CHECK_EVERY)


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else (values[0] if values else 0.0)


def _told(counts: dict[str | int, int]) -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "none"


def _by_message(lines: list[str]) -> str:
    """The log lines by message (digits masked), the most frequent first: what an operator reads during an outage."""
    counts: Counter[str] = Counter()
    for line in lines:
        try:
            message = str(orjson.loads(line).get("message", ""))
        except orjson.JSONDecodeError:
            message = line.strip()
        counts[re.sub(r"\d+(\.\d+)?", "N", message)[:70]] += 1
    return "; ".join(f"{n} x '{m}'" for m, n in counts.most_common(4))


def _one(mode: Mode, label: str, base: Path) -> list[str]:
    # the stand-in server (tests/support/clickhouse_server.py), its store kept at hand for the audit
    audit_store_client = ChdbStore(base / f"clickhouse-{mode}")
    app = create_clickhouse_http_app(audit_store_client, PASSWORD, ClickHouseHttpSettings(port=0, allow_writes=True))
    with serve_app(app) as stand_in:
        upstream = urlsplit(stand_in)
        with FaultProxy(upstream.port or 8123) as proxy:
            url = f"http://default:{PASSWORD}@127.0.0.1:{proxy.port}"
            config = config_file(base, CONFIG.format(url=url, timeout=QUERY_TIMEOUT))
            proc = ServeProcess(base / f"data-{mode}", config).start()
            try:
                load = Load(proc.otlp, proc.api).start()
                time.sleep(BASELINE_SECONDS)
                lines_before = len(proc.lines)
                load.phase = "outage"
                proxy.set_mode(mode)
                time.sleep(OUTAGE_SECONDS)
                outage_lines = proc.lines[lines_before:]
                load.phase = "after"
                proxy.set_mode("pass")
                back = time.monotonic()
                caught_up = None
                while time.monotonic() - back < CATCH_UP_LIMIT:
                    acked = [r for r in list(load.requests) if r.acked_at and r.acked_at < time.time() - 1]
                    audit = audit_store(audit_store_client, acked)
                    stale = httpx.post(proc.api + "/v1/check", json={"session_id": "probe"}).json()["stale_seconds"]
                    if audit.scored_once and stale < 2.0:
                        caught_up = time.monotonic() - back
                        break
                    time.sleep(0.25)
                load.stop()
                proc.terminate()
                proc.wait(60)
                final = audit_store(audit_store_client, [r for r in load.requests if r.acked_at])
            finally:
                audit_store_client.close()
                if proc.proc is not None and proc.proc.poll() is None:
                    proc.kill9()
                    proc.wait(30)
    before, outage, after = (load.phases[p] for p in ("before", "outage", "after"))
    offered = sum(p.offered_spans for p in load.phases.values())
    base_p99 = _p99(before.check_ms)
    failing = sum("detection cycles failing" in line for line in outage_lines)
    lines = header(f"ClickHouse server {label} for {OUTAGE_SECONDS:.0f} s, {SENDERS} senders of "
                   f"{SPANS_PER_REQUEST}-span requests, a /v1/check every {CHECK_EVERY * 1000:.0f} ms")
    lines += [
        row("spans offered (distinct, first attempts)", offered, "spans"),
        row("spans acknowledged (200)", final.spans_sent, "spans"),
        row("acknowledged spans stored once / normalized once", f"{final.stored_spans:,} / {final.calls:,}",
            "spans", "exact" if final.exact else "NOT EXACT"),
        row("acknowledged calls scored once (session and trace scopes)",
            f"{final.scored_session:,} of {final.llm_calls:,}", "calls", "once" if final.scored_once else "NOT ONCE"),
        row("senders told, before", _told(before.send_status)),
        row("senders told, during the outage", _told(outage.send_status)),
        row("senders told, after", _told(after.send_status)),
        row("/v1/check answers, during the outage", _told(outage.check_status)),
        row("stale_seconds at its highest (/v1/check answers)", round(outage.stale_max, 1), "s",
            f"{outage.stale_max / OUTAGE_SECONDS:.2f} of the outage"),
        row("server back to every acknowledged call scored, decisions fresh (stale < 2 s)",
            round(caught_up, 1) if caught_up is not None else f"not within {CATCH_UP_LIMIT:.0f} s", "s"),
        row("log lines during the outage (all) / 'detection cycles failing'", f"{len(outage_lines)} / {failing}"),
        row("the most frequent of them", _by_message(outage_lines)),
        row("/v1/check p99, before (baseline)", round(base_p99, 2), "ms", "1.00"),
        row("/v1/check p99, during the outage", round(_p99(outage.check_ms), 2), "ms",
            f"{_p99(outage.check_ms) / base_p99:.2f}" if base_p99 else ""),
        row("/v1/check p99, after (catching up)", round(_p99(after.check_ms), 2), "ms",
            f"{_p99(after.check_ms) / base_p99:.2f}" if base_p99 else ""),
    ]
    return lines


def run(args: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="outage-probe-") as tmp:
        for mode, label in (("refuse", "stopped (port closed)"), ("blackhole", "hung (accepts, never answers)")):
            if lines:
                lines.append("")
            lines += _one(mode, label, Path(tmp))
    return lines
