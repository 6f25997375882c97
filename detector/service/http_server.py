"""The process's HTTP servers: uvicorn, with the connection limits it lacks and its signal handling left to us.

uvicorn times out idle keep-alive connections, but not a connection that never finishes its request: one that
sends nothing, half a header, or a body a byte at a time stays open for as long as the client likes (the
reliability probe held 600 such connections for 40 s). :class:`TimedHttpToolsProtocol` closes a connection whose
request header is not complete ``header_timeout_seconds`` after its first byte (or after the connection opened),
and one whose body is not complete ``body_timeout_seconds`` after its header. The application then sees a
disconnect (the OTLP receiver answers nothing and stores nothing of that request).

uvicorn's ``Server.serve`` also captures SIGINT and SIGTERM, and once it has stopped, raises the captured signal
again: under SIGTERM's default action the process dies with -15 before anything after ``serve`` runs (the final
checkpoint, closing the store, flushing webhooks). :class:`Server` leaves signals to the caller
(:meth:`detector.service.process.Service.serve` installs its own handlers).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from detector.settings.service_settings import HttpSettings

__all__ = ["Server", "TimedHttpToolsProtocol", "make_server"]


class TimedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a body deadline per request."""

    header_timeout: float = 10.0
    body_timeout: float = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm(self.header_timeout)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.body_timeout)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()


def _protocol(settings: HttpSettings) -> type[TimedHttpToolsProtocol]:
    return type("TimedProtocol", (TimedHttpToolsProtocol,), {
        "header_timeout": settings.header_timeout_seconds, "body_timeout": settings.body_timeout_seconds})


class Server(uvicorn.Server):
    """A uvicorn server that neither installs signal handlers nor re-raises a signal after stopping."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def make_server(app: Any, settings: HttpSettings, **ssl: Any) -> Server:
    """A uvicorn server for ``app`` with the process's connection limits (``ssl``: uvicorn's ``ssl_*`` options)."""
    return Server(uvicorn.Config(
        app, http=_protocol(settings), log_level="warning", access_log=False, lifespan="off",
        timeout_keep_alive=settings.keep_alive_seconds,
        timeout_graceful_shutdown=settings.graceful_shutdown_seconds, **ssl))
