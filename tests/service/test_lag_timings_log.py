"""The instants ``bench/lag.py`` cuts a request's lag at, in the debug log: each group commit's (its requests queued,
the group taken, its commit), each cycle's (its start, phases and watermark) and each cycle's writes' (the store
held, the decisions served, the watermark shown). Only at debug level; never content."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from support.otlp_senders import PROTOBUF, chat_spans, encode, new_conversation

from detector.detection.job import CycleStats
from detector.ingest.commit import Committer
from detector.ingest.receiver import decode_request
from detector.service.cycle_loop import CycleLoop
from detector.settings.service_settings import IngestSettings
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore


def test_a_cycle_logs_its_start_phases_and_watermark_at_debug(caplog):
    stats = CycleStats(calls_read=3, watermark_us=42, phases={"transform": 0.1, "read": 0.01})
    runs = []

    def cycle() -> CycleStats:
        runs.append(1)
        if len(runs) > 1:
            raise SystemExit  # the end of the test's run
        return stats

    loop = CycleLoop(cycle, 1.0, clock=lambda: 100.0 + len(runs), wait=lambda seconds: False)
    with caplog.at_level(logging.DEBUG, logger="loop_detector"), contextlib.suppress(SystemExit):  # (the run's end)
        loop.run()
    records = [r for r in caplog.records if r.getMessage() == "detection cycle"]
    assert len(records) == 1
    record = records[0]
    assert (record.calls_read, record.watermark_us, record.phases) == (3, 42, stats.phases)
    assert record.cycle_started_at <= record.cycle_ended_at


def test_a_group_commit_logs_when_its_requests_were_queued_taken_and_committed(tmp_path, caplog):
    store = ChdbStore(tmp_path / "store")
    apply_schema(store)
    committer = Committer(store)
    requests = [decode_request(encode(chat_spans(2, new_conversation())), "identity", PROTOBUF, IngestSettings())
                for _ in range(2)]

    async def both():
        return await asyncio.gather(*(committer.commit(r) for r in requests))

    try:
        with caplog.at_level(logging.DEBUG, logger="loop_detector.ingest"):
            assert [o.accepted for o in asyncio.run(both())] == [2, 2]
    finally:
        store.close()
    records = [r for r in caplog.records if r.getMessage() == "group committed"]
    assert len(records) == 1 and records[0].group_items == 2
    record = records[0]
    assert max(record.queued_at) <= record.gathered_at <= record.commit_started_at <= record.commit_ended_at
