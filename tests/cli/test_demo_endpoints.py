"""`loop-detector demo --endpoint URL` against a real `loop-detector serve` on ports of its own: the spans go where
that service says it receives them (``/healthz``), and when they cannot arrive the demo says so in one line and
exits non-zero instead of printing allow for agents it never saw."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from support.serve_process import ServeProcess

from detector.cli import demo
from detector.cli.demo import otlp_of, run_demo
from detector.cli.main import main
from detector.service.process import free_port, running_service
from detector.settings.config import AppConfig


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """serve on free ports (OTLP/HTTP, OTLP/gRPC and the API all --*-port 0): never :4318 or :8080."""
    with ServeProcess(tmp_path_factory.mktemp("served") / "data") as proc:
        yield proc


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_healthz_says_where_the_service_receives_otlp(served: ServeProcess):
    health = httpx.get(f"{served.api}/healthz").json()
    assert health["otlp_http"] == served.otlp
    assert health["otlp_grpc"].startswith("127.0.0.1:") and not health["otlp_grpc"].endswith(":4317")
    assert otlp_of(served.api, health) == served.otlp
    # the port it reports, on the host the API was reached on (every listener binds the same --host)
    assert otlp_of(served.api.replace("127.0.0.1", "localhost"), health) == served.otlp.replace("127.0.0.1",
                                                                                                  "localhost")
    assert otlp_of(served.api, {"status": "ok"}) is None


def test_demo_sends_its_spans_where_the_service_on_other_ports_receives_them(served: ServeProcess, capsys):
    assert not served.otlp.endswith(":4318")
    started = time.monotonic()
    assert main(["demo", "--endpoint", served.api, "--calls", "12", "--no-color"]) == 0
    assert time.monotonic() - started < 90
    captured = capsys.readouterr()
    assert captured.err == ""
    assert f"sending the agents' spans to {served.otlp}/v1/traces" in captured.out
    rows = [line.split() for line in captured.out.splitlines() if line.strip()[:1].isdigit()]
    stuck = [r for r in rows if r[1] == "stuck-agent"]
    assert len(stuck) == 12 and stuck[-1][2] != "allow"
    assert "final: stuck-agent -> allow" not in captured.out


def test_demo_fails_in_one_line_when_nothing_takes_the_spans(served: ServeProcess, capsys):
    nowhere = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    assert run_demo(endpoint=served.api, otlp_endpoint=nowhere, calls=6) == 1
    assert time.monotonic() - started < 30, "no minutes of exporter retries"
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert f"nothing took the spans sent to {nowhere}/v1/traces" in line and "--otlp-endpoint" in line
    assert "final:" not in captured.out


def test_demo_fails_in_one_line_when_the_spans_go_to_another_service(served: ServeProcess, capsys, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(demo, "ARRIVAL_TIMEOUT", 3.0)
    with running_service(AppConfig(), tmp_path / "other") as (_, other):
        assert run_demo(endpoint=served.api, otlp_endpoint=other.otlp, calls=6) == 1
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert f"accepted but did not reach the loop-detector at {served.api}" in line and "--otlp-endpoint" in line
    assert "final:" not in captured.out


def test_demo_refuses_a_service_that_does_not_say_where_it_receives(capsys):
    class OldHealth(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = json.dumps({"status": "ok", "version": "0.0.1", "watermark_us": 0}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OldHealth)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = f"http://127.0.0.1:{server.server_address[1]}"
        assert run_demo(endpoint=api, calls=2) == 1
    finally:
        server.shutdown()
        server.server_close()
    line = _one_line(capsys.readouterr().err)
    assert "does not say where it receives OTLP" in line and "--otlp-endpoint" in line


def test_demo_refuses_an_endpoint_where_no_loop_detector_answers(capsys):
    assert run_demo(endpoint=f"http://127.0.0.1:{free_port()}", calls=2) == 1
    line = _one_line(capsys.readouterr().err)
    assert "no loop-detector answers at" in line
