"""Rule detectors: exact prompt repeat (cycle detection), per-trace caps, failure loop breaker, velocity
breaker. Pure functions and small state objects on hand-built inputs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detector.core.models import Call, Turn
from detector.core.rules import FailureStreak, VelocityState, cap_reached, failure_kind, find_repeat
from detector.core.tuning import VelocityTuning
from detector.core.turn_view import turn_view
from detector.detection.engine_config import velocity_tuning
from detector.settings.rule_params import ExactRepeatParams, FailureLoopParams, TraceCapParams, VelocityParams

# The rules as the engine and the pre-flight check call them, from a rule's parameter model.


def find_repeat_cycle(fps: list[int], params: ExactRepeatParams) -> tuple[int, int] | None:
    return find_repeat(fps, params.window, params.repeat_counts())


def trace_cap_exceeded(calls: int, usd: float, tokens: int, params: TraceCapParams) -> bool:
    return cap_reached(calls, usd, tokens, params.unit, params.limit())


def failure_loop_tripped(streaks: tuple[int, int], params: FailureLoopParams) -> str | None:
    return failure_kind(*streaks, params.same_tool_repeats, params.same_error_repeats)


def advance(streak: FailureStreak, turn: Turn) -> tuple[int, int]:
    """One turn through the failure streak, from its view (as the engine does)."""
    view = turn_view(turn)
    return streak.advance(view.tools, view.error_fps if view.is_error else frozenset())

S = 1_000_000_000
MIN = 60 * S
T0 = 1_700_000_000 * S

a, b, c, d, e = 11, 22, 33, 44, 55

# ------------------------------------------------------------------------------------ exact prompt repeat

DEFAULT = ExactRepeatParams()


@pytest.mark.parametrize(
    ("fps", "expected"),
    [
        ([a, a, a], (1, 3)),
        ([a, a, a, a], (1, 4)),
        ([b, a, a, a], (1, 3)),
        ([a, b, a, b], (2, 2)),
        ([a, b, a, b, a, b], (2, 3)),
        ([c, a, b, a, b], (2, 2)),
        ([a, b, c, a, b, c], (3, 2)),
        ([a, b, c, a, b, c, a, b, c], (3, 3)),
        ([a, a, b, a, a, b], (3, 2)),  # a,a,b is a primitive cycle of length 3
        ([a, a, a, a, a, a], (1, 6)),  # shortest cycle preferred, not (2, 3) or (3, 2)
        ([a, b, a], None),
        ([a, a], None),
        ([a], None),
        ([], None),
        ([a, a, a, b], None),  # the tail must repeat
        ([b, a, b, a, a], None),
        ([a, b, c, d, a, b, c, d], None),  # length 4 > default max_cycle_length 3
        ([a, b, c, a, b], None),
        ([0, 0, 0], None),  # unknown fingerprints never match
        ([a, 0, a, 0], None),
        ([0, a, 0, a], None),
    ],
)
def test_find_repeat_cycle_defaults(fps, expected):
    assert find_repeat_cycle(fps, DEFAULT) == expected


def test_default_parameters_match_the_spec():
    assert DEFAULT.window == 20 and DEFAULT.max_cycle_length == 3
    assert [DEFAULT.repeats_for(n) for n in (1, 2, 3)] == [3, 2, 2]


def test_window_limits_what_is_seen():
    assert find_repeat_cycle([a, a, a], ExactRepeatParams(window=2)) is None
    assert find_repeat_cycle([a] * 25, DEFAULT) == (1, 20)
    assert find_repeat_cycle([a, b, a, b] + [c, d, e] * 6, ExactRepeatParams(window=18)) == (3, 6)
    # a cycle older than the window is forgotten
    assert find_repeat_cycle([a, a, a] + list(range(100, 120)), DEFAULT) is None


def test_custom_repeats_per_length():
    strict = ExactRepeatParams(repeats={1: 5})
    assert find_repeat_cycle([a] * 4, strict) is None
    assert find_repeat_cycle([b, a, a, a, a], strict) is None  # not smuggled in as (a, a) x 2
    assert find_repeat_cycle([a] * 5, strict) == (1, 5)
    assert find_repeat_cycle([a, b, a, b], ExactRepeatParams(repeats={2: 3})) is None
    assert find_repeat_cycle([a, b, a, b, a, b], ExactRepeatParams(repeats={2: 3})) == (2, 3)


def test_longer_cycles_when_allowed():
    p = ExactRepeatParams(max_cycle_length=5)
    assert find_repeat_cycle([a, b, c, d, a, b, c, d], p) == (4, 2)
    assert find_repeat_cycle([a, b, c, d, e] * 2, p) == (5, 2)
    assert find_repeat_cycle([a, b, a, b], ExactRepeatParams(max_cycle_length=1)) is None


@given(st.lists(st.integers(1, 2**64 - 1), unique=True, max_size=60))
def test_never_matches_distinct_fingerprints(fps):
    assert find_repeat_cycle(fps, ExactRepeatParams(max_cycle_length=5)) is None


@given(
    block=st.lists(st.integers(1, 1000), unique=True, min_size=1, max_size=3),
    copies=st.integers(1, 6),
    prefix=st.lists(st.integers(2000, 3000), max_size=5),
)
def test_finds_a_repeated_block(block, copies, prefix):
    found = find_repeat_cycle(prefix + block * copies, DEFAULT)
    need = DEFAULT.repeats_for(len(block))
    if copies * len(block) > DEFAULT.window:
        copies = DEFAULT.window // len(block)
    if copies >= need:
        assert found == (len(block), copies)
    else:
        assert found is None


# ---------------------------------------------------------------------------------------- trace caps


@pytest.mark.parametrize(
    ("unit", "calls", "usd", "tokens", "expected"),
    [
        ("calls", 24, 0.0, 0, False),
        ("calls", 25, 0.0, 0, True),  # the 25th call reaches the ceiling: it was allowed, later ones stop
        ("calls", 26, 0.0, 0, True),
        ("usd", 100, 4.99, 10**9, False),
        ("usd", 0, 5.0, 0, True),
        ("usd", 0, 5.01, 0, True),
        ("tokens", 1000, 99.0, 199_999, False),
        ("tokens", 0, 0.0, 200_000, True),
    ],
)
def test_trace_cap_defaults(unit, calls, usd, tokens, expected):
    assert trace_cap_exceeded(calls, usd, tokens, TraceCapParams(unit=unit)) is expected


def test_trace_cap_custom_threshold():
    p = TraceCapParams(unit="calls", threshold=3)
    assert [trace_cap_exceeded(n, 0.0, 0, p) for n in range(1, 5)] == [False, False, True, True]
    assert trace_cap_exceeded(0, 0.25, 0, TraceCapParams(unit="usd", threshold=0.25))


# ------------------------------------------------------------------------------------- failure loop


def tturn(tools: tuple[str, ...] = (), tool_error: str | None = None, call_error: str | None = None) -> Turn:
    def fp(label: str) -> int:
        return abs(hash(("fp", label))) % (2**63) + 1

    spans = [
        Call(ts_ns=0, trace_id="t", span_id=f"x{i}", session_id="s", operation="execute_tool", tool_name=x.split(":")[0],
             tool_fp=fp(x), is_error=tool_error is not None, error_fp=fp(tool_error) if tool_error else 0)
        for i, x in enumerate(tools)
    ]
    call = Call(ts_ns=0, trace_id="t", span_id="c", session_id="s", is_error=call_error is not None,
                error_fp=fp(call_error) if call_error else 0)
    return Turn(call=call, tools=spans)


FL = FailureLoopParams()


def test_failure_loop_defaults():
    assert FL.same_tool_repeats == 5 and FL.same_error_repeats == 3


def test_same_tool_call_streak_trips_on_the_fifth():
    streak = FailureStreak()
    results = [failure_loop_tripped(advance(streak, tturn(("read_file:a",))), FL) for _ in range(6)]
    assert streak.tool_streak == 6
    assert results == [None, None, None, None, "same_tool_call", "same_tool_call"]


def test_different_arguments_or_no_tool_break_the_streak():
    streak = FailureStreak()
    for _ in range(4):
        advance(streak, tturn(("read_file:a",)))
    assert advance(streak, tturn(("read_file:b",))) == (1, 0)
    advance(streak, tturn(("read_file:b",)))
    assert advance(streak, tturn()) == (0, 0)


def test_same_call_alongside_others_continues():
    streak = FailureStreak()
    advance(streak, tturn(("read_file:a", "ls:.")))
    advance(streak, tturn(("read_file:a",)))
    assert advance(streak, tturn(("grep:x", "read_file:a"))) == (3, 0)
    assert streak.tool_fps == sorted({fp for fp in tturn(("read_file:a",)).tool_fps})


def test_same_error_trips_on_the_third():
    streak = FailureStreak()
    results = [failure_loop_tripped(advance(streak, tturn(("run:make",), tool_error="EACCES")), FL) for _ in range(3)]
    assert results == [None, None, "same_tool_error"]


def test_error_wins_over_tool_when_both_trip():
    assert failure_loop_tripped((5, 3), FL) == "same_tool_error"
    assert failure_loop_tripped((5, 2), FL) == "same_tool_call"
    assert failure_loop_tripped((4, 2), FL) is None


def test_success_or_a_different_error_resets_the_error_streak():
    streak = FailureStreak()
    advance(streak, tturn(("run:make",), tool_error="EACCES"))
    advance(streak, tturn(("run:make",), tool_error="EACCES"))
    assert advance(streak, tturn(("run:make",))) == (3, 0)
    advance(streak, tturn(("run:make",), tool_error="EACCES"))
    assert advance(streak, tturn(("run:make",), tool_error="ENOENT")) == (5, 1)


def test_model_call_errors_count_too():
    streak = FailureStreak()
    for _ in range(3):
        advance(streak, tturn(call_error="context_length_exceeded"))
    assert failure_loop_tripped((streak.tool_streak, streak.error_streak), FL) == "same_tool_error"


def test_failure_streak_round_trip():
    streak = FailureStreak()
    for _ in range(3):
        advance(streak, tturn(("read_file:a",), tool_error="EIO"))
    copy = FailureStreak.from_dict(json.loads(json.dumps(streak.to_dict())))
    assert copy == streak
    assert advance(copy, tturn(("read_file:a",), tool_error="EIO")) == advance(streak, tturn(("read_file:a",), tool_error="EIO"))
    assert FailureStreak.from_dict({}) == FailureStreak()


# ---------------------------------------------------------------------------------- velocity breaker

VP = velocity_tuning(VelocityParams())


def feed(state: VelocityState, start_ns: int, seconds: int, every: float, tokens: int,
         params: VelocityTuning = VP, tpm_limit: float | None = None) -> list[bool]:
    out, t = [], 0.0
    while t < seconds:
        out.append(state.update(start_ns + int(t * S), tokens, params, tpm_limit))
        t += every
    return out


def warmed_key(minutes: int = 10, tpm: int = 10_000) -> VelocityState:
    """A key steadily using ``tpm`` tokens/min (one call every 6 s) for ``minutes``."""
    state = VelocityState()
    assert not any(feed(state, T0, minutes * 60, 6.0, tpm // 10))
    return state


def test_steady_traffic_learns_its_baseline_and_never_trips():
    state = warmed_key()
    assert state.baseline_tpm == pytest.approx(10_000, rel=0.15)
    assert state.window_tpm == pytest.approx(10_000, rel=0.1)
    assert not state.tripped


def test_trips_at_ten_times_the_baseline():
    state = warmed_key()
    level = state.trip_threshold(T0 + 600 * S, VP)
    assert level == pytest.approx(10 * state.baseline_tpm)
    # a loop: 20k tokens per second
    results = feed(state, T0 + 600 * S, 20, 1.0, 20_000)
    assert results[0] is False and state.tripped
    first = results.index(True)
    assert 3 <= first <= 6  # trips as soon as the 60 s window holds >= 10x the baseline
    assert state.trip_reason == "baseline"


def test_below_ten_times_does_not_trip():
    state = warmed_key()
    assert not any(feed(state, T0 + 600 * S, 120, 1.0, 1_200))  # ~7x the baseline (72k + 10k / min)


def test_baseline_does_not_learn_from_the_burst():
    state = warmed_key()
    before = state.baseline_tpm
    feed(state, T0 + 600 * S, 300, 1.0, 20_000)  # five minutes of burst, tripped throughout
    assert state.tripped
    assert state.baseline_tpm == before


def test_clears_when_the_rate_normalises_with_hysteresis():
    state = warmed_key()
    start = T0 + 600 * S
    feed(state, start, 30, 1.0, 20_000)
    assert state.tripped
    level = state.trip_level
    # the rate drops to ~70% of the trip level: still tripped (no flapping at the limit)
    t = start + 30 * S
    feed(state, t, 120, 1.0, int(0.7 * level / 60))
    assert state.tripped
    # it drops to ~30% of the trip level: cleared
    t += 120 * S
    results = feed(state, t, 120, 1.0, int(0.3 * level / 60))
    assert not state.tripped and results[-1] is False


def test_blocked_key_clears_after_going_quiet():
    state = warmed_key()
    start = T0 + 600 * S
    feed(state, start, 30, 1.0, 20_000)
    assert state.tripped
    assert state.update(start + 40 * S, 0, VP) is True  # burst still in the window
    assert state.update(start + 95 * S, 0, VP) is False  # the window has emptied
    assert state.window_tpm == 0.0


@pytest.mark.parametrize(("warmup", "trips"), [(5.0, False), (0.0, True)])
def test_warm_up_suppresses_baseline_trips(warmup, trips):
    # two minutes of 10k tokens/min, then a 20k tokens/s burst: inside the default 5 minute warm-up the
    # baseline is not trusted yet, without warm-up it trips at 10x
    params = velocity_tuning(VelocityParams(warmup_minutes=warmup))
    state = VelocityState()
    assert not any(feed(state, T0, 120, 6.0, 1_000, params=params))
    assert any(feed(state, T0 + 120 * S, 20, 1.0, 20_000, params=params)) is trips


def test_min_baseline_floor():
    state = warmed_key(tpm=100)  # a very quiet key: 100 tokens/min
    t = T0 + 600 * S
    assert state.trip_threshold(t, VP) == pytest.approx(10 * VP.min_baseline_tpm)
    assert not any(feed(state, t, 60, 1.0, 100))  # 6k/min: 60x its baseline, but under 10x the floor
    assert any(feed(state, t + 60 * S, 60, 1.0, 300))  # 18k/min


def test_manual_cap_trips_even_during_warm_up():
    state = VelocityState()
    results = feed(state, T0, 60, 1.0, 1_000, tpm_limit=20_000)
    assert results.index(True) == 19  # the 20th second brings the window to 20k
    assert state.trip_reason == "manual"


def test_manual_cap_from_params_and_override_precedence():
    state = VelocityState()
    p = velocity_tuning(VelocityParams(tpm_limit=5_000))
    assert any(feed(state, T0, 10, 1.0, 1_000, params=p))
    other = VelocityState()
    assert not any(feed(other, T0, 10, 1.0, 1_000, params=p, tpm_limit=50_000))


def test_manual_cap_below_baseline_level():
    state = warmed_key()
    t = T0 + 600 * S
    assert any(feed(state, t, 60, 1.0, 500, tpm_limit=15_000))
    assert state.trip_reason == "manual"


def test_window_state_stays_small():
    state = VelocityState()
    feed(state, T0, 120, 0.01, 10)  # 100 calls per second
    assert len(state.buckets) <= 61


def test_out_of_order_and_degenerate_timestamps():
    state = VelocityState()
    for ts in [T0 + 5 * S, T0 + 2 * S, T0 + 5 * S, T0, T0 + 6 * S]:
        state.update(ts, 100, VP)
    assert state.window_tpm == 500
    assert [x[0] for x in state.buckets] == sorted(x[0] for x in state.buckets)
    zero = VelocityState()
    assert zero.update(0, 0, VP) is False and zero.update(0, -5, VP) is False


def test_velocity_json_round_trip_resumes_identically():
    live = warmed_key(minutes=6)
    feed(live, T0 + 360 * S, 10, 1.0, 20_000)
    restored = VelocityState.from_dict(json.loads(json.dumps(live.to_dict())))  # plain JSON
    assert restored == live
    a = feed(live, T0 + 370 * S, 90, 1.0, 2_000)
    b = feed(restored, T0 + 370 * S, 90, 1.0, 2_000)
    assert a == b and restored == live
    assert VelocityState.from_dict({}) == VelocityState()


def test_streaks_trip_the_more_specific_error():
    streak = FailureStreak()
    for _ in range(3):
        advance(streak, tturn(("run:make",), tool_error="EACCES"))
    assert (streak.tool_streak, streak.error_streak) == (3, 3)
    assert failure_loop_tripped((streak.tool_streak, streak.error_streak), FL) == "same_tool_error"
