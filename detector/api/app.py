"""The HTTP API (FastAPI): enforcement for agents, the block list, budget status, health, admin.

Enforcement reads only memory (the :class:`~detector.enforcement.enforcer.Enforcer` over the decision book the
detector cycle keeps current, manual actions, budget totals and the pending-call windows), so a check
costs dictionary lookups, never a query.

* ``POST /v1/check``: the decision for the call about to be made (optionally with its fingerprints);
  200 with the decision, or 429 with the spec's body and ``Retry-After: 60`` when it must not proceed.
* ``GET /v1/decision``: the same decision as a plain read (always 200, nothing recorded).
* ``GET /v1/blocklist``: everything blocked now, with an ``ETag`` (``304`` on ``If-None-Match``).
* ``GET /api/budgets/status``: the ``budget_ok`` pre-flight (``X-Cost-Feature``, ``X-Cost-Session``, ``X-Cost-Key``).
* ``/admin/loop-detection/...`` and ``/admin/config/reload``: see :mod:`detector.api.admin`.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any, Literal

import orjson
from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.openapi.utils import get_openapi
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from detector import __version__
from detector.api.access import reader_refusal, require_reader
from detector.api.admin import admin_router, config_router
from detector.api.limits import BodyLimit
from detector.api.ports import ServicePort
from detector.core.decisions import RETRY_AFTER_SECONDS, Decision, block_body, warning_header
from detector.enforcement.enforcer import etag_matches
from detector.settings.vocabulary import (
    ACTION_ALLOW,
    ACTION_BLOCK,
    BUDGET_BLOCK,
    EVIDENCE_NONE,
    SCOPE_FEATURE,
    SCOPE_KEY,
    SCOPE_SESSION,
    Action,
    BudgetAction,
    BudgetScope,
    Evidence,
    Level,
)

__all__ = [
    "BlockEntry", "BlockedError", "BlockedOut", "BlocklistOut", "BudgetLine", "BudgetStatusOut", "CHECK_BODY_MAX",
    "CheckRequest", "DecisionOut", "FINGERPRINT_MAX", "FastCheck", "Health", "ID_MAX", "InvalidBody", "Pending",
    "PendingEvidence",
    "TOOL_ARGUMENTS_MAX", "TRACE_MAX", "WARNING_HEADER", "check_answer", "create_api", "decision_payload",
    "enforcement_answer",
]

log = logging.getLogger("loop_detector.api")

ID_MAX = 512
TRACE_MAX = 64
FINGERPRINT_MAX = 256
TOOL_ARGUMENTS_MAX = 16 * 1024  # bytes of canonical JSON
CHECK_BODY_MAX = 64 * 1024  # a larger /v1/check body is refused with 413 before it is parsed
WARNING_HEADER = "x-loop-warning"


class DecisionOut(BaseModel):
    """What the agent's code should do before its next call."""

    action: Action = Field(description="allow | warn | throttle | inject | block")
    level: Level = Field(description="the escalation level of the scope that decided")
    confidence: float = Field(description="EMA-smoothed loop confidence in [0, 1]")
    dominant_signal: str = Field(description="the signal contributing most to the confidence")
    detector: str = Field(description="which detector decided: confidence, a rule detector, budget, manual, none")
    scope: str = Field(description="the scope whose decision won: trace | session | key | feature")
    reason: str = Field("", description="for block: why the call must not proceed")
    rule_name: str = Field("", description="the rule or budget that decided, if any")
    delay_seconds: float = Field(0.0, description="for throttle: how long to wait before the call")
    instruction: str = Field("", description="for inject: the text to add to the system prompt")
    session_id: str = ""
    stale_seconds: float = Field(0.0, description=(
        "how old the decisions are: seconds since the start of the last detection cycle that succeeded (calls "
        "stored since are not in them yet). Under one cycle interval plus a cycle's duration when the detector "
        "keeps up; growing while cycles fail (the store unreachable), the decision then being the last one known"))
    evidence: Evidence = Field(EVIDENCE_NONE, description=(
        "what the decision rests on: exact (normalized content identity: the same call with the same result, the "
        "same error, the same reply), fuzzy (reworded or shifted, nothing new back), sizes (content capture off: "
        "the same amounts to the token), structure (shape only: never alone above allow), rate (velocity), none"))


