"""``serve`` on a port it cannot have refuses to start in one line (exit 2) that names the address, what would have
listened there and the flag that moves it: never a traceback, and before it creates anything (its data directory,
tokens and store come after the ports). It never shares a port: grpcio binds with SO_REUSEPORT by default, so a
second ``serve`` used to start beside the first on its OTLP/gRPC port and take part of its traffic. The OTLP/gRPC
receiver listens on ``--host`` like the others, on its own ``--otlp-grpc-port``."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from support.serve_process import ServeProcess

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


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "detector", "serve", "--data-dir", str(tmp_path / "data"), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert not (tmp_path / "data").exists(), "serve created its data directory before checking its ports"
    return lines[0]


@pytest.mark.parametrize(("flag", "label"), [("--otlp-port", "OTLP/HTTP"), ("--api-port", "the API")])
def test_http_port_in_use_is_a_one_line_refusal_before_anything_is_created(tmp_path, flag, label):
    holder = held_port()
    ports = {"--otlp-port": str(free_port()), "--api-port": str(free_port()), "--otlp-grpc-port": "0"}
    ports[flag] = str(holder.getsockname()[1])
    try:
        done = serve(tmp_path, *[x for kv in ports.items() for x in kv])
    finally:
        holder.close()
    line = assert_one_line_refusal(done, tmp_path)
    assert line.startswith(f"refusing to start: cannot listen on 127.0.0.1:{ports[flag]} for {label} ({flag}): "
                           "Address already in use;"), line
    assert f"choose another port with {flag}" in line


def test_grpc_port_in_use_is_refused_not_shared_and_named_by_its_own_flag(tmp_path):
    holder = held_port(reuse_port=True)
    port = holder.getsockname()[1]
    try:
        done = serve(tmp_path, "--otlp-port", str(free_port()), "--api-port", str(free_port()),
                     "--otlp-grpc-port", str(port))
    finally:
        holder.close()
    line = assert_one_line_refusal(done, tmp_path)
    assert f"cannot listen on 127.0.0.1:{port} for OTLP/gRPC (--otlp-grpc-port)" in line
    assert "choose another port with --otlp-grpc-port" in line


@pytest.mark.parametrize("flag", ["--api-port", "--otlp-port", "--otlp-grpc-port", "--clickhouse-http-port"])
@pytest.mark.parametrize("value", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_one_line(tmp_path, flag, value):
    done = serve(tmp_path, flag, value)
    line = assert_one_line_refusal(done, tmp_path)
    assert line.startswith(f"loop-detector serve: argument {flag}: "), line
    assert "(see loop-detector serve --help)" in line


def test_a_host_that_is_not_this_machines_is_named_with_the_flag(tmp_path):
    done = serve(tmp_path, "--host", "192.0.2.1", "--otlp-port", "0", "--api-port", "0", "--otlp-grpc-port", "0")
    line = assert_one_line_refusal(done, tmp_path)
    assert "cannot listen on 192.0.2.1:0 for OTLP/HTTP (--otlp-port)" in line and "--host" in line


def test_grpc_follows_host_on_its_own_port(tmp_path):
    """Every listener binds --host; the startup line names the gRPC receiver's own flag."""
    with ServeProcess(tmp_path / "data", host="127.0.0.2") as proc:
        line = next(line for line in proc.lines if "OTLP/gRPC on" in line)
        address = line.split("OTLP/gRPC on ")[1].split(" ")[0]
        assert address.startswith("127.0.0.2:") and "(--otlp-grpc-port)" in line
        port = int(address.rsplit(":", 1)[1])
        with grpc.insecure_channel(f"127.0.0.2:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
        with socket.socket() as sock:  # nothing of it on the other loopback address
            assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_every_busy_port_is_named_at_once(tmp_path):
    """Issue 32: with several ports taken (the defaults, held by another service), one refusal names them all,
    instead of one per attempt."""
    holders = [held_port(), held_port(), held_port(reuse_port=True)]
    otlp, api, grpc_port = (str(h.getsockname()[1]) for h in holders)
    try:
        done = serve(tmp_path, "--otlp-port", otlp, "--api-port", api, "--otlp-grpc-port", grpc_port)
    finally:
        for holder in holders:
            holder.close()
    line = assert_one_line_refusal(done, tmp_path)
    assert line.startswith(f"refusing to start: cannot listen on 127.0.0.1:{otlp} for OTLP/HTTP (--otlp-port), "
                           f"127.0.0.1:{api} for the API (--api-port), 127.0.0.1:{grpc_port} for OTLP/gRPC "
                           "(--otlp-grpc-port): Address already in use;"), line
    assert "choose other ports with --otlp-port, --api-port, --otlp-grpc-port (0: a free one)" in line


def test_two_busy_ports_of_four_are_both_named(tmp_path):
    holders = [held_port(), held_port()]
    api, clickhouse = (str(h.getsockname()[1]) for h in holders)
    try:
        done = serve(tmp_path, "--otlp-port", str(free_port()), "--api-port", api, "--otlp-grpc-port", "0",
                     "--clickhouse-http-port", clickhouse)
    finally:
        for holder in holders:
            holder.close()
    line = assert_one_line_refusal(done, tmp_path)
    assert f"127.0.0.1:{api} for the API (--api-port), 127.0.0.1:{clickhouse} for the ClickHouse HTTP endpoint" in line
    assert "--otlp-port" not in line and "--otlp-grpc-port" not in line
