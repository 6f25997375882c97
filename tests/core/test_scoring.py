"""Weighted confidence, EMA smoothing and the dominant signal, on hand-built signal values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.scores import dominant_signal, weight_items, weighted_confidence

from detector.core.scoring import ema
from detector.core.signal_values import SignalValues as Signals
from detector.settings.loop_settings import Weights
from detector.settings.vocabulary import SIGNAL_NAMES

W = Weights()


def only(name: str, value: float = 1.0) -> Signals:
    return Signals(**{name: value})


class TestWeightedConfidence:
    def test_zero(self):
        assert weighted_confidence(Signals(), W) == 0.0

    def test_all_ones_is_one(self):
        assert weighted_confidence(Signals(*([1.0] * 7)), W) == pytest.approx(1.0)

    @pytest.mark.parametrize("name", SIGNAL_NAMES)
    def test_single_signal_contributes_its_weight(self, name):
        assert weighted_confidence(only(name), W) == pytest.approx(W.as_dict()[name])
        assert weighted_confidence(only(name, 0.5), W) == pytest.approx(W.as_dict()[name] / 2)

    def test_default_weights(self):
        s = Signals(content_similarity=1.0, tool_call_repetition=1.0, response_stagnation=1.0, context_growth=1.0)
        assert weighted_confidence(s, W) == pytest.approx(0.70)

    def test_custom_weights(self):
        w = Weights(content_similarity=0.0, tool_call_repetition=1.0, response_stagnation=0.0, token_velocity=0.0,
                    error_cycling=0.0, context_growth=0.0, cost_velocity=0.0)
        assert weighted_confidence(Signals(content_similarity=1.0, tool_call_repetition=0.4), w) == pytest.approx(0.4)

    def test_clamped_and_nan_safe(self):
        # Signals are in [0, 1] by construction; out-of-range or NaN values are clamped, never propagated.
        assert weighted_confidence(Signals(*([5.0] * 7)), W) == pytest.approx(1.0)
        assert weighted_confidence(Signals(*([-1.0] * 7)), W) == 0.0
        assert weighted_confidence(Signals(content_similarity=float("nan"), error_cycling=1.0), W) == pytest.approx(0.15)

    def test_contributions(self):
        c = {name: weighted_confidence(Signals(**{name: value}), W)
             for name, value in Signals(error_cycling=1.0, cost_velocity=0.5).as_dict().items()}
        assert [name for name, _ in weight_items(W)] == list(c) == list(SIGNAL_NAMES)
        assert c["error_cycling"] == pytest.approx(0.15) and c["cost_velocity"] == pytest.approx(0.025)


class TestEma:
    def test_starts_from_zero(self):
        # Conservative start: a new scope's first raw score counts only alpha of itself.
        assert ema(None, 0.9, 0.3) == pytest.approx(0.27)
        assert ema(None, 0.0, 0.3) == 0.0

    def test_update(self):
        assert ema(0.5, 1.0, 0.3) == pytest.approx(0.65)
        assert ema(0.5, 0.0, 0.3) == pytest.approx(0.35)

    def test_alpha_one_follows_the_value(self):
        assert ema(0.2, 0.8, 1.0) == pytest.approx(0.8)
        assert ema(None, 0.8, 1.0) == pytest.approx(0.8)

    def test_single_spike_does_not_reach_warn_for_long(self):
        series, value = [], None
        for raw in [0.0, 0.0, 0.95, 0.0, 0.0, 0.0]:
            value = ema(value, raw, 0.3)
            series.append(value)
        assert max(series) < 0.30
        assert sum(v >= 0.30 for v in series) == 0

    def test_sustained_loop_converges(self):
        value = None
        for _ in range(30):
            value = ema(value, 0.8, 0.3)
        assert value == pytest.approx(0.8, abs=1e-3)

    def test_degenerate(self):
        assert ema(float("nan"), 0.5, 0.3) == pytest.approx(0.15)
        assert ema(0.5, float("nan"), 0.3) == pytest.approx(0.35)
        assert ema(0.5, 1.0, 2.0) == pytest.approx(1.0)  # alpha clamped to 1
        assert ema(0.5, 1.0, -1.0) == pytest.approx(0.5)  # alpha clamped to 0


class TestDominantSignal:
    def test_none_when_all_zero(self):
        assert dominant_signal(Signals(), W) == "none"

    @pytest.mark.parametrize("name", SIGNAL_NAMES)
    def test_single(self, name):
        assert dominant_signal(only(name, 0.2), W) == name

    def test_weighted_not_raw(self):
        # cost_velocity 1.0 x 0.05 = 0.05 < content_similarity 0.3 x 0.25 = 0.075
        assert dominant_signal(Signals(content_similarity=0.3, cost_velocity=1.0), W) == "content_similarity"

    def test_ties_follow_signal_order(self):
        # error_cycling and response_stagnation both weigh 0.15; token_velocity and context_growth 0.10.
        assert dominant_signal(Signals(response_stagnation=1.0, error_cycling=1.0), W) == "response_stagnation"
        assert dominant_signal(Signals(token_velocity=1.0, context_growth=1.0), W) == "token_velocity"
        assert dominant_signal(Signals(*([1.0] * 7)), W) == "content_similarity"

    def test_zero_weight_signal_never_dominates(self):
        w = Weights(content_similarity=0.0, tool_call_repetition=0.45, response_stagnation=0.15, token_velocity=0.10,
                    error_cycling=0.15, context_growth=0.10, cost_velocity=0.05)
        assert dominant_signal(Signals(content_similarity=1.0), w) == "none"


unit = st.floats(0.0, 1.0)
signals = st.builds(Signals, unit, unit, unit, unit, unit, unit, unit)


@given(s=signals)
def test_confidence_within_unit_interval_and_dominant_is_a_contributor(s):
    c = weighted_confidence(s, W)
    assert 0.0 <= c <= 1.0
    name = dominant_signal(s, W)
    assert name == "none" if c == 0.0 else name in SIGNAL_NAMES


@given(prev=st.one_of(st.none(), unit), value=unit, alpha=st.floats(0.01, 1.0))
def test_ema_stays_between_previous_and_value(prev, value, alpha):
    out = ema(prev, value, alpha)
    low, high = sorted([0.0 if prev is None else prev, value])
    assert math.isfinite(out) and low - 1e-12 <= out <= high + 1e-12
