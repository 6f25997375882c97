"""Config errors never echo what the file holds (issue 16, failure 6: a YAML syntax error quoted the offending
line, secret and all, in ``check-config``, the reload's 422 and the log). Each broken file below has a secret on
(or as) the line the parser stops at; every channel an error reaches is searched for it.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import httpx
import pytest
from support.enforcement import admin_headers, make_config

from detector.service.process import running_service
from detector.settings.config import ConfigError, load_config

SECRET = "S3CRET-do-not-leak-4f9a1c"
BROKEN = {
    "unclosed-quote": f'api:\n  admin_token: "{SECRET}\n',
    "mapping-in-value": f"webhooks:\n  - url: http://127.0.0.1:9/hook\n    secret: {SECRET}: oops\n",
    "tab-indent": f"api:\n\tadmin_token: {SECRET}\n",
    "undefined-alias": f"api:\n  admin_token: *{SECRET}\n",
    "flow-sequence": f"loop_detection: [1, 2\napi: {{admin_token: '{SECRET}'}}\n",
    "bad-escape": f'webhooks:\n  - url: http://127.0.0.1:9/hook\n    secret: "{SECRET}\\q"\n',
}


def leaked(text: str) -> bool:
    return SECRET in text or "do-not-leak" in text or "4f9a1c" in text


@pytest.mark.parametrize("text", BROKEN.values(), ids=BROKEN.keys())
def test_yaml_errors_give_position_not_content(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "invalid YAML at line" in str(caught.value)
    assert not leaked(str(caught.value)) and not any(leaked(e) for e in caught.value.errors)


def test_check_config_and_serve_do_not_print_secrets(tmp_path):
    path = tmp_path / "config.yaml"
    for text in BROKEN.values():
        path.write_text(text)
        check = subprocess.run([sys.executable, "-m", "detector", "check-config", str(path)], capture_output=True,
                               text=True, timeout=60)
        assert check.returncode == 1 and "invalid YAML" in check.stderr
        assert not leaked(check.stdout + check.stderr)
    serve = subprocess.run([sys.executable, "-m", "detector", "serve", "--config", str(path), "--data-dir",
                            str(tmp_path / "data"), "--otlp-port", "0", "--api-port", "0"], capture_output=True,
                           text=True, timeout=60)
    assert serve.returncode == 2 and not leaked(serve.stdout + serve.stderr)


def test_reload_rejection_does_not_echo_secrets(tmp_path, caplog):
    path = tmp_path / "config.yaml"
    path.write_text("detector:\n  interval_seconds: 0.1\n")
    with running_service(make_config(), tmp_path / "data", config_path=str(path)) as (service, eps):
        for text in BROKEN.values():
            path.write_text(text)
            with caplog.at_level(logging.DEBUG):
                r = httpx.post(f"{eps.api}/admin/config/reload", headers=admin_headers(service), timeout=30)
            assert r.status_code == 422 and "invalid YAML" in r.text
            assert not leaked(r.text)
    assert not any(leaked(record.getMessage()) or leaked(str(getattr(record, "errors", "")))
                   for record in caplog.records)
