"""What the HTTP routes need from the running service: a small ``Protocol``, so the API layer depends on it and
not on the process wiring (:class:`detector.service.process.Service` implements it).
"""

from __future__ import annotations

from typing import Any, Protocol

from detector.api.metrics import Metrics
from detector.detection.freshness import Freshness
from detector.enforcement.enforcer import Enforcer
from detector.enforcement.manual import ManualActions
from detector.enforcement.policy import PolicyOverrides
from detector.settings.config import AppConfig
from detector.storage.transport import Store

__all__ = ["DetectionStatus", "ListenEndpoints", "ServicePort", "WebhookOutboxView"]


class DetectionStatus(Protocol):
    """The detection job as the routes see it: its progress, and counts for the stats."""

    @property
    def watermark_us(self) -> int: ...

    @property
    def cycles(self) -> int: ...

    @property
    def evicted_total(self) -> int: ...

    @property
    def last_cycle_seconds(self) -> float: ...


class WebhookOutboxView(Protocol):
    """The webhook outbox as the admin routes see it."""

    def summary(self) -> dict[str, Any]: ...

    def dead_letters(self, limit: int = 100) -> list[dict[str, Any]]: ...

    def retry_dead_letters(self, event_id: str | None = None) -> int: ...


class ListenEndpoints(Protocol):
    """Where the service listens, as its startup line says it (``/healthz`` tells clients where to send spans)."""

    @property
    def otlp(self) -> str: ...  # the OTLP/HTTP receiver's base URL (spans to <otlp>/v1/traces)

    @property
    def otlp_grpc(self) -> str: ...  # host:port of the OTLP/gRPC receiver ('' when it is off)


class ServicePort(Protocol):
    """The service as the API's routes use it."""

    @property
    def config(self) -> AppConfig: ...

    @property
    def config_path(self) -> str | None: ...

    @property
    def preset(self) -> str | None: ...  # serve --preset, over the file's own (None: the file's)

    @property
    def admin_token(self) -> str: ...

    @property
    def api_token(self) -> str: ...  # the agents' token for the enforcement reads

    @property
    def api_token_required(self) -> bool: ...  # whether the enforcement reads need it (or the admin token)

    @property
    def started_at(self) -> float: ...

    @property
    def endpoints(self) -> ListenEndpoints | None: ...  # None until the listeners are bound

    @property
    def store(self) -> Store: ...  # the session views read it (SELECT only)

    @property
    def job(self) -> DetectionStatus: ...

    @property
    def freshness(self) -> Freshness: ...  # how old the decisions are, whether cycles fail now

    @property
    def enforcer(self) -> Enforcer: ...

    @property
    def manual(self) -> ManualActions: ...

    @property
    def policy(self) -> PolicyOverrides: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def webhooks(self) -> WebhookOutboxView | None: ...  # None when no webhook is configured

    def pending_windows(self) -> int:
        """Pending-call windows held for pre-flight checks."""
        ...

    def degraded_reasons(self) -> list[str]:
        """Why the service is degraded now (``/healthz``), e.g. its data directory short of free space; [] if not."""
        ...

    def estimated_memory_bytes(self) -> int:
        """Scope states, pending-call windows and budget totals held in memory (an estimate)."""
        ...

    def reset_session(self, session_id: str) -> list[str] | None:
        """Fresh state for a session and its traces; the traces reset, or None when the session is unknown."""
        ...

    def reload(self) -> list[str]:
        """Reload the config file; every error, or [] when it applied."""
        ...

    def apply_config(self, config: AppConfig) -> None: ...

    def apply_budgets(self, config: AppConfig) -> None: ...
