"""What detection is told: the ``loop_detection:`` block (the spec's gateway block, field for field, with its ranges
and its cross-field rules: thresholds strictly ascending, consecutive counts non-decreasing, weights in [0, 1] summing
to 1 +- 0.001), per-virtual-key overrides, rules, budgets, prices, and the rules each preset starts with."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from detector.settings.rule_params import validate_params
from detector.settings.strict import StrictModel
from detector.settings.vocabulary import (
    BUDGET_ALERT,
    DETECTOR_EXACT_PROMPT_REPEAT,
    DETECTOR_FAILURE_LOOP,
    DETECTOR_NO_PROGRESS,
    DETECTOR_TRACE_CAP,
    MODE_ENFORCE,
    PRESET_DEFAULT,
    PRESET_PROTECT,
    RULE_BLOCK,
    RULE_NOTIFY,
    SIGNAL_NAMES,
    BudgetAction,
    BudgetScope,
    RuleAction,
    RuleDetector,
    RuleMode,
)

__all__ = [
    "Budget", "ConsecutiveCounts", "KeyOverride", "LoopDetectionConfig", "PRESET_SETTINGS", "Price",
    "ProgressSettings", "Rule", "Thresholds", "WEIGHT_TOLERANCE", "Weights", "default_rules", "protect_rules",
]


WEIGHT_TOLERANCE = 0.001


class Thresholds(StrictModel):
    warn_confidence: float = Field(0.30, ge=0.0, le=1.0)
    throttle_confidence: float = Field(0.50, ge=0.0, le=1.0)
    inject_confidence: float = Field(0.70, ge=0.0, le=1.0)
    hardstop_confidence: float = Field(0.90, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _strictly_ascending(self) -> Thresholds:
        values = [self.warn_confidence, self.throttle_confidence, self.inject_confidence, self.hardstop_confidence]
        if any(a >= b for a, b in zip(values, values[1:], strict=False)):
            raise ValueError(
                "thresholds must be strictly ascending: warn < throttle < inject < hardstop "
                f"(got {values[0]} / {values[1]} / {values[2]} / {values[3]})"
            )
        return self


class ConsecutiveCounts(StrictModel):
    warn: int = Field(3, ge=1, le=100)
    throttle: int = Field(5, ge=1, le=100)
    inject: int = Field(7, ge=1, le=100)
    hardstop: int = Field(10, ge=1, le=100)

    @model_validator(mode="after")
    def _non_decreasing(self) -> ConsecutiveCounts:
        values = [self.warn, self.throttle, self.inject, self.hardstop]
        if any(a > b for a, b in zip(values, values[1:], strict=False)):
            raise ValueError(
                "consecutive_counts must be non-decreasing: warn <= throttle <= inject <= hardstop "
                f"(got {values[0]} / {values[1]} / {values[2]} / {values[3]})"
            )
        return self


class Weights(StrictModel):
    content_similarity: float = Field(0.25, ge=0.0, le=1.0)
    tool_call_repetition: float = Field(0.20, ge=0.0, le=1.0)
    response_stagnation: float = Field(0.15, ge=0.0, le=1.0)
    token_velocity: float = Field(0.10, ge=0.0, le=1.0)
    error_cycling: float = Field(0.15, ge=0.0, le=1.0)
    context_growth: float = Field(0.10, ge=0.0, le=1.0)
    cost_velocity: float = Field(0.05, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _sum_to_one(self) -> Weights:
        total = sum(self.as_dict().values())
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            raise ValueError(f"weights must sum to 1.0 (+-{WEIGHT_TOLERANCE}), got {total:.4f}")
        return self

    def as_dict(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in SIGNAL_NAMES}


def _never_read(instead: str) -> str:
    """Why a removed setting is refused: it never did anything."""
    return f"removed: this setting never did anything (nothing read it); {instead}. Delete it from the config"


class ProgressSettings(StrictModel):
    """How progress evidence (``detector.core.progress``) weighs on the score and raises the early warning
    (``docs/signals.md``, "Progress").

    A loop is a run of 3 wasted steps in a row (``RUN_TO_WARN``), whatever their evidence (sizes count, structure
    never does). Per call and scope, the raw confidence is 0 outside a loop (after progress, or one or two wasted
    steps: a re-read, a retry); in a loop, what the repetition signals say, and at least ``exact_floor`` or
    ``fuzzy_floor`` by the latest step's evidence (sizes as fuzzy). The EMA, the consecutive counts and one level at a
    time are unchanged."""

    removed_settings = {
        "poll_wait_seconds": _never_read("polling is told by what comes back (a status still in progress) and by "
                                         "waits that grow (backoff), with no setting"),
        "progress_discount": _never_read("a call that makes progress scores 0 outside a loop, with no discount"),
    }

    enabled: bool = True
    early_warning: bool = Field(True, description=(
        "warn at the 3rd wasted step in a row (a loop), whatever its evidence; lifted by the first step that makes "
        "progress"))
    exact_floor: float = Field(0.75, ge=0.0, le=1.0, description="the least raw confidence in a loop on exact evidence")
    fuzzy_floor: float = Field(0.55, ge=0.0, le=1.0, description=(
        "the least raw confidence in a loop on fuzzy (or sizes) evidence"))


class LoopDetectionConfig(StrictModel):
    """The spec's ``loop_detection:`` block."""

    enabled: bool = True
    session_timeout_minutes: int = Field(30, ge=1, le=1440)
    max_sessions: int = Field(10_000, ge=100, le=1_000_000)
    history_depth: int = Field(5, ge=2, le=50)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    consecutive_counts: ConsecutiveCounts = Field(default_factory=ConsecutiveCounts)
    weights: Weights = Field(default_factory=Weights)
    throttle_delay_seconds: float = Field(2, ge=1, le=30)
    injection_strategy: Literal["system_prompt_append", "context_aware"] = "system_prompt_append"
    ema_alpha: float = Field(0.3, ge=0.01, le=1.0)
    eviction_interval_seconds: int = Field(60, ge=10, le=3600)
    token_velocity_threshold: float = Field(10_000.0, gt=0, le=1e9)
    cost_velocity_threshold: float = Field(0.5, gt=0, le=1e6)
    break_instruction_template: str | None = Field(None, min_length=1, max_length=2000)
    step_down_after: int = Field(5, ge=1, le=100)
    progress: ProgressSettings = Field(default_factory=ProgressSettings)


