"""What every baseline reads: one :class:`StoredCall` per model call, built from the rows the pipeline stored."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Baseline", "StoredCall", "ToolRun"]


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One ``execute_tool`` span."""

    fp: int  # tool name + argument values (name only when arguments were not captured)
    is_error: bool = False
    error_fp: int = 0
    result_fp: int = 0  # exact hash of the captured result; 0 when the result was not captured


@dataclass(frozen=True, slots=True)
class StoredCall:
    """One model call and the tools it ran, as stored."""

    trace_id: str
    session_id: str
    request_fp: int  # the whole input (structural when content is off)
    is_error: bool = False  # the model call itself failed
    error_fp: int = 0
    output_fp: int = 0  # exact hash of the captured output messages; 0 when not captured
    tools: tuple[ToolRun, ...] = ()


class Baseline(Protocol):
    name: str  # short id, used in JSON
    label: str  # what the table shows
    source: str  # where the published behaviour is described

    def observe(self, step: StoredCall) -> bool:
        """Account one call (in order); True when the rule fires on it."""
        ...
