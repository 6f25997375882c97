"""The ClickHouse-compatible endpoint's configuration: off unless a port is set, the CLI flag, the password."""

from __future__ import annotations

import stat

from detector.cli.main import build_parser
from detector.service.credentials import CLICKHOUSE_PASSWORD_ENV, CLICKHOUSE_PASSWORD_FILE, resolve_clickhouse_password
from detector.service.process import running_service
from detector.settings.config import AppConfig, parse_config


def test_off_by_default_and_the_cli_flag(tmp_path, fast_config):
    with running_service(fast_config, tmp_path) as (svc, eps):
        assert eps.clickhouse is None and svc.clickhouse_app is None
    assert not (tmp_path / CLICKHOUSE_PASSWORD_FILE).exists()
    args = build_parser().parse_args(["serve", "--clickhouse-http-port", "8123"])
    assert args.clickhouse_http_port == 8123
    assert build_parser().parse_args(["serve"]).clickhouse_http_port is None
    assert parse_config({"clickhouse_http": {"port": 8123}}).clickhouse_http.port == 8123


def test_password_from_config_environment_or_a_0600_file(tmp_path, monkeypatch):
    monkeypatch.delenv(CLICKHOUSE_PASSWORD_ENV, raising=False)
    created = resolve_clickhouse_password(AppConfig(), tmp_path)
    path = tmp_path / CLICKHOUSE_PASSWORD_FILE
    assert path.read_text().strip() == created and len(created) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert resolve_clickhouse_password(AppConfig(), tmp_path) == created  # kept across restarts
    monkeypatch.setenv(CLICKHOUSE_PASSWORD_ENV, "from-the-environment")
    assert resolve_clickhouse_password(AppConfig(), tmp_path) == "from-the-environment"
    configured = parse_config({"clickhouse_http": {"port": 8123, "password": "from-the-config"}})
    assert resolve_clickhouse_password(configured, tmp_path) == "from-the-config"
