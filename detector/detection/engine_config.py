"""The configuration, compiled into the plain values the detection core reads (:mod:`detector.core.tuning`).

Done once per configuration (at start, on a reload, on a budget change), never per call: the core never sees a
pydantic model.
"""

from __future__ import annotations

from collections.abc import Iterable

from detector.core.progress import EXACT, FUZZY
from detector.core.tuning import BudgetSpec, EngineTuning, PlannedRule, ScoringTuning, VelocityTuning
from detector.settings.config import AppConfig
from detector.settings.loop_settings import Budget, LoopDetectionConfig, Rule
from detector.settings.rule_params import PARAM_MODELS, VelocityParams
from detector.settings.vocabulary import (
    DETECTOR_EXACT_PROMPT_REPEAT,
    DETECTOR_FAILURE_LOOP,
    DETECTOR_NO_PROGRESS,
    DETECTOR_TRACE_CAP,
    DETECTOR_VELOCITY,
    MODE_ENFORCE,
    RULE_BLOCK,
)

__all__ = ["budget_specs", "engine_tuning", "planned_rule", "scoring_tuning", "velocity_tuning"]


def scoring_tuning(cfg: LoopDetectionConfig) -> ScoringTuning:
    t, c, progress = cfg.thresholds, cfg.consecutive_counts, cfg.progress
    return ScoringTuning(
        history_depth=cfg.history_depth, weights=tuple(cfg.weights.as_dict().items()), alpha=cfg.ema_alpha,
        thresholds=(t.warn_confidence, t.throttle_confidence, t.inject_confidence, t.hardstop_confidence),
        counts=(c.warn, c.throttle, c.inject, c.hardstop), step_down_after=cfg.step_down_after,
        token_velocity_threshold=cfg.token_velocity_threshold, cost_velocity_threshold=cfg.cost_velocity_threshold,
        throttle_delay_seconds=float(cfg.throttle_delay_seconds), injection_strategy=cfg.injection_strategy,
        break_instruction_template=cfg.break_instruction_template or "", progress=progress.enabled,
        early_warning=progress.enabled and progress.early_warning, exact_floor=progress.exact_floor,
        fuzzy_floor=progress.fuzzy_floor, w_token_velocity=cfg.weights.token_velocity,
        w_cost_velocity=cfg.weights.cost_velocity,
    )


def planned_rule(rule: Rule) -> PlannedRule:
    """A rule with its parameters validated and read once. An enforced block stays once tripped for the rules whose
    condition only grows (a cap) or is about the requests themselves (an exact repeat); the failure loop and no
    progress clear with their streak (a call that makes progress is not held by the ones before it); the velocity
    breaker clears itself."""
    params = PARAM_MODELS[rule.detector](**rule.params)
    sticky = (rule.action == RULE_BLOCK and rule.mode == MODE_ENFORCE
              and rule.detector in (DETECTOR_EXACT_PROMPT_REPEAT, DETECTOR_TRACE_CAP))
    base = {"name": rule.name, "detector": rule.detector, "action": rule.action, "mode": rule.mode,
            "enabled": rule.enabled, "sticky": sticky}
    if rule.detector == DETECTOR_EXACT_PROMPT_REPEAT:
        return PlannedRule(**base, window=params.window, repeats=params.repeat_counts())
    if rule.detector == DETECTOR_TRACE_CAP:
        return PlannedRule(**base, unit=params.unit, threshold=params.limit())
    if rule.detector == DETECTOR_FAILURE_LOOP:
        return PlannedRule(**base, same_tool_repeats=params.same_tool_repeats,
                           same_error_repeats=params.same_error_repeats)
    if rule.detector == DETECTOR_NO_PROGRESS:
        return PlannedRule(**base, wasted_calls=params.wasted_calls,
                           min_level=EXACT if params.min_evidence == "exact" else FUZZY)
    if rule.detector == DETECTOR_VELOCITY:
        return PlannedRule(**base, velocity=velocity_tuning(params))
    return PlannedRule(**base)


def velocity_tuning(params: VelocityParams) -> VelocityTuning:
    return VelocityTuning(params.tpm_limit, params.baseline_minutes, params.min_baseline_tpm, params.warmup_minutes)


def budget_specs(budgets: Iterable[Budget]) -> tuple[BudgetSpec, ...]:
    return tuple(BudgetSpec(b.name, b.scope, b.match, b.period, b.limit_usd, b.action) for b in budgets)


def engine_tuning(config: AppConfig) -> EngineTuning:
    """Everything the engine reads of ``config``."""
    ld = config.loop_detection
    return EngineTuning(
        scoring=scoring_tuning(ld),
        rules=tuple(planned_rule(rule) for rule in config.rules),
        budgets=budget_specs(config.budgets),
        prices={model: (p.input_per_million, p.output_per_million) for model, p in config.prices.items()},
        key_scoring={key: scoring_tuning(config.for_key(key)) for key, o in config.virtual_keys.items()
                     if o.loop_detection},
        key_tpm_limits={key: o.tpm_limit for key, o in config.virtual_keys.items() if o.tpm_limit is not None},
        session_timeout_minutes=ld.session_timeout_minutes, max_sessions=ld.max_sessions,
        owns_unknown_traces=config.detector.shard_count == 1,
    )
