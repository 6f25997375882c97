"""Issue 32's first hour: ``check-config`` shows the effective configuration (as the README says ``check-config FILE
--preset protect`` does), secrets masked, and the whole output still reads as YAML."""

from __future__ import annotations

import subprocess
import sys

import yaml

TOKEN = "admin-token-do-not-print-1234"
WEBHOOK_SECRET = "plain-webhook-secret-do-not-print"


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "detector", "check-config", *args], capture_output=True, text=True,
                          timeout=120)


def test_the_effective_configuration_with_the_preset_applied(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("loop_detection:\n  history_depth: 6\n")
    done = check(str(path), "--preset", "protect")
    assert done.returncode == 0, done.stderr
    shown = yaml.safe_load(done.stdout)
    assert shown["preset"] == "protect"
    assert shown["loop_detection"]["history_depth"] == 6  # the file's own setting
    assert [rule["name"] for rule in shown["rules"]], "the preset's rules are shown"
    assert "detector" in shown and "api" in shown  # the defaults, filled in
    assert done.stdout.rstrip().endswith(f"# {path}: OK")
    plain = yaml.safe_load(check(str(path)).stdout)
    assert plain["preset"] == "default" and plain["rules"] != shown["rules"]


def test_secrets_are_masked(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"api:\n  admin_token: {TOKEN}\n"
                    f"webhooks:\n  - url: http://user:pw-do-not-print@127.0.0.1:9/hook\n    secret: {WEBHOOK_SECRET}\n")
    done = check(str(path))
    assert done.returncode == 0, done.stderr
    assert "do-not-print" not in done.stdout + done.stderr
    shown = yaml.safe_load(done.stdout)
    assert shown["api"]["admin_token"] == "***" and shown["webhooks"][0]["secret"] == "***"
    assert shown["webhooks"][0]["url"] == "http://user:***@127.0.0.1:9/hook"
    assert shown["api"]["api_token"] is None  # unset stays unset


def test_quiet_prints_only_ok(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("loop_detection:\n  history_depth: 6\n")
    done = check(str(path), "--quiet")
    assert done.returncode == 0 and done.stdout == f"# {path}: OK\n"
