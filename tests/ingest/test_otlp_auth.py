"""Optional OTLP authentication (issue 16, failure 6: anyone who could reach the receiver could forge spans that
block any session). The collector's conventions, tested with the real OTLP exporter: ``bearertokenauth``
(``Authorization: Bearer <token>``, tokens inline, from the environment or a file of one per line) and mutual TLS
(``tls.client_ca_file``), with certificates made by openssl. A refused request stores nothing and its error never
echoes what was sent.
"""

from __future__ import annotations

import shutil
import subprocess

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from support.enforcement import make_config
from support.otlp_senders import chat_spans, encode, new_conversation, post_body, trace_hex

from detector.service.credentials import OTLP_TOKEN_ENV
from detector.service.process import running_service

TOKEN = "otlp-token-for-the-agents-0123"
OTHER = "second-rotated-token-456789"


def stored(service, spans) -> int:
    return int(service.store.rows("SELECT count() AS n FROM otel.otel_traces WHERE TraceId = {t:String}",
                                  {"t": trace_hex(spans)})[0]["n"])


def export(endpoint: str, spans, **kwargs) -> SpanExportResult:
    exporter = OTLPSpanExporter(endpoint=endpoint + "/v1/traces", timeout=5, **kwargs)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


def test_bearer_token_required_when_configured(tmp_path, monkeypatch):
    monkeypatch.delenv(OTLP_TOKEN_ENV, raising=False)
    token_file = tmp_path / "otlp.tokens"
    token_file.write_text(f"\n{OTHER}\n")
    config = make_config(ingest={"bearer_tokens": [TOKEN], "bearer_token_file": str(token_file)})
    with running_service(config, tmp_path / "data") as (service, eps):
        spans = chat_spans(3, new_conversation())
        assert export(eps.otlp, spans) == SpanExportResult.FAILURE
        assert export(eps.otlp, spans, headers={"Authorization": "Bearer wrong-token-0123456789"}) == \
            SpanExportResult.FAILURE
        assert stored(service, spans) == 0
        with httpx.Client(base_url=eps.otlp, timeout=10) as client:
            for headers in ({}, {"Authorization": f"bearer {TOKEN}"}, {"Authorization": TOKEN},
                            {"Authorization": f"Bearer {TOKEN}x"}):
                r = post_body(client, encode(spans), **headers)
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
                assert TOKEN not in r.text
            assert client.get("/healthz").status_code == 200
        assert stored(service, spans) == 0
        assert export(eps.otlp, spans, headers={"Authorization": f"Bearer {TOKEN}"}) == SpanExportResult.SUCCESS
        other = chat_spans(2, new_conversation())
        assert export(eps.otlp, other, headers={"Authorization": f"Bearer {OTHER}"}) == SpanExportResult.SUCCESS
        assert (stored(service, spans), stored(service, other)) == (3, 2)


def test_token_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(OTLP_TOKEN_ENV, TOKEN)
    with running_service(make_config(), tmp_path / "data") as (service, eps):
        spans = chat_spans(2, new_conversation())
        assert export(eps.otlp, spans) == SpanExportResult.FAILURE
        assert export(eps.otlp, spans, headers={"Authorization": f"Bearer {TOKEN}"}) == SpanExportResult.SUCCESS


def openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture()
def certificates(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test-ca",
            cwd=tmp_path)
    for name, usage in (("server", "serverAuth"), ("client", "clientAuth"), ("stranger", "clientAuth")):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=tmp_path)
        (tmp_path / f"{name}.ext").write_text(f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n")
        ca = ("-CA", "ca.pem", "-CAkey", "ca.key") if name != "stranger" else ("-signkey", "stranger.key")
        openssl("x509", "-req", "-in", f"{name}.csr", *ca, "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                "-extfile", f"{name}.ext", cwd=tmp_path)
    return tmp_path


def test_mutual_tls(tmp_path, certificates, monkeypatch):
    # requests lets these variables override a session's own CA file (the exporter's certificate_file)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    c = certificates
    config = make_config(ingest={"tls": {"cert_file": str(c / "server.pem"), "key_file": str(c / "server.key"),
                                         "client_ca_file": str(c / "ca.pem")}})
    with running_service(config, tmp_path / "data") as (service, eps):
        assert eps.otlp.startswith("https://")
        spans = chat_spans(3, new_conversation())
        assert export(eps.otlp, spans, certificate_file=str(c / "ca.pem")) == SpanExportResult.FAILURE
        assert export(eps.otlp, spans, certificate_file=str(c / "ca.pem"), client_key_file=str(c / "stranger.key"),
                      client_certificate_file=str(c / "stranger.pem")) == SpanExportResult.FAILURE
        assert stored(service, spans) == 0
        assert export(eps.otlp, spans, certificate_file=str(c / "ca.pem"), client_key_file=str(c / "client.key"),
                      client_certificate_file=str(c / "client.pem")) == SpanExportResult.SUCCESS
        assert stored(service, spans) == 3
