"""Timing and layout are not evidence: the same steps give the same decisions however fast the model answers, however
long the tools take, whether a throttle delay separates the calls, and however the run's spans are split into traces
and sessions. Span times come from a fake clock (the spans' recorded timestamps), never from sleeping."""

from __future__ import annotations

import pytest
from support.agent_runs import LAYOUTS, TIMINGS, agent_run, first_flag, step_actions

from detector.settings.config import load_config

LOOP = [{"args": 10 + k, "result": 100 + k} for k in range(3)] + [{"args": 42, "result": 420}] * 14
CYCLE = [{"args": k + 1, "result": 10 * k + 5} for k in range(5)] * 4
FAILING = [{"name": "bash", "args": 1, "result": 10}] + [
    {"name": "bash", "args": 100 + k, "failed": True, "shape": 77, "result": 500 + k} for k in range(16)]
HEALTHY = [{"args": 10 + k, "result": 100 + k} for k in range(17)]
RUNS = {"looping": LOOP, "cycling": CYCLE, "failing": FAILING, "healthy": HEALTHY}
PRESETS = {"default": None, "protect": load_config(None, "protect")}


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("preset", PRESETS)
def test_timing_changes_no_decision(run, timing, preset):
    config = PRESETS[preset]
    expected = step_actions(agent_run(RUNS[run]), config)
    assert step_actions(agent_run(RUNS[run], timing=TIMINGS[timing]), config) == expected


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("preset", PRESETS)
def test_layout_changes_no_decision(run, layout, preset):
    config = PRESETS[preset]
    expected = step_actions(agent_run(RUNS[run]), config)
    assert step_actions(agent_run(RUNS[run], layout=layout), config) == expected


def test_the_reference_runs_are_what_they_claim():
    """The runs above would prove nothing if every decision were allow: the loops are caught, the honest run is not."""
    for name in ("looping", "cycling", "failing"):
        actions = step_actions(agent_run(RUNS[name]))
        assert first_flag(actions) is not None and "throttle" in actions, name
    assert first_flag(step_actions(agent_run(HEALTHY))) is None
    blocked = step_actions(agent_run(LOOP), PRESETS["protect"])
    assert "block" in blocked


def test_a_throttled_loop_stays_flagged_while_it_repeats():
    """The detector's own throttle delay is not a wait for the world: the loop does not look like polling once the
    agent sleeps between its calls."""
    actions = step_actions(agent_run(LOOP, timing=TIMINGS["a throttle delay from the 4th step"]))
    first = first_flag(actions)
    assert first is not None and all(a != "allow" for a in actions[first:])
