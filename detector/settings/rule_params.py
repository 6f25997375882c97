"""The rule detectors' parameters: one pydantic model per detector, validated when the config loads.

Kept apart from :mod:`detector.core.rules` (the detection functions) because those are pure per-call code that
``setup.py`` compiles (see :mod:`detector.native`), and a compiled module cannot define pydantic models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "DETECTORS", "ExactRepeatParams", "FailureLoopParams", "NoProgressParams", "PARAM_MODELS", "TRACE_CAP_DEFAULTS",
    "TraceCapParams", "VelocityParams", "validate_params",
]

DETECTORS = ("exact_prompt_repeat", "trace_cap", "failure_loop", "velocity", "no_progress")

TRACE_CAP_DEFAULTS = {"calls": 25, "usd": 5.0, "tokens": 200_000}


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExactRepeatParams(_Params):
    window: int = Field(20, ge=1, le=100, description="how many of the run's recent model calls to look at")
    max_cycle_length: int = Field(3, ge=1, le=5, description="the longest repeating pattern to look for")
    repeats: dict[int, int] = Field(
        default_factory=dict, description="repetitions that count as a loop, per cycle length (default 3 for 1, else 2)"
    )

    @model_validator(mode="after")
    def _repeats_valid(self) -> ExactRepeatParams:
        for length, count in self.repeats.items():
            if not 1 <= length <= 5:
                raise ValueError(f"repeats: cycle length {length} is outside 1..5")
            if count < 2:
                raise ValueError(f"repeats: {count} repetitions for length {length}; must be 2 or more")
        return self

    def repeats_for(self, length: int) -> int:
        return self.repeats.get(length, 3 if length == 1 else 2)

    def repeat_counts(self) -> tuple[int, ...]:
        """``repeats_for(L)`` for L in 1..``max_cycle_length``: the form :func:`detector.core.rules.find_repeat` takes."""
        return tuple(self.repeats_for(length) for length in range(1, self.max_cycle_length + 1))


class TraceCapParams(_Params):
    unit: Literal["calls", "usd", "tokens"] = "calls"
    threshold: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _default_threshold(self) -> TraceCapParams:
        if self.threshold is None:
            self.threshold = float(TRACE_CAP_DEFAULTS[self.unit])
        return self

    def limit(self) -> float:
        """The threshold in ``unit``: the configured one, else the unit's default."""
        return float(self.threshold if self.threshold is not None else TRACE_CAP_DEFAULTS[self.unit])


class FailureLoopParams(_Params):
    same_tool_repeats: int = Field(5, ge=2, le=1000, description="the same tool call back to back, N times")
    same_error_repeats: int = Field(3, ge=2, le=1000, description="the same tool error back to back, N times")


class VelocityParams(_Params):
    tpm_limit: float | None = Field(None, gt=0, description="manual tokens/min cap (else 10x the key's baseline)")
    baseline_minutes: int = Field(60, ge=5, le=10_080, description="horizon of the key's rolling baseline")
    min_baseline_tpm: float = Field(1000.0, ge=0, description="baseline floor, so a quiet key cannot trip on a blip")
    warmup_minutes: float = Field(5.0, ge=0, description="no baseline trip before the key has this much history")


class NoProgressParams(_Params):
    """Calls that repeat earlier ones without progress (``detector.core.progress``), in a trace or a session (a run
    restarted in new traces): trips after ``wasted_calls`` such calls in a row with at least ``min_evidence``
    (structure alone never counts), and clears with the first call that makes progress."""

    wasted_calls: int = Field(3, ge=1, le=100, description="wasted calls in a row (exact or fuzzy evidence) that trip it")
    min_evidence: Literal["exact", "fuzzy"] = Field("fuzzy", description="the weakest evidence a wasted call may rest on")


PARAM_MODELS: dict[str, type[_Params]] = {
    "exact_prompt_repeat": ExactRepeatParams,
    "trace_cap": TraceCapParams,
    "failure_loop": FailureLoopParams,
    "velocity": VelocityParams,
    "no_progress": NoProgressParams,
}


def validate_params(detector: str, params: dict[str, Any]) -> dict[str, Any]:
    """Validate a rule's ``params`` for its detector; returns them with defaults filled in."""
    model = PARAM_MODELS[detector]
    try:
        return model.model_validate(params or {}).model_dump()
    except ValidationError as exc:
        msgs = "; ".join(
            f"params.{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise ValueError(msgs) from None
