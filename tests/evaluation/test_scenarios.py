"""The scenario library through the full pipeline: OTLP -> chDB -> detector -> decision.

Runs of the labeled corpus (detector/corpus.py) are replayed call by call with the real OpenTelemetry
exporter; after each call the agent's decision is read, as the agent would before its next call.
"""

from __future__ import annotations

import dataclasses

import pytest

from detector.core.escalation import LEVEL_RANK
from detector.evaluation.corpus import (
    LEGIT_FAMILIES,
    LOOP_FAMILIES,
    STRUCTURE_ONLY_WITHOUT_CONTENT,
    generate_scenario,
)
from detector.evaluation.replay import replay
from detector.settings.config import AppConfig, parse_config

# variant 0 captures content, variant 2 does not (the default of every instrumentation); a loop whose runs without
# content carry nothing but structure (STRUCTURE_ONLY_WITHOUT_CONTENT: the arguments unknown, the request's length
# varying with its words) is measured without content through the app's fingerprints (the SDKs' completion hook), as
# its users would run it; a content-off-only family (CONTENT_OFF_ONLY) has both variants without content. Every honest
# run is measured in both.
LOOPS = [dataclasses.replace(s, app_fingerprints=True)
         if not s.capture_content and s.family in STRUCTURE_ONLY_WITHOUT_CONTENT else s
         for s in (generate_scenario(f, v) for f in LOOP_FAMILIES for v in (0, 2))]
LEGIT = [generate_scenario(f, v) for f in LEGIT_FAMILIES for v in (0, 2)]

# Loops the detector misses, and why (strict: once caught, drop it from here).
KNOWN_MISSES = {
    "same_outcome-02": "each change (a form filled) brings back a page of its own, which is a new outcome; the submit's "
                       "same page after it is not judged against the change (docs/detection-quality.md)",
}


def _with_known_misses(scenarios: list) -> list:
    return [pytest.param(s, id=s.id, marks=pytest.mark.xfail(reason=KNOWN_MISSES[s.id], strict=True))
            if s.id in KNOWN_MISSES else pytest.param(s, id=s.id) for s in scenarios]


def first_action(decisions: list[dict]) -> tuple[int, dict] | None:
    return next(((i, d) for i, d in enumerate(decisions) if d["action"] != "allow"), None)


@pytest.fixture(scope="module")
def default_replay():
    return replay(LOOPS + LEGIT, AppConfig())


def test_library_size():
    assert len(LOOPS) >= 12 and len({s.family for s in LOOPS}) >= 9
    assert len(LEGIT) >= 8 and {s.family for s in LEGIT} >= {
        "batch_template", "polling_backoff", "transient_error", "same_greeting", "long_productive"}


@pytest.mark.parametrize("scenario", _with_known_misses(LOOPS))
def test_every_loop_is_caught_after_its_onset(default_replay, scenario):
    decisions = default_replay.decisions[scenario.id]
    first = first_action(decisions)
    assert first is not None, f"{scenario.id} never left allow"
    index, decision = first
    assert index >= scenario.onset, f"alarm at call {index}, before the loop began at {scenario.onset}"
    assert decision["dominant_signal"] != "none"
    levels = [0] + [LEVEL_RANK[d["level"]] for d in decisions]
    assert all(b - a <= 1 for a, b in zip(levels, levels[1:], strict=False)), levels


@pytest.mark.parametrize("scenario", LEGIT, ids=lambda s: s.id)
def test_legitimate_workloads_stay_allow(default_replay, scenario):
    decisions = default_replay.decisions[scenario.id]
    assert [d["action"] for d in decisions] == ["allow"] * len(decisions)


# Rule detectors on their own: confidence thresholds out of reach and the early warning off, so only the rule can
# decide.
RULES_ONLY = parse_config({
    "loop_detection": {"thresholds": {"warn_confidence": 0.96, "throttle_confidence": 0.97,
                                      "inject_confidence": 0.98, "hardstop_confidence": 0.99},
                       "progress": {"early_warning": False}},
    "virtual_keys": {"vk-velocity": {"tpm_limit": 5_000}},
    "rules": [
        {"name": "block-exact-repeat", "detector": "exact_prompt_repeat", "action": "block", "mode": "enforce"},
        {"name": "block-failure-loop", "detector": "failure_loop", "action": "block", "mode": "enforce"},
        {"name": "block-token-cap", "detector": "trace_cap", "action": "block", "mode": "enforce",
         "params": {"unit": "tokens", "threshold": 150_000}},
        {"name": "block-velocity", "detector": "velocity", "action": "block", "mode": "enforce"},
    ],
})

RULE_CASES = {
    # scenario -> the detector that alone must stop it
    "regenerated_text-01": "exact_prompt_repeat",  # stateless retries: identical requests
    "error_retry-00": "failure_loop",  # the same tool error back to back
    "runaway_cost-00": "trace_cap",  # one run past its token ceiling
    "velocity": "velocity",  # a key burning tokens per minute past its manual cap
}


@pytest.fixture(scope="module")
def rules_replay():
    scenarios = []
    for sid in RULE_CASES:
        if sid != "velocity":
            family, variant = sid.rsplit("-", 1)
            scenarios.append(generate_scenario(family, int(variant)))
    # a productive run, but on a key whose manual cap is 5,000 tokens per minute
    burst = dataclasses.replace(generate_scenario("long_productive", 2), id="velocity", virtual_key="vk-velocity")
    control = generate_scenario("edit_test_cycle", 0)
    return replay([*scenarios, burst, control], RULES_ONLY)


@pytest.mark.parametrize(("scenario_id", "detector"), RULE_CASES.items())
def test_each_rule_detector_catches_its_scenario_alone(rules_replay, scenario_id, detector):
    first = first_action(rules_replay.decisions[scenario_id])
    assert first is not None, f"{scenario_id} was not stopped"
    _, decision = first
    assert decision["action"] == "block"
    assert decision["detector"] == detector
    assert decision["level"] == "none"  # the confidence path did not decide


def test_rules_leave_a_productive_run_alone(rules_replay):
    decisions = rules_replay.decisions["edit_test_cycle-00"]
    assert all(d["action"] == "allow" for d in decisions)
