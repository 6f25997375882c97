"""The admin API under ``/admin/loop-detection/`` (and ``/admin/config/reload``), bearer-token protected.

The token is the service's ``admin_token`` (config ``api.admin_token``, else
``$LOOP_DETECTOR_ADMIN_TOKEN``, else ``<data-dir>/admin-token`` created 0600 at first start). No header or
not a bearer token: 401; a wrong token: 403 (compared in constant time).
"""

from __future__ import annotations

import hmac
import time
from typing import Any, Literal

from fastapi import APIRouter, Body, Depends, Header, HTTPException, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from detector.api.ports import ServicePort, WebhookOutboxView
from detector.api.session_views import list_sessions, session_detail, stats
from detector.settings.config import ConfigError, load_config
from detector.settings.loop_settings import Budget, Rule
from detector.settings.vocabulary import (
    MANUAL_BLOCK,
    MANUAL_REVOKE,
    SCOPE_KEY,
    SCOPE_SESSION,
    ManualScope,
)
from detector.storage.transport import StoreError

__all__ = [
    "BudgetsBody", "ID_MAX", "ManualBody", "ManualState", "PolicyList", "ReloadOut", "ResetOut", "RulesBody",
    "admin_router", "config_router", "require_admin",
]

ID_MAX = 512

def _service(request: Request) -> ServicePort:
    return request.app.state.service  # type: ignore[no-any-return]


def require_admin(request: Request, authorization: str | None = Header(None, description="Bearer <admin token>")) -> None:
    if not authorization or not authorization[:7].lower() == "bearer ":
        raise HTTPException(401, "admin token required: Authorization: Bearer <token>",
                            headers={"WWW-Authenticate": "Bearer"})
    given = authorization[7:].strip().encode()
    if not hmac.compare_digest(given, _service(request).admin_token.encode()):
        raise HTTPException(403, "invalid admin token")


class ManualBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=500, description="an operator's note, stored with the action")
    ttl_seconds: float | None = Field(None, gt=0, le=366 * 86400, description="lift automatically after this long")


class ManualState(BaseModel):
    scope: ManualScope
    id: str
    active: bool
    action: str
    reason: str = ""
    expires_at: float | None = None


class RulesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[Rule] = Field(max_length=1000)


class BudgetsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    budgets: list[Budget] = Field(max_length=10_000)


class PolicyList(BaseModel):
    source: Literal["api", "file"] = Field(description="api: set through this API (overrides the file); file")
    rules: list[Rule] | None = None
    budgets: list[Budget] | None = None


class ResetOut(BaseModel):
    session_id: str
    reset: bool
    traces_reset: int


class ReloadOut(BaseModel):
    status: Literal["ok"]


def _file_list(service: ServicePort, kind: str) -> list[dict[str, Any]]:
    """The config file's list of ``kind`` (what applies once the API's override is dropped)."""
    try:
        file_config = load_config(service.config_path, preset=service.preset) if service.config_path else \
            load_config(None, preset=service.preset)
    except ConfigError as exc:
        raise HTTPException(422, {"errors": exc.errors}) from None
    return [item.model_dump(mode="json") for item in getattr(file_config, kind)]


