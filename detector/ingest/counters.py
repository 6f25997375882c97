"""Ingest's counters: what the receivers and the committers did, read by ``/metrics`` and by tests."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["IngestMetrics"]


@dataclass
class IngestMetrics:
    """Counters the receivers and the committers update (one instance per service, shared by both transports)."""

    spans_accepted: int = 0
    spans_rejected: int = 0
    requests_by_status: Counter[int] = field(default_factory=Counter)
    grpc_requests_by_code: Counter[str] = field(default_factory=Counter)  # OTLP/gRPC answers by status code
    logs_accepted: int = 0
    logs_rejected: int = 0
    inserts: int = 0  # store inserts of a group (one per group commit)
    insert_seconds: float = 0.0  # wall time spent inside the store's insert
    failed_inserts: int = 0  # group inserts the store failed (each then resolved request by request)
    store_rejected: int = 0  # spans the store refused, found by isolating them
    duplicates: int = 0  # retried requests acknowledged again without storing anything
    repaired_batches: int = 0  # journaled batches resolved after a failure or at start
    disk_refusals: int = 0  # requests refused (retryable) because the data directory was short of free space
