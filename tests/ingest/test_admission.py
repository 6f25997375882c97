"""The admission control's bookkeeping (:mod:`detector.ingest.admission`), on its own: each bound refuses with its
reason, the bytes in flight never pass the bound while others are in flight, and everything admitted is released."""

from __future__ import annotations

import asyncio
import time

import pytest

from detector.ingest.admission import (
    LOOP_PROBE_SECONDS,
    REFUSED_DETECTOR,
    REFUSED_LOOP,
    REFUSED_MEMORY,
    REFUSED_WAIT,
    RETRY_AFTER_SECONDS,
    Admission,
    Refusal,
    Ticket,
)
from detector.settings.service_settings import IngestSettings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def admitted(admission: Admission, declared: int = 0) -> Ticket:
    ticket = admission.admit(declared)
    assert isinstance(ticket, Ticket), ticket
    return ticket


def test_bytes_in_flight_never_pass_the_bound_and_are_released():
    admission = Admission(1000)
    first = admitted(admission, 600)  # Content-Length known: held from the start
    refused = admission.admit(500)  # would pass the bound: refused before its body is read
    assert isinstance(refused, Refusal) and refused.reason == REFUSED_MEMORY
    assert refused.retry_after_seconds == RETRY_AFTER_SECONDS and "max_inflight_bytes" in refused.message
    second = admitted(admission)  # no Content-Length: counted as it is read
    assert second.charge(300) is None
    assert isinstance(second.charge(200), Refusal)  # a chunk past the bound: refused, nothing added
    assert admission.inflight_bytes == 900 and admission.peak_bytes == 900
    second.release()
    assert first.charge(400) is None  # its decoded rows: alone now, within the bound
    first.release()
    first.release()  # idempotent
    assert admission.inflight_bytes == 0 and admission.snapshot().inflight_requests == 0
    assert admission.refused[REFUSED_MEMORY] == 2


def test_a_lone_request_is_admitted_whatever_its_size():
    admission = Admission(1000)
    with admitted(admission, 5000) as ticket:
        assert ticket.charge(20_000) is None  # nothing else in flight: any request within max_body_bytes passes
        assert isinstance(admission.admit(1), Refusal)
    assert admission.inflight_bytes == 0


def test_commit_wait_past_the_bound_refuses_new_requests():
    clock = Clock()
    admission = Admission(10**9, max_commit_wait_seconds=0.5, clock=clock)
    waiting = admitted(admission, 10)
    waiting.decoded()
    clock.now += 0.4
    admitted(admission).release()
    clock.now += 0.2  # the oldest decoded request has waited 0.6 s
    refused = admission.admit(10)
    assert isinstance(refused, Refusal) and refused.reason == REFUSED_WAIT
    waiting.release()  # committed: the queue drained
    admitted(admission).release()


def test_detector_behind_past_the_bound_refuses_until_a_cycle_reads_the_commits():
    clock, wall = Clock(), Clock()
    watermark = [wall.now]
    admission = Admission(10**9, max_detector_behind_seconds=0.5, watermark=lambda: watermark[0], clock=clock,
                          wall=wall)
    busy = admitted(admission)  # another request in flight: the lag bounds apply
    wall.now += 0.1
    admission.committed()
    wall.now += 0.3
    admission.committed()
    assert admission.detector_behind_seconds() == pytest.approx(0.3)
    wall.now += 0.3  # the first commit is 0.6 s old, unread
    refused = admission.admit()
    assert isinstance(refused, Refusal) and refused.reason == REFUSED_DETECTOR
    watermark[0] = wall.now - 0.35  # a cycle read the first commit, not the second (0.3 s old)
    assert admission.detector_behind_seconds() == pytest.approx(0.3)
    admitted(admission).release()
    busy.release()


def test_a_detector_whose_cycles_fail_is_a_fault_not_load_and_refuses_nothing_by_itself():
    """A full disk or a store away stops the cycles: the commit path answers with that cause (the free-space guard,
    the store unavailable), not a "detector behind" that would hide it."""
    clock, wall = Clock(), Clock()
    failing = [True]
    admission = Admission(10**9, max_detector_behind_seconds=0.5, watermark=lambda: 0.0, clock=clock, wall=wall,
                          stalled=lambda: failing[0])
    busy = admitted(admission)
    admission.committed()
    wall.now += 5.0  # 5 s unread, but the cycles fail
    admitted(admission).release()
    failing[0] = False  # they succeed again and the backlog is load: refused
    refused = admission.admit()
    assert isinstance(refused, Refusal) and refused.reason == REFUSED_DETECTOR
    busy.release()


def test_the_lag_bounds_never_refuse_a_request_that_finds_the_receivers_idle():
    wall = Clock()
    admission = Admission(10**9, max_detector_behind_seconds=0.5, watermark=lambda: 0.0, wall=wall,
                          max_loop_delay_seconds=0.02)
    admission.committed()
    wall.now += 5
    admission.loop_delayed(1.0)
    lone = admitted(admission)
    refused = admission.admit()
    assert isinstance(refused, Refusal) and refused.reason == REFUSED_LOOP
    lone.release()


def test_event_loop_delay_is_sampled_and_decays():
    admission = Admission(10**9, max_loop_delay_seconds=0.02)
    admission.loop_delayed(0.1)
    assert admission.loop_delay == 0.1
    for _ in range(40):
        admission.loop_delayed(0.0)
    assert admission.loop_delay < 0.02

    async def stall() -> float:
        watcher = asyncio.create_task(admission.watch_loop())
        await asyncio.sleep(2 * LOOP_PROBE_SECONDS)
        time.sleep(0.15)  # the loop blocked: the next probe fires late
        await asyncio.sleep(2 * LOOP_PROBE_SECONDS)
        watcher.cancel()
        return admission.loop_delay

    assert asyncio.run(stall()) > 0.05


def test_settings_give_every_bound():
    settings = IngestSettings(max_inflight_bytes=2 * 1024 * 1024, max_commit_wait_seconds=0.25,
                              max_detector_behind_seconds=0.75, max_loop_delay_seconds=0)
    admission = Admission.from_settings(settings, watermark=lambda: 0.0)
    assert (admission.max_inflight_bytes, admission.max_commit_wait_seconds, admission.max_detector_behind_seconds,
            admission.max_loop_delay_seconds) == (2 * 1024 * 1024, 0.25, 0.75, 0)
    defaults = IngestSettings()
    assert defaults.max_inflight_bytes >= 8 * defaults.max_body_bytes  # room for several of the largest requests
