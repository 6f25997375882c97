"""The group commit's linger is for concurrent senders: a lone sender's request is committed at once.

The real committer on chDB with real OTLP bodies (decoded as the receiver does). A group lingers one step (and while
requests are still arriving) so that senders answered together share the next insert
(``tests/ingest/test_isolation.py``); a request that comes alone after a group that was alone too has nobody to
wait for, and its insert starts at once: a request submitted right after it no longer joins it.
"""

from __future__ import annotations

import asyncio

from support.otlp_senders import PROTOBUF, chat_spans, encode, new_conversation

from detector.ingest.commit import Committer
from detector.ingest.counters import IngestMetrics
from detector.ingest.receiver import decode_request
from detector.settings.service_settings import IngestSettings
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore


def inserts_after(tmp_path, before: int) -> tuple[int, int]:
    """``before`` requests committed together, then (once answered) two more, the second submitted just after the
    first as a sender answered a moment ago does: (inserts for the first ``before``, inserts for the last two)."""
    store = ChdbStore(tmp_path / "store")
    apply_schema(store)
    metrics = IngestMetrics()
    committer = Committer(store, metrics)
    requests = [decode_request(encode(chat_spans(2, new_conversation())), "identity", PROTOBUF, IngestSettings())
                for _ in range(before + 2)]

    async def scenario() -> tuple[int, int]:
        await asyncio.gather(*(committer.commit(r) for r in requests[:before]))
        first = metrics.inserts
        one = asyncio.ensure_future(committer.commit(requests[before]))
        await asyncio.sleep(0)  # its group has begun
        two = asyncio.ensure_future(committer.commit(requests[before + 1]))
        outcomes = await asyncio.gather(one, two)
        assert [o.accepted for o in outcomes] == [2, 2]
        return first, metrics.inserts - first

    try:
        return asyncio.run(scenario())
    finally:
        store.close()


def test_a_lone_request_after_a_lone_group_is_committed_at_once(tmp_path):
    """After a group of one with nothing queued behind it, the next lone request does not wait the linger's step:
    its insert has started when the next request comes, which gets an insert of its own. Before, it waited the
    step and the two shared one insert."""
    assert inserts_after(tmp_path, 1) == (1, 2)


def test_after_a_group_of_several_the_linger_still_gathers(tmp_path):
    """Senders that were answered together are concurrent: the next group still waits for its companions."""
    assert inserts_after(tmp_path, 2) == (1, 1)
