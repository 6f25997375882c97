"""The detection engine: per-scope state, and one call at a time through every detector.

No I/O. The scheduled job (``detector.job``) reads new calls from ClickHouse, hands them to
:meth:`Engine.process` in span-time order, and writes back what it returns. Because every call is
scored on its own against the state left by the previous one, results do not depend on how calls
were batched into detection cycles.

Per LLM call (a :class:`~detector.models.Turn`, with the trace's execute_tool spans since its previous
LLM call attributed to it):

* session and trace scope: seven signals -> weighted confidence -> EMA -> escalation state machine;
* trace scope: the rule detectors exact_prompt_repeat, trace_cap, failure_loop;
* key scope: the velocity circuit breaker.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

from detector.budgets import BudgetTracker
from detector.config import SIGNAL_NAMES, AppConfig, LoopDetectionConfig, Rule
from detector.decisions import REASON_LOOP, Decision, strongest
from detector.escalation import LEVEL_ACTION, LEVELS, Escalation, break_instruction, counts_of, thresholds_of
from detector.events import event_row
from detector.models import Call, Turn, ns_to_ch
from detector.rule_params import PARAM_MODELS
from detector.rules import FailureStreak, VelocityState, cap_reached, failure_kind, find_repeat
from detector.scoring import confidence_and_dominant_items, ema, weight_items
from detector.signals import TurnView, turn_view
from detector.window import SignalWindow, Values

REQUEST_FP_WINDOW: Final = 100  # the largest exact_prompt_repeat window allowed
_NO_ERRORS: Final[frozenset[int]] = frozenset()
_NO_TRIPS: Final[tuple[Any, ...]] = ()  # a scope's rule trips as the decision check compares them, when it has none

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
    for name in ("finish_reasons", "out_tool_names", "out_tool_fps"):
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
    published: tuple[Any, ...] | None = None  # the last decision handed out (not persisted)
    # What the last decision came from, as the decision check reads it (not persisted): level rank (-1: none
    # yet), confidence to 3 places, dominant signal, break instruction, rule trips. Fields, not one tuple: compiled,
    # comparing them is a few machine instructions, building and comparing a tuple ~1,000 a scope.
    from_level: int = field(default=-1, compare=False)
    from_confidence: float = field(default=0.0, compare=False)
    from_dominant: str = field(default="", compare=False)
    from_instruction: str = field(default="", compare=False)
    from_trips: tuple[Any, ...] = field(default=(), compare=False)
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
                 instruction: str = "", pending_tools: list[Call] | None = None,
                 published: tuple[Any, ...] | None = None, window: SignalWindow | None = None) -> None:
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
        self.published = published
        self.from_level = -1
        self.from_confidence = 0.0
        self.from_dominant = ""
        self.from_instruction = ""
        self.from_trips = _NO_TRIPS
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
            "last_seen_us": self.last_seen_us,
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
        state.last_seen_us = int(data.get("last_seen_us", 0))
        return state

    def state_json(self) -> str:
        """What ``loop_state.state`` holds: :meth:`to_json`, serialized."""
        import orjson

        return orjson.dumps(self.to_json()).decode()

    def to_row(self, version: int) -> dict[str, Any]:
        """This state as a ``loop_state`` row (the job writes many at once: :func:`detector.tables.state_table`)."""
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


# A row of otel.loop_scores: ``ts`` in unix nanoseconds and the seven signal values nested in SIGNAL_NAMES order.
SCORE_FIELDS = ("ts_ns", "scope", "scope_id", "session_id", "trace_id", "span_id", "virtual_key", "feature",
                "signals", "raw_confidence", "confidence", "level", "dominant_signal", "tokens", "cost_usd")
ScoreRow = tuple[int, str, str, str, str, str, str, str, Values, float, float, str, str, int, float]


class ScoreColumns:
    """A cycle's score rows kept column by column, as ``otel.loop_scores`` stores them.

    20,000 rows a cycle: the engine appends each row's values to one list per column, and
    :func:`detector.tables.score_table` hands the lists to Arrow as they are. Rows as tuples had to be built,
    transposed back into columns and freed: ~8 ms of a cycle (the seven signal values stay one tuple per row:
    appending each to a list of its own would unbox and box them again)."""

    __slots__ = ("ts_ns", "scope", "scope_id", "session_id", "trace_id", "span_id", "virtual_key", "feature",
                 "signals", "raw_confidence", "confidence", "level", "dominant_signal", "tokens", "cost_usd")

    def __init__(self) -> None:
        self.ts_ns: list[int] = []
        self.scope: list[str] = []
        self.scope_id: list[str] = []
        self.session_id: list[str] = []
        self.trace_id: list[str] = []
        self.span_id: list[str] = []
        self.virtual_key: list[str] = []
        self.feature: list[str] = []
        self.signals: list[Values] = []  # each row's seven values (score_table transposes them, in C)
        self.raw_confidence: list[float] = []
        self.confidence: list[float] = []
        self.level: list[str] = []
        self.dominant_signal: list[str] = []
        self.tokens: list[int] = []
        self.cost_usd: list[float] = []

    def append(self, ts_ns: int, scope: str, scope_id: str, session_id: str, trace_id: str, span_id: str,
               virtual_key: str, feature: str, values: Values, raw: float, confidence: float, level: str,
               dominant: str, tokens: int, cost_usd: float) -> None:
        self.ts_ns.append(ts_ns)
        self.scope.append(scope)
        self.scope_id.append(scope_id)
        self.session_id.append(session_id)
        self.trace_id.append(trace_id)
        self.span_id.append(span_id)
        self.virtual_key.append(virtual_key)
        self.feature.append(feature)
        self.signals.append(values)
        self.raw_confidence.append(raw)
        self.confidence.append(confidence)
        self.level.append(level)
        self.dominant_signal.append(dominant)
        self.tokens.append(tokens)
        self.cost_usd.append(cost_usd)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def row(self, i: int) -> ScoreRow:
        return (self.ts_ns[i], self.scope[i], self.scope_id[i], self.session_id[i], self.trace_id[i],
                self.span_id[i], self.virtual_key[i], self.feature[i], self.signals[i],
                self.raw_confidence[i], self.confidence[i], self.level[i], self.dominant_signal[i], self.tokens[i],
                self.cost_usd[i])

    def rows(self) -> list[ScoreRow]:
        """The rows as tuples (tests, and consumers that want one row at a time)."""
        return [self.row(i) for i in range(len(self))]

    @classmethod
    def of(cls, rows: Iterable[ScoreRow]) -> ScoreColumns:
        columns = cls()
        for r in rows:
            columns.append(*r)
        return columns


_OUTPUT_MARKS = itertools.count(1)


@dataclass(slots=True)
class CycleOutput:
    """What one batch of calls produced, for the job to write."""

    scores: ScoreColumns = field(default_factory=ScoreColumns)
    events: list[dict[str, Any]] = field(default_factory=list)
    dirty: list[ScopeState] = field(default_factory=list)  # every scope the batch touched, once each
    mark: int = field(default_factory=lambda: next(_OUTPUT_MARKS))  # tells this batch's scopes (ScopeState.marked)
    decisions: list[Decision] = field(default_factory=list)
    calls_scored: int = 0

    @property
    def score_dicts(self) -> list[dict[str, Any]]:
        """The score rows as ``otel.loop_scores`` column dicts (``ts`` as a DateTime64 literal)."""
        return [score_dict(row) for row in self.scores.rows()]


def score_dict(row: ScoreRow) -> dict[str, Any]:
    ts_ns, scope, scope_id, session_id, trace_id, span_id, virtual_key, feature, values, *rest = row
    raw, confidence, level, dominant, tokens, cost = rest
    return {"ts": ns_to_ch(ts_ns), "scope": scope, "scope_id": scope_id, "session_id": session_id,
            "trace_id": trace_id, "span_id": span_id, "virtual_key": virtual_key, "feature": feature,
            **dict(zip(SIGNAL_NAMES, values, strict=True)), "raw_confidence": raw, "confidence": confidence,
            "level": level, "dominant_signal": dominant, "tokens": tokens, "cost_usd": cost}


# One turn's scoring in one scope, reusable by a scope whose window holds the very same turns:
# (the window, the seven values, the raw confidence, the dominant signal, the values by name).
_Scored = tuple[SignalWindow, Values, float, str, dict[str, float]]
_NO_SIGNALS: Final[Values] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
_ZERO_NAMED: Final[dict[str, float]] = dict.fromkeys(SIGNAL_NAMES, 0.0)
# SIGNAL_NAMES as a compiled module's constant: the name imported from detector.config (not compiled) is a dict
# lookup at every use.
_SIGNAL_NAMES: Final[tuple[str, ...]] = SIGNAL_NAMES


@dataclass(slots=True)
class _Tuning:
    """A configuration's numbers as the per-call pipeline reads them, extracted once."""

    depth: int
    token_threshold: float
    cost_threshold: float
    alpha: float
    thresholds: tuple[float, ...]
    counts: tuple[int, ...]
    step_down_after: int
    weights: tuple[tuple[str, float], ...]

    @classmethod
    def of(cls, cfg: LoopDetectionConfig) -> _Tuning:
        return cls(cfg.history_depth, cfg.token_velocity_threshold, cfg.cost_velocity_threshold, cfg.ema_alpha,
                   thresholds_of(cfg), counts_of(cfg), cfg.step_down_after, weight_items(cfg.weights))


