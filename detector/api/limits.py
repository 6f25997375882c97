"""Request bodies of the API are bounded: a body larger than ``api.max_body_bytes`` is refused with 413 before
anything parses it (by ``Content-Length`` when declared, else while it arrives), so that no client can make the
process buffer or parse an unbounded body. (``POST /v1/check`` has its own, smaller bound: ``FastCheck``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["BodyLimit"]


class BodyLimit:
    """Pure ASGI middleware: buffers a request's body up to the limit, then hands it on; beyond it, 413."""

    def __init__(self, app: Any, max_bytes: Callable[[], int]) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes()
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _too_large(send, limit)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, whenever it comes

        await self.app(scope, replay, send)


async def _too_large(send: Any, limit: int) -> None:
    content = orjson.dumps({"detail": f"body larger than {limit} bytes"})
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": content})
