"""Issue 32's first hour, ``sessions`` and ``session`` when something is off: another web service at the endpoint
is named as not loop-detector in one line (never a traceback), a refused token says where the token file was
looked for and that --data-dir finds it, and a session the service does not know is still "unknown session"."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.serve_process import ServeProcess


class NotFound(BaseHTTPRequestHandler):
    """Another web service: every path is a 404 page."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"<html><body>404 Not Found</body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_web_service() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    environ = {k: v for k, v in os.environ.items() if k != "LOOP_DETECTOR_ADMIN_TOKEN"}
    return subprocess.run([sys.executable, "-m", "detector", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**environ, **(env or {})})


@pytest.mark.parametrize("command", [("sessions",), ("session", "some-session")])
def test_another_web_service_at_the_endpoint_is_one_line(tmp_path, other_web_service, command):
    done = cli(*command, "--endpoint", other_web_service, "--token", "x" * 20, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"what answers at {other_web_service} is not loop-detector (404 to GET "
                               "/admin/loop-detection/sessions"), lines[0]
    assert "--endpoint" in lines[0]
    assert "unknown session" not in done.stdout + done.stderr


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[ServeProcess]:
    data = tmp_path_factory.mktemp("served") / "data"
    with ServeProcess(data) as proc:
        yield proc


def test_no_token_found_says_where_it_looked_and_that_data_dir_finds_it(tmp_path, service):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = cli("sessions", "--endpoint", service.api, cwd=elsewhere)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"the admin API at {service.api} needs the admin token (401) and none was found" in lines[0]
    assert str(elsewhere / ".loop-detector" / "admin-token") in lines[0]
    assert "$LOOP_DETECTOR_ADMIN_TOKEN" in lines[0] and "--data-dir" in lines[0]
    # and --data-dir does find it, from anywhere
    found = cli("sessions", "--endpoint", service.api, "--data-dir", str(service.data_dir), cwd=elsewhere)
    assert found.returncode == 0, found.stderr
    assert "session(s)" in found.stdout


def test_a_wrong_token_names_where_it_came_from(tmp_path, service):
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "admin-token").write_text("not-the-token-of-this-service\n")
    done = cli("sessions", "--endpoint", service.api, "--data-dir", str(stale), cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"refused the token from {stale / 'admin-token'} (403)" in lines[0]
    by_env = cli("sessions", "--endpoint", service.api, cwd=tmp_path,
                 env={"LOOP_DETECTOR_ADMIN_TOKEN": "not-the-token-of-this-service"})
    assert "refused the token from $LOOP_DETECTOR_ADMIN_TOKEN (403)" in by_env.stderr


def test_an_unknown_session_is_still_unknown(tmp_path, service):
    done = cli("session", "nobody-here", "--endpoint", service.api, "--data-dir", str(service.data_dir), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == "unknown session: nobody-here"
