"""One export request on its way to the store: decoded (the rows to commit) and answered (its outcome)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa

from detector.settings.vocabulary import CommitStatus

__all__ = ["CommitOutcome", "DecodedRequest", "request_digest"]


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    """One export request, decoded: the accepted spans as ``otel.otel_traces`` columns (an Arrow table, e.g.
    ``SpanBatch.to_arrow()``), what the decoder rejected, and the request's identity for retries."""

    rows: pa.Table
    rejected: int = 0
    error_message: str = ""
    digest: bytes = b""  # request_digest() of the body; b"": not deduplicated

    @property
    def accepted(self) -> int:
        return int(self.rows.num_rows)


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """What to tell the sender. ``committed``: every accepted span is stored (``rejected`` of them were refused,
    ``error_message`` says why). ``retryable``: nothing of the request is acknowledged; send it again."""

    status: CommitStatus
    accepted: int = 0
    rejected: int = 0
    error_message: str = ""
    retry_reason: str = ""  # for retryable: the store's failure as type and error code only
    duplicate: bool = False  # a retry of a request already committed: nothing was stored this time


def request_digest(media_type: str, body: bytes) -> bytes:
    """The identity of an export request: its media type and decompressed body (exporters resend the same bytes)."""
    return hashlib.blake2b(media_type.encode() + b"\x00" + body, digest_size=16).digest()
