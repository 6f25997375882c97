"""How the detector reads :class:`~detector.core.models.Call` records from ``otel.genai_calls``.

The select list is derived from ``Call``'s fields (declared once, in the dataclass): each field is the column
of the same name, except the times, which are read as integers.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Final

from detector.core.models import Call

__all__ = ["CALL_COLUMNS"]

# The fields that are not a column of the same name: the expression that gives them.
_EXPRESSIONS: Final = {
    "ts_ns": "toUnixTimestamp64Nano(ts)",
    "end_ns": "toUnixTimestamp64Nano(end_ts)",
    "inserted_us": "toUnixTimestamp64Micro(inserted_at)",
}

CALL_COLUMNS: Final = ", ".join(f"{_EXPRESSIONS[f.name]} AS {f.name}" if f.name in _EXPRESSIONS else f.name
                                for f in fields(Call))
