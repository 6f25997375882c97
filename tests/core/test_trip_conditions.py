"""When a rule trips (``detector/core/trip_conditions.py``): the one evaluator the spans' path (``core/trips.py``) and
the pre-flight check (``enforcement/preflight.py``) both ask. Plain data in, plain data out, call by call."""

from __future__ import annotations

import pytest

from detector.core.progress import EXACT, FUZZY, NONE, ProgressMemory
from detector.core.steps import STEP_TOOL, ProgressStep
from detector.core.trip_conditions import (
    NoProgressTrip,
    RepeatTrip,
    WastedRun,
    failure_trip,
    no_progress_trip,
    repeat_trip,
    wasted_run,
)
from detector.core.tuning import PlannedRule
from detector.detection.engine_config import planned_rule
from detector.settings.loop_settings import Rule


def rule(detector: str, **params: object) -> PlannedRule:
    return PlannedRule(name="r", detector=detector, action="block", mode="enforce", enabled=True, sticky=False,
                       **params)  # type: ignore[arg-type]


REPEAT = rule("exact_prompt_repeat", window=20, repeats=(3, 2, 2))  # the spec's defaults
FAILURE = rule("failure_loop", same_tool_repeats=5, same_error_repeats=3)
a, b, c = 11, 22, 33


# -- exact prompt repeat ---------------------------------------------------------------------------------------------

def test_a_repeat_trips_call_by_call():
    fps: list[int] = []
    got = []
    for fp in (c, a, a, a, b, a, b):
        fps.append(fp)
        got.append(repeat_trip(REPEAT, fps))
    assert got == [None, None, None, RepeatTrip(1, 3),  # a three times
                   None, None,  # a b: a new tail
                   RepeatTrip(2, 2)]  # a b a b


def test_a_repeat_looks_only_at_the_rules_window_and_never_at_unknown_requests():
    assert repeat_trip(rule("exact_prompt_repeat", window=2, repeats=(3,)), [a, a, a]) is None
    assert repeat_trip(rule("exact_prompt_repeat", window=3, repeats=(3,)), [a, a, a]) == RepeatTrip(1, 3)
    assert repeat_trip(REPEAT, [0, 0, 0]) is None
    assert repeat_trip(REPEAT, []) is None


# -- failure loop ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("tool_streak", "error_streak", "expected"), [
    (0, 0, None),
    (4, 0, None),
    (5, 0, "same_tool_call"),
    (1, 2, None),
    (1, 3, "same_tool_error"),
    (7, 3, "same_tool_error"),  # both: the error is the more specific diagnosis
])
def test_which_failure_trips(tool_streak, error_streak, expected):
    assert failure_trip(FAILURE, tool_streak, error_streak) == expected


def test_the_failure_loop_reads_the_rules_own_repeats():
    assert failure_trip(rule("failure_loop", same_tool_repeats=2, same_error_repeats=9), 2, 0) == "same_tool_call"
    assert failure_trip(rule("failure_loop", same_tool_repeats=2, same_error_repeats=9), 1, 8) is None


# -- no progress -----------------------------------------------------------------------------------------------------

FUZZY_3 = rule("no_progress", wasted_calls=3, min_level=FUZZY)
EXACT_4 = rule("no_progress", wasted_calls=4, min_level=EXACT)  # the protect preset's


@pytest.mark.parametrize(("r", "run", "expected"), [
    (FUZZY_3, WastedRun(exact=0, fuzzy=2, top=FUZZY, flag=NONE), None),
    (FUZZY_3, WastedRun(exact=1, fuzzy=3, top=EXACT, flag=EXACT), NoProgressTrip(3, "exact")),
    (FUZZY_3, WastedRun(exact=0, fuzzy=3, top=FUZZY, flag=FUZZY), NoProgressTrip(3, "fuzzy")),
    (EXACT_4, WastedRun(exact=3, fuzzy=6, top=EXACT, flag=EXACT), None),  # fuzzy steps do not count for it
    (EXACT_4, WastedRun(exact=4, fuzzy=4, top=EXACT, flag=EXACT), NoProgressTrip(4, "exact")),
    # a rule of fewer wasted steps than make a loop trips before the early warning (flag NONE), on either path
    (rule("no_progress", wasted_calls=1, min_level=FUZZY), WastedRun(0, 1, FUZZY, NONE), NoProgressTrip(1, "fuzzy")),
    (rule("no_progress", wasted_calls=0, min_level=FUZZY), WastedRun(0, 0, NONE, NONE), None),  # an empty run: never
])
def test_does_a_no_progress_rule_trip(r, run, expected):
    assert no_progress_trip(r, run) == expected


def test_the_evidence_the_config_names_is_the_level_the_rule_counts():
    exact = planned_rule(Rule(name="e", detector="no_progress", params={"wasted_calls": 2, "min_evidence": "exact"}))
    fuzzy = planned_rule(Rule(name="f", detector="no_progress", params={"wasted_calls": 2, "min_evidence": "fuzzy"}))
    run = WastedRun(exact=1, fuzzy=2, top=EXACT, flag=NONE)
    assert no_progress_trip(exact, run) is None
    assert no_progress_trip(fuzzy, run) == NoProgressTrip(2, "exact")


def read(obs: int) -> ProgressStep:
    """``read_file("config.yaml")`` bringing back ``obs``."""
    return ProgressStep(STEP_TOOL, ("read_file",), 7, 0, obs, 0, 300, 0)


def test_a_memory_read_step_by_step():
    """The same read bringing back the same, then something new: the run a real memory holds after each step, and
    whether the protect preset's rule (4 wasted, exact) trips on it."""
    memory = ProgressMemory()
    runs, trips = [], []
    for obs in (5, 5, 5, 5, 5, 6):
        memory.observe(read(obs))
        run = wasted_run(memory)
        runs.append(run)
        trips.append(no_progress_trip(EXACT_4, run))
    assert runs == [WastedRun(0, 0, NONE, NONE), WastedRun(1, 1, EXACT, NONE), WastedRun(2, 2, EXACT, NONE),
                    WastedRun(3, 3, EXACT, EXACT), WastedRun(4, 4, EXACT, EXACT), WastedRun(0, 0, NONE, NONE)]
    assert trips == [None, None, None, None, NoProgressTrip(4, "exact"), None]  # cleared by the new result
