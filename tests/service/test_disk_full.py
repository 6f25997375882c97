"""The data directory's disk fills under load, over OTLP/HTTP and OTLP/gRPC, then space comes back (issue 32, item 1).

A real ``serve`` child keeps its data directory on a small tmpfs; a file beside it grows until the filesystem is
full. Checked: while full, every OTLP request is answered at once with a retryable refusal (HTTP 503 with
``Retry-After``, gRPC UNAVAILABLE or RESOURCE_EXHAUSTED with RetryInfo) naming ``ingest.min_free_bytes``, never a
hang; ``/v1/check`` answers; ``/healthz`` says ``degraded`` and why. Once the file is removed, ingestion resumes
without a restart, ``/healthz`` is ``ok`` again, and every acknowledged span is stored, staged, normalized and
scored exactly once (:func:`support.otlp_load.audit_store`). The full disk's other hang, a repair's DELETE that
waited for a mutation the full disk never let run, is checked on the store itself.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
from support.disk_full import Filler, TimedGrpcSenders, TimedHttpSenders, mount_refusal, small_tmpfs
from support.otlp_load import audit_store
from support.serve_process import ServeProcess

from detector.storage.transport import ChdbStore

ROOT = Path(__file__).resolve().parents[2]
TMPFS_SIZE = "48m"  # the service's store and journal need ~20 MiB: a few seconds of load fill the rest
MIN_FREE_BYTES = 8 * 1024 * 1024  # the guard, scaled to the small disk (the default, 256 MiB, exceeds it)
CONFIG = f"""\
detector:
  interval_seconds: 0.5
ingest:
  min_free_bytes: {MIN_FREE_BYTES}
  # the disk guard alone refuses here: the overload bounds refuse a machine too busy (two test workers on two CPUs)
  # with a reason of their own (tests/ingest/test_overload.py)
  max_commit_wait_seconds: 0
  max_detector_behind_seconds: 0
  max_loop_delay_seconds: 0
"""
FULL_SECONDS = 4.0  # how long the disk stays full
ANSWERED_WITHIN = 10.0  # "at once": a refusal must not wait for anything (a hang was past a 15 s client timeout)
RETRYABLE_GRPC = {"UNAVAILABLE", "RESOURCE_EXHAUSTED"}


@pytest.fixture()
def tmpfs(tmp_path):
    refusal = mount_refusal()
    if refusal:
        pytest.skip(refusal)
    try:
        with small_tmpfs(tmp_path / "small", TMPFS_SIZE) as mount:
            yield mount
    except OSError as exc:
        pytest.skip(str(exc))


def test_full_disk_is_refused_at_once_then_everything_acknowledged_is_stored_and_scored_once(tmpfs, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    data = tmpfs / "data"
    with ServeProcess(data, config) as proc:
        grpc_target = httpx.get(proc.api + "/healthz", timeout=10).json()["otlp_grpc"]
        http = TimedHttpSenders(lambda: proc.otlp, threads=2, requests=14, spans=100).start()
        grpc_senders = TimedGrpcSenders(lambda: grpc_target, threads=2, requests=14, spans=100).start()
        senders = (http, grpc_senders)
        try:
            deadline = time.monotonic() + 60
            while sum(len(s.acknowledged) for s in senders) < 6:
                assert time.monotonic() < deadline, "nothing acknowledged before the disk filled"
                time.sleep(0.05)
            filler = Filler(tmpfs / "filler").fill()
            full_until = time.monotonic() + FULL_SECONDS
            health = httpx.get(proc.api + "/healthz", timeout=ANSWERED_WITHIN).json()
            check = httpx.post(proc.api + "/v1/check", json={"session_id": "disk-full"}, timeout=ANSWERED_WITHIN)
            time.sleep(max(0.0, full_until - time.monotonic()))
            acked_while_full = {id(r) for s in senders for r in s.acknowledged}
            filler.free()
            freed = time.monotonic()
            for s in senders:  # every request eventually acknowledged (the senders retry, as exporters do)
                while len(s.acknowledged) < len(s.all):
                    assert time.monotonic() < freed + 60, "ingestion did not resume after space came back"
                    time.sleep(0.05)
            health_after = httpx.get(proc.api + "/healthz", timeout=10).json()
            last_ack = max(r.acked_at for s in senders for r in s.all)
            while httpx.get(proc.api + "/healthz", timeout=10).json()["watermark_us"] < last_ack * 1e6:
                assert time.monotonic() < freed + 90, "the detector did not resume after space came back"
                time.sleep(0.05)
        finally:
            for s in senders:
                s.stop()
        proc.terminate()
        assert proc.wait(60) == 0

    # while full: refused at once, retryable, with the reason; the API answered; health said why
    assert health["status"] == "degraded", health
    assert any("disk" in r and "min_free_bytes" in r for r in health["reasons"]), health
    assert check.status_code == 200
    answers = [a for s in senders for a in s.log.answers]
    full = [a for a in answers if filler.full_at <= a.asked <= freed]
    assert {a.transport for a in full} == {"http", "grpc"}
    for a in full:
        assert a.seconds < ANSWERED_WITHIN, a
        assert a.status in {"200", "OK", "503", *RETRYABLE_GRPC}, a
        if a.status not in ("200", "OK"):
            assert a.retry_hint, a
    refused = [a for a in full if a.status not in ("200", "OK")]
    assert refused and all("min_free_bytes" in a.message for a in refused), refused[:3]
    assert not [a for a in answers if a.status == "timeout"]
    assert health_after["status"] == "ok", health_after
    assert len(acked_while_full) < len(http.all) + len(grpc_senders.all)  # the disk did refuse some

    # after: acknowledged = stored = staged = normalized = scored, each exactly once
    store = ChdbStore(data)
    try:
        audit = audit_store(store, [r for s in senders for r in s.all])
    finally:
        store.close()
    assert audit.exact, audit
    assert audit.scored_once, audit


DELETE_ON_A_FULL_DISK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from detector.storage.transport import ChdbStore, StoreError
    mount = Path(sys.argv[1])
    store = ChdbStore(mount / "data")
    store.command("CREATE TABLE t (a UInt64, b String) ENGINE = MergeTree ORDER BY a")
    store.command("INSERT INTO t SELECT number, toString(number) FROM numbers(10000)")
    with open(mount / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"0" * 65536)
                fh.flush()
        except OSError:
            pass
    started = time.monotonic()
    try:
        store.delete("default.t", "a < 10")
        print("deleted")
    except StoreError as exc:
        print("refused", str(exc).split(".")[0], round(time.monotonic() - started, 1))
    (mount / "filler").unlink()
    store.delete("default.t", "a < 10")  # space is back: the DELETE (and the earlier one) applies
    print("rows", store.rows("SELECT count() AS n FROM t")[0]["n"])
""")


