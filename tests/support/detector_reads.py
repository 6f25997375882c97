"""The calls of some traces as the detector reads them: their ``otel.genai_calls`` rows (the content that came in logs
joined in by the normalization), in span order, as dicts of ``Call`` fields."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from detector.core.models import Call
from detector.storage.call_rows import CALL_COLUMNS

__all__ = ["detector_calls"]


def detector_calls(store: Any, traces: list[str]) -> list[dict[str, Any]]:
    table = store.arrow(f"SELECT {CALL_COLUMNS} FROM otel.genai_calls WHERE trace_id IN {{t:Array(String)}} "
                        "ORDER BY ts, span_id", {"t": traces})
    return [asdict(c) for c in Call.from_columns(table.to_pydict())]