def admin_router() -> APIRouter:
    router = APIRouter(prefix="/admin/loop-detection", tags=["admin"], dependencies=[Depends(require_admin)],
                       responses={401: {"description": "no bearer token"}, 403: {"description": "wrong token"}})
    SessionId = Path(min_length=1, max_length=ID_MAX)

    @router.get("/sessions")
    def sessions(request: Request, limit: int = Query(50, ge=1, le=1000),
                 offset: int = Query(0, ge=0, le=2**31)) -> dict[str, Any]:
        """Sessions, most recently active first: id, virtual key, request count, confidence, level, dominant
        signal, last activity (as of the detector's last checkpoint)."""
        return list_sessions(_service(request).store, limit=limit, offset=offset)

    @router.get("/sessions/{session_id}", responses={404: {"description": "unknown session"}})
    def session(request: Request, session_id: str = SessionId) -> dict[str, Any]:
        """One session's full state: confidence, level, timeline, signals, hashes, tokens and cost."""
        try:
            detail = session_detail(_service(request).store, session_id)
        except StoreError:  # the embedded store cannot take some characters (e.g. a trailing backslash) as a
            raise HTTPException(422, "this session id cannot be looked up by the store") from None  # parameter
        if detail is None:
            raise HTTPException(404, "unknown session")
        return detail

    @router.post("/sessions/{session_id}/reset", response_model=ResetOut,
                 responses={404: {"description": "unknown session"}})
    def reset(request: Request, session_id: str = SessionId) -> ResetOut:
        """Fresh state for the session and its traces (level, confidence, history, rule trips, pending-call
        windows); the session keeps existing. Manual blocks and budget spend are not touched."""
        traces = _service(request).reset_session(session_id)
        if traces is None:
            raise HTTPException(404, "unknown session")
        return ResetOut(session_id=session_id, reset=True, traces_reset=len(traces))

    def manual(request: Request, scope: ManualScope, scope_id: str, active: bool,
               body: ManualBody | None) -> ManualState:
        body = body or ManualBody()
        action = _service(request).manual.set(scope, scope_id, active, reason=body.reason,
                                              ttl_seconds=body.ttl_seconds)
        return ManualState(scope=scope, id=scope_id, active=action is not None,
                           action=MANUAL_BLOCK if scope == SCOPE_SESSION else MANUAL_REVOKE,
                           reason=action.reason if action else "",
                           expires_at=action.expires_at_us / 1e6 if action and action.expires_at_us else None)

    @router.post("/sessions/{session_id}/block", response_model=ManualState)
    def block(request: Request, session_id: str = SessionId, body: ManualBody | None = Body(None)) -> ManualState:
        """Block a session: every further check for it answers 429 (reason ``session_blocked``)."""
        return manual(request, SCOPE_SESSION, session_id, True, body)

    @router.post("/sessions/{session_id}/unblock", response_model=ManualState)
    def unblock(request: Request, session_id: str = SessionId) -> ManualState:
        return manual(request, SCOPE_SESSION, session_id, False, None)

    @router.post("/keys/{key_id}/revoke", response_model=ManualState)
    def revoke(request: Request, key_id: str = Path(min_length=1, max_length=ID_MAX),
               body: ManualBody | None = Body(None)) -> ManualState:
        """Revoke a virtual key: every check carrying it answers 429 (reason ``key_revoked``)."""
        return manual(request, SCOPE_KEY, key_id, True, body)

    @router.post("/keys/{key_id}/restore", response_model=ManualState)
    def restore(request: Request, key_id: str = Path(min_length=1, max_length=ID_MAX)) -> ManualState:
        return manual(request, SCOPE_KEY, key_id, False, None)

    @router.get("/stats")
    def get_stats(request: Request) -> dict[str, Any]:
        """Active sessions, level and dominant-signal distributions, average confidence, top 10 sessions,
        estimated memory, evictions."""
        service = _service(request)
        out = stats(service.store, service.job.evicted_total, time.time() - service.started_at,
                    service.estimated_memory_bytes())
        out["manual_actions"] = len(service.manual.all())
        out["pending_windows"] = service.pending_windows()
        return out

    # -- webhooks: the outbox and its dead letters --------------------------------------------------------
    def _outbox(request: Request) -> WebhookOutboxView:
        outbox = _service(request).webhooks
        if outbox is None:
            raise HTTPException(404, "no webhook is configured")
        return outbox

    @router.get("/webhooks", responses={404: {"description": "no webhook is configured"}})
    def webhooks_summary(request: Request) -> dict[str, Any]:
        """Deliveries pending, dead letters, attempts since start, the configured endpoints."""
        return _outbox(request).summary()

    @router.get("/webhooks/dead-letters", responses={404: {"description": "no webhook is configured"}})
    def dead_letters(request: Request, limit: int = Query(100, ge=1, le=10_000)) -> dict[str, Any]:
        """Deliveries that gave up (after `webhook_delivery.max_attempts` failures, or a 410 Gone), newest first,
        with the body that was sent and the last error."""
        return {"dead_letters": _outbox(request).dead_letters(limit)}

    @router.post("/webhooks/dead-letters/retry", responses={404: {"description": "no webhook is configured"}})
    def retry_dead_letters(request: Request, event_id: str | None = Query(None, min_length=1, max_length=64)
                           ) -> dict[str, int]:
        """Queue dead letters again (all of them, or one event's), with a fresh count of attempts."""
        return {"requeued": _outbox(request).retry_dead_letters(event_id)}

    # -- rules and budgets ----------------------------------------------------------------------------
    @router.get("/rules", response_model=PolicyList, response_model_exclude_none=True)
    def get_rules(request: Request) -> PolicyList:
        service = _service(request)
        return PolicyList(source=service.policy.source("rules"), rules=service.config.rules)  # type: ignore[arg-type]

    @router.put("/rules", response_model=PolicyList, response_model_exclude_none=True,
                responses={422: {"description": "invalid rules, every error listed"}})
    def put_rules(request: Request, body: RulesBody) -> PolicyList:
        """Replace the rules (overrides the config file's list; survives restarts and reloads). Applied at
        once; like a reload, this clears the detector's session state."""
        service = _service(request)
        items = [r.model_dump(mode="json") for r in body.rules]
        try:
            config = service.policy.merged(service.config, "rules", items)
        except ConfigError as exc:
            raise HTTPException(422, {"errors": exc.errors}) from None
        service.policy.set("rules", items)
        service.apply_config(config)
        return get_rules(request)

    @router.delete("/rules", response_model=PolicyList, response_model_exclude_none=True)
    def delete_rules(request: Request) -> PolicyList:
        """Drop the API's rules: the config file's rules apply again (clears session state)."""
        service = _service(request)
        config = service.policy.merged(service.config, "rules", _file_list(service, "rules"))
        service.policy.set("rules", None)
        service.apply_config(config)
        return get_rules(request)

    @router.get("/budgets", response_model=PolicyList, response_model_exclude_none=True)
    def get_budgets(request: Request) -> PolicyList:
        service = _service(request)
        return PolicyList(source=service.policy.source("budgets"), budgets=service.config.budgets)  # type: ignore[arg-type]

    @router.put("/budgets", response_model=PolicyList, response_model_exclude_none=True,
                responses={422: {"description": "invalid budgets, every error listed"}})
    def put_budgets(request: Request, body: BudgetsBody) -> PolicyList:
        """Replace the budgets (overrides the file's list; survives restarts and reloads). Applied at once;
        spend totals and session state are kept."""
        service = _service(request)
        items = [b.model_dump(mode="json") for b in body.budgets]
        try:
            config = service.policy.merged(service.config, "budgets", items)
        except ConfigError as exc:
            raise HTTPException(422, {"errors": exc.errors}) from None
        service.policy.set("budgets", items)
        service.apply_budgets(config)
        return get_budgets(request)

    @router.delete("/budgets", response_model=PolicyList, response_model_exclude_none=True)
    def delete_budgets(request: Request) -> PolicyList:
        """Drop the API's budgets: the config file's budgets apply again."""
        service = _service(request)
        config = service.policy.merged(service.config, "budgets", _file_list(service, "budgets"))
        service.policy.set("budgets", None)
        service.apply_budgets(config)
        return get_budgets(request)

    return router


def config_router() -> APIRouter:
    router = APIRouter(prefix="/admin/config", tags=["admin"], dependencies=[Depends(require_admin)],
                       responses={401: {"description": "no bearer token"}, 403: {"description": "wrong token"}})

    @router.post("/reload", response_model=ReloadOut,
                 responses={422: {"description": "invalid config file: every error listed, old config kept"},
                            409: {"description": "the service was started without a config file"}})
    def reload(request: Request) -> ReloadOut:
        """Reload the config file (like SIGHUP). On success the new config applies and session state is
        cleared; on error the old config is kept and every error is listed."""
        service = _service(request)
        if not service.config_path:
            raise HTTPException(409, "no config file to reload (serve was started without --config)")
        errors = service.reload()
        if errors:
            raise HTTPException(422, {"errors": errors})
        return ReloadOut(status="ok")

    return router
