"""One sender's bad spans never fail another sender's request, and a batch is stored whole or not at all.

Real OTLP bodies (the OpenTelemetry SDK's spans, the OTLP exporter's encoder) go to the real receiver over
HTTP; the store is chDB. The bad inputs are the ones the reliability probe found (issue 16): a protobuf end
time past DateTime64(9)'s end, which made the materialized view fail the whole group commit (code 407), and a
JSON end time of 1e30 (an OverflowError, a 500). A store that rejects data the receiver cannot foresee is a
real ClickHouse failure too: a materialized view an operator added on ``otel.otel_traces`` that throws for one
marked span (``throwIf``), so the insert fails after ``otel.otel_traces`` took the rows, as it did in the probe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid

import httpx
import orjson
import pytest
from support.otlp_senders import (
    PROTOBUF,
    SECOND,
    chat_spans,
    encode,
    new_conversation,
    partial_success,
    post_body,
    trace_hex,
)
from support.servers import serve_app

from detector.ingest.commit import COMMIT_LINGER_SECONDS, Committer
from detector.ingest.counters import IngestMetrics
from detector.ingest.journal import JOURNAL_SUFFIX, write_journal
from detector.ingest.receiver import create_otlp_app, decode_request
from detector.settings.service_settings import IngestSettings
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore

POISON_MV = """
CREATE MATERIALIZED VIEW IF NOT EXISTS otel.test_poison_mv TO otel.test_poison_sink AS
SELECT throwIf(SpanAttributes['test.poison'] = '1', 'poisoned span') AS x FROM otel.otel_traces
"""


def open_receiver(tmp_path, poison_view: bool = False):
    store = ChdbStore(tmp_path / "store")
    apply_schema(store)
    if poison_view:
        store.command("CREATE TABLE IF NOT EXISTS otel.test_poison_sink (x UInt8) ENGINE = Null")
        store.command(POISON_MV)
    metrics = IngestMetrics()
    app = create_otlp_app(store, IngestSettings(), metrics)
    return store, app, metrics


@pytest.fixture()
def receiver(tmp_path):
    store, app, metrics = open_receiver(tmp_path)
    with serve_app(app) as url:
        yield store, url, metrics
    store.close()


@pytest.fixture()
def poisoned_receiver(tmp_path):
    store, app, metrics = open_receiver(tmp_path, poison_view=True)
    with serve_app(app) as url:
        yield store, url, metrics
    store.close()


def counts(store, trace: str) -> tuple[int, int, int]:
    """(rows in otel_traces, distinct span ids there, rows staged for the detector in genai_spans) of one trace."""
    t = store.rows("SELECT count() AS n, uniqExact(SpanId) AS u FROM otel.otel_traces WHERE TraceId = {t:String}",
                   {"t": trace})[0]
    g = store.rows("SELECT count() AS n FROM otel.genai_spans WHERE trace_id = {t:String}", {"t": trace})[0]
    return int(t["n"]), int(t["u"]), int(g["n"])


def stored_span_ids(store, trace: str) -> set[str]:
    return {r["SpanId"] for r in store.rows("SELECT SpanId FROM otel.otel_traces WHERE TraceId = {t:String}",
                                            {"t": trace})}


def span_hex(span) -> str:
    return f"{span.context.span_id:016x}"


def send_all(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    """Post every body at once, one connection each (the senders are independent agents)."""
    def send(body: bytes) -> httpx.Response:
        with httpx.Client(base_url=url, timeout=60) as client:
            return post_body(client, body)

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(send, bodies))


def test_poison_end_time_fails_only_its_own_span(receiver):
    """Issue 16, failure 1: one span ending at 2^63 + 5 ns beside 6 valid requests, 5 rounds. Before: the poison
    request got 503 every time and most valid requests committed with it got 503 too."""
    store, url, metrics = receiver
    for _ in range(5):
        valid = [chat_spans(20, new_conversation()) for _ in range(6)]
        poison = chat_spans(3, new_conversation(), end_times={1: 2**63 + 5})
        responses = send_all(url, [encode(poison)] + [encode(s) for s in valid])
        assert [r.status_code for r in responses] == [200] * 7, [r.content[:200] for r in responses]
        for spans, response in zip(valid, responses[1:], strict=True):
            assert partial_success(response) == (0, "")
            assert counts(store, trace_hex(spans)) == (20, 20, 20)
        rejected, message = partial_success(responses[0])
        assert rejected == 1 and "end time out of range" in message, message
        assert stored_span_ids(store, trace_hex(poison)) == {span_hex(poison[0]), span_hex(poison[2])}
        assert counts(store, trace_hex(poison)) == (2, 2, 2)
    assert metrics.requests_by_status[503] == 0


def test_json_end_time_1e30_is_a_rejected_span_not_a_500(receiver):
    store, url, _ = receiver
    trace = uuid.uuid4().hex
    start = time.time_ns() - 5 * SECOND
    spans = [{"traceId": trace, "spanId": f"{i + 1:016x}", "name": "chat", "startTimeUnixNano": str(start),
              "endTimeUnixNano": end, "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}
             for i, end in enumerate([1e30, start + SECOND, -1, str(2**64 + 1)])]
    body = orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
    with httpx.Client(base_url=url, timeout=30) as client:
        response = post_body(client, body, "application/json")
    assert response.status_code == 200, response.text
    rejected, message = partial_success(response)
    assert rejected == 3 and "end time out of range" in message and "end time before start time" in message, message
    assert counts(store, trace) == (1, 1, 1)


def test_store_rejection_fails_only_the_spans_it_rejects(poisoned_receiver):
    """A span the store itself rejects (a view throws after otel_traces took the group's rows): every other
    request is committed, the poisoned request keeps its other spans, and nothing is half stored: no row of
    the rejected span remains, and every stored GenAI span is staged for the detector, exactly once."""
    store, url, metrics = poisoned_receiver
    for _ in range(3):
        valid = [chat_spans(10, new_conversation()) for _ in range(6)]
        poison = chat_spans(4, new_conversation(), attributes={2: {"test.poison": "1"}})
        responses = send_all(url, [encode(poison)] + [encode(s) for s in valid])
        assert [r.status_code for r in responses] == [200] * 7, [r.content[:200] for r in responses]
        for spans, response in zip(valid, responses[1:], strict=True):
            assert partial_success(response) == (0, "")
            assert counts(store, trace_hex(spans)) == (10, 10, 10)
        rejected, message = partial_success(responses[0])
        assert rejected == 1 and "rejected by the store" in message and "code 395" in message, message
        assert span_hex(poison[2]) in message  # where: the span's ids (never its attribute values)
        assert stored_span_ids(store, trace_hex(poison)) == {span_hex(s) for i, s in enumerate(poison) if i != 2}
        assert counts(store, trace_hex(poison)) == (3, 3, 3)
    assert metrics.requests_by_status[503] == 0
    assert metrics.failed_inserts >= 3 and metrics.store_rejected == 3  # the isolation path did run, each round
    orphans = store.rows("""
        SELECT count() AS n FROM otel.otel_traces
        WHERE SpanAttributes['gen_ai.operation.name'] != ''
          AND (TraceId, SpanId) NOT IN (SELECT trace_id, span_id FROM otel.genai_spans)""")[0]["n"]
    assert orphans == 0


def test_retry_of_a_committed_request_stores_nothing_twice(receiver):
    """Issue 16, failure 2 (idempotence): the exporter resends a request whose 200 it never saw; the retry is
    acknowledged again and nothing is stored twice (so nothing is scored twice)."""
    store, url, metrics = receiver
    spans = chat_spans(5, new_conversation(), tool_every=2)
    body = encode(spans)
    with httpx.Client(base_url=url, timeout=30) as client:
        first, again, gzipped = (post_body(client, body), post_body(client, body),
                                 client.post("/v1/traces", content=__import__("gzip").compress(body),
                                             headers={"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}))
    assert [first.status_code, again.status_code, gzipped.status_code] == [200, 200, 200]
    assert counts(store, trace_hex(spans)) == (5, 5, 5)
    assert metrics.spans_accepted == 5


def test_half_stored_batch_left_by_a_crash_is_completed_at_start(tmp_path):
    """Issue 16, failure 2: a process killed mid-insert leaves the batch's rows in otel_traces and none in
    genai_spans (ClickHouse commits the table's part before the view's). The crash state is made with real
    parts: the batch journaled as the committer journals it before an insert, its rows inserted while the view
    is detached. The next start completes the batch (each call derived once), and the exporter's retry of the
    unacknowledged request is acknowledged without storing anything twice."""
    store = ChdbStore(tmp_path / "store")
    apply_schema(store)
    journal = tmp_path / "journal"
    journal.mkdir()
    spans = chat_spans(8, new_conversation(), tool_every=3)
    body = encode(spans)
    request = decode_request(body, "identity", PROTOBUF, IngestSettings())
    write_journal(journal / f"{time.time_ns():020d}-000001{JOURNAL_SUFFIX}", [request])
    store.command("DETACH TABLE otel.genai_spans_mv")
    store.insert_arrow("otel.otel_traces", request.rows)
    store.command("ATTACH TABLE otel.genai_spans_mv")
    assert counts(store, trace_hex(spans)) == (8, 8, 0)  # half stored, as after the kill

    metrics = IngestMetrics()
    committer = Committer(store, metrics, journal)
    report = committer.recover()
    assert (report.batches, report.resolved, report.pending) == (1, 1, 0)
    assert counts(store, trace_hex(spans)) == (8, 8, 8)
    assert list(journal.glob("*" + JOURNAL_SUFFIX)) == []
    with serve_app(create_otlp_app(store, IngestSettings(), committer=committer)) as url, \
            httpx.Client(base_url=url, timeout=30) as client:
        assert post_body(client, body).status_code == 200
    assert counts(store, trace_hex(spans)) == (8, 8, 8)
    assert metrics.duplicates == 1
    store.close()


def inserts_for_two_requests(tmp_path, arrive) -> int:
    """Commit two 3-span requests with the default Committer, as ``arrive(committer, requests)`` (a coroutine)
    hands them over; the number of inserts they took."""
    store = ChdbStore(tmp_path / "store")
    apply_schema(store)
    metrics = IngestMetrics()
    committer = Committer(store, metrics)
    requests = [decode_request(encode(chat_spans(3, new_conversation())), "identity", PROTOBUF, IngestSettings())
                for _ in range(2)]
    try:
        outcomes = asyncio.run(arrive(committer, requests))
    finally:
        store.close()
    assert [o.accepted for o in outcomes] == [3, 3]
    return metrics.inserts


def test_requests_arriving_together_share_one_insert(tmp_path):
    """Senders answered by one insert send again together; the first of them must not get an insert of its own
    (an insert has a fixed cost whatever its size). Before the linger, the first request's insert started at
    once and the second waited for an insert of its own: two inserts."""
    async def one_after_the_other(committer, requests):
        first = asyncio.ensure_future(committer.commit(requests[0]))
        await asyncio.sleep(0)  # the first request is queued and its group has begun
        second = asyncio.ensure_future(committer.commit(requests[1]))
        return await asyncio.gather(first, second)

    assert inserts_for_two_requests(tmp_path, one_after_the_other) == 1


def test_a_request_still_being_decoded_joins_the_group_about_to_start(tmp_path):
    """A group waits (a bounded time) while a receiver is still reading or decoding a request, so a sender that
    was answered a moment ago and is sending again is not left for the next insert."""
    async def second_still_decoding(committer, requests):
        async def second():  # as the receiver does: read and decode, then commit
            with committer.arriving():
                await asyncio.sleep(COMMIT_LINGER_SECONDS / 2)  # longer than a linger step, shorter than the linger
            return await committer.commit(requests[1])

        return await asyncio.gather(committer.commit(requests[0]), second())

    assert inserts_for_two_requests(tmp_path, second_still_decoding) == 1
