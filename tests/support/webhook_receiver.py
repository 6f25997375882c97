"""A real HTTP webhook receiver for tests: it answers from a script of responses, then with ``default``, and
verifies every signed request with the ``standardwebhooks`` library (the reference implementation receivers use).

    receiver = WebhookReceiver(secret="whsec_...", script=[(503, {}), (429, {"Retry-After": "3600"})])
    with serve_app(receiver.app) as base: ...
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from fastapi import FastAPI, Request, Response
from standardwebhooks import Webhook, WebhookVerificationError


@dataclass
class Attempt:
    webhook_id: str
    timestamp: str
    headers: dict[str, str]
    body: bytes
    status: int
    verified: bool | None  # None: the receiver has no secret
    error: str = ""

    @property
    def payload(self) -> dict:
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    secret: str | bytes | None = None
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    default: int = 204
    attempts: list[Attempt] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.app = FastAPI()

        @self.app.post("/hook")
        async def hook(request: Request) -> Response:
            body = await request.body()
            headers = {k.lower(): v for k, v in request.headers.items()}
            verified, error = None, ""
            if self.secret is not None:
                try:
                    Webhook(self.secret).verify(body, headers)
                    verified = True
                except WebhookVerificationError as exc:
                    verified, error = False, str(exc)
            with self.lock:
                status, extra = self.script.pop(0) if self.script else (self.default, {})
                self.attempts.append(Attempt(headers.get("webhook-id", ""), headers.get("webhook-timestamp", ""),
                                             headers, body, status, verified, error))
            return Response(status_code=status, headers=extra)

    def accepted(self) -> list[Attempt]:
        with self.lock:
            return [a for a in self.attempts if 200 <= a.status < 300]

    def all(self) -> list[Attempt]:
        with self.lock:
            return list(self.attempts)
