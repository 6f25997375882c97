"""Shared by the enforcement tests (API, SDK, budgets): a real service, real OTLP spans, and helpers to drive
an agent to a given decision through the whole pipeline (exporter -> receiver -> chDB -> detector -> API)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from detector.cli.demo import looping_step
from detector.evaluation.simulate import SimulatedStep, ToolCall, emit_step, otlp_tracer, start_run
from detector.evaluation.simulate import wait_for_detector as wait_for_watermark
from detector.settings.config import AppConfig, parse_config

# Escalation one level per looping call (counts 1, low thresholds): every action is reachable in a few calls.
FAST_LEVELS = {
    "thresholds": {"warn_confidence": 0.05, "throttle_confidence": 0.10, "inject_confidence": 0.15,
                   "hardstop_confidence": 0.20},
    "consecutive_counts": {"warn": 1, "throttle": 1, "inject": 1, "hardstop": 1},
    "throttle_delay_seconds": 1,
}


def make_config(**overrides: Any) -> AppConfig:
    data: dict[str, Any] = {"detector": {"interval_seconds": 0.1, "checkpoint_seconds": 0}}
    data.update(overrides)
    return parse_config(data)


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def repeat_step(i: int) -> SimulatedStep:
    """The same request every time (same model, same single input message): an exact prompt repeat (with a
    different tool call each time, so only the exact-repeat rule can trip)."""
    return SimulatedStep(user_text="Try the deployment again.", output_text="Retrying the deployment.",
                         tools=[ToolCall("deploy", {"attempt": i})], input_tokens=500, output_tokens=60)


@dataclass
class Agent:
    """One agent run (one trace) emitting real GenAI spans through the OTLP exporter."""

    otlp: str
    api: str
    session_id: str
    virtual_key: str | None = None
    feature: str | None = None
    step: Any = looping_step
    api_headers: dict[str, str] = field(default_factory=dict)  # e.g. the API token, when the service needs it
    i: int = 0
    trace_id: str = ""
    _t: int = 0
    _state: dict[str, Any] = field(default_factory=dict)

    def __enter__(self) -> Agent:
        self._cm = otlp_tracer(self.otlp)
        self.tracer, self.provider = self._cm.__enter__()
        self._t = time.time_ns()
        span, ctx = start_run(self.tracer, agent_name="agent", session_id=self.session_id, start_ns=self._t,
                              virtual_key=self.virtual_key)
        self._span, self._ctx = span, ctx
        self.trace_id = format(span.get_span_context().trace_id, "032x")
        self._history: list[dict[str, Any]] = []
        return self

    def __exit__(self, *exc: object) -> None:
        self._span.end()
        self._cm.__exit__(None, None, None)

    def call(self, fresh_history: bool = False) -> None:
        """Emit one step and wait until the detector has read it."""
        self._t = emit_step(self.tracer, self.step(self.i), session_id=self.session_id,
                            start_ns=max(self._t, time.time_ns()), virtual_key=self.virtual_key,
                            feature=self.feature, history=[] if fresh_history else self._history, parent=self._ctx)
        self.i += 1
        self.provider.force_flush()
        wait_for_watermark(self.api, time.time_ns() // 1000)

    def decision(self) -> dict[str, Any]:
        params = {"session_id": self.session_id}
        return httpx.get(f"{self.api}/v1/decision", params=params, headers=self.api_headers).json()

    def drive_to(self, action: str, max_calls: int = 12) -> dict[str, Any]:
        """Loop until the session's decision is ``action``; returns that decision."""
        seen = []
        for _ in range(max_calls):
            self.call()
            d = self.decision()
            seen.append(d["action"])
            if d["action"] == action:
                return d
        raise AssertionError(f"never reached {action}: {seen}")


@contextmanager
def agent(otlp: str, api: str, session_id: str, **kw: Any) -> Iterator[Agent]:
    with Agent(otlp, api, session_id, **kw) as a:
        yield a


def admin_headers(service: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {service.admin_token}"}
