"""The detection cycle's schedule, on a clock the test moves: every interval start to start, a cycle that
overran followed by the next at once (an APScheduler interval job skipped that tick), a failing cycle not the
end of the schedule; and sooner after a commit (a nudge), at most every min_interval."""

from __future__ import annotations

import contextlib
import threading

from detector.service.cycle_loop import CycleLoop


class FakeTime:
    """A clock, and a wait that advances it; the loop stops after ``cycles`` cycles. ``commits``: times (from 0) at
    which the receiver nudges the loop; a wait ends at the first one it reaches, as the real wait does."""

    def __init__(self, durations: list[float], commits: tuple[float, ...] = ()) -> None:
        self.now = 100.0
        self.durations = list(durations)
        self.commits = sorted(100.0 + c for c in commits)
        self.starts: list[float] = []
        self.loop: CycleLoop | None = None

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        until = self.now + seconds
        if self.commits and self.commits[0] <= until:
            self.now = max(self.now, self.commits.pop(0))
            self._nudge()
        else:
            self.now = until
        return False

    def cycle(self) -> None:
        self.starts.append(self.now)
        if not self.durations:
            raise SystemExit  # the end of the test's run (not an Exception: the loop does not catch it)
        end = self.now + self.durations.pop(0)
        while self.commits and self.commits[0] <= end:  # commits during the cycle
            self.commits.pop(0)
            self._nudge()
        self.now = end

    def _nudge(self) -> None:
        assert self.loop is not None
        self.loop.nudge()


def run(durations: list[float], interval: float = 1.0, min_interval: float | None = None,
        commits: tuple[float, ...] = (), idle: float | None = None, settle: float = 0.0) -> list[float]:
    t = FakeTime(durations, commits)
    t.loop = loop = CycleLoop(t.cycle, interval, min_interval, clock=t.clock, wait=t.wait,
                              idle_interval_seconds=idle, settle_seconds=settle)
    with contextlib.suppress(SystemExit):  # the fake time's end
        loop.run()
    return [round(s - 100.0, 6) for s in t.starts]


def test_cycles_start_every_interval():
    assert run([0.2, 0.3, 0.1]) == [0.0, 1.0, 2.0, 3.0]


def test_a_cycle_that_overran_is_followed_at_once_not_a_tick_later():
    # APScheduler (max_instances=1) skipped the tick at 1.0 and started the second cycle at 2.0
    assert run([1.1, 0.2, 0.2]) == [0.0, 1.1, 2.1, 3.1]


def test_a_commit_during_a_cycle_brings_the_next_one_to_min_interval_after_its_start():
    assert run([0.1, 0.1, 0.1], min_interval=0.25, commits=(0.05,)) == [0.0, 0.25, 1.25, 2.25]


def test_a_commit_during_the_wait_starts_a_cycle_at_once_once_min_interval_has_passed():
    assert run([0.1, 0.1, 0.1], min_interval=0.25, commits=(0.6,)) == [0.0, 0.6, 1.6, 2.6]


def test_a_commit_soon_after_a_start_waits_for_min_interval():
    assert run([0.05, 0.1], min_interval=0.25, commits=(0.1,)) == [0.0, 0.25, 1.25]


def test_commits_all_the_time_give_a_cycle_every_min_interval_or_back_to_back():
    commits = tuple(k * 0.05 for k in range(1, 60))
    assert run([0.1, 0.1, 0.1], min_interval=0.25, commits=commits) == [0.0, 0.25, 0.5, 0.75]
    assert run([0.4, 0.4, 0.4], min_interval=0.25, commits=commits) == [0.0, 0.4, 0.8, 1.2]


def test_without_commits_or_without_min_interval_the_interval_holds():
    assert run([0.1, 0.1, 0.1], min_interval=0.25) == [0.0, 1.0, 2.0, 3.0]
    assert run([0.1, 0.1, 0.1], commits=(0.05, 1.5)) == [0.0, 1.0, 2.0, 3.0]  # min_interval defaults to interval
    assert run([0.1, 0.1], interval=1.0, min_interval=5.0, commits=(0.5,)) == [0.0, 1.0, 2.0]


# -- when nothing arrives (the embedded store: every span comes through the receiver, which nudges) -----------------

def test_quiet_cycles_double_the_gap_up_to_the_idle_interval():
    # the first cycle reads what a previous run left; the one a second later answers whoever waits for "now"
    assert run([0.1] * 8, idle=10.0) == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 26.0, 36.0, 46.0]


def test_a_commit_brings_the_schedule_back_at_once_and_the_backoff_starts_over():
    starts = run([0.1] * 9, min_interval=0.25, idle=10.0, commits=(20.0,))
    assert starts[:6] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0]  # quiet: 1, 1, 2, 4, 8
    assert starts[6:] == [20.0, 21.0, 22.0, 24.0]  # the commit at 20.0: a cycle at once, then 1, 1, 2 again


