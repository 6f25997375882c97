"""The engine's incremental scoring window (detector.core.window) gives exactly what the specification
(tests/support/reference_signals.py: compute_signals) gives, every signal bit for bit: built call by call as the engine does,
and rebuilt from a history (a restart). On the hand-built scenarios, on runs that sit on the edges of the
formulas, and on random runs built to hit every branch (near-duplicate SimHashes, near-equal token counts,
shared tools, errors, content on and off, execute_tool spans, backoff timing)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from support.reference_signals import Signals, compute_signals, window_signals
from support.turns import (
    batch_job,
    edit_test_cycle,
    error_retry_loop,
    healthy_run,
    monologue,
    polling_with_backoff,
    regenerated_text,
    stuck_tool_loop,
    tool_error_loop,
    transient_error_retried_once,
    turn,
    write_many_files,
)

from detector.core.models import Call, Turn
from detector.core.turn_view import turn_view
from detector.core.window import SignalWindow
from detector.settings.loop_settings import LoopDetectionConfig

S = 1_000_000_000
T0 = 1_700_000_000 * S


def assert_same(history: list[Turn], new: Turn, cfg: LoopDetectionConfig) -> None:
    expected = compute_signals(history, new, cfg)
    got = window_signals(history, new, cfg)
    # dataclass equality compares floats with ==: bit for bit (and no NaN can come out of either)
    assert got == expected, (got, expected)


def assert_run_same(turns: list[Turn], cfg: LoopDetectionConfig) -> None:
    """Call by call through one window, as the engine scores a scope, and from a rebuilt window."""
    window = SignalWindow(cfg.history_depth)
    for i, t in enumerate(turns):
        history = turns[max(0, i - cfg.history_depth) : i]
        expected = compute_signals(history, t, cfg)
        values, fallback = window.score(turn_view(t), cfg.token_velocity_threshold, cfg.cost_velocity_threshold)
        assert Signals(*values, content_fallback=fallback) == expected, (i, values, expected)
        assert window_signals(history, t, cfg) == expected
        window.push(turn_view(t))


SCENARIOS = [
    stuck_tool_loop(12), stuck_tool_loop(12, content=False), healthy_run(), healthy_run(content=False),
    healthy_run(content=False, args_captured=False), error_retry_loop(), tool_error_loop(), regenerated_text(),
    monologue(), batch_job(), batch_job(content=False), polling_with_backoff(), transient_error_retried_once(),
    edit_test_cycle(), write_many_files(),
]


def boundary_runs() -> list[list[Turn]]:
    """Runs that sit on the edges random runs rarely reach."""
    runs = [
        # empty replies to the same re-prompt: the same (non-)answer
        [turn(2.0 * i, in_tok=3000 + 8 * i, out_tok=0, inp="Please continue with the task.") for i in range(5)],
        # the same documents re-retrieved with a reworded query
        [turn(4.0 * i, in_tok=3000 + 2030 * i, out_tok=30, inp="the same retrieved documents",
              out="the documents do not mention it, searching again", tools=(f"search_kb:query {i}",)) for i in range(5)],
        # re-fetching vs paging without content or arguments
        [turn(3.0 * i, in_tok=3000 + 1225 * i, out_tok=25, tools=("list_orders",), content=False, args_captured=False)
         for i in range(6)],
        # the same failing call with tweaked arguments
        [turn(3.0 * i, in_tok=4000 + 300 * i, out_tok=30, inp="503 Service Unavailable", out="retrying",
              tools=(f"http_get:timeout={5 * (i + 1)}",), tool_error="HTTPError") for i in range(5)],
        # backoff on idle time, and a loop whose latency varies
        [turn(t, in_tok=1500, out_tok=20, inp="status: running", out="still running", tools=("get_status:job-1",))
         for t in itertools.accumulate((1.5 + 2.0 * 1.32**k for k in range(5)), initial=0.0)],
        [turn(8.0 * i, in_tok=3000 + 450 * i, out_tok=42, inp="contents of a.py", out="Let me read a.py",
              tools=("read_file:a.py",), dur=0.5 if i % 2 else 6.0) for i in range(6)],
    ]
    # a model talking to itself without content: its context grows by its own reply, give or take a few tokens
    for short in (0, 1, 2, 3, 4):
        in_tok, run = 2000, []
        for i in range(6):
            run.append(turn(2.0 * i, in_tok=in_tok, out_tok=40, content=False, request=f"r{i}"))
            in_tok += 40 - short
        runs.append(run)
    # the same words after the same input, the context growing by less than the previous reply (a negative
    # share from outside the model), the same tool name with other arguments
    for growth in (10, 28, 40, 45, 400):
        runs.append([turn(3.0 * i, in_tok=3000 + growth * i, out_tok=40, inp="the same page", out="the same words",
                          inp_flip=i % 3, tools=(f"fetch:{i}",)) for i in range(6)])
    # without content, a two-step tool loop whose two steps bring back different amounts: with a short
    # window, the oldest call (whose increment is unknown) is compared directly
    in_tok, run = 3000, []
    for i in range(6):
        run.append(turn(3.0 * i, in_tok=in_tok, out_tok=25, tools=("a" if i % 2 else "b",), content=False))
        in_tok += 100 if i % 2 else 500
    runs.append(run)
    # polling whose idle gaps grow by exactly 1.3x, and polling whose tools end after the previous call
    runs.append(polling([10 * S, 13 * S, 16_900_000_000, 21_970_000_000, 28_561_000_000], tool_ns=0))
    runs.append(polling([2 * S, 4 * S, 8 * S, 16 * S, 32 * S], tool_ns=[9 * S, 3 * S, S, S, S]))
    runs.append(polling([20 * S, 4 * S, 8 * S, 16 * S, 32 * S], tool_ns=[S, 18 * S, 2 * S, S, S]))
    return runs


def polling(waits: list[int], tool_ns: int | list[int]) -> list[Turn]:
    """The same successful status call, each after a wait (ns) that starts when the previous step ended:
    the previous call, then the tool it asked for (``tool_ns`` long, attributed to the next call)."""
    turns, ts = [], T0
    for i in range(len(waits) + 1):
        tools = []
        if i:
            took = tool_ns if isinstance(tool_ns, int) else tool_ns[i - 1]
            prev_end = turns[-1].call.end_ns
            tools.append(Call(ts_ns=prev_end, end_ns=prev_end + took, trace_id="t", span_id=f"x{i}", session_id="s",
                              operation="execute_tool", call_kind="tool", tool_name="get_status", tool_fp=7))
            ts = prev_end + took + waits[i - 1]
        call = Call(ts_ns=ts, end_ns=ts + S, trace_id="t", span_id=f"s{i}", session_id="s", input_tokens=1500,
                    output_tokens=20, has_content=True, request_fp=100 + i, input_simhash=BASE_SIMHASH,
                    output_simhash=BASE_SIMHASH ^ 0xF0, out_tool_fps=(7,), out_tool_names=("get_status",),
                    finish_reasons=("tool_calls",), response_fp=5)
        turns.append(Turn(call=call, tools=tools, cost_usd=0.001))
    return turns


def test_boundary_runs_score_identically():
    for run, depth in itertools.product(boundary_runs(), (2, 5)):
        assert_run_same(run, LoopDetectionConfig(history_depth=depth))


def test_scenarios_score_identically_at_every_depth():
    for run, depth in itertools.product(SCENARIOS, (2, 3, 5, 8)):
        assert_run_same(run, LoopDetectionConfig(history_depth=depth))


def test_empty_history_and_single_turn():
    cfg = LoopDetectionConfig()
    assert_same([], turn(0), cfg)
    assert_same([], turn(0, error="RateLimitError"), cfg)


# ----------------------------------------------------------------------------------- random runs

BASE_SIMHASH = 0x5A5A_C3C3


@st.composite
def near_simhash(draw) -> int:
    """0 (no text), a near-duplicate of one text (k of its low bits flipped: two of them differ by every
    distance, so every similarity band is hit), or random; bits above 31 are not significant."""
    kind = draw(st.sampled_from(["none", "near", "near", "near", "random"]))
    if kind == "none":
        return 0
    if kind == "random":
        return draw(st.integers(1, 2**64 - 1))
    value = BASE_SIMHASH ^ ((1 << draw(st.integers(0, 13))) - 1)
    if draw(st.booleans()):
        value ^= 1 << draw(st.integers(32, 63))
    return value


small_fp = st.sampled_from([0, 1, 2, 3, 2**64 - 1])

# The fields of a call, each with the values that reach every branch of the pair comparisons.
CALL_FIELDS = {
    "has_content": st.booleans(),
    "is_error": st.sampled_from([False, False, True]),
    "error_fp": small_fp,
    "request_fp": small_fp,
    "input_simhash": near_simhash(),
    "output_simhash": near_simhash(),
    "output_tokens": st.sampled_from([0, 1, 2, 3, 40, 41, 42, 44, 50, 60, 1000]),
    "out_tool_fps": st.sampled_from([(), (), (11,), (12,), (11, 12), (11, 13), (0,)]),
    "out_tool_names": st.sampled_from([(), ("read_file",), ("search",), ("read_file", "search"), ("",)]),
    "finish_reasons": st.sampled_from([(), ("stop",), ("tool_calls",)]),
    "response_fp": small_fp,
}
SPAN_FIELDS = {
    "tool_name": st.sampled_from(["read_file", "search", ""]),
    "tool_fp": st.sampled_from([0, 11, 12]),
    "is_error": st.booleans(),
    "error_fp": small_fp,
}


@st.composite
def template(draw) -> tuple[dict, list[dict]]:
    call = {name: draw(strategy) for name, strategy in CALL_FIELDS.items()}
    spans = [{name: draw(strategy) for name, strategy in SPAN_FIELDS.items()} for _ in range(draw(st.integers(0, 2)))]
    return call, spans


@st.composite
def random_turn(draw, templates: list, ts: int, in_tok: int) -> Turn:
    """A call made from one of the run's templates (so calls repeat, as in a loop), some fields redrawn."""
    base, base_spans = draw(st.sampled_from(templates))
    fields = {name: draw(CALL_FIELDS[name]) if draw(st.integers(0, 4)) == 0 else value for name, value in base.items()}
    spans = []
    for i, span in enumerate(base_spans):
        end = ts - draw(st.sampled_from([-2 * S, 0, S, 3 * S]))  # mostly before the call: its tools ran before it
        spans.append(Call(ts_ns=end - S, end_ns=end, trace_id="t", span_id=f"x{ts}-{i}", session_id="s",
                          operation="execute_tool", call_kind="tool", **span))
    call = Call(ts_ns=ts, end_ns=ts + draw(st.sampled_from([-S, 0, S, 3 * S])), trace_id="t", span_id=f"s{ts}",
                session_id="s", input_tokens=in_tok, **fields)
    cost = draw(st.sampled_from([0.0, 0.001, 0.5, 3.0, float("nan"), -1.0]))
    return Turn(call=call, tools=spans, cost_usd=cost)


