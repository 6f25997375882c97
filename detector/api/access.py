"""Who may read enforcement decisions: the agents' API token (not the admin's), when the API is exposed.

The enforcement reads (``POST /v1/check``, ``GET /v1/decision``, ``GET /v1/blocklist``, ``GET /api/budgets/status``,
``GET /metrics``) tell whoever asks which sessions are blocked and which keys revoked, and a check with a pending
call is recorded (a stranger could make another agent's calls look like a loop). So whenever the API listens beyond
loopback (config ``api.require_api_token: auto``, the default; ``always`` / ``never`` to decide otherwise) they
need ``Authorization: Bearer <token>``: the service's API token (``api.api_token``, ``$LOOP_DETECTOR_API_TOKEN`` or
``<data-dir>/api-token``), which the SDK sends, or the admin token. No header: 401; a wrong token: 403. Tokens are
compared in constant time and never echoed.
"""

from __future__ import annotations

import hmac

from fastapi import Header, HTTPException, Request

from detector.api.ports import ServicePort

__all__ = ["READ_PATHS", "reader_refusal", "require_reader"]

READ_PATHS = ("/v1/check", "/v1/decision", "/v1/blocklist", "/api/budgets/status", "/metrics")


def reader_refusal(service: ServicePort, authorization: str | None) -> tuple[int, str] | None:
    """None when the caller may read enforcement decisions, else (status, message)."""
    if not service.api_token_required:
        return None
    if not authorization or authorization[:7].lower() != "bearer ":
        return 401, "API token required: Authorization: Bearer <token>"
    given = authorization[7:].strip().encode()
    ok = hmac.compare_digest(given, service.api_token.encode())
    ok |= hmac.compare_digest(given, service.admin_token.encode())
    return None if ok else (403, "invalid API token")


def require_reader(request: Request, authorization: str | None = Header(
        None, description="Bearer <API token> (needed when the API listens beyond loopback)")) -> None:
    refusal = reader_refusal(request.app.state.service, authorization)
    if refusal is not None:
        status, message = refusal
        raise HTTPException(status, message, headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)
