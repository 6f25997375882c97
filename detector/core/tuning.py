"""The numbers and names the engine works with, as plain values.

No I/O, no pydantic. The configuration file is validated by ``detector.settings`` (pydantic models); the shell
compiles it into these records once per configuration (``detector.detection.engine_config.engine_tuning``), so that the core
reads plain attributes call after call and never sees a configuration model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BudgetSpec", "EngineTuning", "PlannedRule", "ScoringTuning", "VelocityTuning"]



@dataclass(frozen=True, slots=True)
class ScoringTuning:
    """One ``loop_detection`` block (the default, or a virtual key's merged override)."""

    history_depth: int  # turns each scope's seven signals look back over
    weights: tuple[tuple[str, float], ...]  # (signal, weight) in SIGNAL_NAMES order
    alpha: float  # the EMA's
    thresholds: tuple[float, ...]  # warn, throttle, inject, hard_stop
    counts: tuple[int, ...]  # consecutive calls at or above each threshold
    step_down_after: int
    token_velocity_threshold: float
    cost_velocity_threshold: float
    throttle_delay_seconds: float
    injection_strategy: str
    break_instruction_template: str  # "" when none is configured
    progress: bool  # the progress memory weighs on the score
    early_warning: bool  # a loop of wasted steps warns, whatever the score
    exact_floor: float  # the least raw confidence of a call in a loop, by its evidence
    fuzzy_floor: float
    w_token_velocity: float  # the rates' weights: timing, left out of what decides (docs/signals.md)
    w_cost_velocity: float


@dataclass(frozen=True, slots=True)
class VelocityTuning:
    """The velocity circuit breaker's parameters."""

    tpm_limit: float | None
    baseline_minutes: int
    min_baseline_tpm: float
    warmup_minutes: float


@dataclass(frozen=True, slots=True)
class PlannedRule:
    """A configured rule as the per-call loop reads it: plain attributes, its detector's parameters as plain values."""

    name: str
    detector: str
    action: str
    mode: str
    enabled: bool
    sticky: bool  # an enforced block stays tripped once tripped (a cap, an exact repeat)
    window: int = 0  # exact_prompt_repeat
    repeats: tuple[int, ...] = ()
    unit: str = ""  # trace_cap
    threshold: float = 0.0
    same_tool_repeats: int = 0  # failure_loop
    same_error_repeats: int = 0
    wasted_calls: int = 0  # no_progress
    min_level: int = 0  # no_progress: the weakest evidence counted (detector.core.progress levels)
    velocity: VelocityTuning | None = None  # velocity


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """A spend budget: ``limit_usd`` per ``period`` for a scope (``match``: one id, or ``*`` for each)."""

    name: str
    scope: str
    match: str
    period: str
    limit_usd: float
    action: str


@dataclass(frozen=True, slots=True)
class EngineTuning:
    """Everything the engine reads of a configuration."""

    scoring: ScoringTuning
    rules: tuple[PlannedRule, ...] = ()
    budgets: tuple[BudgetSpec, ...] = ()
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)  # model -> USD per million in, out
    key_scoring: dict[str, ScoringTuning] = field(default_factory=dict)  # virtual keys with an override
    key_tpm_limits: dict[str, float] = field(default_factory=dict)  # virtual keys with a manual TPM cap
    session_timeout_minutes: int = 30
    max_sessions: int = 10_000
    owns_unknown_traces: bool = True  # a single detector (not one shard of several)

    def for_key(self, virtual_key: str) -> ScoringTuning:
        return self.key_scoring.get(virtual_key, self.scoring) if virtual_key else self.scoring
