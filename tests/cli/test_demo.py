"""`loop-detector demo`: the stuck agent escalates, the healthy one stays allow, printed call by call."""

from __future__ import annotations

import io

from detector.cli.demo import run_demo


def test_demo_shows_the_stuck_agent_escalating_and_the_healthy_one_allowed():
    out = io.StringIO()
    assert run_demo(calls=12, out=out) == 0
    text = out.getvalue()
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    stuck = [r for r in rows if r[1] == "stuck-agent"]
    healthy = [r for r in rows if r[1] == "healthy-agent"]
    assert len(stuck) == len(healthy) == 12
    assert stuck[-1][2] != "allow" and stuck[0][2] == "allow"
    assert all(r[2] == "allow" for r in healthy)
    assert "final: stuck-agent -> " in text and "healthy-agent -> allow" in text
    assert "\x1b[" not in text  # colour only on a terminal
