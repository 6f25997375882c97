"""``loop-detector serve``: the OTLP receiver, the scheduled detector and the API in one process.

One process owns the store (a chDB data directory can be opened by one process only), so every
reader and writer goes through it. One event loop serves the OTLP/HTTP receiver (default :4318), the OTLP/gRPC
receiver (default :4317), the HTTP API (default :8080) and, when configured, the read-only ClickHouse HTTP
endpoint; the detection cycle runs every ``interval_seconds`` in its own thread (:mod:`detector.service.cycle_loop`),
and APScheduler runs the eviction job every ``eviction_interval_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler

from detector.api.app import create_api
from detector.api.clickhouse_http import create_clickhouse_http_app
from detector.api.metrics import KeyLabels, Metrics
from detector.core.decisions import DecisionBook
from detector.detection.freshness import Freshness
from detector.detection.job import DetectorJob
from detector.enforcement.enforcer import Enforcer
from detector.enforcement.manual import ManualActions
from detector.enforcement.policy import PolicyOverrides
from detector.enforcement.preflight import PendingWindows
from detector.ingest.admission import Admission
from detector.ingest.commit import Committer
from detector.ingest.counters import IngestMetrics
from detector.ingest.grpc_receiver import GrpcBindError, OTLPGrpcReceiver
from detector.ingest.receiver import create_otlp_app
from detector.service.admission_metrics import AdmissionMetrics
from detector.service.credentials import (
    API_TOKEN_FILE,
    api_token_required,
    is_loopback,
    otlp_tls,
    otlp_tokens,
    resolve_admin_token,
    resolve_api_token,
    resolve_clickhouse_password,
)
from detector.service.cycle_loop import CycleLoop
from detector.service.data_dir import private_directory
from detector.service.http_server import Server, make_server
from detector.service.listeners import OTLP_GRPC, ListenError, Listeners, open_listeners
from detector.service.log_output import TransitionLogger
from detector.service.memory import estimate_bytes
from detector.service.webhooks import WebhookDispatcher, WebhookMetrics
from detector.settings.config import AppConfig, ConfigError, load_config
from detector.settings.vocabulary import SCOPE_SESSION
from detector.storage.disk_space import FreeSpace
from detector.storage.embedded_tables import apply_embedded_table_settings
from detector.storage.retention import apply_retention
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore, Store, open_store

__all__ = ["Endpoints", "INGEST_JOURNAL_DIR", "Service", "free_port", "running_service"]

log = logging.getLogger("loop_detector")

WEBHOOK_FLUSH_SECONDS = 5.0  # at shutdown, deliveries due now get this long (the outbox keeps the rest)
INGEST_JOURNAL_DIR = "ingest-journal"  # batches being committed, and the committed requests (idempotent retries)


@dataclass(slots=True)
class Endpoints:
    otlp: str
    api: str
    otlp_grpc: str = ""  # host:port of the OTLP/gRPC receiver ('' when it is off or not started yet)
    clickhouse: str | None = None  # the ClickHouse-compatible HTTP endpoint, when configured


class Service:
    """Everything ``serve`` runs, wired together; usable in-process by tests and the demo."""

    def __init__(self, config: AppConfig, data_dir: str | os.PathLike[str], config_path: str | None = None,
                 store: Store | None = None, preset: str | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.preset = preset  # serve --preset: kept over the file's own `preset:` on every reload
        self.data_dir = Path(data_dir)
        private_directory(self.data_dir)
        self.store = store or open_store(self.data_dir, config.store.url, config.store.connect_timeout_seconds,
                                         config.store.query_timeout_seconds)
        apply_schema(self.store, cluster=config.store.cluster)
        if isinstance(self.store, ChdbStore):  # no burst of part clean-up threads left behind (embedded_tables.py)
            apply_embedded_table_settings(self.store)
        self._apply_retention(config)
        self.policy = PolicyOverrides(self.store).load()  # rules / budgets set through the admin API
        config = self.config = self.policy.apply(config)
        self.book = DecisionBook()
        self.job = DetectorJob(self.store, config, self.book)
        self.job.load()
        self.manual = ManualActions(self.store)
        self.manual.load()
        self.preflight = PendingWindows()
        self.job.on_evict.append(lambda gone: self.preflight.forget_sessions(
            {scope_id for scope, scope_id in gone if scope == SCOPE_SESSION}))
        # the pre-flight check reads the rules as the engine planned them (one parse, the same plain values)
        self.enforcer = Enforcer(self.book, self.manual, lambda: self.job.engine.budgets, self.preflight,
                                 lambda: self.job.engine.tuning.rules, lambda: self.config.loop_detection.progress.enabled
                                 and self.config.loop_detection.progress.early_warning)
        self.admin_token = resolve_admin_token(config, self.data_dir)
        self.api_token = resolve_api_token(config, self.data_dir)
        # decided when the API binds (auto: beyond loopback); before that, as "always" would say
        self.api_token_required = config.api.require_api_token == "always"
        self.ingest_metrics = IngestMetrics()
        # before the receiver serves: batches a killed process left half stored are completed (or refused) first
        self.free_space = FreeSpace(self.data_dir, config.ingest.min_free_bytes)  # ingest refuses below it
        self.committer = Committer(self.store, self.ingest_metrics, self.data_dir / INGEST_JOURNAL_DIR,
                                   free_space=self.free_space)
        self.committer.recover()
        self.started_at = time.time()
        self.freshness = Freshness()  # the decisions' age (as of the load above), and failing cycles
        self.metrics = Metrics(self.job, lambda: (self.ingest_metrics.spans_accepted,
                                                  self.ingest_metrics.spans_rejected),
                               KeyLabels(lambda: self.config.virtual_keys, lambda: self.config.metrics.max_key_labels),
                               self.freshness)
        self.job.on_cycle.extend([self.metrics.observe_cycle, TransitionLogger(self.store)])
        self.webhooks: WebhookDispatcher | None = None
        self._start_webhooks(config)
        self.otlp_tokens = otlp_tokens(config)
        # overload: both receivers refuse past the same bounds, the detector's backlog included (its watermark,
        # shifted by the configured lag: a span is read once the cutoff, now - lag, passes it), unless the cycles fail
        self.admission = Admission.from_settings(config.ingest, lambda: (
            self.job.watermark_us / 1e6 + self.config.detector.watermark_lag_seconds),
            stalled=lambda: self.freshness.failing_cycles > 0)
        self.metrics.registry.register(AdmissionMetrics(self.admission))
        self.otlp_app = create_otlp_app(self.store, config.ingest, committer=self.committer,
                                        bearer_tokens=self.otlp_tokens, admission=self.admission)
        # the OTLP/gRPC receiver commits through the HTTP receiver's committers (one commit path for both)
        self.grpc_receiver = OTLPGrpcReceiver(self.committer, self.otlp_app.state.logs_committer, config.ingest,
                                              self.ingest_metrics, admission=self.admission,
                                              bearer_tokens=self.otlp_tokens)
        self.clickhouse_app = None  # the ClickHouse-compatible HTTP endpoint, when clickhouse_http.port is set
        if config.clickhouse_http.port is not None:
            self.clickhouse_app = create_clickhouse_http_app(
                self.store, resolve_clickhouse_password(config, self.data_dir), config.clickhouse_http)
        self.api_app = create_api(self)
        self.scheduler: BackgroundScheduler | None = None  # the eviction job
        self.cycles: CycleLoop | None = None  # the detection cycle's schedule
        self._reload_lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._servers: list[Server] = []
        self._stopping = False
        self._closed = False
        self.host = ""
        self.endpoints: Endpoints | None = None

    # -- what the API's routes ask (detector.api.ports.ServicePort) ------------------------------------------
    def pending_windows(self) -> int:
        return len(self.preflight)

    def degraded_reasons(self) -> list[str]:
        shortage = self.free_space.shortage()
        return [f"disk: {shortage}; OTLP requests are refused (retryable) until space is freed"] if shortage else []

    def estimated_memory_bytes(self) -> int:
        return estimate_bytes([*self.job.memory_groups(), self.preflight.snapshot()])

    def reset_session(self, session_id: str) -> list[str] | None:
        """Fresh state for a session and its traces (detector state and pending-call windows), recorded as an
        operator's action; None when the session is unknown. Manual blocks and budget spend are not touched."""
        traces = self.job.reset_session(session_id)
        if traces is None:
            return None
        self.preflight.forget_sessions([session_id], traces)
        self.manual.record(SCOPE_SESSION, session_id, "reset", f"session reset by an operator ({len(traces)} trace(s))",
                           detector="reset_session")
        return traces

    # -- scheduling -----------------------------------------------------------------------------
    def _evict(self) -> None:
        if self.freshness.failing_cycles:  # the store fails: eviction would drop states it cannot mark (deferred)
            return
        try:
            self.job.evict()
            timeout_us = self.config.loop_detection.session_timeout_minutes * 60 * 10**6
            self.preflight.evict_idle(int(time.time() * 1e6) - timeout_us)
        except Exception:
            log.exception("eviction failed")

    def start_scheduler(self) -> None:
        detector = self.config.detector
        self.cycles = CycleLoop(self.job.run_cycle, detector.interval_seconds, detector.min_interval_seconds,
                                idle_interval_seconds=self._idle_interval(self.config),
                                settle_seconds=detector.watermark_lag_seconds,
                                pending=lambda: bool(self.job.engine.budgets.pending_events), freshness=self.freshness)
        self.committer.on_committed = self.cycles.nudge  # new spans: a cycle soon, not at the next interval
        self.cycles.start()
        self.scheduler = BackgroundScheduler(daemon=True)
        self.scheduler.add_job(self._evict, "interval", seconds=self.config.loop_detection.eviction_interval_seconds,
                               id="evict", max_instances=1, coalesce=True)
        self.scheduler.start()

    def _idle_interval(self, config: AppConfig) -> float | None:
        """The quiet cycles' longest gap: on the embedded store only (every span comes through the receiver, which
        nudges the loop); spans a Collector writes into a server are not seen arriving."""
        return config.detector.idle_interval_seconds if isinstance(self.store, ChdbStore) else None

    def stop_scheduler(self) -> None:
        if self.cycles is not None:
            self.committer.on_committed = None
            self.cycles.stop()
            self.cycles = None
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=True)
            self.scheduler = None

    def _start_webhooks(self, config: AppConfig) -> None:
        """The outbox worker, on the first detector replica only (one deliverer, no duplicates across replicas)."""
        if self.webhooks is not None:
            self.webhooks.update(config.webhooks, config.webhook_delivery, config.grafana_url)
            return
        if not config.webhooks or config.detector.shard_index != 0:
            return
        self.webhooks = WebhookDispatcher(self.store, config.webhooks, config.webhook_delivery, config.grafana_url,
                                          lag_seconds=config.detector.watermark_lag_seconds)
        self.job.on_cycle.append(self.webhooks.notify)
        self.metrics.registry.register(WebhookMetrics(self.webhooks))

    def _apply_retention(self, config: AppConfig) -> None:
        for change in apply_retention(self.store, config.retention, config.store.cluster):
            log.info("retention changed", extra={"table": change.table, "ttl": change.after or "none"})

    # -- configuration ----------------------------------------------------------------------------
    def reload(self) -> list[str]:
        """Hot reload from the config file: on error keep the old config and return every error; on
        success apply it and clear session state. Returns [] on success."""
        with self._reload_lock:
            if not self.config_path:
                return ["no config file to reload (serve was started without --config)"]
            try:
                config = load_config(self.config_path, preset=self.preset)
            except ConfigError as exc:
                log.error("config reload rejected", extra={"errors": exc.errors})
                return exc.errors
            self.apply_config(self.policy.apply(config))
            return []

    def apply_config(self, config: AppConfig) -> None:
        if config.retention != self.config.retention:
            self._apply_retention(config)
        if (config.webhooks, config.webhook_delivery) != (self.config.webhooks, self.config.webhook_delivery):
            self._start_webhooks(config)
        self.config = config
        self.free_space.min_free_bytes = config.ingest.min_free_bytes
        self.job.reconfigure(config)
        if self.cycles is not None:
            self.cycles.interval_seconds = config.detector.interval_seconds
            self.cycles.min_interval_seconds = config.detector.min_interval_seconds
            self.cycles.idle_interval_seconds = self._idle_interval(config)
            self.cycles.settle_seconds = config.detector.watermark_lag_seconds
        log.info("config applied; session state cleared")

    def apply_budgets(self, config: AppConfig) -> None:
        """Apply a config whose budgets changed (and nothing else): spend totals and session state are kept."""
        self.config = config
        self.job.update_budgets(config)

    # -- running ----------------------------------------------------------------------------------
    def bind(self, host: str, otlp_port: int, api_port: int, clickhouse_port: int | None = None) -> Endpoints:
        """Open the HTTP listening sockets (port 0: a free one): OTLP, API, and the ClickHouse endpoint when it is
        configured (on ``clickhouse_port``, else the configured port); the endpoints say which ports they got. The
        OTLP/gRPC receiver binds when :meth:`serve` starts it."""
        port = None
        if self.clickhouse_app is not None:
            port = clickhouse_port if clickhouse_port is not None else self.config.clickhouse_http.port
            port = port if port is not None else 0
        return self.listen_on(open_listeners(host, otlp_port, api_port, port))

    def listen_on(self, listeners: Listeners) -> Endpoints:
        """Serve on sockets bound already (``serve`` binds them before it creates anything: :mod:`listeners`)."""
        if (listeners.clickhouse is None) != (self.clickhouse_app is None):
            listeners.close()
            raise ValueError("a ClickHouse HTTP listener without the endpoint configured, or the other way round")
        host = listeners.host
        self._sockets = [s for s in (listeners.otlp, listeners.api, listeners.clickhouse) if s is not None]
        self.host = host
        self.api_token_required = api_token_required(self.config.api.require_api_token, host)
        if self.api_token_required:
            log.info("the enforcement reads need the API token (%s/%s)", self.data_dir, API_TOKEN_FILE)
        ports = [sock.getsockname()[1] for sock in self._sockets]
        shown = _url_host(host)
        scheme = "https" if self.config.ingest.tls is not None else "http"
        self.endpoints = Endpoints(otlp=f"{scheme}://{shown}:{ports[0]}", api=f"http://{shown}:{ports[1]}",
                                   clickhouse=f"http://{shown}:{ports[2]}" if len(ports) > 2 else None)
        if not is_loopback(host) and not self.otlp_tokens and not (
                self.config.ingest.tls is not None and self.config.ingest.tls.client_ca_file):
            log.warning("the OTLP receiver listens beyond loopback without authentication: anyone who reaches it "
                        "can send spans (set ingest.bearer_tokens or mutual TLS)")
        return self.endpoints

    async def serve(self, host: str = "127.0.0.1", otlp_port: int = 4318, api_port: int = 8080,
                    install_signals: bool = True, otlp_grpc_port: int | None = None,
                    on_ready: Callable[[Endpoints], None] | None = None) -> None:
        """Serve until :meth:`request_stop` (or SIGTERM / SIGINT with ``install_signals``: a first signal stops
        gracefully, a second one at once). The caller then calls :meth:`close`. ``otlp_grpc_port``: None, no
        OTLP/gRPC receiver; 0, a free port. ``on_ready`` is called with the endpoints once every listener is up."""
        if not self._sockets:
            self.bind(host, otlp_port, api_port)
        assert self.endpoints is not None
        if otlp_grpc_port is not None:
            try:
                port = await self.grpc_receiver.start(self.host, otlp_grpc_port)
            except GrpcBindError:  # the bind alone: a TLS file that cannot be read is not a port in use
                raise ListenError(self.host, otlp_grpc_port, OTLP_GRPC, "in use, or not an address of this host",
                                  f"choose another port with {OTLP_GRPC.flag} (0: a free one), or --no-otlp-grpc"
                                  ) from None
            self.endpoints.otlp_grpc = f"{_url_host(self.host)}:{port}"
        servers = [make_server(self.otlp_app, self.config.http, **otlp_tls(self.config)),
                   make_server(self.api_app, self.config.http)]
        if self.clickhouse_app is not None:
            servers.append(make_server(self.clickhouse_app, self.config.http))
        self._servers = servers
        loop = asyncio.get_running_loop()
        handled: list[int] = []
        if install_signals:
            with _suppress():
                loop.add_signal_handler(signal.SIGHUP, lambda: threading.Thread(target=self.reload).start())
                handled.append(signal.SIGHUP)
            for sig in (signal.SIGTERM, signal.SIGINT):
                with _suppress():
                    loop.add_signal_handler(sig, self._on_stop_signal, sig)
                    handled.append(sig)
        self.start_scheduler()
        watching = asyncio.create_task(self.admission.watch_loop())  # the event loop's delay: the API's latency
        if on_ready is not None:
            on_ready(self.endpoints)
        try:
            await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in zip(servers, self._sockets,
                                                                                          strict=True)))
        finally:
            watching.cancel()
            await self.grpc_receiver.stop()
            for sig in handled:
                with _suppress():
                    loop.remove_signal_handler(sig)
            self.stop_scheduler()

    def _on_stop_signal(self, sig: int) -> None:
        if self._stopping:  # a second signal: do not wait for the requests in flight
            log.warning("second %s: stopping now", signal.Signals(sig).name)
            for server in self._servers:
                server.force_exit = True
            return
        self._stopping = True
        log.info("%s received: stopping (requests in flight finish, then a final cycle and checkpoint)",
                 signal.Signals(sig).name)
        self.request_stop()

    def request_stop(self) -> None:
        for s in self._servers:
            s.should_exit = True

    def close(self) -> None:
        """Stop everything in order: no more cycles, the insert in progress finished, a final detection cycle (the
        spans acknowledged are scored), a final checkpoint, webhooks flushed (bounded), the store closed."""
        if self._closed:
            return
        self._closed = True
        self.stop_scheduler()
        self.committer.close()
        try:
            self.job.run_cycle()
        except Exception:
            log.exception("final detection cycle failed; the next start reads from the last watermark")
        try:
            self.job.checkpoint()
        except Exception:
            log.exception("final checkpoint failed; the next start replays from the previous one")
        if self.webhooks is not None:
            # what is due now is delivered (bounded); the rest stays in the persisted outbox for the next start
            self.webhooks.flush(timeout=WEBHOOK_FLUSH_SECONDS, pending=False)
            self.webhooks.close()
        self.store.close()
        log.info("stopped", extra={"watermark_us": self.job.watermark_us, "checkpoint_us": self.job.checkpoint_us})


