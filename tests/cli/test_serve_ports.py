"""``serve`` on a port another process holds refuses to start in one line (exit 2), never a traceback, and never
shares the port: grpcio binds with SO_REUSEPORT by default, so a second ``serve`` used to start beside the first
on its OTLP/gRPC port and take part of its traffic."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def held_port(reuse_port: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if reuse_port:  # what a gRPC server holding the port sets
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(tmp_path: Path, *ports: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "detector", "serve", "--data-dir", str(tmp_path / "data"), *ports],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("flag", ["--otlp-port", "--api-port"])
def test_http_port_in_use_is_a_one_line_refusal(tmp_path, flag):
    holder = held_port()
    others = {"--otlp-port": str(free_port()), "--api-port": str(free_port()), "--otlp-grpc-port": "0"}
    others[flag] = str(holder.getsockname()[1])
    try:
        done = serve(tmp_path, *[x for kv in others.items() for x in kv])
    finally:
        holder.close()
    assert done.returncode == 2
    assert f"refusing to start: cannot listen on 127.0.0.1:{others[flag]}: Address already in use" in done.stderr
    assert "Traceback" not in done.stderr


def test_grpc_port_in_use_is_refused_not_shared(tmp_path):
    holder = held_port(reuse_port=True)
    port = holder.getsockname()[1]
    try:
        done = serve(tmp_path, "--otlp-port", str(free_port()), "--api-port", str(free_port()),
                     "--otlp-grpc-port", str(port))
    finally:
        holder.close()
    assert done.returncode == 2
    assert f"refusing to start: cannot listen on 127.0.0.1:{port} (OTLP/gRPC)" in done.stderr
    assert "Traceback" not in done.stderr
