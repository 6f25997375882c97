"""The seven signals on hand-built turns: each fires on its loop pattern and stays low on a legitimate
look-alike; the weighted confidence is calibrated on whole runs (healthy < 0.30, stuck tool loop >= 0.7,
error retries / regenerated text / monologue clearly above 0.3); degenerate inputs never crash."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.reference_signals import (
    Signals,
    compute_signals,
    content_fallback,
    content_similarity,
    context_growth,
    cost_velocity,
    error_cycling,
    response_stagnation,
    token_velocity,
    tool_call_repetition,
)
from support.scores import dominant_signal, weighted_confidence
from support.turns import (
    CFG,
    T0,
    WEIGHTS,
    batch_job,
    bucket,
    confidences,
    edit_test_cycle,
    error_retry_loop,
    healthy_run,
    last_signals,
    monologue,
    polling_with_backoff,
    regenerated_text,
    score_run,
    signal_series,
    simhash,
    stuck_tool_loop,
    tool_error_loop,
    transient_error_retried_once,
    turn,
    write_many_files,
)

from detector.core.models import Call, Turn
from detector.core.scoring import ema
from detector.core.similarity import cycle_score, simhash_similarity, token_closeness, velocity_score
from detector.settings.loop_settings import LoopDetectionConfig
from detector.settings.vocabulary import SIGNAL_NAMES

# ----------------------------------------------------------------------------------- building blocks


class TestBuildingBlocks:
    def test_simhash_similarity_uses_32_bits(self):
        a = simhash("text")
        assert simhash_similarity(a, a) == 1.0
        assert simhash_similarity(a, a | (0xABCD << 32)) == 1.0  # bits above 32 are not SimHash bits
        assert simhash_similarity(a, 0) is None and simhash_similarity(0, a) is None

    @pytest.mark.parametrize(("bits", "expected"), [(0, 1.0), (3, 1.0), (7, 0.5), (11, 0.0), (16, 0.0), (32, 0.0)])
    def test_simhash_similarity_ramp(self, bits, expected):
        a = 0x5A5A_5A5A
        b = a ^ ((1 << bits) - 1)
        assert simhash_similarity(a, b) == pytest.approx(expected)

    @pytest.mark.parametrize(
        ("a", "b", "expected"),
        [(0, 0, 1.0), (40, 42, 1.0), (1000, 1050, 1.0), (1000, 850, 0.5), (1000, 750, 0.0), (0, 500, 0.0)],
    )
    def test_token_closeness(self, a, b, expected):
        assert token_closeness(a, b) == pytest.approx(expected)
        assert token_closeness(b, a) == pytest.approx(expected)

    @pytest.mark.parametrize(
        ("seq", "expected"),
        [
            ("", 0.0),
            ("a", 0.0),
            ("ab", 0.0),
            ("aa", 1.0),  # the first complete repeat saturates (the EMA and consecutive counts do the rest)
            ("aaa", 1.0),
            ("aaaaaa", 1.0),
            ("abab", 1.0),
            ("ababa", 1.0),
            ("ababab", 1.0),
            ("aba", 0.5),  # A,B,A: the same step once more after another: half a cycle
            ("abcab", 2 / 3),
            ("abcabc", 1.0),
            ("abcdab", 0.5),  # a 4-step cycle: a 6-call window (depth 5) only ever shows half of it again
            ("abcdef", 0.0),
            ("abcb", 0.5),
            ("xyzaaa", 1.0),
        ],
    )
    def test_cycle_score(self, seq, expected):
        assert cycle_score(len(seq), lambda i, j: float(seq[i] == seq[j])) == pytest.approx(expected)

    @pytest.mark.parametrize(
        ("rate", "expected"), [(0, 0.0), (5_000, 0.0), (10_000, 0.0), (20_000, 0.5), (100_000, 0.9), (-1, 0.0)]
    )
    def test_velocity_score(self, rate, expected):
        assert velocity_score(rate, 10_000) == pytest.approx(expected)

    def test_velocity_score_degenerate(self):
        assert velocity_score(float("nan"), 10.0) == 0.0
        assert velocity_score(float("inf"), 10.0) == 0.0
        assert velocity_score(5.0, 0.0) == 1.0

    def test_signals_dict_round_trip(self):
        s = Signals(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, content_fallback=True)
        assert list(s.as_dict()) == list(SIGNAL_NAMES)
        assert "content_fallback" not in s.as_dict()
        assert Signals.from_dict(s.to_dict()) == s
        assert Signals() == Signals.from_dict({})


# ------------------------------------------------------------------------------- content_similarity


class TestContentSimilarity:
    def test_fires_on_repeated_tool_result_and_reply(self):
        run = stuck_tool_loop(4)
        assert content_similarity([], run[0]) == 0.0
        assert content_similarity(run[:1], run[1]) == pytest.approx(1.0)
        assert content_similarity(run[:2], run[2]) == pytest.approx(1.0)

    def test_fires_on_near_identical_regenerated_text(self):
        assert last_signals(regenerated_text(4)).content_similarity == pytest.approx(1.0)

    def test_fires_on_a_two_step_cycle(self):
        run = [turn(3.0 * i, inp=f"result {i % 2}", out=f"reply {i % 2}", tools=(f"tool:{i % 2}",)) for i in range(6)]
        assert content_similarity(run[:5], run[5]) == pytest.approx(1.0)

    def test_low_on_batch_job_same_template_different_documents(self):
        assert max(signal_series(batch_job(), "content_similarity")) == 0.0

    def test_low_on_same_tool_result_for_different_actions(self):
        # "File written." comes back every time, but each call writes a different file.
        assert max(signal_series(write_many_files(), "content_similarity")) == 0.0

    def test_low_on_long_productive_run(self):
        assert max(signal_series(healthy_run(30), "content_similarity")) == 0.0

    def test_new_content_only_not_the_growing_conversation(self):
        # Two calls that share the whole conversation prefix but add different new content are not similar:
        # only the last input message and the output are compared.
        a = turn(0, in_tok=50_000, inp="result A", out="reply A")
        b = turn(3, in_tok=50_400, inp="result B", out="reply B")
        assert content_similarity([a], b) == 0.0

    def test_exact_same_request_is_similar_even_with_a_different_output(self):
        a = turn(0, inp="q", out="answer one", request="same")
        b = turn(3, inp="q", out="answer two", request="same")
        assert content_similarity([a], b) == pytest.approx(1.0)

    def test_fallback_without_content(self):
        run = stuck_tool_loop(4, content=False)
        assert content_similarity(run[:3], run[3]) == pytest.approx(1.0)
        assert content_fallback(run[:3], run[3]) is True
        healthy = healthy_run(12, content=False)
        assert max(signal_series(healthy, "content_similarity")) == 0.0
        assert all(s.content_fallback for s, _ in score_run(healthy))

    def test_fallback_flag_false_with_content(self):
        run = stuck_tool_loop(4)
        assert content_fallback(run[:3], run[3]) is False
        assert not any(s.content_fallback for s, _ in score_run(run))

    def test_fallback_flag_when_history_lacks_content(self):
        old = stuck_tool_loop(3, content=False)
        new = turn(9.0, in_tok=5350, out_tok=42, inp="contents of a.py", out="Let me read a.py", tools=("read_file:a.py",))
        assert content_fallback(old, new) is True
        assert content_similarity(old, new) == pytest.approx(1.0)  # structure still matches

    def test_structural_fallback_without_tools_leaves_shape_to_response_stagnation(self):
        # Without content or tools, only an exact request repeat counts as similar content; equal response
        # shapes (e.g. every output cut at max_tokens) are response_stagnation's evidence, counted once.
        run = [turn(5.0 * i, in_tok=3000 + 200 * i, out_tok=250, content=False) for i in range(6)]
        s = last_signals(run)
        assert s.content_similarity == 0.0 and s.context_growth == 0.0
        assert s.response_stagnation == pytest.approx(1.0)
        assert weighted_confidence(s, WEIGHTS) < 0.3

    def test_structural_fallback_same_request_fingerprint(self):
        run = [turn(2.0 * i, in_tok=8000, request="same", content=False, error="overloaded") for i in range(3)]
        assert content_similarity(run[:1], run[1]) == pytest.approx(0.8)  # one repeat, weighted 0.8
        assert content_similarity(run[:2], run[2]) == pytest.approx(1.0)  # 0.8 + 0.8: more than a full repeat


# ----------------------------------------------------------------------------- tool_call_repetition


class TestToolCallRepetition:
    def test_fires_on_same_call_same_arguments(self):
        run = stuck_tool_loop(4)
        assert [tool_call_repetition(run[:i], run[i]) for i in range(4)] == [0.0, 1.0, 1.0, 1.0]

    def test_arguments_matter(self):
        run = [turn(3.0 * i, tools=(f"read_file:file{i}.py",)) for i in range(5)]
        assert tool_call_repetition(run[:4], run[4]) == 0.0

    def test_fires_on_alternating_calls(self):
        run = [turn(3.0 * i, tools=("ls:." if i % 2 else "cat:a.txt",)) for i in range(6)]
        assert tool_call_repetition(run[:5], run[5]) == pytest.approx(1.0)

    def test_uses_the_calls_own_tools(self):
        run = stuck_tool_loop(4)
        no_tools = turn(12.0, inp="contents of a.py", out="I will stop now")
        assert tool_call_repetition(run, no_tools) == 0.0

    def test_same_call_alongside_another_counts_partly(self):
        a = turn(0, tools=("read_file:a", "ls:."))
        b = turn(3, tools=("read_file:a", "ls:."))
        c = turn(6, tools=("read_file:a", "grep:x"))
        assert tool_call_repetition([a, b], c) == pytest.approx(0.0)  # jaccard 1/3 breaks the streak
        assert tool_call_repetition([a], b) == pytest.approx(1.0)
        d = turn(9, tools=("read_file:a", "ls:.", "cat:b"))
        assert tool_call_repetition([a], d) == pytest.approx(2 / 3)  # jaccard 2/3: partly the same

    def test_low_on_edit_test_cycle(self):
        # run_tests() recurs every other call (A,B,A: half a cycle) but the edits differ: never a full cycle
        assert max(signal_series(edit_test_cycle(), "tool_call_repetition")) <= 0.5

    def test_low_on_long_productive_run(self):
        assert max(signal_series(healthy_run(30), "tool_call_repetition")) == 0.0

    def test_low_on_polling_with_backoff(self):
        series = signal_series(polling_with_backoff(), "tool_call_repetition")
        assert max(series[3:]) <= 0.25

    def test_polling_without_backoff_is_repetition(self):
        run = [turn(2.0 * i, inp="status: pending", out="still pending", tools=("check_status:job-1",)) for i in range(7)]
        assert last_signals(run).tool_call_repetition == pytest.approx(1.0)

    def test_without_content_tool_spans_still_count(self):
        run = stuck_tool_loop(4, content=False)
        assert tool_call_repetition(run[:3], run[3]) == pytest.approx(1.0)


# ------------------------------------------------------------------------------ response_stagnation


class TestResponseStagnation:
    def test_fires_on_same_response(self):
        run = stuck_tool_loop(4)
        assert response_stagnation(run[:3], run[3]) == pytest.approx(1.0)

    def test_fires_on_near_identical_token_counts_and_text(self):
        assert last_signals(regenerated_text(5)).response_stagnation == pytest.approx(1.0)

    def test_low_when_token_counts_differ(self):
        run = [turn(5.0 * i, out_tok=200 + 60 * i, out="same text") for i in range(5)]
        assert response_stagnation(run[:4], run[4]) == 0.0

    def test_low_when_text_differs(self):
        run = [turn(5.0 * i, out_tok=200, out=f"text {i}") for i in range(5)]
        assert response_stagnation(run[:4], run[4]) == 0.0

    def test_low_on_batch_job(self):
        assert max(signal_series(batch_job(), "response_stagnation")) == 0.0

    def test_low_on_long_productive_run(self):
        assert max(signal_series(healthy_run(30), "response_stagnation")) == 0.0

    def test_without_content_structure_and_tokens_only(self):
        run = [turn(5.0 * i, out_tok=120, content=False) for i in range(4)]
        assert response_stagnation(run[:3], run[3]) == pytest.approx(1.0)
        varied = [turn(5.0 * i, out_tok=120 + 70 * i, content=False) for i in range(4)]
        assert response_stagnation(varied[:3], varied[3]) == 0.0

    def test_unknown_structure_never_matches(self):
        a, b = turn(0), turn(3)
        a = Turn(call=Call(ts_ns=a.ts_ns, trace_id="t", span_id="a", session_id="s", output_tokens=10))
        b = Turn(call=Call(ts_ns=b.ts_ns, trace_id="t", span_id="b", session_id="s", output_tokens=10))
        assert response_stagnation([a], b) == 0.0


# ----------------------------------------------------------------------------------- error_cycling


class TestErrorCycling:
    def test_fires_on_same_error_retried(self):
        run = error_retry_loop(4)
        assert [error_cycling(run[:i], run[i]) for i in range(4)] == [0.0, 0.5, 1.0, 1.0]

    def test_fires_on_same_tool_error(self):
        assert last_signals(tool_error_loop(4)).error_cycling == pytest.approx(1.0)

    def test_same_failing_request_with_different_errors(self):
        run = [turn(2.0 * i, in_tok=9000, inp="q", request="same", error=f"error {i}") for i in range(3)]
        assert error_cycling(run[:2], run[2]) == pytest.approx(0.5)

    def test_low_on_transient_error_retried_once(self):
        assert max(signal_series(transient_error_retried_once(), "error_cycling")) == 0.0

    def test_success_breaks_the_cycle(self):
        run = error_retry_loop(3)
        ok = turn(6.0, in_tok=12000, inp="summarize the report", out="summary")
        assert error_cycling(run, ok) == 0.0

    def test_different_errors_are_not_a_cycle(self):
        run = [turn(3.0 * i, inp=f"q{i}", error=f"error {i}") for i in range(4)]
        assert error_cycling(run[:3], run[3]) == 0.0


# ---------------------------------------------------------------------------------- context_growth


class TestContextGrowth:
    def test_fires_on_growing_context_with_nothing_new(self):
        run = stuck_tool_loop(5)
        assert [round(context_growth(run[:i], run[i]), 3) for i in range(5)] == [0.0, 0.5, 1.0, 1.0, 1.0]

    def test_fires_on_monologue(self):
        assert last_signals(monologue(5)).context_growth == pytest.approx(1.0)

    def test_low_when_growth_brings_new_content(self):
        assert max(signal_series(healthy_run(30), "context_growth")) == 0.0
        assert max(signal_series(write_many_files(), "context_growth")) == 0.0

    def test_zero_without_growth(self):
        # The same request retried verbatim: similar, but the context does not grow.
        assert max(signal_series(error_retry_loop(), "context_growth")) == 0.0
        shrinking = [turn(3.0 * i, in_tok=9000 - 500 * i, inp="same", out="same", tools=("t:x",)) for i in range(5)]
        assert context_growth(shrinking[:4], shrinking[4]) == 0.0

    def test_irregular_increments_weaken_it(self):
        run = [turn(3.0 * i, in_tok=[4000, 4500, 6100, 6300, 8900][i], inp="same", out="same", tools=("t:x",))
               for i in range(5)]
        assert context_growth(run[:4], run[4]) == pytest.approx(0.5)


# ---------------------------------------------------------------------------- token / cost velocity


class TestVelocity:
    def test_token_velocity_fires_on_a_fast_heavy_loop(self):
        run = [turn(2.0 * i, in_tok=30_000 + 500 * i, out_tok=40) for i in range(6)]
        assert token_velocity(run[:5], run[5], 10_000) >= 0.9

    def test_token_velocity_zero_below_threshold(self):
        run = [turn(20.0 * i, in_tok=1000, out_tok=100) for i in range(6)]  # 6.6k tokens over 100 s
        assert token_velocity(run[:5], run[5], 10_000) == 0.0

    def test_single_call_is_not_a_velocity(self):
        big = turn(0, in_tok=9_000, out_tok=500, dur=2.0)
        assert token_velocity([], big, 10_000) == 0.0

    def test_rate_is_measured_over_at_least_a_minute(self):
        same_instant = [turn(0.0, in_tok=1000, out_tok=0, dur=0.0) for _ in range(6)]
        assert token_velocity(same_instant[:5], same_instant[5], 10_000) == 0.0  # 6k tokens "in a minute"
        assert token_velocity(same_instant[:5], same_instant[5], 3_000) == pytest.approx(0.5)

    def test_token_velocity_scales_with_threshold(self):
        run = stuck_tool_loop(6)
        low = token_velocity(run[:5], run[5], 10_000)
        high = token_velocity(run[:5], run[5], 1_000_000)
        assert low > 0.0 and high == 0.0

    def test_cost_velocity(self):
        run = [turn(2.0 * i, in_tok=100_000, out_tok=2000, price=(3.0, 15.0)) for i in range(6)]
        # 6 x $0.33 in a minute = $1.98/min against $0.5/min
        assert cost_velocity(run[:5], run[5], 0.5) == pytest.approx(1 - 0.5 / 1.98)
        assert cost_velocity(run[:5], run[5], 5.0) == 0.0

    def test_cost_velocity_uses_turn_cost(self):
        a = turn(0, in_tok=10, out_tok=10)
        b = turn(1, in_tok=10, out_tok=10)
        b.cost_usd = 2.0
        assert cost_velocity([a], b, 0.5) == pytest.approx(1 - 0.5 / (2.0 + a.cost_usd))

    def test_polling_with_backoff_is_slow(self):
        assert max(signal_series(polling_with_backoff(), "token_velocity")) == 0.0


# -------------------------------------------------------------------------------- backoff discount


class TestPollingWithBackoff:
    def test_repetition_signals_discounted_once_backoff_is_visible(self):
        for s, _ in score_run(polling_with_backoff())[3:]:
            assert s.content_similarity <= 0.25
            assert s.tool_call_repetition <= 0.25
            assert s.response_stagnation <= 0.25
            assert s.context_growth <= 0.25

    def test_failed_calls_backing_off_are_not_discounted(self):
        t, run = 0.0, []
        for i in range(6):
            run.append(turn(t, in_tok=5000, inp="q", request="same", error="overloaded"))
            t += 2.0 * 2**i
        s = last_signals(run)
        assert s.error_cycling == 1.0 and s.content_similarity == 1.0


# ------------------------------------------------------------------------------- calibration (a)-(c)


class TestCalibration:
    @pytest.mark.parametrize("content", [True, False])
    def test_healthy_run_stays_well_below_warn(self, content):
        assert max(confidences(healthy_run(30, content=content))) < 0.15

    def test_healthy_run_without_argument_capture(self):
        assert max(confidences(healthy_run(30, content=False, args_captured=False))) < 0.15

    @pytest.mark.parametrize("content", [True, False])
    def test_stuck_tool_loop_reaches_inject_level_within_three_calls(self, content):
        conf = confidences(stuck_tool_loop(10, content=content))
        assert conf[0] < 0.1
        assert all(c >= 0.7 for c in conf[2:])

    def test_stuck_tool_loop_dominant_signal(self):
        s, _ = score_run(stuck_tool_loop(6))[-1]
        assert dominant_signal(s, WEIGHTS) == "content_similarity"

    @pytest.mark.parametrize("scenario", [error_retry_loop, tool_error_loop, regenerated_text, monologue])
    def test_other_loops_push_confidence_clearly_above_warn(self, scenario):
        conf = confidences(scenario())
        assert min(conf[3:]) >= 0.45

    @pytest.mark.parametrize(
        "scenario", [batch_job, transient_error_retried_once, edit_test_cycle, write_many_files, healthy_run]
    )
    def test_legitimate_look_alikes_stay_below_warn(self, scenario):
        raw = confidences(scenario())
        smoothed = list(itertools.accumulate(raw, lambda e, x: ema(e, x, CFG.ema_alpha), initial=None))[1:]
        assert max(smoothed) < 0.3
        # the retried request is the same request again: one spike, which the EMA absorbs
        assert sum(c >= 0.3 for c in raw) <= (1 if scenario is transient_error_retried_once else 0)

    def test_polling_with_backoff_stays_below_warn_once_visible(self):
        assert max(confidences(polling_with_backoff())[3:]) < 0.3


# ------------------------------------------------------------------------------------ degenerate input


def bare(ts_ns: int = 0, **kw) -> Turn:
    return Turn(call=Call(ts_ns=ts_ns, trace_id="t", span_id=f"s{ts_ns}", session_id="s", **kw))


class TestTunedOnTheEvaluationCorpus:
    """Behaviour added while measuring detection quality (docs/detection-quality.md)."""

    def test_token_bucket_boundary_is_not_a_different_structure(self):
        # 40 and 42 output tokens fall in different buckets of response_fp, but it is the same response
        assert bucket(40) != bucket(42)
        a = turn(0, out_tok=40, out="the same reply")
        b = turn(3, out_tok=42, out="the same reply")
        assert response_stagnation([a], b) == pytest.approx(1.0)

    def test_same_failing_call_with_tweaked_arguments(self):
        run = [turn(3.0 * i, in_tok=4000 + 300 * i, out_tok=30, inp="503 Service Unavailable", out="retrying",
                    tools=(f"http_get:timeout={5 * (i + 1)}",), tool_error="HTTPError") for i in range(4)]
        s = last_signals(run)
        assert s.tool_call_repetition == pytest.approx(1.0) and s.content_similarity == pytest.approx(1.0)
        # without the shared error, different arguments are different calls
        ok = [turn(3.0 * i, in_tok=4000 + 300 * i, tools=(f"http_get:timeout={5 * (i + 1)}",)) for i in range(4)]
        assert last_signals(ok).tool_call_repetition == 0.0

    def test_without_arguments_the_same_call_brings_back_the_same_amount(self):
        # content capture off, tool arguments not captured: every call is just "list_orders"
        refetch = [turn(3.0 * i, in_tok=3000 + 1225 * i, out_tok=25, tools=("list_orders",), content=False,
                        args_captured=False) for i in range(6)]
        pages, in_tok = [], 3000
        for i, extra in enumerate([0, 17, -22, 31, -9, 26]):
            pages.append(turn(3.0 * i, in_tok=in_tok, out_tok=25, tools=("list_orders",), content=False,
                              args_captured=False))
            in_tok += 1225 + extra  # pages of 50 fixed-width rows still differ by tens of tokens
        assert last_signals(refetch).tool_call_repetition == pytest.approx(1.0)
        assert last_signals(refetch).content_similarity == pytest.approx(1.0)
        assert last_signals(pages).tool_call_repetition == 0.0
        assert last_signals(pages).content_similarity == 0.0

    def test_backoff_is_measured_on_idle_time(self):
        # polling with a 1.3x multiplier: waits 2, 2.6, 3.4, 4.4 s between a call's end and the next call
        t, run = 0.0, []
        for wait in (2.0 * 1.32**k for k in range(5)):
            run.append(turn(t, in_tok=1500, out_tok=20, inp="status: running", out="still running",
                            tools=("get_status:job-1",)))
            t += 1.5 + wait
        assert last_signals(run).tool_call_repetition == pytest.approx(0.25)
        # a loop whose model latency varies (0.5 s / 6 s) at a steady pace is not backing off
        loop = [turn(8.0 * i, in_tok=3000 + 450 * i, out_tok=42, inp="contents of a.py", out="Let me read a.py",
                     tools=("read_file:a.py",), dur=0.5 if i % 2 else 6.0) for i in range(6)]
        assert last_signals(loop).tool_call_repetition == pytest.approx(1.0)

    def test_empty_replies_are_the_same_reply(self):
        run = [turn(2.0 * i, in_tok=3000 + 8 * i, out_tok=0, inp="Please continue with the task.") for i in range(4)]
        s = last_signals(run)
        assert s.content_similarity == pytest.approx(1.0) and s.response_stagnation == pytest.approx(1.0)

    def test_same_documents_re_retrieved_with_a_reworded_query(self):
        # the query changes every time, the same 2,000 tokens of documents come back, the model says the same
        run = [turn(4.0 * i, in_tok=3000 + 2030 * i, out_tok=30, inp="the same retrieved documents",
                    out="the documents do not mention it, searching again", tools=(f"search_kb:query {i}",))
               for i in range(5)]
        assert last_signals(run).content_similarity == pytest.approx(1.0)
        # the same short acknowledgement after writing a different file each time is not redundancy
        assert max(signal_series(write_many_files(), "content_similarity")) == 0.0


class TestDegenerate:
    def test_empty_history(self):
        s = compute_signals([], stuck_tool_loop(1)[0], CFG)
        assert s == Signals(content_fallback=False)

    def test_all_zero_turns(self):
        turns = [bare() for _ in range(6)]
        s = compute_signals(turns[:5], turns[5], CFG)
        for value in s.as_dict().values():
            assert 0.0 <= value <= 1.0
        assert s.token_velocity == 0.0 and s.cost_velocity == 0.0 and s.context_growth == 0.0

    def test_identical_timestamps_and_zero_durations(self):
        turns = [bare(T0, input_tokens=50_000, output_tokens=10, has_content=True, input_simhash=7, response_fp=3)
                 for _ in range(6)]
        s = compute_signals(turns[:5], turns[5], CFG)
        assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in s.as_dict().values())
        assert s.token_velocity > 0.9  # 300k tokens at one instant: at least "per minute"

    def test_history_longer_than_depth_is_truncated(self):
        cfg = LoopDetectionConfig(history_depth=2)
        run = [turn(3.0 * i, inp=f"r{i % 3}", out=f"o{i % 3}", tools=(f"t:{i % 3}",)) for i in range(6)]
        assert compute_signals(run[:5], run[5], cfg).tool_call_repetition == 0.0  # period 3 needs 3 back
        assert compute_signals(run[:5], run[5], CFG).tool_call_repetition == pytest.approx(1.0)

    def test_negative_and_nan_cost(self):
        a, b = turn(0), turn(1)
        a.cost_usd, b.cost_usd = float("nan"), -3.0
        assert cost_velocity([a], b, 0.5) == 0.0


# ------------------------------------------------------------------------------------------ properties

fingerprints = st.sampled_from([0, 1, 2, 3, 2**63, 2**64 - 1])


@st.composite
def turns_strategy(draw, ts: int) -> Turn:
    n_tools = draw(st.integers(0, 3))
    tools = [
        Call(ts_ns=ts, trace_id="t", span_id=f"x{i}", session_id="s", operation="execute_tool",
             tool_fp=draw(fingerprints), is_error=draw(st.booleans()), error_fp=draw(fingerprints),
             end_ns=draw(st.integers(0, 2**62)))
        for i in range(n_tools)
    ]
    call = Call(
        ts_ns=ts,
        end_ns=draw(st.integers(0, 2**62)),
        trace_id="t",
        span_id="s",
        session_id="s",
        input_tokens=draw(st.integers(0, 10**7)),
        output_tokens=draw(st.integers(0, 10**6)),
        is_error=draw(st.booleans()),
        error_fp=draw(fingerprints),
        has_content=draw(st.booleans()),
        request_fp=draw(fingerprints),
        input_simhash=draw(fingerprints),
        output_simhash=draw(fingerprints),
        out_tool_fps=tuple(draw(st.lists(fingerprints, max_size=3))),
        response_fp=draw(fingerprints),
    )
    cost = draw(st.one_of(st.floats(0, 1e3), st.just(float("nan")), st.just(-1.0)))
    return Turn(call=call, tools=tools, cost_usd=cost)


@st.composite
def runs(draw):
    n = draw(st.integers(1, 12))
    stamps = sorted(draw(st.lists(st.integers(0, 10**12), min_size=n, max_size=n)))
    return [draw(turns_strategy(ts)) for ts in stamps]


@settings(max_examples=300, deadline=None)
@given(run=runs(), depth=st.integers(2, 10))
def test_signals_always_within_unit_interval(run, depth):
    cfg = LoopDetectionConfig(history_depth=depth)
    s = compute_signals(run[:-1], run[-1], cfg)
    for name, value in s.as_dict().items():
        assert math.isfinite(value) and 0.0 <= value <= 1.0, name
    assert 0.0 <= weighted_confidence(s, cfg.weights) <= 1.0


@settings(max_examples=100, deadline=None)
@given(n=st.integers(2, 12))
def test_all_distinct_turns_score_no_repetition(n):
    run = [turn(5.0 * i, inp=f"in {i}", out=f"out {i}", out_tok=40 + 30 * i, tools=(f"tool{i}:arg{i}",)) for i in range(n)]
    s = compute_signals(run[:-1], run[-1], CFG)
    assert s.content_similarity == s.tool_call_repetition == s.response_stagnation == s.context_growth == 0.0


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_popcount32_counts_the_bits_of_a_32_bit_simhash(x):
    from detector.core.similarity import popcount32

    assert popcount32(x) == x.bit_count()


def test_popcount32_extremes():
    from detector.core.similarity import popcount32

    assert [popcount32(x) for x in (0, 1, 2**31, 2**32 - 1, 0x55555555, 0xAAAAAAAA)] == [0, 1, 1, 32, 16, 16]
