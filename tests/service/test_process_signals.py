"""A real ``loop-detector serve`` under load, stopped by SIGTERM and killed by SIGKILL (signals sent to the child
this test started, by pid). What must hold (issue 16, failures 2 and 5):

- SIGTERM is a graceful stop: requests in flight finish, a last cycle scores what was acknowledged, the final
  checkpoint is taken (state persisted as of the watermark), the store is closed, and the process exits 0;
- after ``kill -9`` mid-insert and a restart, with the senders resending what was not acknowledged (the same
  bytes, as exporters do): every span is stored exactly once in ``otel_traces``, staged once in ``genai_spans`` and
  normalized once into ``genai_calls``, none half stored, and every call scored exactly once.
"""

from __future__ import annotations

import random
import time

import httpx
import pytest
from support.otlp_load import Senders, audit_store
from support.serve_process import ServeProcess

from detector.storage.transport import ChdbStore

CONFIG = """
detector:
  interval_seconds: 0.2
  checkpoint_seconds: 600   # no periodic checkpoint during the test: only the final one can bring it up to date
"""


@pytest.fixture()
def config_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    return path


def meta(store, key: str) -> int:
    rows = store.rows("SELECT value FROM otel.loop_meta FINAL WHERE key = {k:String}", {"k": key})
    return int(rows[0]["value"]) if rows else 0


def wait_scored_past(api: str, when: float, timeout: float = 120.0) -> None:
    """Until the detector's watermark passes ``when`` (a time after the last acknowledgement): every call
    acknowledged before it has been read, scored and written."""
    deadline = time.monotonic() + timeout
    while httpx.get(api + "/healthz", timeout=5).json()["watermark_us"] < when * 1e6:
        assert time.monotonic() < deadline, "the detector's watermark did not move"
        time.sleep(0.05)


def test_sigterm_under_load_is_a_graceful_stop(tmp_path, config_file):
    proc = ServeProcess(tmp_path / "data", config_file).start()
    senders = Senders(lambda: proc.otlp, threads=4, requests=12, spans=150).start()
    try:
        senders.wait_acknowledged(10)
        proc.terminate()
        code = proc.wait(120)
    finally:
        senders.stop()
        if proc.proc.poll() is None:
            proc.kill9()
    log = "".join(proc.lines)
    assert code == 0, log[-3000:]
    assert '"message":"stopped"' in log
    acknowledged = senders.acknowledged
    store = ChdbStore(tmp_path / "data")
    try:
        watermark, checkpoint = meta(store, "watermark:0/1"), meta(store, "checkpoint:0/1")
        assert watermark > 0 and checkpoint == watermark  # the final checkpoint is as of the last cycle
        assert watermark >= max(r.acked_at for r in acknowledged) * 1e6  # ... which read every acknowledged span
        audit = audit_store(store, acknowledged)
        assert audit.exact, audit
        assert audit.scored_once, audit
        states = store.rows("SELECT count() AS n FROM otel.loop_state FINAL WHERE scope = 'session' AND deleted = 0")
        assert states[0]["n"] == len(acknowledged)  # each request is its own session: all persisted
    finally:
        store.close()


def test_kill9_under_load_then_restart_and_retry_stores_each_span_once(tmp_path, config_file):
    data = tmp_path / "data"
    proc = ServeProcess(data, config_file).start()
    current = {"url": proc.otlp}
    senders = Senders(lambda: current["url"], threads=4, requests=8, spans=250).start()
    try:
        senders.wait_acknowledged(6)
        time.sleep(random.Random(16).uniform(0.0, 0.15))
        proc.kill9()  # an insert is running most of the time under this load
        assert proc.wait(60) == -9
        senders.stop()
        proc = ServeProcess(data, config_file).start()
        current["url"] = proc.otlp
        senders.resend_unacknowledged()
        wait_scored_past(proc.api, max(r.acked_at for r in senders.all) + 0.01)
        proc.terminate()
        assert proc.wait(120) == 0
    finally:
        senders.stop()
        if proc.proc.poll() is None:
            proc.kill9()
    store = ChdbStore(data)
    try:
        audit = audit_store(store, senders.all)
    finally:
        store.close()
    assert audit.exact, audit
    assert audit.scored_once, audit