class BlockedError(BaseModel):
    reason: str = Field(description="loop_detected | session_blocked | key_revoked | budget_exhausted | the "
                                    "detector of a blocking rule (exact_prompt_repeat, trace_cap, failure_loop, velocity)")
    session_id: str
    confidence: float
    dominant_signal: str
    enforcement_level: Literal["hard_stop"]  # LEVEL_HARD_STOP, always
    scope: str = ""
    rule_name: str = ""
    evidence: Evidence = EVIDENCE_NONE
    stale_seconds: float = Field(0.0, description="as in a 200 answer: the age of the decisions, in seconds")


class BlockedOut(BaseModel):
    """The HTTP 429 body: the call must not proceed (``Retry-After: 60``)."""

    error: BlockedError


def _uint64(text: str) -> str:
    if int(text) > 2**64 - 1:
        raise ValueError("larger than 2**64 - 1")
    return text


UInt64Text = Annotated[str, Field(pattern=r"^(0|[1-9][0-9]{0,19})$", max_length=20,
                                  description="an unsigned 64-bit hash in decimal (a string: JSON numbers are doubles)"),
                       AfterValidator(_uint64)]


class PendingEvidence(BaseModel):
    """The app's fingerprints of the call about to be made, version 3, 2 or 1 (``docs/sdk.md``, "Fingerprints"):
    hashes of what the agent just observed and of what it is about to send, computed in the app with the service's own
    normalization and ClickHouse's hash functions, never the text. Accepted and validated; the detectors do not
    read them yet, except ``tool``, which stands in for ``tool_arguments`` in the pre-flight failure-loop check."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1, 2, 3] = Field(description="the fingerprint set's version (3; 2: without input_ack; 1: also "
                                                  "without input_failed, input_shape and input_pending)")
    request: UInt64Text | None = Field(None, description="the whole request (model and messages)")
    input: UInt64Text | None = Field(None, description="the new input (the tool results and user message since the "
                                                       "last call), normalized")
    input_simhash: UInt64Text | None = Field(None, description="word-shingle SimHash of the new input, normalized, "
                                                               "without its JSON keys")
    input_empty: bool | None = Field(None, description="the new input says nothing (no results, not found, empty)")
    input_chars: int | None = Field(None, ge=0, le=2**32 - 1, description="bytes of the normalized new input")
    input_failed: bool | None = Field(None, description="the new input says it failed (an error, a traceback...)")
    input_shape: UInt64Text | None = Field(None, description="the new input, normalized, every digit run as '#'")
    input_pending: bool | None = Field(None, description="the new input says the work is still in progress")
    input_ack: bool | None = Field(None, description="the new input only acknowledges what was done (File created, "
                                                     "True, a command that completed with exit code 0)")
    tool: UInt64Text | None = Field(None, description="the tool about to run: name + canonical argument values "
                                                      "(needs tool_name)")
    tool_args: UInt64Text | None = Field(None, description="the tool's name + normalized arguments")
    tool_args_simhash: UInt64Text | None = Field(None, description="n-gram SimHash of the normalized arguments, "
                                                                   "digits masked")


class Pending(BaseModel):
    """The call about to be made, as fingerprints (``tool_arguments``: from clients that send the arguments
    themselves; the SDKs send ``evidence`` instead)."""

    model_config = ConfigDict(extra="forbid")

    request_fingerprint: str | None = Field(
        None, min_length=1, max_length=FINGERPRINT_MAX,
        description="opaque fingerprint of the whole request, e.g. sha256 of the canonical model + messages")
    tool_name: str | None = Field(None, min_length=1, max_length=FINGERPRINT_MAX,
                                  description="the tool about to be run")
    tool_arguments: dict[str, Any] | list[Any] | str | None = Field(
        None, description="its arguments (object, or a JSON string); compared by value, canonically")
    evidence: PendingEvidence | None = Field(None, description="the app's fingerprints of the call (no content)")

    @model_validator(mode="after")
    def _consistent(self) -> Pending:
        if self.tool_arguments is not None and self.tool_name is None:
            raise ValueError("tool_arguments needs tool_name")
        evidence = self.evidence
        if evidence is not None and self.tool_name is None and (
                evidence.tool is not None or evidence.tool_args is not None or evidence.tool_args_simhash is not None):
            raise ValueError("evidence of a tool (tool, tool_args, tool_args_simhash) needs tool_name")
        if self.tool_arguments is not None:
            size = len(self.tool_arguments) if isinstance(self.tool_arguments, str) else len(
                json.dumps(self.tool_arguments, separators=(",", ":"), default=str))
            if size > TOOL_ARGUMENTS_MAX:
                raise ValueError(f"tool_arguments larger than {TOOL_ARGUMENTS_MAX} bytes")
        return self


class CheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str | None = Field(None, min_length=1, max_length=ID_MAX,
                                   description="the session (conversation); optional when trace_id is given")
    trace_id: str | None = Field(None, min_length=1, max_length=TRACE_MAX,
                                 description="the OTel trace id (32 hex digits); alone, the trace's known session "
                                             "is used")
    virtual_key: str | None = Field(None, max_length=ID_MAX)
    feature: str | None = Field(None, max_length=ID_MAX)
    pending: Pending | None = None

    @model_validator(mode="after")
    def _session_or_trace(self) -> CheckRequest:
        if not self.session_id and not self.trace_id:
            raise ValueError("session_id or trace_id is required")
        return self


class BudgetLine(BaseModel):
    name: str
    scope: BudgetScope
    id: str
    period: Literal["run", "day", "month"]
    spent_usd: float
    limit_usd: float
    action: BudgetAction
    exhausted: bool
    resets_at: float | None = Field(None, description="unix seconds when the period rolls over (none for run)")


class BudgetStatusOut(BaseModel):
    can_proceed: bool = Field(description="false when the call must not proceed (an exhausted blocking budget, or "
                                          "any other block: the same answer POST /v1/check would give)")
    reason: str = ""
    budgets: list[BudgetLine]


class BlockEntry(BaseModel):
    id: str
    reason: str
    detector: str
    rule_name: str
    expires_at: float | None = Field(description="unix seconds; null: until lifted")


class BlocklistOut(BaseModel):
    sessions: list[BlockEntry]
    traces: list[BlockEntry]
    keys: list[BlockEntry]
    features: list[BlockEntry]
    count: int


class InvalidBody(BaseModel):
    detail: list[dict[str, Any]] = Field(description="pydantic's errors: loc, msg, type")


class Health(BaseModel):
    status: Literal["ok", "degraded"] = Field(description=(
        "degraded: the service answers, but something it needs is short (each reason in `reasons`)"))
    reasons: list[str] = Field(default_factory=list, description="why the service is degraded ([] when ok)")
    version: str
    watermark_us: int
    cycles: int
    last_cycle_seconds: float
    otlp_http: str = Field("", description=(
        "where this service receives OTLP/HTTP, as its startup line says it: the base URL (spans to "
        "<otlp_http>/v1/traces); its port is the one to use with the host this API was reached on"))
    otlp_grpc: str = Field("", description="host:port of the OTLP/gRPC receiver ('' when it is off)")
    stale_seconds: float = Field(0.0, description="the age of the decisions /v1/check serves (as in its answers)")
    detector_behind: str = Field("", description=(
        "'' while detection cycles succeed; else why they fail and since when (the API still answers, from the last "
        "decisions)"))


def decision_payload(d: Decision, session_id: str, stale_seconds: float = 0.0) -> dict[str, Any]:
    return {
        "action": d.action, "level": d.level, "confidence": d.confidence, "dominant_signal": d.dominant_signal,
        "detector": d.detector, "scope": d.scope, "reason": d.reason, "rule_name": d.rule_name,
        "delay_seconds": d.delay_seconds, "instruction": d.instruction, "session_id": session_id,
        "evidence": d.evidence, "stale_seconds": round(stale_seconds, 3),
    }


def _json(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json", headers=headers)


def enforcement_answer(d: Decision, session_id: str, stale_seconds: float = 0.0) -> tuple[int, dict[str, str], bytes]:
    """200 with the decision (plus ``x-loop-warning`` from warn up), or 429 with the spec's body; both say how old
    the decisions are (``stale_seconds``)."""
    headers = {WARNING_HEADER: warning_header(d)} if d.action != ACTION_ALLOW else {}
    if d.action == ACTION_BLOCK:
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        body = block_body(d, session_id)
        body["error"]["stale_seconds"] = round(stale_seconds, 3)  # type: ignore[index]
        return 429, headers, orjson.dumps(body)
    return 200, headers, orjson.dumps(decision_payload(d, session_id, stale_seconds))


def check_answer(service: ServicePort, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """``POST /v1/check``: the body parsed and validated by pydantic-core in one step (the same model and
    422 shape as a FastAPI body parameter), then the decision."""
    try:
        body = CheckRequest.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        return 422, {}, orjson.dumps({"detail": errors})
    pending = body.pending.model_dump(exclude_none=True) if body.pending is not None else None
    session_id = body.session_id or service.enforcer.session_of(body.trace_id or "")
    try:
        d = service.enforcer.decide(session_id, body.trace_id or None, body.virtual_key or None,
                                    body.feature or None, pending=pending or None)
    except Exception as exc:  # fail safe: the pending call could not be judged, every other decision still holds
        log.error("pending call could not be checked (%s); deciding without it", type(exc).__name__)
        d = service.enforcer.decide(session_id, body.trace_id or None, body.virtual_key or None,
                                    body.feature or None)
    return enforcement_answer(d, session_id, service.freshness.stale_seconds())


class FastCheck:
    """Pure ASGI middleware serving ``POST /v1/check``, the hot path, without the router, the dependency
    machinery and the inner middleware (only Starlette's outermost error handler runs before it). Every
    other request goes to the FastAPI app, which also documents ``/v1/check`` in the OpenAPI schema (its
    route gives the very same answers, through :func:`check_answer`)."""

    def __init__(self, app: Any, service: ServicePort) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/check" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if self.service.api_token_required:
            authorization = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
            refusal = reader_refusal(self.service, authorization)
            if refusal is not None:
                status, message = refusal
                headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
                await _send(send, status, headers, orjson.dumps({"detail": message}))
                return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if size > CHECK_BODY_MAX:
                status, headers, content = 413, {}, orjson.dumps({"detail": f"body larger than {CHECK_BODY_MAX} bytes"})
                break
            if not message.get("more_body", False):
                status, headers, content = check_answer(self.service, b"".join(chunks))
                break
        await _send(send, status, headers, content)


async def _send(send: Any, status: int, headers: dict[str, str], content: bytes) -> None:
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
    raw_headers.extend((k.lower().encode(), v.encode()) for k, v in headers.items())
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": content})


def create_api(service: ServicePort) -> FastAPI:
    app = FastAPI(
        title="loop-detector",
        version=__version__,
        description="Enforcement decisions for AI agents stuck in loops, from OpenTelemetry GenAI spans.",
    )
    app.state.service = service

    @app.get("/healthz", response_model=Health, tags=["ops"])
    def healthz() -> Health:
        job, endpoints = service.job, service.endpoints
        reasons = service.degraded_reasons()
        fresh = service.freshness.view()
        return Health(status="degraded" if reasons else "ok", reasons=reasons, version=__version__,
                      watermark_us=job.watermark_us, cycles=job.cycles, last_cycle_seconds=job.last_cycle_seconds,
                      otlp_http=endpoints.otlp if endpoints else "", otlp_grpc=endpoints.otlp_grpc if endpoints else "",
                      stale_seconds=round(fresh.stale_seconds, 3), detector_behind=fresh.note())

    reader = [Depends(require_reader)]
    unauthorized: dict[int | str, dict[str, Any]] = {
        401: {"description": "API token required (the API listens beyond loopback)"},
        403: {"description": "invalid API token"}}

    @app.get("/metrics", tags=["ops"], response_class=Response, dependencies=reader, responses=unauthorized)
    def metrics() -> Response:
        """Prometheus metrics."""
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    blocked_doc: dict[int | str, dict[str, Any]] = {
        429: {"model": BlockedOut, "description": "the call must not proceed (Retry-After: 60)"}}

    check_doc = {**blocked_doc, **unauthorized, 422: {"model": InvalidBody, "description": "invalid body"},
                 413: {"description": f"body larger than {CHECK_BODY_MAX} bytes"}}
    check_body = {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/CheckRequest"}}}}}

    @app.post("/v1/check", response_model=DecisionOut, responses=check_doc, tags=["enforcement"],
              openapi_extra=check_body, dependencies=reader)
    async def check(request: Request) -> Response:
        """The decision for the call about to be made. With ``pending`` (its fingerprints), the call is
        recorded and a call that would complete a loop of a blocking rule in enforce mode is refused before
        it is sent. An unknown session is ``allow``. 429 when the call must not proceed.

        (Served by the :class:`FastCheck` middleware; this route documents it and gives the same answers.)"""
        status, headers, content = check_answer(service, await request.body())
        return Response(content, status_code=status, media_type="application/json", headers=headers)

    @app.get("/v1/decision", response_model=DecisionOut, tags=["enforcement"], dependencies=reader,
             responses=unauthorized)
    async def decision(
        session_id: str | None = Query(None, min_length=1, max_length=ID_MAX,
                                       description="optional when trace_id is given"),
        trace_id: str | None = Query(None, min_length=1, max_length=TRACE_MAX,
                                     description="alone, the trace's known session is used"),
        virtual_key: str | None = Query(None, max_length=ID_MAX),
        feature: str | None = Query(None, max_length=ID_MAX),
    ) -> Response:
        """The current decision for a call in these scopes, as a plain read (200; nothing recorded). A session id
        or a trace id (or both) is required (422 otherwise). An unknown session is ``allow``."""
        if not session_id and not trace_id:
            return _json({"detail": [{"type": "missing", "loc": ["query", "session_id"],
                                      "msg": "session_id or trace_id is required"}]}, 422)
        session_id = session_id or service.enforcer.session_of(trace_id or "")
        d = service.enforcer.decide(session_id, trace_id or None, virtual_key or None, feature or None)
        headers = {WARNING_HEADER: warning_header(d)} if d.action != ACTION_ALLOW else None
        return _json(decision_payload(d, session_id, service.freshness.stale_seconds()), 200, headers)

    @app.get("/v1/blocklist", response_model=BlocklistOut, tags=["enforcement"], dependencies=reader,
             responses={304: {"description": "not modified (If-None-Match matched the ETag)"}, **unauthorized})
    async def blocklist(if_none_match: str | None = Header(None, max_length=1024)) -> Response:
        """Everything blocked now (sessions, traces, keys, features) with expiry times; ``ETag`` / ``304``."""
        body, etag = service.enforcer.blocklist()
        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if etag_matches(if_none_match, etag):
            return Response(status_code=304, headers=headers)
        return Response(body, media_type="application/json", headers=headers)

    @app.get("/api/budgets/status", response_model=BudgetStatusOut, tags=["budgets"], dependencies=reader,
             responses=unauthorized)
    async def budget_status(
        x_cost_feature: str | None = Header(None, max_length=ID_MAX),
        x_cost_session: str | None = Header(None, max_length=ID_MAX),
        x_cost_key: str | None = Header(None, max_length=ID_MAX),
    ) -> Response:
        """The ``budget_ok`` pre-flight: every budget that applies to this feature / session / key with its
        spend in the current period, and whether the call may proceed."""
        ids = {SCOPE_FEATURE: x_cost_feature or None, SCOPE_SESSION: x_cost_session or None,
               SCOPE_KEY: x_cost_key or None}
        lines = [s.as_dict() for s in service.enforcer.budgets.status(ids)]
        can_proceed, reason = True, ""
        if x_cost_session:
            d = service.enforcer.decide(x_cost_session, None, ids[SCOPE_KEY], ids[SCOPE_FEATURE])
            can_proceed, reason = d.action != ACTION_BLOCK, (d.reason if d.action == ACTION_BLOCK else "")
        elif any(line["exhausted"] and line["action"] == BUDGET_BLOCK for line in lines):
            can_proceed, reason = False, "budget_exhausted"
        return _json({"can_proceed": can_proceed, "reason": reason, "budgets": lines})

    app.include_router(admin_router())
    app.include_router(config_router())

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            body_schema = CheckRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body_schema.pop("$defs", {}))
            components["CheckRequest"] = body_schema
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(BodyLimit, max_bytes=lambda: service.config.api.max_body_bytes)
    app.add_middleware(FastCheck, service=service)  # outermost: the hot path runs before anything else
    return app
