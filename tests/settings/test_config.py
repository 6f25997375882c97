"""Config validation: every rule of the spec has a failing example, all errors are reported at once."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from detector.settings.config import AppConfig, ConfigError, load_config, parse_config


def errors_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return info.value.errors


def ld(**block) -> dict:
    return {"loop_detection": block}


def test_defaults_are_the_spec_defaults():
    cfg = AppConfig().loop_detection
    assert cfg.thresholds.model_dump() == {"warn_confidence": 0.30, "throttle_confidence": 0.50,
                                           "inject_confidence": 0.70, "hardstop_confidence": 0.90}
    assert cfg.consecutive_counts.model_dump() == {"warn": 3, "throttle": 5, "inject": 7, "hardstop": 10}
    assert cfg.weights.as_dict() == {"content_similarity": 0.25, "tool_call_repetition": 0.20,
                                     "response_stagnation": 0.15, "error_cycling": 0.15, "token_velocity": 0.10,
                                     "context_growth": 0.10, "cost_velocity": 0.05}
    assert (cfg.session_timeout_minutes, cfg.max_sessions, cfg.history_depth) == (30, 10_000, 5)
    assert (cfg.throttle_delay_seconds, cfg.injection_strategy, cfg.ema_alpha) == (2, "system_prompt_append", 0.3)
    assert (cfg.eviction_interval_seconds, cfg.token_velocity_threshold, cfg.cost_velocity_threshold) == (60, 10000.0, 0.5)
    assert [r.name for r in AppConfig().rules] == ["Loop: Exact prompt repeat", "Loop: Per-trace call cap",
                                                   "Loop: Per-trace cost cap"]
    assert all(r.action == "notify" for r in AppConfig().rules)


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (ld(thresholds={"warn_confidence": 0.5}), "strictly ascending"),
        (ld(thresholds={"inject_confidence": 0.9}), "strictly ascending"),
        (ld(consecutive_counts={"warn": 6}), "non-decreasing"),
        (ld(consecutive_counts={"inject": 11}), "non-decreasing"),
        (ld(weights={"cost_velocity": 0.5}), "sum to 1.0"),
        (ld(weights={"cost_velocity": -0.05, "content_similarity": 0.35}), "greater than or equal to 0"),
        (ld(weights={"content_similarity": 1.2}), "less than or equal to 1"),
        (ld(session_timeout_minutes=0), "session_timeout_minutes"),
        (ld(session_timeout_minutes=1441), "session_timeout_minutes"),
        (ld(max_sessions=99), "max_sessions"),
        (ld(max_sessions=1_000_001), "max_sessions"),
        (ld(history_depth=1), "history_depth"),
        (ld(history_depth=51), "history_depth"),
        (ld(throttle_delay_seconds=0), "throttle_delay_seconds"),
        (ld(throttle_delay_seconds=31), "throttle_delay_seconds"),
        (ld(ema_alpha=0.001), "ema_alpha"),
        (ld(ema_alpha=1.5), "ema_alpha"),
        (ld(eviction_interval_seconds=5), "eviction_interval_seconds"),
        (ld(eviction_interval_seconds=3601), "eviction_interval_seconds"),
        (ld(injection_strategy="shout"), "injection_strategy"),
        (ld(break_instruction_template=""), "break_instruction_template"),
        (ld(break_instruction_template="x" * 2001), "break_instruction_template"),
        (ld(token_velocity_threshold=0), "token_velocity_threshold"),
        (ld(cost_velocity_threshold=-1), "cost_velocity_threshold"),
        (ld(unknown_field=1), "unknown_field"),
        ({"rules": [{"name": "r", "detector": "exact_prompt_repeat", "params": {"window": 101}}]}, "window"),
        ({"rules": [{"name": "r", "detector": "exact_prompt_repeat", "params": {"max_cycle_length": 6}}]},
         "max_cycle_length"),
        ({"rules": [{"name": "r", "detector": "exact_prompt_repeat", "params": {"repeats": {1: 1}}}]}, "repeats"),
        ({"rules": [{"name": "r", "detector": "trace_cap", "params": {"unit": "hours"}}]}, "unit"),
        ({"rules": [{"name": "r", "detector": "nope"}]}, "detector"),
        ({"rules": [{"name": "r", "detector": "trace_cap", "action": "explode"}]}, "action"),
        ({"rules": [{"name": "r", "detector": "trace_cap"}, {"name": "r", "detector": "trace_cap"}]}, "duplicate"),
        ({"virtual_keys": {"agent-1": {"loop_detection": {"thresholds": {"warn_confidence": 0.95}}}}},
         "virtual_keys.agent-1.loop_detection.thresholds"),
        ({"budgets": [{"name": "b", "scope": "feature", "limit_usd": -1}]}, "limit_usd"),
        ({"budgets": [{"name": "b", "scope": "feature", "limit_usd": 1}, {"name": "b", "scope": "key", "limit_usd": 2}]},
         "duplicate budget names"),
        ({"detector": {"shard": "2/2"}}, "shard"),
    ],
)
def test_each_rule_has_a_failing_example(block, expected):
    errors = errors_of(block)
    assert any(expected in e for e in errors), errors


def test_every_error_is_reported_at_once():
    errors = errors_of(ld(thresholds={"warn_confidence": 0.6}, consecutive_counts={"warn": 9},
                          weights={"cost_velocity": 0.5}, ema_alpha=5, history_depth=0))
    assert len(errors) == 5
    assert any(e.startswith("loop_detection.thresholds") for e in errors)
    assert any(e.startswith("loop_detection.history_depth") for e in errors)


def test_a_removed_setting_is_named_and_said_to_have_done_nothing_beside_every_other_error(tmp_path):
    """``progress.poll_wait_seconds`` and ``progress.progress_discount`` were never read: a config that still sets one
    is told so by name (not "extra inputs are not permitted"), with every other error of the file."""
    errors = errors_of(ld(ema_alpha=5, progress={"poll_wait_seconds": 2, "progress_discount": 0.25,
                                                 "exact_floor": 2}))
    assert len(errors) == 4, errors
    for key in ("poll_wait_seconds", "progress_discount"):
        line = next(e for e in errors if e.startswith(f"loop_detection.progress.{key}: "))
        assert "removed" in line and "never did anything" in line and "Delete it" in line, line
    assert any(e.startswith("loop_detection.progress.exact_floor: ") for e in errors)
    assert any(e.startswith("loop_detection.ema_alpha: ") for e in errors)
    # in a virtual key's override too, and in a file (check-config, serve, a reload)
    override = errors_of({"virtual_keys": {"k": {"loop_detection": {"progress": {"progress_discount": 0.1}}}}})
    assert len(override) == 1 and override[0].startswith("virtual_keys.k.loop_detection.progress.progress_discount: "
                                                          "removed"), override
    path = tmp_path / "old.yaml"
    path.write_text("loop_detection:\n  progress:\n    poll_wait_seconds: 1.0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.errors[0].startswith("loop_detection.progress.poll_wait_seconds: removed")
    assert "poll_wait_seconds" not in AppConfig().loop_detection.progress.model_dump()


def test_the_early_warning_is_described_as_the_model_raises_it():
    from detector.core.progress import RUN_TO_WARN
    from detector.settings.loop_settings import ProgressSettings

    described = ProgressSettings.model_fields["early_warning"].description or ""
    assert f"{RUN_TO_WARN}rd wasted step in a row" in described and "whatever its evidence" in described


def test_weights_within_tolerance_are_accepted():
    cfg = parse_config(ld(weights={"cost_velocity": 0.0505}))
    assert cfg.loop_detection.weights.cost_velocity == 0.0505


def test_per_key_override_merges_field_by_field():
    cfg = parse_config({"virtual_keys": {"aggressive-agent": {"loop_detection": {
        "thresholds": {"warn_confidence": 0.20, "throttle_confidence": 0.40, "inject_confidence": 0.60,
                       "hardstop_confidence": 0.80},
        "consecutive_counts": {"warn": 2},
        "injection_strategy": "context_aware",
    }}}})
    merged = cfg.for_key("aggressive-agent")
    assert merged.thresholds.warn_confidence == 0.20
    assert merged.consecutive_counts.warn == 2 and merged.consecutive_counts.throttle == 5
    assert merged.injection_strategy == "context_aware"
    assert merged.ema_alpha == 0.3
    assert cfg.for_key("someone-else") == cfg.loop_detection


def test_check_config_cli(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"loop_detection": {"ema_alpha": 0.5}}))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"loop_detection": {"ema_alpha": 5, "thresholds": {"warn_confidence": 0.99}}}))
    ok = subprocess.run([sys.executable, "-m", "detector", "check-config", str(good)], capture_output=True, text=True)
    assert ok.returncode == 0 and "OK" in ok.stdout
    ko = subprocess.run([sys.executable, "-m", "detector", "check-config", str(bad)], capture_output=True, text=True)
    assert ko.returncode == 1
    assert "loop_detection.ema_alpha" in ko.stderr and "loop_detection.thresholds" in ko.stderr


def test_serve_refuses_invalid_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("loop_detection:\n  history_depth: 500\n")
    proc = subprocess.run([sys.executable, "-m", "detector", "serve", "--config", str(bad), "--data-dir",
                           str(tmp_path / "d")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "loop_detection.history_depth" in proc.stderr


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("loop_detection: [unclosed")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(broken)
