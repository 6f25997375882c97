"""What the engine remembers about one scope (a session, a trace, a key or a feature), and its persisted form.

Pure data. A scope's state is checkpointed as one ``otel.loop_state`` row (:meth:`ScopeState.to_row`, the
JSON of :meth:`ScopeState.to_json`) and rebuilt from it after a restart (:meth:`ScopeState.from_row`); its
history keeps each turn in a compact form (the call fields that differ from their defaults, minus the ids
the scope already has).
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

from detector.core.escalation import Escalation
from detector.core.models import Call, Turn, ns_to_ch
from detector.core.progress import ProgressMemory
from detector.core.rules import FailureStreak, VelocityState
from detector.core.window import SignalWindow

__all__ = ["REQUEST_FP_WINDOW", "RuleTrip", "ScopeState", "call_from_compact", "call_to_compact",
           "turn_from_compact", "turn_to_compact"]

REQUEST_FP_WINDOW: Final = 100  # the largest exact_prompt_repeat window allowed
NO_TRIPS: Final[tuple[Any, ...]] = ()  # a scope's rule trips as the decision check compares them, when it has none

# Call fields worth keeping in a persisted history (the rest are ids and keys the scope already has).
_COMPACT_SKIP = {"trace_id", "span_id", "parent_span_id", "session_id", "session_source", "virtual_key", "feature",
                 "service_name", "agent_name", "tool_call_id", "inserted_us", "provider"}
_CALL_DEFAULTS = {f.name: f.default for f in fields(Call)}


_COMPACT_FIELDS = tuple(f.name for f in fields(Call) if f.name not in _COMPACT_SKIP)


def call_to_compact(call: Call) -> dict[str, Any]:
    out = {}
    for name in _COMPACT_FIELDS:
        value = getattr(call, name)
        if value != _CALL_DEFAULTS[name]:
            out[name] = value
    return out


def call_from_compact(data: dict[str, Any]) -> Call:
    values = {"trace_id": "", "span_id": "", "session_id": "", **data}
    for name in ("finish_reasons", "out_tool_names", "out_tool_fps", "out_tool_arg_simhashes"):
        if name in values:
            values[name] = tuple(values[name])
    return Call(**values)


def turn_to_compact(turn: Turn) -> dict[str, Any]:
    """A turn as persisted in a scope's history (computed once per turn: both scopes share it)."""
    if turn.compact is None:
        turn.compact = {"c": call_to_compact(turn.call), "t": [call_to_compact(t) for t in turn.tools],
                        "usd": turn.cost_usd}
    return turn.compact


def turn_from_compact(data: dict[str, Any]) -> Turn:
    return Turn(call_from_compact(data["c"]), [call_from_compact(t) for t in data["t"]], float(data["usd"]))


@dataclass(slots=True)
class RuleTrip:
    """A rule currently tripped on a scope."""

    rule: str
    detector: str
    action: str
    mode: str
    since_ns: int
    detail: str = ""
    expires_ns: int = 0
    evidence: str = ""  # what the trip rests on (no_progress: exact or fuzzy; "" for the other rules)