class KeyOverride(StrictModel):
    """Per-virtual-key settings: a partial ``loop_detection`` block, merged field by field."""

    loop_detection: dict[str, Any] = Field(default_factory=dict)
    tpm_limit: float | None = Field(None, gt=0, description="manual tokens-per-minute cap for the velocity breaker")


class Rule(StrictModel):
    name: str = Field(min_length=1, max_length=200)
    detector: RuleDetector
    action: RuleAction = RULE_NOTIFY
    mode: RuleMode = MODE_ENFORCE
    enabled: bool = True
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _params_valid(self) -> Rule:
        self.params = validate_params(self.detector, self.params)
        return self


class Budget(StrictModel):
    name: str = Field(min_length=1, max_length=200)
    scope: BudgetScope
    match: str = Field("*", description="the feature / session / key id, or * for each one separately")
    limit_usd: float = Field(ge=0)
    period: Literal["run", "day", "month"] = "month"
    action: BudgetAction = BUDGET_ALERT


class Price(StrictModel):
    input_per_million: float = Field(ge=0)
    output_per_million: float = Field(ge=0)


def default_rules() -> list[Rule]:
    """The three notify-only rules every fresh installation starts with."""
    return [
        Rule(name="Loop: Exact prompt repeat", detector=DETECTOR_EXACT_PROMPT_REPEAT, action=RULE_NOTIFY),
        Rule(name="Loop: Per-trace call cap", detector=DETECTOR_TRACE_CAP, action=RULE_NOTIFY,
             params={"unit": "calls", "threshold": 25}),
        Rule(name="Loop: Per-trace cost cap", detector=DETECTOR_TRACE_CAP, action=RULE_NOTIFY,
             params={"unit": "usd", "threshold": 5.0}),
    ]


def protect_rules() -> list[dict[str, Any]]:
    """The rules of the ``protect`` preset: the defaults (notify), plus blocking that is safe for honest work: a loop
    resting on exact evidence, by its 4th wasted step (trace and session scope), and the failure loop (result-aware;
    it clears when the streak ends). docs/detection-quality.md measures that no honest real run is blocked."""
    return [
        {"name": "Loop: Exact prompt repeat", "detector": DETECTOR_EXACT_PROMPT_REPEAT, "action": RULE_NOTIFY},
        {"name": "Loop: No progress", "detector": DETECTOR_NO_PROGRESS, "action": RULE_BLOCK,
         "params": {"wasted_calls": 4, "min_evidence": "exact"}},
        {"name": "Loop: Failure loop", "detector": DETECTOR_FAILURE_LOOP, "action": RULE_BLOCK},
        {"name": "Loop: Per-trace call cap", "detector": DETECTOR_TRACE_CAP, "action": RULE_NOTIFY,
         "params": {"unit": "calls", "threshold": 25}},
        {"name": "Loop: Per-trace cost cap", "detector": DETECTOR_TRACE_CAP, "action": RULE_NOTIFY,
         "params": {"unit": "usd", "threshold": 5.0}},
    ]


# What each preset sets; the config file's own settings override it, field by field (a list, such as `rules`,
# as a whole). `protect` also lets the score reach hard_stop for loops without errors (floors of 1.0 and 0.85).
PRESET_SETTINGS: dict[str, dict[str, Any]] = {
    PRESET_DEFAULT: {},
    PRESET_PROTECT: {
        "loop_detection": {"progress": {"exact_floor": 1.0, "fuzzy_floor": 0.85}},
        "rules": protect_rules(),
    },
}
