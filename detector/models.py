"""Plain data the detection core works on: a stored GenAI call, and a scored turn.

No I/O here. :class:`Call` mirrors one row of ``otel.genai_calls`` (see ``clickhouse/002_genai_calls.sql``);
:class:`Turn` is what the scoring core sees: one LLM inference call plus the ``execute_tool`` spans of
the same trace that are attributed to it, with its cost resolved.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})

# The columns the detector reads from otel.genai_calls, in Call's field order.
CALL_COLUMNS = (
    "toUnixTimestamp64Nano(ts) AS ts_ns, toUnixTimestamp64Nano(end_ts) AS end_ns, "
    "toUnixTimestamp64Micro(inserted_at) AS inserted_us, trace_id, span_id, parent_span_id, session_id, "
    "session_source, virtual_key, feature, service_name, operation, call_kind, provider, model, agent_name, "
    "tool_name, tool_call_id, input_tokens, output_tokens, cost_usd, is_error, error_type, finish_reasons, "
    "has_content, request_fp, turn_fp, input_simhash, output_simhash, tool_fp, tool_shape_fp, out_tool_names, "
    "out_tool_fps, response_fp, error_fp"
)


@dataclass(slots=True)
class Call:
    """One GenAI span, normalized (a row of ``otel.genai_calls``).

    Treated as immutable but not ``frozen``: a frozen dataclass sets each of its 35 fields through
    ``object.__setattr__``, which made building a cycle's calls cost ~7.5 us each instead of ~1.5.
    """

    ts_ns: int
    trace_id: str
    span_id: str
    session_id: str
    operation: str = "chat"
    call_kind: str = "llm"
    end_ns: int = 0
    inserted_us: int = 0
    parent_span_id: str = ""
    session_source: str = "gen_ai.conversation.id"
    virtual_key: str = ""
    feature: str = ""
    service_name: str = ""
    provider: str = ""
    model: str = ""
    agent_name: str = ""
    tool_name: str = ""
    tool_call_id: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    is_error: bool = False
    error_type: str = ""
    finish_reasons: tuple[str, ...] = ()
    has_content: bool = False
    request_fp: int = 0
    turn_fp: int = 0
    input_simhash: int = 0
    output_simhash: int = 0
    tool_fp: int = 0
    tool_shape_fp: int = 0
    out_tool_names: tuple[str, ...] = ()
    out_tool_fps: tuple[int, ...] = ()
    response_fp: int = 0
    error_fp: int = 0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Call:
        """Build from a query row (the row dict is reused: callers hand over rows they just parsed)."""
        for name in _BOOL_FIELDS:
            row[name] = bool(row.get(name, 0))
        for name in _TUPLE_FIELDS:
            row[name] = tuple(row.get(name) or ())
        return cls(**row)

    @classmethod
    def from_columns(cls, columns: Mapping[str, list[Any]]) -> list[Call]:
        """Build from a query's columns (``store.arrow(...).to_pydict()``): about 3x cheaper per call than
        parsing JSON rows and :meth:`from_row`, which matters when a cycle reads thousands of calls."""
        lists: list[Iterable[Any]] = []
        for name in _CALL_FIELDS:
            values = columns[name]
            if name in _BOOL_FIELDS:
                lists.append(map(bool, values))
            elif name in _TUPLE_FIELDS:
                lists.append(map(tuple, values))
            else:
                lists.append(values)
        return [cls(*values) for values in zip(*lists, strict=True)]

    @property
    def is_llm(self) -> bool:
        return self.operation in LLM_OPERATIONS

    @property
    def is_tool(self) -> bool:
        return self.operation == "execute_tool"

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


_CALL_FIELDS = tuple(f.name for f in fields(Call))
_BOOL_FIELDS = frozenset({"is_error", "has_content"})
_TUPLE_FIELDS = frozenset({"finish_reasons", "out_tool_names", "out_tool_fps"})


@dataclass(slots=True)
class Turn:
    """One scored LLM call, with the tool executions attributed to it and its cost resolved."""

    call: Call
    tools: list[Call] = field(default_factory=list)
    cost_usd: float = 0.0
    compact: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # persisted form, cached
    view: Any = field(default=None, repr=False, compare=False)  # what the signals read, cached by them

    @property
    def ts_ns(self) -> int:
        return self.call.ts_ns

    @property
    def tokens(self) -> int:
        return self.call.tokens

    @property
    def tool_fps(self) -> tuple[int, ...]:
        """Fingerprints (name + argument values) of this turn's own tool calls, in order.

        With content capture on they come from the call's output messages (the calls it asked for);
        without it, from the execute_tool spans attributed to the turn (those run since the trace's
        previous LLM call). Never both, so a healthy run's consecutive steps do not overlap.
        """
        if self.call.out_tool_fps:
            return self.call.out_tool_fps
        return tuple(t.tool_fp for t in self.tools if t.tool_fp)

    @property
    def tool_names(self) -> tuple[str, ...]:
        if self.call.out_tool_names:
            return self.call.out_tool_names
        return tuple(t.tool_name for t in self.tools if t.tool_name)

    @property
    def tool_error_fps(self) -> tuple[int, ...]:
        return tuple(t.error_fp for t in self.tools if t.is_error)

    @property
    def is_error(self) -> bool:
        """The call itself failed, or one of its tools did."""
        return self.call.is_error or any(t.is_error for t in self.tools)

    @property
    def error_fps(self) -> tuple[int, ...]:
        fps = [self.call.error_fp] if self.call.is_error else []
        return tuple(fps) + self.tool_error_fps


@functools.lru_cache(maxsize=4096)
def _utc_second(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def ns_to_ch(ns: int) -> str:
    """Unix nanoseconds as a ClickHouse DateTime64(9) literal in UTC ('YYYY-MM-DD HH:MM:SS.nnnnnnnnn')."""
    seconds, frac = divmod(int(ns), 1_000_000_000)
    return f"{_utc_second(seconds)}.{frac:09d}"
