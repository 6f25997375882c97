"""Simulated agents through a running service: emit their steps as real OTLP, read each one's decision after
every step, as the agent would before its next call. Span times start now and advance step by step."""

from __future__ import annotations

import time

import httpx

from detector.evaluation.simulate import emit_step, otlp_tracer, start_run
from detector.evaluation.simulate import wait_for_detector as wait_for_watermark


def run_agents(otlp: str, api: str, sessions: dict[str, object], steps: int, capture_content: bool = True):
    """Emit the agents' steps one at a time; after each, read every agent's decision."""
    timeline: dict[str, list[dict]] = {s: [] for s in sessions}
    with otlp_tracer(otlp) as (tracer, provider):
        t = time.time_ns()
        runs = {}
        for session in sessions:
            span, ctx = start_run(tracer, agent_name=session, session_id=session, start_ns=t)
            runs[session] = {"t": t, "history": [], "ctx": ctx, "span": span}
        for i in range(steps):
            for session, make_step in sessions.items():
                r = runs[session]
                # span time advances by the steps themselves, not by the harness's waits for the detector: a real
                # agent calls back to back, and waits that grow with the machine's load would look like backoff
                r["t"] = emit_step(tracer, make_step(i), session_id=session, start_ns=r["t"],
                                   history=r["history"], parent=r["ctx"], capture_content=capture_content)
            provider.force_flush()
            wait_for_watermark(api, time.time_ns() // 1000)
            for session in sessions:
                timeline[session].append(httpx.get(f"{api}/v1/decision", params={"session_id": session}).json())
        for r in runs.values():
            r["span"].end()
    return timeline
