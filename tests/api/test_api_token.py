"""The enforcement reads behind the agents' API token whenever the API is exposed (issue 16, failure 6:
``/v1/blocklist`` needed no token and listed every blocked session id and revoked key id).

End to end on loopback with ``require_api_token: always`` (what ``auto`` does beyond loopback; the tests do not
open ports on other interfaces), and the ``auto`` rule itself over listen addresses.
"""

from __future__ import annotations

import os
import stat

import httpx
import pytest
from support.enforcement import admin_headers, make_config, uid

from detector.service.credentials import API_TOKEN_ENV, api_token_required, resolve_api_token
from detector.service.process import running_service

READS = [("POST", "/v1/check", {"session_id": "s"}), ("GET", "/v1/decision?session_id=s", None),
         ("GET", "/v1/blocklist", None), ("GET", "/api/budgets/status", None), ("GET", "/metrics", None)]


# first: a service of its own, before the module's (chDB: one data directory per process at a time)
def test_loopback_default_stays_open(tmp_path):
    with running_service(make_config(), tmp_path) as (service, eps):
        assert not service.api_token_required
        assert httpx.get(eps.api + "/v1/blocklist").status_code == 200


@pytest.fixture(scope="module")
def exposed(tmp_path_factory):
    config = make_config(api={"require_api_token": "always"})
    data = tmp_path_factory.mktemp("token")
    with running_service(config, data) as (service, eps):
        yield service, eps, data


def call(api: str, method: str, path: str, body, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, api + path, json=body, headers=headers, timeout=10)


@pytest.mark.parametrize(("method", "path", "body"), READS, ids=[p for _, p, _ in READS])
def test_enforcement_reads_need_the_api_token(exposed, method, path, body):
    service, eps, _ = exposed
    missing = call(eps.api, method, path, body)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert call(eps.api, method, path, body, "not-the-token-at-all").status_code == 403
    assert service.api_token not in missing.text
    assert call(eps.api, method, path, body, service.api_token).status_code == 200
    assert call(eps.api, method, path, body, service.admin_token).status_code == 200  # an admin may read too


def test_blocklist_hides_blocked_ids_without_the_token(exposed):
    service, eps, _ = exposed
    blocked = uid("secret-session")
    r = httpx.post(f"{eps.api}/admin/loop-detection/sessions/{blocked}/block", headers=admin_headers(service))
    assert r.status_code == 200
    assert blocked not in httpx.get(eps.api + "/v1/blocklist").text
    listed = httpx.get(eps.api + "/v1/blocklist", headers={"Authorization": f"Bearer {service.api_token}"})
    assert blocked in {e["id"] for e in listed.json()["sessions"]}


def test_api_token_is_not_an_admin_token(exposed):
    service, eps, _ = exposed
    r = httpx.get(eps.api + "/admin/loop-detection/stats", headers={"Authorization": f"Bearer {service.api_token}"})
    assert r.status_code == 403
    assert httpx.get(eps.api + "/healthz").status_code == 200  # liveness stays open (container health checks)


def test_api_token_file_is_private_and_config_and_env_win(exposed, tmp_path, monkeypatch):
    service, _, data = exposed
    path = data / "api-token"
    assert path.read_text().strip() == service.api_token and len(service.api_token) >= 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    monkeypatch.setenv(API_TOKEN_ENV, "from-the-environment-0123")
    assert resolve_api_token(make_config(), tmp_path) == "from-the-environment-0123"
    assert resolve_api_token(make_config(api={"api_token": "from-the-config-file-0123"}), tmp_path) == \
        "from-the-config-file-0123"


@pytest.mark.parametrize(("host", "auto"), [
    ("127.0.0.1", False), ("127.1.2.3", False), ("::1", False), ("localhost", False), ("0.0.0.0", True),
    ("::", True), ("192.168.1.20", True), ("10.0.0.5", True), ("my-host.example", True)])
def test_auto_requires_the_token_beyond_loopback(host, auto):
    assert api_token_required("auto", host) is auto
    assert api_token_required("always", host) is True
    assert api_token_required("never", host) is False
