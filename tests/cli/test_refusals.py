"""What a person sees when something is in the way: one line that says what and what to do, never a traceback.

A data directory another process holds (a second ``serve``, or any process with chDB open on it), a ClickHouse
store that cannot be reached, the operator commands with no service at their endpoint, the demo pointed at
nothing, a mistyped option; and ``--version``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path

import pytest
from support.serve_process import ServeProcess

from detector.storage.transport import CLICKHOUSE_URL_ENV

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "detector", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=180, env={**os.environ, **(env or {})})


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def serve_args(data_dir: Path) -> list[str]:
    return ["serve", "--data-dir", str(data_dir), "--otlp-port", "0", "--api-port", "0", "--otlp-grpc-port", "0"]


def test_a_second_serve_on_the_same_data_directory_names_the_first(tmp_path):
    data = tmp_path / "data"
    with ServeProcess(data) as first:
        done = cli(tmp_path, *serve_args(data))
    line = one_line(done, 2)
    assert line.startswith(f"refusing to start: the data directory {data} is in use by pid {first.pid} "
                           "(loop-detector serve"), line
    assert "--data-dir" in line


def test_a_data_directory_another_process_has_open_in_chdb_is_named(tmp_path):
    """Not a serve: any process with chDB open there (its status file names it)."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)  # as serve keeps it (else serve's one warning, that it tightened it, comes first)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from detector.storage.transport import ChdbStore
        store = ChdbStore({str(data)!r})
        print("open", flush=True)
        time.sleep(120)
    """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        done = cli(tmp_path, *serve_args(data))
    finally:
        holder.kill()
        holder.wait(30)
    line = one_line(done, 2)
    assert f"the chDB data directory {data / 'chdb'} is in use by process {holder.pid}, started " in line, line


def test_a_store_that_cannot_be_reached_is_one_line_without_its_password(tmp_path):
    url = f"http://loop:s3cret-pw@127.0.0.1:{free_port()}/"
    done = cli(tmp_path, *serve_args(tmp_path / "data"), env={CLICKHOUSE_URL_ENV: url})
    line = one_line(done, 2)
    assert line.startswith("refusing to start: cannot reach ClickHouse at http://loop:***@127.0.0.1:"), line
    assert "Connection refused" in line and "s3cret-pw" not in done.stderr + done.stdout


@pytest.mark.parametrize("command", [["sessions"], ["session", "some-session"]])
def test_the_operator_commands_without_a_service_name_the_endpoint_and_the_flag(tmp_path, command):
    endpoint = f"http://127.0.0.1:{free_port()}"
    line = one_line(cli(tmp_path, *command, "--endpoint", endpoint), 1)
    assert line.startswith(f"no loop-detector answers at {endpoint} (Connection refused)"), line
    assert "--endpoint" in line


def test_the_operator_commands_default_to_the_documented_endpoint(tmp_path):
    done = cli(tmp_path, "sessions")
    if done.returncode == 0:
        pytest.skip("a loop-detector is serving on 127.0.0.1:8080 on this machine")
    assert "http://127.0.0.1:8080" in one_line(done, 1)


def test_the_demo_pointed_at_nothing_says_so(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"
    line = one_line(cli(tmp_path, "demo", "--endpoint", endpoint), 1)
    assert line.startswith(f"no loop-detector answers at {endpoint}/healthz"), line


def test_a_mistyped_option_is_one_line(tmp_path):
    line = one_line(cli(tmp_path, "serve", "--api-prot", "8081"), 2)
    assert line.startswith("loop-detector serve: unrecognized arguments: --api-prot 8081"), line


def test_version(tmp_path):
    done = cli(tmp_path, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"loop-detector {metadata.version('loop-detector')} (detection core: ")


def test_the_lock_is_released_when_serve_ends(tmp_path):
    """However it ends: a SIGKILL leaves a lock file, never a held lock."""
    data = tmp_path / "data"
    with ServeProcess(data) as first:
        first.kill9()
        first.wait()
    deadline = time.monotonic() + 60
    with ServeProcess(data) as second:
        assert second.pid and time.monotonic() < deadline
