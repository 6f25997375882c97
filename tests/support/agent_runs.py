"""Agent runs as the engine sees them, laid out and timed in every way a real agent's spans can be.

A run is a list of steps, each a dict: a **tool step** (``name``, and ``agent_tool``'s fingerprint arguments:
``args``, ``result``, ``failed``, ``shape``, ``pending``...) is a model call asking for one tool, then the tool's
span; a **reply step** (``reply``, ``told``: the model's normalized reply, and the new input it answered) is a model
call without tools. :func:`agent_run` turns them into spans under a layout and a timing; :func:`step_actions` feeds
them to an engine span by span (each span its own batch, as a busy detector may see them) and reads the decision
after every step, as the agent's SDK would before its next call.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from detector.core.decisions import DecisionBook
from detector.core.models import Call
from detector.settings.config import AppConfig
from support.calls import T0, agent_llm, agent_tool
from support.engines import make_engine

Layout = Literal["root", "trace_per_step", "many_traces", "no_session", "session_named_last"]
LAYOUTS: tuple[Layout, ...] = ("root", "trace_per_step", "many_traces", "no_session", "session_named_last")


@dataclass(frozen=True)
class Timing:
    """Span time: how long the model answers, how long a tool takes, the agent's idle time before each model call,
    and a throttle delay added before every call from step ``throttle_from`` on (None: never)."""

    model_s: float = 1.0
    tool_s: float = 0.2
    gap_s: float = 0.3
    throttle_from: int | None = None
    throttle_s: float = 2.0
    gaps: tuple[float, ...] = ()  # when given, the idle time before step k is gaps[k % len(gaps)]


TIMINGS: dict[str, Timing] = {
    "a model of 10 ms": Timing(model_s=0.01),
    "a model of 10 s": Timing(model_s=10.0),
    "tools of 0 s": Timing(tool_s=0.0),
    "tools of 5 s": Timing(tool_s=5.0),
    "a person's second between calls": Timing(gap_s=1.2),
    "a throttle delay from the 4th step": Timing(throttle_from=3),
    # waits that happen to grow just before the detector's throttle starts (an SDK waiting for the detector's cycle)
    "jittery waits, then a throttle delay": Timing(gaps=(0.2, 0.5, 0.9, 0.3, 0.6, 1.1, 0.4), throttle_from=6),
}


@dataclass(frozen=True)
class RunSpans:
    calls: list[Call]
    step_ends: list[int]  # index in ``calls`` of each step's last span
    lookups: list[tuple[str, str]]  # the (session, trace) the agent asks about after each step


def agent_run(steps: list[dict[str, Any]], *, layout: Layout = "root", timing: Timing = Timing(), session: str = "s1",
              content: bool = True, t0: int = T0) -> RunSpans:
    calls: list[Call] = []
    step_ends: list[int] = []
    lookups: list[tuple[str, str]] = []
    t, tokens = 0.0, 500
    for k, step in enumerate(steps):
        step = dict(step)
        trace = {"trace_per_step": f"t{k}", "many_traces": f"t{k // 4}"}.get(layout, "t1")
        gap = timing.gaps[k % len(timing.gaps)] if timing.gaps else timing.gap_s
        t += gap + (timing.throttle_s if timing.throttle_from is not None and k >= timing.throttle_from else 0)
        named = layout not in ("no_session", "session_named_last")
        if "reply" in step:
            llm = agent_llm(k, trace=trace, session=session if named else trace, t0=t0, at=t, duration=timing.model_s,
                            tokens=(tokens, 40), text=step["reply"], told=step.get("told", 0),
                            told_chars=step.get("told_chars", 80), content=content)
            calls.append(_unnamed(llm) if not named else llm)
        else:
            name = step.pop("name", "read_file")
            llm = agent_llm(k, trace=trace, session=session if named else trace, t0=t0, at=t, duration=timing.model_s,
                            tokens=(tokens, 40), tools=((name, step.get("args", 1)),), content=content)
            calls.append(_unnamed(llm) if not named else llm)
            t += timing.model_s + 0.01
            calls.append(agent_tool(k, name, trace=trace, t0=t0, at=t, duration=timing.tool_s, content=content,
                                    **step))
            t += timing.tool_s
        tokens += 140
        step_ends.append(len(calls) - 1)
        lookups.append((session if layout != "no_session" else trace, trace))
    if layout == "session_named_last":  # the root span, exported last, names the session
        calls.append(Call(ts_ns=t0 - 10**6, end_ns=t0 + int(t * 1e9), trace_id="t1", span_id="t1-root",
                          session_id=session, operation="invoke_agent", call_kind="agent"))
    return RunSpans(calls, step_ends, lookups)


def _unnamed(call: Call) -> Call:
    return dataclasses.replace(call, session_id=call.trace_id, session_source="trace")


def step_actions(run: RunSpans, config: AppConfig | None = None, detail: bool = False) -> list[str]:
    """The action after every step (``detail``: ``action/detector/evidence``). Spans are fed one batch each, in the
    order their run emitted them; a layout whose session is named last is read once every span is in."""
    engine = make_engine(config)
    book = DecisionBook()
    after: dict[int, str] = {}
    ends = {end: k for k, end in enumerate(run.step_ends)}
    for i, call in enumerate(run.calls):
        now = call.ts_ns // 1000
        book.put(engine.process([call], now_us=now).decisions)
        if i in ends:
            session, trace = run.lookups[ends[i]]
            d = book.lookup(session, trace, now_us=now)
            after[ends[i]] = d.action if not detail or d.action == "allow" else f"{d.action}/{d.detector}/{d.evidence}"
    return [after[k] for k in range(len(run.step_ends))]


def first_flag(actions: list[str]) -> int | None:
    return next((i for i, a in enumerate(actions) if a != "allow"), None)
