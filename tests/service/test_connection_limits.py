"""Slow and silent clients are cut off (issue 16, failure 4: 600 slow-body and partial-header connections stayed
open for 40 s). Raw sockets against a running service on both listeners: a connection that sends nothing, one
that stops in the middle of its header, one that sends a header and then a body too slowly. The server must
close each one (the test waits for the close with a generous bound: it checks that it happens, not how fast),
and keep serving everyone else meanwhile.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from detector.service.process import running_service

PATIENCE = 30.0  # seconds the test waits for the server to close a connection (the deadlines below are 1 s)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    from detector.settings.config import AppConfig

    config = AppConfig()
    config.http.header_timeout_seconds = 1.0
    config.http.body_timeout_seconds = 1.0
    with running_service(config, tmp_path_factory.mktemp("limits")) as (svc, endpoints):
        yield svc, endpoints


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes the connection (EOF or reset) before PATIENCE runs out."""
    sock.settimeout(PATIENCE)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
            # a response (e.g. 408 or 400) is fine too, as long as the connection then closes
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    finally:
        sock.close()


def open_to(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=PATIENCE)


@pytest.mark.parametrize("listener", ["otlp", "api"])
def test_slow_and_silent_connections_are_closed(service, listener):
    _, endpoints = service
    url = getattr(endpoints, listener)
    path = "/v1/traces" if listener == "otlp" else "/v1/check"
    silent = open_to(url)
    partial_header = open_to(url)
    partial_header.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Ty".encode())
    slow_body = open_to(url)
    slow_body.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: 100000\r\n\r\n{{".encode())
    # everyone else is served meanwhile
    assert httpx.get(url + "/healthz", timeout=10).status_code == 200
    for sock in (silent, partial_header, slow_body):
        assert closed_by_server(sock)
    assert httpx.get(url + "/healthz", timeout=10).status_code == 200


def test_keep_alive_connection_serves_requests_after_a_quiet_spell_under_the_deadline(service):
    """The header deadline starts when a request begins, so a keep-alive client is not cut mid-conversation."""
    _, endpoints = service
    with httpx.Client(base_url=endpoints.api, timeout=10) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(0.5)
        assert client.get("/healthz").status_code == 200
