"""The operator CLI (`loop-detector sessions`, `loop-detector session ID`) against a running service."""

from __future__ import annotations

import re
import uuid

from support.agents import run_agents

from detector.cli.demo import healthy_step, looping_step
from detector.cli.main import main


def test_sessions_and_session_detail_in_a_terminal(tmp_path, fast_config, capsys, monkeypatch):
    """The listing and the details, from one running service. Issue 32: the store's nanosecond timestamps print to the
    millisecond, and a healthy session at confidence 0.000 has no dominant signal ("-"), in the listing and in its
    detail."""
    from detector.service.process import running_service

    stuck, healthy = f"stuck-{uuid.uuid4().hex[:6]}", f"ok-{uuid.uuid4().hex[:6]}"
    with running_service(fast_config, tmp_path) as (service, eps):
        run_agents(eps.otlp, eps.api, {stuck: looping_step, healthy: healthy_step}, 10)
        service.job.checkpoint()
        monkeypatch.delenv("LOOP_DETECTOR_ADMIN_TOKEN", raising=False)
        # the token is read from <data-dir>/admin-token, as an operator on the same machine would
        assert main(["sessions", "--endpoint", eps.api, "--data-dir", str(tmp_path)]) == 0
        listing = capsys.readouterr().out
        assert main(["session", stuck, "--endpoint", eps.api, "--data-dir", str(tmp_path)]) == 0
        detail = capsys.readouterr().out
        assert main(["session", healthy, "--endpoint", eps.api, "--data-dir", str(tmp_path)]) == 0
        healthy_detail = capsys.readouterr().out
        assert main(["session", "nobody", "--endpoint", eps.api, "--data-dir", str(tmp_path)]) == 1

    lines = {line.split()[0]: line for line in listing.splitlines() if line.startswith(("stuck-", "ok-"))}
    assert "throttle" in lines[stuck] or "inject" in lines[stuck] or "warn" in lines[stuck]
    assert " none " in lines[healthy]
    assert "2 of 2 session(s)" in listing
    assert f"session {stuck}" in detail
    assert "escalation timeline" in detail and "none ->" in detail and "warn" in detail
    assert "tool_call_repetition" in detail and "#" in detail  # signal bars
    assert "\x1b[" not in detail  # no colour codes when not a terminal

    stamp = re.compile(r"\d{2}:\d{2}:\d{2}(\.\d+)?")
    stamps = stamp.findall(listing + healthy_detail)
    assert len(stamps) >= 3
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d{4,}", listing + detail + healthy_detail), listing + healthy_detail
    row = lines[healthy].split()
    assert row[3:6] == ["0.000", "none", "-"], row
    assert "confidence 0.000" in healthy_detail and re.search(r"dominant -\n", healthy_detail), healthy_detail