@dataclass(slots=True)
class ScopeState:
    """Everything the engine remembers about one scope (a session, a trace, a key or a feature)."""

    scope: str
    scope_id: str
    session_id: str = ""
    virtual_key: str = ""
    feature: str = ""
    escalation: Escalation = field(default_factory=Escalation)
    ema: float | None = None
    peak: float = 0.0
    dominant: str = "none"
    signals: dict[str, float] = field(default_factory=dict)
    history: deque[Turn] = field(default_factory=deque)
    request_fps: deque[int] = field(default_factory=lambda: deque(maxlen=REQUEST_FP_WINDOW))
    calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    first_ns: int = 0
    last_ns: int = 0
    last_seen_us: int = 0
    failure: FailureStreak = field(default_factory=FailureStreak)
    trips: dict[str, RuleTrip] = field(default_factory=dict)
    velocity: dict[str, VelocityState] = field(default_factory=dict)
    instruction: str = ""
    pending_tools: list[Call] = field(default_factory=list)
    wait_ns: int = 0  # how long the agent waited before its latest model call (the steps it asked for carry it)
    waits_before: tuple[int, int] = (0, 0)  # and before the two model calls before it (backoff: detector.core.progress)
    published: tuple[Any, ...] | None = None  # the last decision handed out (not persisted)
    progress: ProgressMemory = field(default_factory=ProgressMemory)  # progress evidence: the last steps, the early warning
    evidence: str = "none"  # what the scope's current escalation rests on (detector.core.progress)
    # What the last decision came from, as the decision check reads it (not persisted): level rank (-1: none
    # yet), confidence to 3 places, dominant signal, break instruction, rule trips. Fields, not one tuple: compiled,
    # comparing them is a few machine instructions, far less than building and comparing a tuple for every scope.
    from_level: int = field(default=-1, compare=False)
    from_confidence: float = field(default=0.0, compare=False)
    from_dominant: str = field(default="", compare=False)
    from_instruction: str = field(default="", compare=False)
    from_trips: tuple[Any, ...] = field(default=(), compare=False)
    from_flag: int = field(default=0, compare=False)  # the early warning's evidence, as last published
    from_evidence: str = field(default="", compare=False)
    from_flag_event: int = field(default=0, compare=False)  # the early warning as its last event announced it
    window: SignalWindow | None = field(default=None, repr=False, compare=False)  # the history as the signals read it
    marked: int = field(default=0, repr=False, compare=False)  # the CycleOutput.mark of the last batch it was in

    # Written out, not generated by @dataclass: compiled (detector.native), a dataclass's own __init__ runs as
    # interpreted Python, its default factories too; a cycle of new sessions builds 20,000 of these.
    def __init__(self, scope: str, scope_id: str, session_id: str = "", virtual_key: str = "", feature: str = "",
                 escalation: Escalation | None = None, ema: float | None = None, peak: float = 0.0,
                 dominant: str = "none", signals: dict[str, float] | None = None, history: deque[Turn] | None = None,
                 request_fps: deque[int] | None = None, calls: int = 0, tokens: int = 0, cost_usd: float = 0.0,
                 first_ns: int = 0, last_ns: int = 0, last_seen_us: int = 0, failure: FailureStreak | None = None,
                 trips: dict[str, RuleTrip] | None = None, velocity: dict[str, VelocityState] | None = None,
                 instruction: str = "", pending_tools: list[Call] | None = None, wait_ns: int = 0,
                 waits_before: tuple[int, int] = (0, 0),
                 published: tuple[Any, ...] | None = None, progress: ProgressMemory | None = None, evidence: str = "none",
                 window: SignalWindow | None = None) -> None:
        self.scope = scope
        self.scope_id = scope_id
        self.session_id = session_id
        self.virtual_key = virtual_key
        self.feature = feature
        self.escalation = Escalation() if escalation is None else escalation
        self.ema = ema
        self.peak = peak
        self.dominant = dominant
        self.signals = {} if signals is None else signals
        self.history = deque() if history is None else history
        self.request_fps = deque(maxlen=REQUEST_FP_WINDOW) if request_fps is None else request_fps
        self.calls = calls
        self.tokens = tokens
        self.cost_usd = cost_usd
        self.first_ns = first_ns
        self.last_ns = last_ns
        self.last_seen_us = last_seen_us
        self.failure = FailureStreak() if failure is None else failure
        self.trips = {} if trips is None else trips
        self.velocity = {} if velocity is None else velocity
        self.instruction = instruction
        self.pending_tools = [] if pending_tools is None else pending_tools
        self.wait_ns = wait_ns
        self.waits_before = waits_before
        self.published = published
        self.progress = ProgressMemory() if progress is None else progress
        self.evidence = evidence
        self.from_level = -1
        self.from_confidence = 0.0
        self.from_dominant = ""
        self.from_instruction = ""
        self.from_trips = NO_TRIPS
        self.from_flag = 0
        self.from_evidence = ""
        self.from_flag_event = progress.flag if progress is not None else 0
        self.window = window
        self.marked = 0

    @property
    def confidence(self) -> float:
        return self.ema or 0.0

    @property
    def level(self) -> str:
        return self.escalation.level_name

    def to_json(self) -> dict[str, Any]:
        return {
            "escalation": self.escalation.to_dict(),
            "ema": self.ema,
            "peak": self.peak,
            "dominant": self.dominant,
            "signals": self.signals,
            "history": [turn_to_compact(t) for t in self.history],
            "request_fps": list(self.request_fps),
            "failure": self.failure.to_dict(),
            "trips": {k: asdict(v) for k, v in self.trips.items()},
            "velocity": {k: v.to_dict() for k, v in self.velocity.items()},
            "instruction": self.instruction,
            "pending_tools": [call_to_compact(c) for c in self.pending_tools],
            "wait_ns": self.wait_ns,
            "waits_before": list(self.waits_before),
            "last_seen_us": self.last_seen_us,
            "progress": self.progress.to_json(),
            "evidence": self.evidence,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any], history_depth: int) -> ScopeState:
        import orjson

        data = orjson.loads(row["state"]) if row.get("state") else {}
        state = cls(
            scope=row["scope"],
            scope_id=row["scope_id"],
            session_id=row.get("session_id", ""),
            virtual_key=row.get("virtual_key", ""),
            calls=int(row.get("call_count", 0)),
            tokens=int(row.get("total_tokens", 0)),
            cost_usd=float(row.get("cost_usd", 0.0)),
            first_ns=int(row.get("first_ns", 0)),
            last_ns=int(row.get("last_ns", 0)),
        )
        if not data:
            return state
        state.escalation = Escalation.from_dict(data["escalation"])
        state.ema = data["ema"]
        state.peak = data["peak"]
        state.dominant = data["dominant"]
        state.signals = data["signals"]
        state.history = deque((turn_from_compact(t) for t in data["history"]), maxlen=history_depth)
        state.request_fps = deque(data["request_fps"], maxlen=REQUEST_FP_WINDOW)
        state.failure = FailureStreak.from_dict(data["failure"])
        state.trips = {k: RuleTrip(**v) for k, v in data["trips"].items()}
        state.velocity = {k: VelocityState.from_dict(v) for k, v in data["velocity"].items()}
        state.instruction = data["instruction"]
        state.pending_tools = [call_from_compact(c) for c in data["pending_tools"]]
        state.wait_ns = int(data.get("wait_ns", 0))
        before = data.get("waits_before") or (0, 0)
        state.waits_before = (int(before[0]), int(before[1]))
        state.last_seen_us = int(data.get("last_seen_us", 0))
        if "progress" in data:  # states checkpointed before progress evidence have none: they start afresh
            state.progress = ProgressMemory.from_json(data["progress"])
            state.from_flag_event = state.progress.flag
        state.evidence = str(data.get("evidence", "none"))
        return state

    def state_json(self) -> str:
        """What ``loop_state.state`` holds: :meth:`to_json`, serialized."""
        import orjson

        return orjson.dumps(self.to_json()).decode()

    def to_row(self, version: int) -> dict[str, Any]:
        """This state as a ``loop_state`` row (the job writes many at once: :func:`detector.storage.tables.state_table`)."""
        return {
            "scope": self.scope,
            "scope_id": self.scope_id,
            "session_id": self.session_id,
            "virtual_key": self.virtual_key,
            "level": self.level,
            "confidence": self.confidence,
            "peak_confidence": self.peak,
            "dominant_signal": self.dominant,
            "call_count": self.calls,
            "total_tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "first_seen": ns_to_ch(self.first_ns),
            "last_activity": ns_to_ch(self.last_ns),
            "state": self.state_json(),
            "version": version,
        }