def round_unit(x: float, digits: int) -> float:
    """``round(x, digits)`` for ``x`` in [0, 1] and ``digits`` <= 6, without Python's decimal-string rounding
    (~1,400 instructions a call; the decision check rounds every changed confidence).

    Exactly the same result: ``r = floor(x * 10**digits + 0.5)`` is the right integer unless ``x * 10**digits``
    lies within rounding error of a half (then ``round`` itself decides), and ``r / 10**digits`` is the double
    nearest to that decimal, as ``round`` returns (IEEE division of exact operands is correctly rounded).
    """
    scale = 1e6 if digits == 6 else 1e3 if digits == 3 else 10.0 ** digits
    y = x * scale
    floor_y = float(math.floor(y))
    off_half = y - floor_y - 0.5
    if not 0.0 <= x <= 1.0 or -1e-6 < off_half < 1e-6:
        return round(x, digits)
    return (floor_y + 1.0 if off_half > 0.0 else floor_y) / scale


def resolve_cost(call: Call, config: AppConfig) -> float:
    """The span's own cost attribute when it has one, else the configured price table (exact model name,
    then the longest configured prefix, e.g. ``gpt-4o`` for ``gpt-4o-2024-08-06``)."""
    if call.cost_usd > 0:
        return call.cost_usd
    return cost_at(call, model_price(call.model, config))


