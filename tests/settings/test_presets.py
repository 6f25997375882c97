"""``preset: protect`` and ``serve --preset protect``: blocking that is safe for honest work; the config file's own
settings override the preset, field by field; the default preset never blocks."""

from __future__ import annotations

import pytest

from detector.cli.main import build_parser, main
from detector.settings.config import AppConfig, ConfigError, load_config, parse_config


def blocking(config: AppConfig) -> set[str]:
    return {r.detector for r in config.rules if r.action == "block" and r.mode == "enforce"}


def test_default_never_blocks_and_protect_blocks_no_progress_and_the_failure_loop():
    assert blocking(AppConfig()) == set() and AppConfig().preset == "default"
    protect = parse_config({"preset": "protect"})
    assert protect.preset == "protect" and blocking(protect) == {"no_progress", "failure_loop"}
    assert protect.loop_detection.progress.exact_floor == 1.0  # the score can reach hard_stop without errors
    no_progress = next(r for r in protect.rules if r.detector == "no_progress")
    assert no_progress.params == {"wasted_calls": 4, "min_evidence": "exact"}  # what is certain, by its 4th step


def test_explicit_settings_override_the_preset():
    config = parse_config({"preset": "protect", "loop_detection": {"progress": {"fuzzy_floor": 0.6}},
                           "rules": [{"name": "only", "detector": "no_progress", "action": "block",
                                      "params": {"wasted_calls": 5, "min_evidence": "exact"}}]})
    assert config.loop_detection.progress.fuzzy_floor == 0.6 and config.loop_detection.progress.exact_floor == 1.0
    assert [r.name for r in config.rules] == ["only"] and config.rules[0].params["wasted_calls"] == 5


def test_the_command_line_preset_applies_over_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("loop_detection:\n  history_depth: 6\n")
    config = load_config(path, preset="protect")
    assert config.preset == "protect" and blocking(config) and config.loop_detection.history_depth == 6
    assert load_config(None, preset="protect").preset == "protect"
    args = build_parser().parse_args(["serve", "--preset", "protect"])
    assert args.preset == "protect"
    assert main(["check-config", str(path), "--preset", "protect"]) == 0


def test_invalid_presets_and_parameters_are_rejected():
    with pytest.raises(ConfigError, match="preset"):
        parse_config({"preset": "paranoid"})
    with pytest.raises(ConfigError, match="min_evidence"):
        parse_config({"rules": [{"name": "x", "detector": "no_progress", "params": {"min_evidence": "structure"}}]})
    with pytest.raises(ConfigError, match="fuzzy_floor"):
        parse_config({"loop_detection": {"progress": {"fuzzy_floor": -1}}})
