"""The request that hung as the disk filled (issue 32), reproduced through the real commit path.

A full disk can fail an insert half way: ClickHouse commits ``otel.otel_traces``' part, then the staging view's
insert into ``otel.genai_spans`` fails (NOT_ENOUGH_SPACE). The committer repairs the batch at once: its spans are
stored but not staged, so they are deleted and inserted again. chDB's DELETE waited for its mutation, which a full
disk never lets run, while it held the store: the request, and every one behind it, hung. Here the store does both
for real, without filling a disk: ``min_free_disk_bytes_to_perform_insert`` makes ``genai_spans`` refuse inserts with
NOT_ENOUGH_SPACE, and ``SYSTEM STOP MERGES`` keeps the mutation from running, as a full disk does. The request must
be answered retryable within seconds, and its retry, once the store is writable again, stores and stages every span
exactly once. Run in a child process: before the fix it never returned (a chDB call cannot be interrupted).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANSWERED_WITHIN = 15.0  # the client timeout the request hung past
SCRIPT = textwrap.dedent("""
    import asyncio, sys, time
    from pathlib import Path
    sys.path.insert(0, "tests")
    from support.otlp_senders import chat_spans, encode, new_conversation
    from detector.ingest.commit import Committer
    from detector.ingest.receiver import PROTOBUF, decode_request
    from detector.settings.service_settings import IngestSettings
    from detector.storage.schema import apply_schema
    from detector.storage.transport import ChdbStore

    data = Path(sys.argv[1])
    store = ChdbStore(data)
    apply_schema(store)
    committer = Committer(store, journal_dir=data / "ingest-journal")
    request = decode_request(encode(chat_spans(20, new_conversation())), "identity", PROTOBUF, IngestSettings())
    full = "ALTER TABLE otel.genai_spans MODIFY SETTING min_free_disk_bytes_to_perform_insert = {n:UInt64}"
    store.command(full, {"n": 2**62})
    store.command("SYSTEM STOP MERGES otel.otel_traces")
    started = time.monotonic()
    first = asyncio.run(committer.commit(request))
    print("first", first.status, round(time.monotonic() - started, 1), flush=True)
    store.command(full, {"n": 0})
    store.command("SYSTEM START MERGES otel.otel_traces")
    retry = asyncio.run(committer.commit(request))
    print("retry", retry.status, retry.accepted)
    counts = store.rows("SELECT (SELECT count() FROM otel.otel_traces) AS rows, "
                        "(SELECT uniqExact(SpanId) FROM otel.otel_traces) AS spans, "
                        "(SELECT count() FROM otel.genai_spans) AS staged")[0]
    print("stored", counts["rows"], counts["spans"], counts["staged"])
    print("journal", len(list((data / "ingest-journal").glob("*.arrow"))))
""")


def test_a_half_failed_insert_on_a_full_disk_is_answered_retryable_not_hung(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=40)
    assert done.returncode == 0, done.stderr[-2000:]
    first, retry, stored, journal = done.stdout.strip().split("\n")
    status, seconds = first.split()[1:]
    assert status == "retryable" and float(seconds) < ANSWERED_WITHIN, done.stdout
    assert retry == "retry committed 20", done.stdout
    assert stored == "stored 20 20 20", done.stdout  # each span once in otel_traces, once staged
    assert journal == "journal 0", done.stdout
