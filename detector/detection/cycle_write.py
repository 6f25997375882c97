"""What one detection cycle has to write once its calls are scored: kept whole until it is written.

The engine's state moves as soon as a cycle scores its calls, in memory; the watermark moves only once the cycle's
scores, events and decisions are written. A write that fails (a full disk, a store that went away) used to leave the
two apart: the next cycle read the same calls again from the old watermark and scored them a second time, in memory
and in ``otel.loop_scores`` (a new range, so a new deduplication token). Now the failed write is kept, as these
plain tables, and the next cycle writes it again, the same rows under the same tokens (what the failed attempt had
stored already is deduplicated, ``clickhouse/006_detector_dedup.sql``) before it reads anything new: a cycle that
cannot write waits, and resumes with no gap and nothing scored twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from detector.core.engine import CycleOutput

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CycleWrite"]


@dataclass(slots=True)
class CycleWrite:
    """One scored range's writes (built before the store is held; written, then the watermark moves to ``cutoff``)."""

    out: CycleOutput
    cutoff: int
    token: str  # the range's deduplication token: the same on every attempt
    replay: bool
    version: int
    now_us: int
    newest_us: int  # the newest call's insertion time (the decision lag)
    calls_read: int
    started: float  # perf_counter at the cycle's start
    phases: dict[str, float] = field(default_factory=dict)
    scores: pa.Table | None = None
    events: pa.Table | None = None
    announced: pa.Table | None = None  # budget exhaustions the API announced (drained from the engine once)
    decisions: pa.Table | None = None
    attempts: int = 0
