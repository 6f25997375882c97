"""The escalation state machine, call by call (pure, no I/O)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from detector.core.escalation import (
    GENERIC_INSTRUCTION,
    LEVEL_RANK,
    Escalation,
    Transition,
    break_instruction,
)
from detector.detection.engine_config import scoring_tuning
from detector.settings.config import AppConfig, merge_loop_detection
from detector.settings.loop_settings import LoopDetectionConfig

CFG = AppConfig().loop_detection


def step(esc: Escalation, confidence: float, cfg: LoopDetectionConfig) -> Transition | None:
    """One scored call through the state machine, with the configuration's numbers (as the engine passes them)."""
    tuning = scoring_tuning(cfg)
    return esc.advance(confidence, tuning.thresholds, tuning.counts, tuning.step_down_after)


def run(confidences: list[float], cfg=CFG) -> list[str]:
    esc = Escalation()
    levels = []
    for c in confidences:
        step(esc, c, cfg)
        levels.append(esc.level_name)
    return levels


def test_sustained_high_confidence_climbs_at_the_spec_counts():
    levels = run([0.95] * 12)
    first = {name: levels.index(name) + 1 for name in ("warn", "throttle", "inject", "hard_stop")}
    assert first == {"warn": 3, "throttle": 5, "inject": 7, "hard_stop": 10}


def test_each_level_needs_its_own_threshold():
    # 0.55 is above warn and throttle, below inject: the session stops at throttle however long it lasts
    assert run([0.55] * 30)[-1] == "throttle"
    assert run([0.35] * 30)[-1] == "warn"
    assert run([0.29] * 30)[-1] == "none"


def test_a_dip_restarts_the_consecutive_count():
    levels = run([0.95, 0.95, 0.1, 0.95, 0.95])
    assert levels[-1] == "none"
    assert run([0.95, 0.95, 0.1, 0.95, 0.95, 0.95])[-1] == "warn"


def test_five_low_calls_step_down_exactly_one_level():
    esc = Escalation()
    for _ in range(7):
        step(esc, 0.95, CFG)
    assert esc.level_name == "inject"
    seen = []
    for _ in range(15):
        step(esc, 0.05, CFG)
        seen.append(esc.level_name)
    assert seen[:4] == ["inject"] * 4
    assert seen[4] == "throttle"
    assert seen[9] == "warn"
    assert seen[14] == "none"


def test_per_key_counts_apply():
    fast = merge_loop_detection(CFG, {"consecutive_counts": {"warn": 1, "throttle": 2, "inject": 3, "hardstop": 4}})
    assert run([0.95] * 4, fast) == ["warn", "throttle", "inject", "hard_stop"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), max_size=80))
def test_levels_are_never_skipped(confidences):
    levels = [0] + [LEVEL_RANK[x] for x in run(confidences)]
    assert all(abs(b - a) <= 1 for a, b in zip(levels, levels[1:], strict=False))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=4), st.integers(min_value=0, max_value=30))
def test_exactly_one_step_down_per_five_low_calls(start_level, low_calls):
    esc = Escalation(level=start_level)
    for _ in range(low_calls):
        step(esc, 0.0, CFG)
    assert esc.level == max(0, start_level - low_calls // 5)


def test_serialisation_round_trip():
    esc = Escalation()
    for c in (0.95, 0.6, 0.95, 0.2):
        step(esc, c, CFG)
    assert Escalation.from_dict(esc.to_dict()) == esc


def test_break_instruction_strategies():
    assert break_instruction(scoring_tuning(CFG), "tool_call_repetition", ("read_file",)) == GENERIC_INSTRUCTION
    aware = merge_loop_detection(CFG, {"injection_strategy": "context_aware"})
    assert "`read_file`" in break_instruction(scoring_tuning(aware), "tool_call_repetition", ("read_file",))
    assert "Stop retrying" in break_instruction(scoring_tuning(aware), "error_cycling")
    templated = merge_loop_detection(CFG, {"break_instruction_template": "STOP. Ask the user."})
    assert break_instruction(scoring_tuning(templated), "error_cycling") == "STOP. Ask the user."
