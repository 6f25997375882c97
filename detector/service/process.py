"""``loop-detector serve``: the OTLP receiver, the scheduled detector and the API in one process.

One process owns the store (a chDB data directory can be opened by one process only), so every
reader and writer goes through it. Two uvicorn servers share one event loop: the OTLP/HTTP receiver
(default :4318) and the HTTP API (default :8080); APScheduler runs the detection cycle every
``interval_seconds`` and the eviction job every ``eviction_interval_seconds`` in its own threads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from apscheduler.schedulers.background import BackgroundScheduler

from detector.api.app import create_api
from detector.api.metrics import Metrics
from detector.core.decisions import DecisionBook
from detector.detection.job import DetectorJob
from detector.enforcement.enforcer import Enforcer
from detector.enforcement.manual import ManualActions
from detector.enforcement.policy import PolicyOverrides
from detector.enforcement.preflight import PendingWindows
from detector.ingest.receiver import IngestMetrics, create_otlp_app
from detector.service.logs import TransitionLogger
from detector.service.memory import estimate_bytes
from detector.service.webhooks import WebhookDispatcher
from detector.settings.config import AppConfig, ConfigError, load_config
from detector.settings.vocabulary import SCOPE_SESSION
from detector.storage.schema import apply_schema
from detector.storage.transport import Store, open_store

__all__ = [
    "ADMIN_TOKEN_ENV", "ADMIN_TOKEN_FILE", "Endpoints", "Service", "free_port", "resolve_admin_token",
    "running_service",
]

log = logging.getLogger("loop_detector")

ADMIN_TOKEN_ENV = "LOOP_DETECTOR_ADMIN_TOKEN"
ADMIN_TOKEN_FILE = "admin-token"


@dataclass(slots=True)
class Endpoints:
    otlp: str
    api: str


def resolve_admin_token(config: AppConfig, data_dir: Path) -> str:
    """The admin token: config, else the environment, else a random one created at first start in
    ``<data-dir>/admin-token`` (mode 0600). Only the file's path is ever logged."""
    if config.api.admin_token:
        return config.api.admin_token
    env = os.environ.get(ADMIN_TOKEN_ENV)
    if env:
        return env
    path = data_dir / ADMIN_TOKEN_FILE
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    log.info("created admin token file %s (mode 0600)", path)
    return token


class Service:
    """Everything ``serve`` runs, wired together; usable in-process by tests and the demo."""

    def __init__(self, config: AppConfig, data_dir: str | os.PathLike[str], config_path: str | None = None,
                 store: Store | None = None, preset: str | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.preset = preset  # serve --preset: kept over the file's own `preset:` on every reload
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = store or open_store(self.data_dir, config.store.url)
        apply_schema(self.store, cluster=config.store.cluster)
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
        self.enforcer = Enforcer(self.book, self.manual, lambda: self.job.engine.budgets, self.preflight,
                                 lambda: self.config.rules)
        self.admin_token = resolve_admin_token(config, self.data_dir)
        self.ingest_metrics = IngestMetrics()
        self.started_at = time.time()
        self.metrics = Metrics(self.job, lambda: (self.ingest_metrics.spans_accepted,
                                                  self.ingest_metrics.spans_rejected))
        self.webhooks = WebhookDispatcher(config.webhooks, config.grafana_url) if config.webhooks else None
        self.job.on_cycle.extend([self.metrics.observe_cycle, TransitionLogger(self.store)])
        if self.webhooks is not None:
            self.job.on_cycle.append(lambda out, _stats: self.webhooks.submit(out.events))  # type: ignore[union-attr]
        self.otlp_app = create_otlp_app(self.store, config.ingest, self.ingest_metrics)
        self.api_app = create_api(self)
        self.scheduler: BackgroundScheduler | None = None
        self._reload_lock = threading.Lock()

    # -- what the API's routes ask (detector.api.ports.ServicePort) ------------------------------------------
    def pending_windows(self) -> int:
        return len(self.preflight)

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
    def _cycle(self) -> None:
        try:
            self.job.run_cycle()
        except Exception:  # keep the scheduler alive; the next cycle retries from the same watermark
            log.exception("detection cycle failed")

    def _evict(self) -> None:
        try:
            self.job.evict()
            timeout_us = self.config.loop_detection.session_timeout_minutes * 60 * 10**6
            self.preflight.evict_idle(int(time.time() * 1e6) - timeout_us)
        except Exception:
            log.exception("eviction failed")

    def start_scheduler(self) -> None:
        self.scheduler = BackgroundScheduler(daemon=True)
        self.scheduler.add_job(self._cycle, "interval", seconds=self.config.detector.interval_seconds,
                               id="detect", max_instances=1, coalesce=True)
        self.scheduler.add_job(self._evict, "interval", seconds=self.config.loop_detection.eviction_interval_seconds,
                               id="evict", max_instances=1, coalesce=True)
        self.scheduler.start()

    def stop_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=True)
            self.scheduler = None

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
        self.config = config
        self.job.reconfigure(config)
        if self.scheduler is not None:
            self.scheduler.reschedule_job("detect", trigger="interval", seconds=config.detector.interval_seconds)
        log.info("config applied; session state cleared")

    def apply_budgets(self, config: AppConfig) -> None:
        """Apply a config whose budgets changed (and nothing else): spend totals and session state are kept."""
        self.config = config
        self.job.update_budgets(config)

    # -- running ----------------------------------------------------------------------------------
    async def serve(self, host: str, otlp_port: int, api_port: int, install_signals: bool = True) -> None:
        servers = [
            uvicorn.Server(uvicorn.Config(self.otlp_app, host=host, port=otlp_port, log_level="warning",
                                          access_log=False, lifespan="off")),
            uvicorn.Server(uvicorn.Config(self.api_app, host=host, port=api_port, log_level="warning",
                                          access_log=False, lifespan="off")),
        ]
        self._servers = servers
        if install_signals:
            loop = asyncio.get_running_loop()
            with _suppress():
                loop.add_signal_handler(signal.SIGHUP, lambda: threading.Thread(target=self.reload).start())
        self.start_scheduler()
        try:
            await asyncio.gather(*(s.serve() for s in servers))
        finally:
            self.stop_scheduler()

    def request_stop(self) -> None:
        for s in getattr(self, "_servers", []):
            s.should_exit = True

    def close(self) -> None:
        self.stop_scheduler()
        try:
            self.job.checkpoint()
        except Exception:
            log.exception("final checkpoint failed; the next start replays from the previous one")
        if self.webhooks is not None:
            self.webhooks.close()
        self.store.close()


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
                    config_path: str | None = None) -> Iterator[tuple[Service, Endpoints]]:
    """Run a whole service in a background thread on free ports (tests, demo, eval, benchmarks)."""
    service = Service(config, data_dir, config_path=config_path)
    otlp_port, api_port = free_port(host), free_port(host)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(
        target=lambda: loop.run_until_complete(service.serve(host, otlp_port, api_port, install_signals=False)),
        daemon=True,
    )
    thread.start()
    endpoints = Endpoints(otlp=f"http://{host}:{otlp_port}", api=f"http://{host}:{api_port}")
    _wait_ready(endpoints.api + "/healthz")
    _wait_ready(endpoints.otlp + "/healthz")
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
