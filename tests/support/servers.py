"""Run an ASGI app with uvicorn in a background thread for a test (reusable by every test module).

    with serve_app(app) as base_url:
        httpx.get(f"{base_url}/healthz")

The socket is bound (port 0 on 127.0.0.1) before the server starts, so there is no race for a free
port; the context manager returns only once uvicorn accepts connections and, on exit, shuts it
down gracefully (forcefully if it does not stop in time) and joins the thread.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


@contextmanager
def serve_app(app: Any, host: str = "127.0.0.1", *, lifespan: str = "auto", startup_timeout: float = 15.0,
              shutdown_timeout: float = 15.0, **config: Any) -> Iterator[str]:
    """Serve ``app`` on a free port of ``host``; yields the base URL (``http://127.0.0.1:PORT``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, lifespan=lifespan, log_level="warning",
                                           access_log=False, **config))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # surfaced to the caller below
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if failure or not thread.is_alive():
                raise RuntimeError(f"uvicorn did not start: {failure[0] if failure else 'thread exited'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start within {startup_timeout} s")
            time.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(shutdown_timeout)
        if thread.is_alive():
            server.force_exit = True
            thread.join(shutdown_timeout)
        sock.close()
