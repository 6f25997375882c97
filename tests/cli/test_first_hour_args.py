"""Issue 32's first hour, the arguments: a log level in any case (a wrong one is one line listing the choices),
``sessions --limit/--offset`` checked by the parser, help texts for every operator option, and help without reST
markup. Each runs the real command line, ``python -m detector``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.serve_process import ServeProcess

from detector.cli.parser import strip_markup


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "detector", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_a_lowercase_log_level_starts_the_service(tmp_path):
    with ServeProcess(tmp_path / "data", extra_args=("--log-level", "debug")) as proc:
        assert proc.api.startswith("http://127.0.0.1:")
    assert not any("Traceback" in line or "Unknown level" in line for line in proc.lines)


def test_a_wrong_log_level_is_one_line_listing_the_choices(tmp_path):
    done = cli("serve", "--log-level", "verbose", "--data-dir", str(tmp_path / "data"), "--otlp-port", "0",
               "--api-port", "0", "--otlp-grpc-port", "0")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "'verbose' is not a log level" in lines[0]
    assert "debug, info, warning, error, critical" in lines[0]
    assert not (tmp_path / "data").exists()


def test_serve_help_lists_the_log_levels():
    done = cli("serve", "--help")
    text = " ".join(done.stdout.split())
    assert re.search(r"--log-level LEVEL\s+the log's threshold: debug, info, warning, error, critical", text), text


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--limit", "-5", "-5 is out of range (sessions per page: 1-1000)"),
    ("--limit", "0", "0 is out of range (sessions per page: 1-1000)"),
    ("--limit", "5000", "5000 is out of range (sessions per page: 1-1000)"),
    ("--limit", "ten", "'ten' is not a whole number"),
    ("--offset", "-1", "-1 is out of range (sessions to skip: 0-2147483648)"),
])
def test_sessions_limit_and_offset_are_checked_before_asking_the_service(flag, value, says):
    # port 9 (discard): nothing is asked, the parser refuses first
    done = cli("sessions", "--endpoint", "http://127.0.0.1:9", flag, value)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"argument {flag}: {says}" in lines[0], done.stderr
    assert "admin API" not in done.stderr


def test_operator_options_have_help_texts():
    text = " ".join(cli("sessions", "--help").stdout.split("options:", 1)[1].split())  # past the usage line
    for option in ("--limit LIMIT", "--offset OFFSET", "--data-dir DATA_DIR", "--no-color", "--token TOKEN"):
        after = text.split(option, 1)[1].lstrip()
        assert not after.startswith("-"), f"{option} has no help text: {text}"
    assert "admin-token" in text.split("--data-dir DATA_DIR", 1)[1]


@pytest.mark.parametrize("args", [("--help",), ("serve", "--help"), ("sessions", "--help"),
                                  ("check-config", "--help"), ("eval", "--help"), ("demo", "--help")])
def test_help_has_no_rest_markup(args):
    done = cli(*args)
    assert done.returncode == 0
    assert "``" not in done.stdout and ":class:" not in done.stdout, done.stdout
    assert "`" not in done.stdout, done.stdout
    if args == ("--help",):
        assert "The loop-detector command line" in done.stdout


def test_strip_markup():
    assert strip_markup("The ``loop-detector`` command, :class:`detector.X`, `preset:`") == \
        "The loop-detector command, detector.X, preset:"
