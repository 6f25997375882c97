"""The admin API under ``/admin/loop-detection/`` (and ``/admin/config/reload``), bearer-token protected.

The token is :attr:`detector.server.Service.admin_token` (config ``api.admin_token``, else
``$LOOP_DETECTOR_ADMIN_TOKEN``, else ``<data-dir>/admin-token`` created 0600 at first start). No header or
not a bearer token: 401; a wrong token: 403 (compared in constant time).
"""

from __future__ import annotations

import hmac
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, HTTPException, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from detector.config import Budget, ConfigError, Rule
from detector.sessions import list_sessions, session_detail, stats
from detector.store import StoreError

if TYPE_CHECKING:
    from detector.server import Service

ID_MAX = 512

# Ids are passed as one-element arrays: every store quotes array parameters exactly, whatever the characters.
SELECT_SESSION_TRACES = """
SELECT scope_id FROM otel.loop_state FINAL
WHERE scope = 'trace' AND session_id IN {ids:Array(String)} AND deleted = 0
"""
SESSION_EXISTS = """
SELECT count() AS n FROM otel.loop_state FINAL WHERE scope = 'session' AND scope_id IN {ids:Array(String)} AND deleted = 0
"""


def _service(request: Request) -> Service:
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
    scope: Literal["session", "key"]
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


def _deep_size(obj: Any, seen: set[int]) -> int:
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset, deque)):
        size += sum(_deep_size(v, seen) for v in obj)
    elif hasattr(obj, "__slots__"):
        for cls in type(obj).__mro__:
            for name in getattr(cls, "__slots__", ()):
                if hasattr(obj, name):
                    size += _deep_size(getattr(obj, name), seen)
    elif hasattr(obj, "__dict__"):
        size += _deep_size(vars(obj), seen)
    return size


def estimate_memory_bytes(service: Service, sample: int = 64) -> int:
    """Engine scope states, pending-call windows and budget totals: the deep size of an evenly spread sample
    of each, extrapolated to the count (exact for small counts)."""
    total = 0
    with service.job.lock:
        groups: list[list[Any]] = [list(service.job.engine.states.values()),
                                   list(service.job.engine.budgets.totals.items())]
    groups.append(list(service.preflight._windows.values()))  # a snapshot; the size is an estimate anyway
    for items in groups:
        if not items:
            continue
        step = max(1, len(items) // sample)
        picked = items[::step][:sample]
        seen: set[int] = set()
        total += int(sum(_deep_size(x, seen) for x in picked) / len(picked) * len(items))
    return total


def _file_list(service: Service, kind: str) -> list[dict[str, Any]]:
    """The config file's list of ``kind`` (what applies once the API's override is dropped)."""
    from detector.config import AppConfig, load_config

    try:
        file_config = load_config(service.config_path) if service.config_path else AppConfig()
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
        service = _service(request)
        job = service.job
        with job.lock:
            known = ("session", session_id) in job.engine.states or service.store.rows(
                SESSION_EXISTS, {"ids": [session_id]})[0]["n"] > 0
            if not known:
                raise HTTPException(404, "unknown session")
            traces = {st.scope_id for st in job.engine.states.values()
                      if st.scope == "trace" and st.session_id == session_id}
            traces |= {r["scope_id"] for r in service.store.rows(SELECT_SESSION_TRACES, {"ids": [session_id]})}
            job.reset_scope("session", session_id)
            for trace_id in sorted(traces):
                job.reset_scope("trace", trace_id)
        service.preflight.forget_sessions([session_id], traces)
        service.manual.record("session", session_id, "reset", f"session reset by an operator ({len(traces)} trace(s))",
                              detector="reset_session")
        return ResetOut(session_id=session_id, reset=True, traces_reset=len(traces))

    def manual(request: Request, scope: Literal["session", "key"], scope_id: str, active: bool,
               body: ManualBody | None) -> ManualState:
        body = body or ManualBody()
        action = _service(request).manual.set(scope, scope_id, active, reason=body.reason,
                                              ttl_seconds=body.ttl_seconds)
        return ManualState(scope=scope, id=scope_id, active=action is not None,
                           action="block" if scope == "session" else "revoke",
                           reason=action.reason if action else "",
                           expires_at=action.expires_at_us / 1e6 if action and action.expires_at_us else None)

    @router.post("/sessions/{session_id}/block", response_model=ManualState)
    def block(request: Request, session_id: str = SessionId, body: ManualBody | None = Body(None)) -> ManualState:
        """Block a session: every further check for it answers 429 (reason ``session_blocked``)."""
        return manual(request, "session", session_id, True, body)

    @router.post("/sessions/{session_id}/unblock", response_model=ManualState)
    def unblock(request: Request, session_id: str = SessionId) -> ManualState:
        return manual(request, "session", session_id, False, None)

    @router.post("/keys/{key_id}/revoke", response_model=ManualState)
    def revoke(request: Request, key_id: str = Path(min_length=1, max_length=ID_MAX),
               body: ManualBody | None = Body(None)) -> ManualState:
        """Revoke a virtual key: every check carrying it answers 429 (reason ``key_revoked``)."""
        return manual(request, "key", key_id, True, body)

    @router.post("/keys/{key_id}/restore", response_model=ManualState)
    def restore(request: Request, key_id: str = Path(min_length=1, max_length=ID_MAX)) -> ManualState:
        return manual(request, "key", key_id, False, None)

    @router.get("/stats")
    def get_stats(request: Request) -> dict[str, Any]:
        """Active sessions, level and dominant-signal distributions, average confidence, top 10 sessions,
        estimated memory, evictions."""
        service = _service(request)
        out = stats(service.store, service.job.evicted_total, time.time() - service.started_at,
                    estimate_memory_bytes(service))
        out["manual_actions"] = len(service.manual.all())
        out["pending_windows"] = len(service.preflight)
        return out

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
