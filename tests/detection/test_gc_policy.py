"""Garbage collection around detection cycles (detector.detection.gc_policy): automatic collection is paused during a
cycle and restored after it, survivors are frozen, a full collection runs when due, and steady cycles leave
no reference cycles behind (so freezing their survivors never keeps garbage alive)."""

from __future__ import annotations

import gc

from support.calls import healthy, looping
from support.engines import make_engine

from detector.detection.gc_policy import CollectorPolicy
from detector.settings.config import AppConfig


def test_a_cycle_pauses_collection_then_freezes_and_restores_it():
    policy = CollectorPolicy()
    assert gc.isenabled()
    try:
        with policy.cycle():
            assert not gc.isenabled()
            survivor = [object()]
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
        gc.disable()
        with policy.cycle():  # a collector already paused by someone else stays paused
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
    assert survivor


def test_disabled_policy_leaves_the_collector_alone():
    policy = CollectorPolicy(enabled=False)
    with policy.cycle():
        assert gc.isenabled()
    assert policy.collect_if_due(force=True) is None


def test_full_collection_only_when_due_and_it_finds_frozen_garbage():
    policy = CollectorPolicy(full_every_seconds=3600)
    try:
        with policy.cycle():
            cycle: list = []
            cycle.append(cycle)  # a reference cycle alive when the cycle ends: frozen with the rest
        del cycle
        assert policy.collect_if_due() is None  # not due yet
        assert policy.collect_if_due(force=True) >= 1  # unfrozen and collected
        assert policy.full_collections == 1
    finally:
        gc.unfreeze()


def test_scoring_leaves_no_reference_cycles():
    engine = make_engine(AppConfig())
    calls = [*looping(30, session="a", trace="ta"), *healthy(30, session="b", trace="tb")]
    engine.process(calls[:20])
    gc.collect()
    gc.disable()
    try:
        engine.process(calls[20:])
        assert gc.collect() == 0
    finally:
        gc.enable()