# (USD per million input tokens, per million output tokens) of one model; None: not priced
ModelPrice = tuple[float, float] | None


def model_price(model: str, config: AppConfig) -> ModelPrice:
    """The price table's entry for ``model``: its exact name, else the longest configured prefix."""
    price = config.prices.get(model)
    if price is None and model:
        prefixes = [m for m in config.prices if model.startswith(m)]
        if prefixes:
            price = config.prices[max(prefixes, key=len)]
    return None if price is None else (price.input_per_million, price.output_per_million)


def cost_at(call: Call, price: ModelPrice) -> float:
    if price is None:
        return 0.0
    return (call.input_tokens * price[0] + call.output_tokens * price[1]) / 1e6


def span_order(call: Call) -> tuple[int, str]:
    """The order calls are scored in: span start time, then span id (a total order, whatever the batching)."""
    return call.ts_ns, call.span_id


def in_span_order(calls: list[Call]) -> bool:
    """Whether ``calls`` are sorted by :func:`span_order` already (checked without building its keys)."""
    for i in range(1, len(calls)):
        a, b = calls[i - 1], calls[i]
        if a.ts_ns > b.ts_ns or (a.ts_ns == b.ts_ns and a.span_id > b.span_id):
            return False
    return True


@dataclass(slots=True)
class PlannedRule:
    """A configured rule as the per-call loop reads it, planned once per rule list: plain attributes, and its
    detector's parameters as plain values. (A rule is evaluated on every call; reading an attribute of a
    pydantic model costs more than most of the checks.)"""

    name: str
    detector: str
    action: str
    mode: str
    enabled: bool
    sticky: bool  # an enforced block stays tripped once tripped (velocity excepted: it clears itself)
    params: Any  # the validated parameter model (the velocity breaker reads it)
    window: int = 0  # exact_prompt_repeat
    repeats: tuple[int, ...] = ()
    unit: str = ""  # trace_cap
    threshold: float = 0.0
    same_tool_repeats: int = 0  # failure_loop
    same_error_repeats: int = 0

    @classmethod
    def of(cls, rule: Rule, params: Any) -> PlannedRule:
        planned = cls(rule.name, rule.detector, rule.action, rule.mode, rule.enabled,
                      rule.action == "block" and rule.mode == "enforce" and rule.detector != "velocity", params)
        if rule.detector == "exact_prompt_repeat":
            planned.window = params.window
            planned.repeats = params.repeat_counts()
        elif rule.detector == "trace_cap":
            planned.unit = params.unit
            planned.threshold = params.limit()
        elif rule.detector == "failure_loop":
            planned.same_tool_repeats = params.same_tool_repeats
            planned.same_error_repeats = params.same_error_repeats
        return planned