def _url_host(host: str) -> str:
    """A listen address as it goes before ``:port`` (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


@contextmanager
def _suppress() -> Iterator[None]:
    with suppress(NotImplementedError, RuntimeError, ValueError):
        yield


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def running_service(config: AppConfig, data_dir: str | os.PathLike[str], host: str = "127.0.0.1",
                    config_path: str | None = None, otlp_grpc_port: int = 0) -> Iterator[tuple[Service, Endpoints]]:
    """Run a whole service in a background thread on free ports (tests, demo, eval, benchmarks); the OTLP/gRPC
    receiver on ``otlp_grpc_port`` (0: a free one)."""
    service = Service(config, data_dir, config_path=config_path)
    endpoints = service.bind(host, 0, 0, clickhouse_port=0)
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(
        target=lambda: loop.run_until_complete(service.serve(install_signals=False, otlp_grpc_port=otlp_grpc_port,
                                                             on_ready=lambda _endpoints: ready.set())),
        daemon=True,
    )
    thread.start()
    if not ready.wait(60):
        raise RuntimeError("service did not start")
    _wait_ready(endpoints.api + "/healthz")  # (the OTLP socket listens already: requests queue until it serves)
    if endpoints.clickhouse:
        _wait_ready(endpoints.clickhouse + "/ping")
    try:
        yield service, endpoints
    finally:
        service.request_stop()
        thread.join(timeout=15)
        service.close()


def _wait_ready(url: str, attempts: int = 200) -> None:
    import time

    import httpx

    for _ in range(attempts):
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"service did not become ready at {url}")
