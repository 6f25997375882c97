"""What the SDK integration modules share: a live service (the enforcement tests' config: rules, budgets, fast
escalation), the local stub model, sessions driven to inject and to throttle by real spans, and one an admin blocked.
The service is module-scoped: each module has one of its own, one at a time (chDB opens one data directory per
process); a module that needs another setup defines its own fixture of the same name (``test_sdk.py``'s ``svc``)."""

from __future__ import annotations

import sys

import httpx
import pytest
from support.enforcement import FAST_LEVELS, admin_headers, agent, make_config, uid
from support.sdk import BUDGETS, ROOT, RULES

from detector.service.process import running_service

sys.path.insert(0, str(ROOT / "examples"))
from openai_stub import create_stub_app, serve_stub  # noqa: E402


@pytest.fixture(scope="module")
def svc(request, tmp_path_factory):
    config = make_config(rules=RULES, budgets=BUDGETS, loop_detection=FAST_LEVELS)
    with running_service(config, tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])) as (service, eps):
        yield service, eps


@pytest.fixture(scope="module")
def stub():
    """The stub model's URL, and the requests it received (in order)."""
    app = create_stub_app()
    with serve_stub(app=app) as url:
        yield url, app.state.requests


def _driven_to(svc, action: str) -> str:
    """A new session whose decision is ``action``, driven there by real spans."""
    _, eps = svc
    session = uid(action)
    with agent(eps.otlp, eps.api, session) as a:
        a.drive_to(action)
    return session


@pytest.fixture(scope="module")
def inject_session(svc):
    return _driven_to(svc, "inject")


@pytest.fixture(scope="module")
def throttle_session(svc):
    return _driven_to(svc, "throttle")


@pytest.fixture()
def blocked_session(svc):
    """A session an admin blocked (unblocked after the test)."""
    service, eps = svc
    session = uid("blocked")
    r = httpx.post(f"{eps.api}/admin/loop-detection/sessions/{session}/block", headers=admin_headers(service))
    assert r.status_code == 200
    yield session
    httpx.post(f"{eps.api}/admin/loop-detection/sessions/{session}/unblock", headers=admin_headers(service))
