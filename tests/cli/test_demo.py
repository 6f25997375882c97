"""`loop-detector demo`: the stuck agent escalates, the healthy one stays allow, printed call by call under a legend
that says what each column means."""

from __future__ import annotations

import io

from detector.cli.demo import run_demo
from detector.cli.main import build_parser


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
    # only :8080 is looked for unasked: the first line says how to point the demo at a service elsewhere
    assert "--endpoint URL" in text.splitlines()[0]

    # a warn beside level none (the early warning) is explained on the page the demo prints
    legend = text.split("call  agent", 1)[0]
    for column in ("action", "level", "by", "dominant"):
        assert f"\n  {column} " in legend, column
    assert "no_progress" in legend and "early warning" in legend and 'level "none"' in legend
    assert all(len(r) >= 6 for r in stuck if r[2] != "allow"), "a decision other than allow names who made it"


def test_every_demo_option_says_what_it_does():
    demo = build_parser()._subparsers._group_actions[0].choices["demo"]
    assert all(action.help for action in demo._actions), [a.dest for a in demo._actions if not a.help]

