"""The service's secrets and who must present them: the admin token, the agents' API token, the ClickHouse HTTP
endpoint's password, the OTLP receiver's bearer tokens and TLS, and whether the enforcement reads need the API token
on a given listen address.

Each secret is configured, else taken from the environment, else created at first start in the data directory (mode
0600); only the file's path is ever logged.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import ssl
from pathlib import Path
from typing import Any

from detector.settings.config import AppConfig, ConfigError

__all__ = [
    "ADMIN_TOKEN_ENV", "ADMIN_TOKEN_FILE", "API_TOKEN_ENV", "API_TOKEN_FILE", "CLICKHOUSE_PASSWORD_ENV",
    "CLICKHOUSE_PASSWORD_FILE", "OTLP_TOKEN_ENV", "api_token_required", "is_loopback", "otlp_tls", "otlp_tokens",
    "resolve_admin_token", "resolve_api_token", "resolve_clickhouse_password",
]

log = logging.getLogger("loop_detector")

ADMIN_TOKEN_ENV = "LOOP_DETECTOR_ADMIN_TOKEN"
ADMIN_TOKEN_FILE = "admin-token"
API_TOKEN_ENV = "LOOP_DETECTOR_API_TOKEN"
API_TOKEN_FILE = "api-token"
OTLP_TOKEN_ENV = "LOOP_DETECTOR_OTLP_TOKEN"
CLICKHOUSE_PASSWORD_ENV = "LOOP_DETECTOR_CLICKHOUSE_PASSWORD"
CLICKHOUSE_PASSWORD_FILE = "clickhouse-password"


def _resolve_token(configured: str | None, env_name: str, path: Path, label: str) -> str:
    """A token: configured, else the environment, else a random one created at first start in ``path`` (mode
    0600). Only the file's path is ever logged."""
    if configured:
        return configured
    env = os.environ.get(env_name)
    if env:
        return env
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    log.info("created %s file %s (mode 0600)", label, path)
    return token


def resolve_admin_token(config: AppConfig, data_dir: Path) -> str:
    """The admin token: config ``api.admin_token``, else ``$LOOP_DETECTOR_ADMIN_TOKEN``, else
    ``<data-dir>/admin-token``."""
    return _resolve_token(config.api.admin_token, ADMIN_TOKEN_ENV, data_dir / ADMIN_TOKEN_FILE, "admin token")


def resolve_api_token(config: AppConfig, data_dir: Path) -> str:
    """The agents' token for the enforcement reads (not the admin's): config ``api.api_token``, else
    ``$LOOP_DETECTOR_API_TOKEN``, else ``<data-dir>/api-token``."""
    return _resolve_token(config.api.api_token, API_TOKEN_ENV, data_dir / API_TOKEN_FILE, "API token")


def resolve_clickhouse_password(config: AppConfig, data_dir: Path) -> str:
    """The ClickHouse HTTP endpoint's password (user ``default``): config ``clickhouse_http.password``, else
    ``$LOOP_DETECTOR_CLICKHOUSE_PASSWORD``, else ``<data-dir>/clickhouse-password``."""
    return _resolve_token(config.clickhouse_http.password, CLICKHOUSE_PASSWORD_ENV,
                          data_dir / CLICKHOUSE_PASSWORD_FILE, "ClickHouse HTTP password")


def otlp_tokens(config: AppConfig) -> list[str]:
    """The bearer tokens the OTLP receiver accepts: ``ingest.bearer_tokens``, ``$LOOP_DETECTOR_OTLP_TOKEN`` and the
    non-empty lines of ``ingest.bearer_token_file`` (the collector's ``bearertokenauth`` ``filename``)."""
    tokens = list(config.ingest.bearer_tokens)
    env = os.environ.get(OTLP_TOKEN_ENV, "").strip()
    if env:
        tokens.append(env)
    if config.ingest.bearer_token_file:
        try:
            lines = Path(config.ingest.bearer_token_file).read_text().splitlines()
        except OSError as exc:
            raise ConfigError([f"ingest.bearer_token_file: cannot read: {exc.strerror}"]) from None
        tokens.extend(line.strip() for line in lines if line.strip())
    return tokens


def otlp_tls(config: AppConfig) -> dict[str, Any]:
    """The OTLP/HTTP server's TLS options (uvicorn's names) from ``ingest.tls``: none when it is not set."""
    tls = config.ingest.tls
    if tls is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": tls.cert_file, "ssl_keyfile": tls.key_file}
    if tls.client_ca_file:
        options.update(ssl_ca_certs=tls.client_ca_file, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options


def api_token_required(mode: str, host: str) -> bool:
    """Whether the enforcement reads need the API token on an API listening on ``host``."""
    return mode == "always" or (mode == "auto" and not is_loopback(host))


def is_loopback(host: str) -> bool:
    """Whether a listen address is reachable from this machine only (a name other than localhost is not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
