"""What ``serve`` opens before anything else: its listening sockets, each port named by the flag that moves it.

A port that is in use, privileged, out of range or on an address this host does not have must stop ``serve``
before it creates its data directory, its tokens or its store (opening the store takes seconds). So the HTTP
listeners are bound here, first, and the OTLP/gRPC port, which grpcio binds itself when the receiver starts inside
the event loop, is tried with a plain socket at the same moment. Every failure is a :class:`ListenError` whose
message says the address, what would have listened there, why it cannot, and which flag moves it; when several
ports cannot be had (the defaults, taken by another service), one :class:`ListenError` names every one of them, so
the next attempt is not refused again for the next port.

The OTLP/gRPC receiver listens on ``--host`` like the others, on its own port (``--otlp-grpc-port``, default
4317): moving ``--otlp-port`` (OTLP/HTTP) leaves it where it is.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

__all__ = ["API", "CLICKHOUSE_HTTP", "HOST_FLAG", "OTLP_GRPC", "OTLP_HTTP", "ListenError", "Listener", "Listeners",
           "bind", "combined", "open_listeners", "probe"]

HOST_FLAG = "--host"


@dataclass(frozen=True, slots=True)
class Listener:
    """One of ``serve``'s listeners: what it serves, and the flag (or config field) that sets its port."""

    label: str
    flag: str


OTLP_HTTP = Listener("OTLP/HTTP", "--otlp-port")
OTLP_GRPC = Listener("OTLP/gRPC", "--otlp-grpc-port")
API = Listener("the API", "--api-port")
CLICKHOUSE_HTTP = Listener("the ClickHouse HTTP endpoint", "--clickhouse-http-port (config: clickhouse_http.port)")


class ListenError(Exception):
    """A listener could not be opened; ``str()`` is the whole one-line explanation, remedy included."""

    def __init__(self, host: str, port: int, listener: Listener | None, reason: str, remedy: str) -> None:
        self.host, self.port, self.listener, self.reason, self.remedy = host, port, listener, reason, remedy
        self.failures: list[ListenError] = [self]
        what = f" for {listener.label} ({listener.flag})" if listener else ""
        super().__init__(f"cannot listen on {host}:{port}{what}: {reason}; {remedy}")


def _where(error: ListenError) -> str:
    return f"{error.host}:{error.port}" + (f" for {error.listener.label} ({error.listener.flag})"
                                           if error.listener else "")


def _flag(error: ListenError) -> str:
    return error.listener.flag.split(" ")[0] if error.listener else "the port's flag"


def combined(errors: list[ListenError]) -> ListenError:
    """One error for every listener that failed: the first alone, or one line naming them all (ports in use: one
    reason and one remedy for all of them; otherwise each with its own)."""
    if len(errors) == 1:
        return errors[0]
    first = errors[0]
    if all(e.reason == first.reason and e.remedy.startswith("another process holds it") for e in errors):
        flags = ", ".join(_flag(e) for e in errors)
        message = (f"cannot listen on {', '.join(_where(e) for e in errors)}: {first.reason}; other processes "
                   f"hold them: stop them, or choose other ports with {flags} (0: a free one)")
    else:
        message = "; and ".join(str(e) for e in errors)
    error = ListenError(first.host, first.port, first.listener, first.reason, first.remedy)
    error.args = (message,)
    error.failures = errors
    return error


def _failure(host: str, port: int, listener: Listener | None, exc: Exception) -> ListenError:
    flag = listener.flag.split(" ")[0] if listener else "the port's flag"
    if isinstance(exc, OverflowError) or not 0 <= port <= 65535:
        return ListenError(host, port, listener, "not a port number", f"ports are 0-65535 (0: a free one); set {flag}")
    if isinstance(exc, socket.gaierror):
        return ListenError(host, port, listener, f"unknown host ({exc.strerror})",
                           f"give {HOST_FLAG} an address or a name of this machine")
    code = getattr(exc, "errno", None)
    reason = getattr(exc, "strerror", None) or str(exc)
    if code == errno.EADDRINUSE:
        remedy = f"another process holds it: stop it, or choose another port with {flag} (0: a free one)"
    elif code == errno.EADDRNOTAVAIL:
        remedy = f"{host} is not an address of this machine: choose another with {HOST_FLAG}"
    elif code == errno.EACCES:
        remedy = f"ports below 1024 need privileges: choose another with {flag}"
    else:
        remedy = f"choose another port with {flag}, or another address with {HOST_FLAG}"
    return ListenError(host, port, listener, reason, remedy)


def _socket(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


def bind(host: str, port: int, listener: Listener | None = None) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one; ``getsockname()`` says which)."""
    sock = _socket(host)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:  # in use, not this host's address, privileged, out of range
        sock.close()
        raise _failure(host, port, listener, exc) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def probe(host: str, port: int, listener: Listener | None = None) -> None:
    """Fail now if ``host:port`` cannot be bound (for a listener that binds later, itself): a plain bind, released
    at once. Without ``SO_REUSEPORT``, so a port a gRPC server holds (with it) counts as in use."""
    if port == 0:
        return
    with _socket(host) as sock:
        try:
            sock.bind((host, port))
        except (OSError, OverflowError) as exc:
            raise _failure(host, port, listener, exc) from None


@dataclass(slots=True)
class Listeners:
    """The bound HTTP listeners of a ``serve``, in the order they are served; the gRPC port was probed."""

    host: str
    otlp: socket.socket
    api: socket.socket
    clickhouse: socket.socket | None = None

    def close(self) -> None:
        for sock in (self.otlp, self.api, self.clickhouse):
            if sock is not None:
                sock.close()


def open_listeners(host: str, otlp_port: int, api_port: int, clickhouse_port: int | None = None,
                   grpc_port: int | None = None) -> Listeners:
    """Bind the OTLP/HTTP and API listeners (and the ClickHouse HTTP one, when it has a port), and probe the
    OTLP/gRPC port (None: no gRPC receiver); when any fails, close what was bound and raise one error naming every
    listener that failed."""
    wanted: list[tuple[int, Listener]] = [(otlp_port, OTLP_HTTP), (api_port, API)]
    if clickhouse_port is not None:
        wanted.append((clickhouse_port, CLICKHOUSE_HTTP))
    opened: list[socket.socket] = []
    errors: list[ListenError] = []
    for number, listener in wanted:
        try:
            opened.append(bind(host, number, listener))
        except ListenError as exc:
            errors.append(exc)
    if grpc_port is not None:
        try:
            probe(host, grpc_port, OTLP_GRPC)
        except ListenError as exc:
            errors.append(exc)
    if errors:
        for sock in opened:
            sock.close()
        raise combined(errors)
    return Listeners(host, opened[0], opened[1], opened[2] if len(opened) > 2 else None)
