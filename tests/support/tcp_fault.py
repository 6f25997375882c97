"""A TCP proxy in front of a server, with faults on demand: the ClickHouse server of a scaled deployment going away.

    with FaultProxy(upstream_port) as proxy:   # 127.0.0.1:proxy.port forwards to 127.0.0.1:upstream_port
        proxy.set_mode("refuse")     # the server stopped: the port is closed (connection refused)
        proxy.set_mode("blackhole")  # a hung server: connections are accepted and never answered
        proxy.set_mode("drop")       # accepted, then closed at once
        proxy.set_mode("pass")       # back, on the same port, with the same data behind it

Every change of mode cuts the connections open at that moment, as a server that stops does (clients pool their
connections: without this a kept-alive connection would go on working). Threads only; nothing is mocked: clients
see what a real network gives them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Literal

__all__ = ["FaultProxy", "Mode"]

Mode = Literal["pass", "refuse", "blackhole", "drop"]
_CHUNK = 65536


class FaultProxy:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.upstream = (host, upstream_port)
        self.mode: Mode = "pass"
        self.port = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()  # every socket of a live pipe or a held (blackholed) connection
        self._listener: socket.socket | None = None
        self._closed = False
        self.accepted = 0

    # -- control --------------------------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._listen()
        return self

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            previous, self.mode = self.mode, mode
            if mode != previous:  # (back to pass too: a blackholed connection would never be answered)
                self._cut_locked()
        if mode == "refuse" and previous != "refuse":
            self._stop_listening()
        elif mode != "refuse" and previous == "refuse":
            self._listen()

    def close(self) -> None:
        self._closed = True
        self._stop_listening()
        with self._lock:
            self._cut_locked()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------------------------
    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))  # the same port again after a "refuse"
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), name=f"fault-proxy-{self.port}", daemon=True).start()

    def _stop_listening(self) -> None:
        sock, self._listener = self._listener, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _cut_locked(self) -> None:
        for sock in list(self._open):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed
            self.accepted += 1
            mode = self.mode
            if mode == "drop":
                client.close()
                continue
            with self._lock:
                self._open.add(client)
            if mode == "blackhole":
                continue  # held open, never read, never answered (until the mode changes or the proxy closes)
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                self._discard(client)
                continue
            with self._lock:
                self._open.add(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                target.sendall(data)
        except OSError:
            pass
        finally:
            self._discard(source)
            self._discard(target)

    def _discard(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