@st.composite
def random_runs(draw) -> list[Turn]:
    templates = draw(st.lists(template(), min_size=1, max_size=3))
    n = draw(st.integers(1, 10))
    ts, in_tok, turns = T0, draw(st.integers(0, 5000)), []
    for _ in range(n):
        turns.append(draw(random_turn(templates, ts, in_tok)))
        # waits that sometimes back off; context grown by the previous reply plus an amount that sometimes
        # repeats to the token, sometimes falls just short of the reply, sometimes shrinks
        ts += draw(st.sampled_from([0, S, 2 * S, 4 * S, 9 * S, 20 * S, 61 * S]))
        extra = draw(st.sampled_from([-400, -4, -3, -2, 0, 1, 3, 4, 6, 150, 151, 156, 2000]))
        in_tok = max(0, in_tok + turns[-1].call.output_tokens * draw(st.sampled_from([0, 1])) + extra)
    return turns


@settings(max_examples=500, deadline=None)
@given(run=random_runs(), depth=st.integers(2, 8), thresholds=st.sampled_from([(10_000.0, 0.5), (100.0, 0.001)]))
def test_random_runs_score_identically(run, depth, thresholds):
    cfg = LoopDetectionConfig(history_depth=depth, token_velocity_threshold=thresholds[0],
                              cost_velocity_threshold=thresholds[1])
    assert_same(run[:-1], run[-1], cfg)


@settings(max_examples=200, deadline=None)
@given(run=random_runs())
def test_random_runs_score_identically_turn_by_turn(run):
    assert_run_same(run, LoopDetectionConfig())


def test_windows_of_restored_copies_score_alike():
    """After a restart each scope's history is loaded on its own: a session and its only trace then hold equal
    copies of the same turns, and one scoring serves both."""
    from detector.core.scope_state import turn_from_compact, turn_to_compact

    run = stuck_tool_loop(6)
    original = SignalWindow.of(run, 5)
    restored = SignalWindow.of([turn_from_compact(turn_to_compact(t)) for t in run], 5)
    assert original.scores_like(restored) and restored.scores_like(original)
    nxt = stuck_tool_loop(7)[-1]
    assert original.score(turn_view(nxt), 10_000.0, 0.5) == restored.score(turn_view(nxt), 10_000.0, 0.5)
    assert not original.scores_like(SignalWindow.of(run[:-1], 5))  # the same turns, one call earlier
    assert not original.scores_like(SignalWindow.of([*run[:-1], healthy_run(6)[-1]], 5))