class Engine:
    """Scope states in memory plus the per-call pipeline. Not thread-safe: one job drives it."""

    def __init__(self, config: AppConfig) -> None:
        self.config = config
        # A shard of several reads every execute_tool span without a session attribute (it cannot tell whose
        # it is); it keeps only those of traces it already follows. A single detector keeps them all.
        self.owns_unknown_traces = config.detector.shard_count == 1
        self.states: dict[tuple[str, str], ScopeState] = {}
        self.trace_sessions: dict[str, str] = {}
        self._key_cfg: dict[str, LoopDetectionConfig] = {}
        self._key_tuning: dict[str, tuple[LoopDetectionConfig, _Tuning]] = {}
        self._params: dict[str, Any] = {}
        self._plan: list[PlannedRule] = []
        self._plan_for: list[Rule] | None = None
        self._prices: dict[str, ModelPrice] = {}
        self._prices_of: AppConfig | None = None  # the config _prices were looked up in
        self.budgets = BudgetTracker(config.budgets)  # spend totals: kept across reconfigure (spent is spent)

    # -- configuration -------------------------------------------------------------------------
    def reconfigure(self, config: AppConfig) -> None:
        """Apply a new config; as specified, session state is cleared (circuit-breaker reset semantics)."""
        self.config = config
        self.owns_unknown_traces = config.detector.shard_count == 1
        self._key_cfg.clear()
        self._key_tuning.clear()
        self._params.clear()
        self._plan_for = None
        self.states.clear()
        self.trace_sessions.clear()
        self.budgets.set_budgets(config.budgets)

    def cfg_for(self, virtual_key: str) -> LoopDetectionConfig:
        cfg = self._key_cfg.get(virtual_key)
        if cfg is None:
            cfg = self.config.for_key(virtual_key)
            self._key_cfg[virtual_key] = cfg
        return cfg

    def _cost(self, call: Call) -> float:
        """:func:`resolve_cost`, with each model's price looked up once per configuration (reading pydantic
        models on every call was ~2% of a cycle)."""
        if call.cost_usd > 0:
            return call.cost_usd
        if self._prices_of is not self.config:  # the job may swap the config object (detector.job.update_budgets)
            self._prices.clear()
            self._prices_of = self.config
        model = call.model
        if model in self._prices:
            price = self._prices[model]
        else:
            price = self._prices[model] = model_price(model, self.config)
        return cost_at(call, price)

    def _tuning_for(self, virtual_key: str) -> tuple[LoopDetectionConfig, _Tuning]:
        found = self._key_tuning.get(virtual_key)
        if found is None or found[0] is not self.cfg_for(virtual_key):
            cfg = self.cfg_for(virtual_key)
            found = self._key_tuning[virtual_key] = (cfg, _Tuning.of(cfg))
        return found

    # -- state -----------------------------------------------------------------------------------
    def state(self, scope: str, scope_id: str, out: CycleOutput | None = None) -> ScopeState:
        key = (scope, scope_id)
        st = self.states.get(key)
        if st is None:
            depth = self.config.loop_detection.history_depth
            st = ScopeState(scope=scope, scope_id=scope_id, history=deque(maxlen=depth))
            self.states[key] = st
        if out is not None and st.marked != out.mark:  # once per batch: a flag, not a set of 20,000 keys
            st.marked = out.mark
            out.dirty.append(st)
        return st

    def adopt(self, states: Iterable[ScopeState]) -> None:
        """Take states loaded from the store (restart, or a scope this process has not seen yet)."""
        for st in states:
            self.states.setdefault((st.scope, st.scope_id), st)

    def needed_scopes(self, calls: Sequence[Call]) -> set[tuple[str, str]]:
        """Scopes a batch touches that are not in memory (the job loads them before processing)."""
        wanted: set[tuple[str, str]] = set()
        states = self.states
        for c in calls:
            if c.is_tool and not self._follows(c):
                continue
            key = ("trace", c.trace_id)
            if key not in states:
                wanted.add(key)
            if c.is_llm:
                key = ("session", c.session_id)
                if key not in states:
                    wanted.add(key)
                if c.virtual_key and ("key", c.virtual_key) not in states:
                    wanted.add(("key", c.virtual_key))
        return wanted

    # -- the pipeline ----------------------------------------------------------------------------
    def process(self, calls: Iterable[Call], now_us: int | None = None) -> CycleOutput:
        """Score a batch of calls, in span-time order; returns rows, events and changed decisions."""
        now_us = now_us if now_us is not None else int(time.time() * 1e6)
        out = CycleOutput()
        ordered = list(calls)
        if not in_span_order(ordered):  # the job's query returns them in order already
            ordered.sort(key=span_order)
        for call in ordered:
            self.process_call(call, out, now_us)
        out.decisions = self._changed_decisions(out.dirty, now_us)
        return out

    def _changed_decisions(self, states: Iterable[ScopeState], now_us: int) -> list[Decision]:
        """Decisions that differ from what each scope last published (only those need writing), as of
        ``now_us``."""
        changed = []
        for st in states:
            if st.calls == 0 and not st.trips and st.published is None:
                continue  # a trace seen only through tool spans (maybe another shard's): nothing to decide
            # What decision_for reads, as the decision key rounds it: unchanged, so is the decision (most
            # scopes of a cycle), and it need not be built to find out.
            trips = st.trips
            level = st.escalation.level
            confidence = round_unit(st.ema, 6) if st.ema else 0.0  # as the decision carries it
            rounded = round_unit(confidence, 3) if confidence else 0.0
            dominant, instruction = st.dominant, st.instruction
            trip_keys = (tuple([(t.action, t.mode, t.detector, t.rule, t.expires_ns) for t in trips.values()])
                         if trips else _NO_TRIPS)
            if (level == st.from_level and rounded == st.from_confidence and dominant == st.from_dominant
                    and instruction == st.from_instruction and (trip_keys is st.from_trips or trip_keys == st.from_trips)):
                continue
            st.from_level, st.from_confidence, st.from_dominant = level, rounded, dominant
            st.from_instruction, st.from_trips = instruction, trip_keys
            d = self.decision_for(st, confidence, now_us)
            # rounded is round(d.confidence, 3): every decision of a scope carries round(ema, 6)
            key = (d.action, d.level, rounded, d.dominant_signal, d.detector, d.rule_name, d.instruction,
                   d.expires_at_us)
            if key != st.published:
                st.published = key
                changed.append(d)
        return changed

    def process_call(self, call: Call, out: CycleOutput, now_us: int) -> None:
        if call.session_source != "trace" and call.session_id:
            self.trace_sessions.setdefault(call.trace_id, call.session_id)
        if call.is_tool and not self._follows(call):
            return
        trace = self.state("trace", call.trace_id, out)
        trace.last_seen_us = now_us
        if call.is_tool:
            trace.pending_tools.append(call)
            return
        if not call.is_llm:
            return

        session_id = call.session_id
        if call.session_source == "trace":
            session_id = self.trace_sessions.get(call.trace_id, call.session_id)
        turn = Turn(call, trace.pending_tools, self._cost(call))
        trace.pending_tools = []
        view = turn_view(turn)
        cfg, tuning = self._tuning_for(call.virtual_key)
        session = self.state("session", session_id, out)

        shared = None
        scopes = [session, trace]  # a list: compiled, iterating a tuple display goes through the iterator protocol
        for st in scopes:
            st.session_id = session_id
            st.virtual_key = call.virtual_key or st.virtual_key
            st.feature = call.feature or st.feature
            st.last_seen_us = now_us
            shared = self._score(st, turn, view, cfg, tuning, out, shared)
        # only now: the trace's window was compared with the session's as it was before this turn
        for st in scopes:
            window = st.window
            assert window is not None  # _score made sure there is one (and, narrowed, push is a direct call)
            window.push(view)
            st.history.append(turn)

        trace.request_fps.append(call.request_fp)
        trace.failure.advance(view.tools, view.error_fps if view.is_error else _NO_ERRORS)
        for rule in self._rule_plan():
            if rule.enabled:
                self._evaluate_rule(rule, trace, turn, out)
        out.events.extend(self.budgets.account(ts_ns=call.ts_ns, cost_usd=turn.cost_usd, session_id=session_id,
                                               virtual_key=call.virtual_key, feature=call.feature,
                                               trace_id=call.trace_id, span_id=call.span_id))
        out.calls_scored += 1

    def _follows(self, call: Call) -> bool:
        """Whether this detector keeps a tool span: it has a session of its own, or its trace is followed."""
        return (self.owns_unknown_traces or call.session_source != "trace" or call.trace_id in self.trace_sessions
                or ("trace", call.trace_id) in self.states)

    def _score(self, st: ScopeState, turn: Turn, view: TurnView, cfg: LoopDetectionConfig, tuning: _Tuning,
               out: CycleOutput, shared: _Scored | None = None) -> _Scored:
        """Score one turn in one scope (the caller then adds it to the scope's history and window). ``shared``
        is the previous scope's result: when this scope's window holds the same turns (a session with a single
        trace), the signals, the raw confidence and the dominant signal are equal, and are reused rather than
        computed twice."""
        window = st.window
        if window is None or window.depth != tuning.depth:
            if st.history.maxlen != tuning.depth:
                st.history = deque(st.history, maxlen=tuning.depth)
            window = st.window = SignalWindow.of(st.history, tuning.depth)
        if shared is not None and window.scores_like(shared[0]):
            scored = shared
        else:
            values, _ = window.score(view, tuning.token_threshold, tuning.cost_threshold)
            if values == _NO_SIGNALS:  # no evidence at all (most calls): one shared, never mutated, dict
                scored = (window, _NO_SIGNALS, 0.0, "none", _ZERO_NAMED)
            else:
                raw, dominant = confidence_and_dominant_items(values, tuning.weights)
                named = {_SIGNAL_NAMES[i]: values[i] for i in range(len(values))}
                scored = (window, values, raw, dominant, named)
        _, values, raw, dominant, named = scored
        st.ema = confidence = ema(st.ema, raw, tuning.alpha)
        if confidence > st.peak:
            st.peak = confidence
        st.dominant = dominant
        st.signals = named
        escalation = st.escalation
        transition = escalation.advance(confidence, tuning.thresholds, tuning.counts, tuning.step_down_after)
        call = turn.call
        tokens = call.input_tokens + call.output_tokens
        st.calls += 1
        st.tokens += tokens
        st.cost_usd += turn.cost_usd
        st.first_ns = st.first_ns or call.ts_ns
        if call.ts_ns > st.last_ns:
            st.last_ns = call.ts_ns
        out.scores.append(call.ts_ns, st.scope, st.scope_id, st.session_id, call.trace_id, call.span_id,
                          call.virtual_key, call.feature, values, raw, confidence, LEVELS[escalation.level], dominant,
                          tokens, turn.cost_usd)
        if transition is None:
            return scored
        if transition.to_level == "inject" and transition.up:
            st.instruction = break_instruction(cfg, st.dominant, turn.tool_names)
        out.events.append(self._event(
            st, turn, kind="escalation", detector="confidence", action=LEVEL_ACTION[transition.to_level],
            from_level=transition.from_level, to_level=transition.to_level, consecutive=transition.consecutive,
        ))
        return scored

    def _rule_plan(self) -> list[PlannedRule]:
        """The configured rules, planned once per rule list."""
        rules = self.config.rules
        if self._plan_for is not rules:
            self._plan = [PlannedRule.of(rule, self._rule_params(rule)) for rule in rules]
            self._plan_for = rules
        return self._plan

    def _rule_params(self, rule: Rule) -> Any:
        """The rule's parameter model, validated once per configuration (not per call)."""
        params = self._params.get(rule.name)
        if params is None:
            params = self._params[rule.name] = PARAM_MODELS[rule.detector](**rule.params)
        return params

    def _evaluate_rule(self, rule: PlannedRule, trace: ScopeState, turn: Turn, out: CycleOutput) -> None:
        target = trace
        detail = ""
        expires_ns = 0
        if rule.detector == "exact_prompt_repeat":
            match = find_repeat(trace.request_fps, rule.window, rule.repeats)
            tripped = match is not None
            if match and rule.name not in trace.trips:  # the message of a new trip (a loop trips call after call)
                detail = f"cycle of {match[0]} call(s) repeated {match[1]} times"
        elif rule.detector == "trace_cap":
            tripped = cap_reached(trace.calls, trace.cost_usd, trace.tokens, rule.unit, rule.threshold)
            if tripped and rule.name not in trace.trips:
                detail = f"{rule.unit} cap {rule.threshold:g} reached"
        elif rule.detector == "failure_loop":
            failure = trace.failure
            kind = failure_kind(failure.tool_streak, failure.error_streak, rule.same_tool_repeats,
                                rule.same_error_repeats)
            tripped = kind is not None
            detail = kind or ""
        elif rule.detector == "velocity":
            if not turn.call.virtual_key:
                return
            target = self.state("key", turn.call.virtual_key, out)
            target.virtual_key = turn.call.virtual_key
            target.last_seen_us = trace.last_seen_us
            target.calls += 1
            target.tokens += turn.tokens
            target.last_ns = max(target.last_ns, turn.ts_ns)
            target.first_ns = target.first_ns or turn.ts_ns
            vstate = target.velocity.setdefault(rule.name, VelocityState())
            override = self.config.virtual_keys.get(turn.call.virtual_key)
            tripped = vstate.update(turn.ts_ns, turn.tokens, rule.params,
                                    override.tpm_limit if override else None)
            expires_ns = turn.ts_ns + 60 * 10**9
            if tripped:
                detail = "tokens per minute over the key's limit"
        else:  # pragma: no cover - config validation forbids it
            return

        current = target.trips.get(rule.name)
        if not tripped and current is None:
            return  # the usual case: nothing tripped, nothing to clear (the target is already marked dirty)
        if tripped and current is None:
            target.trips[rule.name] = RuleTrip(rule.name, rule.detector, rule.action, rule.mode, turn.ts_ns, detail,
                                               expires_ns)
            out.events.append(self._event(
                target, turn, kind="rule", detector=rule.detector, action=rule.action, mode=rule.mode,
                rule_name=rule.name, from_level=target.level, to_level=target.level, message=detail,
            ))
        elif tripped and current is not None:
            current.expires_ns = expires_ns
        elif not tripped and current is not None and not rule.sticky:
            del target.trips[rule.name]
            out.events.append(self._event(
                target, turn, kind="rule_clear", detector=rule.detector, action="allow", mode=rule.mode,
                rule_name=rule.name, from_level=target.level, to_level=target.level, message="condition cleared",
            ))
        # the target is marked dirty already: the trace by process_call, a key by state()

    def _event(self, st: ScopeState, turn: Turn, *, kind: str, detector: str, action: str, from_level: str,
               to_level: str, mode: str = "enforce", rule_name: str = "", consecutive: int = 0,
               message: str = "") -> dict[str, Any]:
        call = turn.call
        return event_row(
            ts_ns=call.ts_ns, kind=kind, scope=st.scope, scope_id=st.scope_id, session_id=st.session_id,
            trace_id=call.trace_id, span_id=call.span_id, virtual_key=call.virtual_key, feature=call.feature,
            detector=detector, rule_name=rule_name, action=action, mode=mode, from_level=from_level,
            to_level=to_level, confidence=st.confidence, signals=st.signals, dominant_signal=st.dominant,
            consecutive=consecutive, message=message,
        )

    # -- decisions -------------------------------------------------------------------------------
    def decision_for(self, st: ScopeState, confidence: float = -1.0, now_us: int = -1) -> Decision:
        """The scope's decision: its escalation level, strengthened by any enforced blocking rule tripped on it.
        ``confidence``: ``round(st.confidence, 6)`` when the caller has it already; ``now_us``: when it is made
        (-1: the clock; a cycle passes its own time)."""
        action = LEVEL_ACTION[st.level]
        if confidence < 0.0:
            confidence = round_unit(st.confidence, 6)
        base = Decision(
            scope=st.scope, scope_id=st.scope_id, session_id=st.session_id, action=action, level=st.level,
            confidence=confidence, dominant_signal=st.dominant,
            detector="confidence" if action != "allow" else "none",
            reason=REASON_LOOP if action == "block" else "",
            delay_seconds=float(self.cfg_for(st.virtual_key).throttle_delay_seconds) if action == "throttle" else 0.0,
            instruction=st.instruction if action == "inject" else "", updated_us=now_us,
        )
        if not st.trips:
            return base
        candidates = [base]
        for trip in st.trips.values():
            # notify: log, event, webhook, metric, and the run continues untouched; dry run: the same,
            # recording what a block would have done. Only an enforced block changes the decision.
            if trip.action != "block" or trip.mode != "enforce":
                continue
            candidates.append(Decision(
                scope=st.scope, scope_id=st.scope_id, session_id=st.session_id, action="block", level=st.level,
                confidence=confidence, dominant_signal=st.dominant, detector=trip.detector,
                reason=trip.detector, rule_name=trip.rule,
                expires_at_us=trip.expires_ns // 1000 if trip.expires_ns else 0, updated_us=now_us,
            ))
        best = strongest(candidates)
        assert best is not None
        return best

    # -- lifecycle -------------------------------------------------------------------------------
    def reset(self, scope: str, scope_id: str) -> ScopeState:
        """Fresh state for a scope (the admin reset): the scope still exists, its history is gone."""
        old = self.states.get((scope, scope_id))
        depth = self.config.loop_detection.history_depth
        st = ScopeState(scope=scope, scope_id=scope_id, history=deque(maxlen=depth))
        if old is not None:
            st.session_id, st.virtual_key, st.feature = old.session_id, old.virtual_key, old.feature
            st.last_seen_us = old.last_seen_us
        self.states[(scope, scope_id)] = st
        return st

    def evict(self, now_us: int) -> list[ScopeState]:
        """Drop sessions idle past ``session_timeout_minutes`` (with their traces), then the least recently
        active sessions beyond ``max_sessions``. Returns what was dropped."""
        cfg = self.config.loop_detection
        cutoff = now_us - cfg.session_timeout_minutes * 60 * 10**6
        sessions = sorted((st for st in self.states.values() if st.scope == "session"), key=lambda s: s.last_seen_us)
        drop = [st for st in sessions if st.last_seen_us < cutoff]
        live = [st for st in sessions if st.last_seen_us >= cutoff]
        if len(live) > cfg.max_sessions:
            drop.extend(live[: len(live) - cfg.max_sessions])
        dropped_ids = {st.scope_id for st in drop}
        removed: list[ScopeState] = []
        for key, st in list(self.states.items()):
            if (st.scope == "session" and st.scope_id in dropped_ids) or (
                st.scope == "trace" and (st.session_id in dropped_ids or (not st.session_id and st.last_seen_us < cutoff))
            ) or (st.scope in ("key", "feature") and st.last_seen_us < cutoff):
                removed.append(self.states.pop(key))
        for trace_id in [t for t, s in self.trace_sessions.items() if s in dropped_ids]:
            del self.trace_sessions[trace_id]
        self.budgets.forget("session", dropped_ids)
        return removed
