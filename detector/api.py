"""The HTTP API (FastAPI): the enforcement decision for agents, health, and (later modules) admin.

Decisions are served from the in-memory :class:`~detector.decisions.DecisionBook` that the detector
cycle keeps current, so a check costs a dictionary lookup, not a query.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from fastapi import FastAPI, Query, Response
from pydantic import BaseModel, Field

from detector import __version__

if TYPE_CHECKING:
    from detector.server import Service

Action = Literal["allow", "warn", "throttle", "inject", "block"]
Level = Literal["none", "warn", "throttle", "inject", "hard_stop"]


class DecisionOut(BaseModel):
    """What the agent's code should do before its next call."""

    action: Action = Field(description="allow | warn | throttle | inject | block")
    level: Level = Field(description="the escalation level of the scope that decided")
    confidence: float = Field(description="EMA-smoothed loop confidence in [0, 1]")
    dominant_signal: str = Field(description="the signal contributing most to the confidence")
    detector: str = Field(description="which detector decided: confidence, a rule detector, budget, manual, none")
    scope: str = Field(description="the scope whose decision won: trace | session | key | feature")
    reason: str = Field("", description="for block: why the call must not proceed")
    rule_name: str = ""
    delay_seconds: float = Field(0.0, description="for throttle: how long to wait before the call")
    instruction: str = Field("", description="for inject: the text to add to the system prompt")
    session_id: str = ""


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    watermark_us: int
    cycles: int
    last_cycle_seconds: float


def create_api(service: Service) -> FastAPI:
    app = FastAPI(
        title="loop-detector",
        version=__version__,
        description="Enforcement decisions for AI agents stuck in loops, from OpenTelemetry GenAI spans.",
    )
    app.state.service = service

    @app.get("/healthz", response_model=Health, tags=["ops"])
    def healthz() -> Health:
        job = service.job
        return Health(status="ok", version=__version__, watermark_us=job.watermark_us, cycles=job.cycles,
                      last_cycle_seconds=job.last_stats.seconds)

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def metrics() -> Response:
        """Prometheus metrics."""
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/decision", response_model=DecisionOut, tags=["enforcement"])
    def decision(
        session_id: str = Query(min_length=1, max_length=512),
        trace_id: str | None = Query(None, max_length=64),
        virtual_key: str | None = Query(None, max_length=512),
        feature: str | None = Query(None, max_length=512),
    ) -> DecisionOut:
        """The current decision for a call in these scopes. An unknown session is ``allow``."""
        d = service.book.lookup(session_id, trace_id, virtual_key, feature)
        return DecisionOut(
            action=d.action, level=d.level, confidence=d.confidence, dominant_signal=d.dominant_signal,  # type: ignore[arg-type]
            detector=d.detector, scope=d.scope, reason=d.reason, rule_name=d.rule_name,
            delay_seconds=d.delay_seconds, instruction=d.instruction, session_id=session_id,
        )

    return app