def test_under_steady_commits_the_loop_never_backs_off():
    commits = tuple(k * 0.5 for k in range(1, 40))
    assert run([0.1] * 6, min_interval=0.25, idle=30.0, commits=commits) == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]


def test_the_watermark_lag_keeps_the_interval_until_a_cycle_reads_past_the_last_commit():
    # spans younger than the lag (2.5 s) are left to a later cycle: no backoff before a cycle starts at 0.5 + 2.5
    starts = run([0.1] * 7, min_interval=0.25, idle=30.0, settle=2.5, commits=(0.5,))
    assert starts == [0.0, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 7.5]  # 3.5 reads past it; quiet from 4.5: 1, 2


def test_work_the_api_queued_brings_a_cycle_within_an_interval_of_a_quiet_gap():
    t = FakeTime([0.1] * 8)
    # queued at 11.5 (during the quiet gap from 8.1 to 16.0), until the next cycle writes it
    t.loop = loop = CycleLoop(t.cycle, 1.0, 0.25, clock=t.clock, wait=t.wait, idle_interval_seconds=30.0,
                              pending=lambda: t.now >= 111.5 and len(t.starts) == 5)
    with contextlib.suppress(SystemExit):
        loop.run()
    starts = [round(s - 100.0, 6) for s in t.starts]
    # the gap after the cycle at 8.0 is waited an interval at a time (9.1, 10.1, 11.1, 12.1): the queued work at 12.1
    assert starts[:6] == [0.0, 1.0, 2.0, 4.0, 8.0, 12.1]
    assert starts[6] == 28.1  # no span came: the backoff goes on from where it was (a gap of 16)


def test_without_an_idle_interval_the_interval_holds_when_nothing_arrives():  # a server store: a Collector writes
    assert run([0.1] * 5) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_failing_cycle_keeps_the_schedule():
    t = FakeTime([0.1, 0.1])
    calls = []

    def flaky() -> None:
        calls.append(t.now)
        if len(calls) == 1:
            raise RuntimeError("store unavailable")
        t.cycle()

    loop = CycleLoop(flaky, 1.0, clock=t.clock, wait=t.wait)
    with contextlib.suppress(SystemExit):  # the fake time's end
        loop.run()
    assert [round(c - 100.0, 6) for c in calls] == [0.0, 1.0, 2.0, 3.0]


def test_a_nudge_wakes_the_real_loop_before_its_interval():
    ran = threading.Semaphore(0)
    loop = CycleLoop(ran.release, 3600.0, 0.0)
    loop.start()
    try:
        assert ran.acquire(timeout=30)  # the first cycle, at once
        loop.nudge()
        assert ran.acquire(timeout=30)  # the second, long before the hour is up
    finally:
        loop.stop(timeout=10)


def test_stop_ends_the_loop_thread():
    loop = CycleLoop(lambda: None, 0.01)
    loop.start()
    assert "detection-cycle" in {t.name for t in threading.enumerate()}
    loop.stop(timeout=10)
    assert "detection-cycle" not in {t.name for t in threading.enumerate()}


def test_failing_cycles_back_off_to_a_bound_ignore_nudges_and_log_once_per_state_change(caplog):
    """The store away for 8 attempts: retried after 1, 2, 4, then every 5 s (MAX_BACKOFF_SECONDS), a commit's nudge
    not bringing the retry forward; one log line when cycles start failing, one when they resume; the decisions'
    age (Freshness) grows while they fail and is back to the last cycle's start after."""
    from detector.service.cycle_loop import MAX_BACKOFF_SECONDS
    from detector.storage.transport import StoreUnreachable

    t = FakeTime([0.0] * 12, commits=(3.5,))
    failures = iter([False] + [True] * 8 + [False] * 3)
    stale = []

    def cycle() -> None:
        t.cycle()
        stale.append(round(loop.freshness.stale_seconds(), 6))
        if next(failures):
            raise StoreUnreachable("ClickHouse unreachable: Connection refused")

    t.loop = loop = CycleLoop(cycle, 1.0, 0.1, clock=t.clock, wait=t.wait)
    with caplog.at_level("INFO", logger="loop_detector"), contextlib.suppress(SystemExit):
        loop.run()
    starts = [round(s - 100.0, 6) for s in t.starts]
    assert MAX_BACKOFF_SECONDS == 5.0
    assert starts[:10] == [0.0, 1.0, 2.0, 4.0, 8.0, 13.0, 18.0, 23.0, 28.0, 33.0]
    assert stale[9] == 33.0  # the retry at 33 s: 33 s after the start of the last cycle that succeeded (0 s)
    assert loop.freshness.failing_cycles == 0 and loop.freshness.failures_total == 8
    messages = [r.getMessage() for r in caplog.records]
    assert sum("detection cycles failing" in m for m in messages) == 1, messages
    assert sum("detection cycles resumed after 8 failed cycles" in m for m in messages) == 1, messages