def test_a_delete_on_a_full_disk_fails_in_seconds_instead_of_waiting_forever(tmpfs):
    """chDB's DELETE waited for its mutation, which a full disk never lets run: the repair of a half-stored batch
    held the store forever, and every request behind it hung."""
    done = subprocess.run([sys.executable, "-c", DELETE_ON_A_FULL_DISK, str(tmpfs)], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.split("\n")
    assert lines[0].startswith("refused Code: 341"), done.stdout
    assert float(lines[0].split()[-1]) < ANSWERED_WITHIN
    assert lines[1] == "rows 9990"


def test_the_journal_on_a_full_disk_leaves_nothing_torn_and_forgets_nothing(tmpfs):
    """A journal file that cannot be written is removed (a torn one held its space until the next start), and a
    ``committed.log`` append that fails neither fails the commit (its rows are stored) nor loses the entry."""
    from support.otlp_senders import chat_spans, encode, new_conversation

    from detector.ingest.journal import Journal
    from detector.ingest.receiver import PROTOBUF, decode_request
    from detector.ingest.requests import CommitOutcome
    from detector.settings.service_settings import IngestSettings

    journal = Journal(tmpfs / "ingest-journal")
    request = decode_request(encode(chat_spans(200, new_conversation())), "identity", PROTOBUF, IngestSettings())
    filler = Filler(tmpfs / "filler").fill(chunk_pause=0)
    with pytest.raises(OSError):
        journal.write([request])
    assert not list((tmpfs / "ingest-journal").glob("*.tmp"))
    journal.committed.add([(b"first", CommitOutcome("committed", 1, 0, ""))])  # ENOSPC: kept in memory
    assert journal.committed.get(b"first") is not None
    filler.free()
    journal.committed.add([(b"second", CommitOutcome("committed", 2, 0, ""))])  # the file is written whole again
    reread = Journal(tmpfs / "ingest-journal").committed
    assert reread.get(b"first") is not None and reread.get(b"second") is not None
