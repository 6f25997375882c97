"""The ClickHouse-compatible HTTP endpoint over the embedded store, through real clients.

clickhouse-connect is the client Python users and our own ServerStore use; the Grafana plugin talks through
clickhouse-go, whose HTTP requests are reproduced here as its source (conn_http.go, v2.47.0) builds them: POST,
the SQL as the body, ``default_format=Native&client_protocol_version=54460``, the plugin's settings as URL
parameters, ``Accept-Encoding: gzip``, basic auth; the Native answers are decoded by clickhouse-driver's block reader
at the revision the hello query returned, as clickhouse-go decodes them. Every dashboard panel query and every
alert query, after Grafana's and the plugin's macro expansion, runs through it and returns rows.
"""

from __future__ import annotations

import gzip
import os

import clickhouse_connect
import httpx
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError
from support.grafana_macros import interpolate
from support.grafana_seed import DASHBOARD_CTX, alert_ctx, panel_targets, rules, seed
from support.native_oracle import read_native

from detector.service.process import (
    running_service,
)
from detector.settings.config import AppConfig, parse_config

PASSWORD = "embedded-grafana-password"
HELLO = "SELECT displayName(), version(), revision(), timezone()"  # clickhouse-go's queryHello
GO_PARAMS = {"database": "default", "max_execution_time": "60", "default_format": "Native",
             "client_protocol_version": "54460"}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    config = parse_config({"clickhouse_http": {"port": 8123, "password": PASSWORD},
                           "detector": {"interval_seconds": 3600},  # the seeded rows stay as they are
                           "retention": {"spans": "off", "detector": "off"}})  # they are dated 2025
    with running_service(config, tmp_path_factory.mktemp("embedded")) as (svc, eps):
        seed(svc.store)
        yield svc, eps


@pytest.fixture(scope="module")
def base(service) -> str:
    return service[1].clickhouse


@pytest.fixture(scope="module")
def client(base):
    host, port = base.removeprefix("http://").split(":")
    c = clickhouse_connect.get_client(host=host, port=int(port), username="default", password=PASSWORD)
    yield c
    c.close()


def go_query(base: str, sql: str, revision: int) -> list[tuple]:
    """One query as clickhouse-go sends it over HTTP, decoded as it decodes the answer."""
    response = httpx.post(f"{base}/", params=GO_PARAMS, content=sql.encode(), auth=("default", PASSWORD),
                          headers={"Accept-Encoding": "gzip", "User-Agent": "clickhouse-go/2.47.0 (lv:go/1.24) "
                                   "grafana/12.4.11 clickhouse-datasource/4.20.0"})
    assert response.status_code == 200, response.text
    assert "content-encoding" not in response.headers  # no enable_http_compression: a server answers plainly
    if not response.content:
        return []
    return [row for _, rows in read_native(response.content, revision) for row in rows]


@pytest.fixture(scope="module")
def go_revision(base) -> int:
    """The hello: decoded at clickhouse-go's own revision; the revision it returns is used for what follows."""
    [(name, version, revision, tz)] = go_query(base, HELLO, 54460)
    assert name and version and tz
    assert revision >= 54460
    return revision


# --- the dashboards and alert rules, through both clients -------------------------------------------------------

@pytest.mark.parametrize(("board", "panel", "target"),
                         [pytest.param(*t, id=f"{t[0].removesuffix('.json')}:{t[1]['title']}:{t[2]['refId']}")
                          for t in panel_targets()])
def test_every_panel_query_returns_rows_through_the_endpoint(service, client, base, go_revision, board, panel,
                                                             target):
    sql = interpolate(target["rawSql"], DASHBOARD_CTX)
    direct = service[0].store.rows(sql)
    result = client.query(sql)
    assert result.result_rows, f"{board} / {panel['title']}: no rows through clickhouse-connect"
    assert len(result.result_rows) == len(direct) and result.column_names == tuple(direct[0])
    assert len(go_query(base, sql, go_revision)) == len(direct)


@pytest.mark.parametrize(("rule", "query"), [pytest.param(r, q, id=r["uid"]) for r in rules() for q in r["data"]
                                             if q["datasourceUid"] == "loop-clickhouse"])
def test_every_alert_query_returns_rows_through_the_endpoint(service, client, base, go_revision, rule, query):
    sql = interpolate(query["model"]["rawSql"], alert_ctx(query), frontend=False)
    direct = service[0].store.rows(sql)
    rows = client.query(sql).result_rows
    assert rows and len(rows) == len(direct)
    assert [tuple(r.values()) for r in direct] == [tuple(float(v) if isinstance(v, float) else v for v in row)
                                                   for row in go_query(base, sql, go_revision)]


def test_the_plugins_own_queries(base, go_revision):
    """What the plugin runs besides the dashboards: ping, version check, schema browsing, the ad-hoc values."""
    assert go_query(base, "SELECT 1", go_revision) == [(1,)]
    assert go_query(base, "SELECT version()", go_revision)[0][0].count(".") == 3
    tables = go_query(base, "SELECT database, name FROM system.tables ORDER BY database, name", go_revision)
    assert ("otel", "otel_traces") in tables and ("otel", "loop_events") in tables
    columns = go_query(base, "SELECT database, table, name, type, comment FROM system.columns WHERE database = 'otel' "
                       "AND table = 'loop_state' ORDER BY database, table, position", go_revision)
    assert [c[2] for c in columns][:3] == ["scope", "scope_id", "session_id"]
    assert go_query(base, "SELECT currentDatabase()", go_revision) == [("default",)]
    values = go_query(base, "SELECT 'level' AS col_name, toString(level) AS val FROM (SELECT DISTINCT level FROM "
                      "otel.loop_state LIMIT 100) SETTINGS max_execution_time=10", go_revision)
    assert {v for _, v in values} == {"hard_stop", "none"}


def test_clickhouse_connect_negotiates_the_native_protocol_version(client):
    assert client.protocol_version == 54405  # its probe read a BlockInfo: the framing is what it expects
    assert client.query("SELECT toLowCardinality('a') AS l, [1, 2] AS a, map('k', 1) AS m").result_rows == [
        ("a", [1, 2], {"k": 1})]


# --- the HTTP interface ------------------------------------------------------------------------------------------

def test_formats_parameters_and_headers(base):
    auth = ("default", PASSWORD)
    r = httpx.get(f"{base}/", params={"query": "SELECT {x:String} AS x, 2 AS y", "param_x": "it's",
                                      "default_format": "JSONCompact", "query_id": "q-123"}, auth=auth)
    assert r.status_code == 200 and r.json()["data"] == [["it's", 2]]
    assert r.headers["x-clickhouse-query-id"] == "q-123" and r.headers["x-clickhouse-format"] == "JSONCompact"
    assert r.headers["x-clickhouse-timezone"] and r.headers["x-clickhouse-server-display-name"]
    assert int(httpx.Response(200, content=r.headers["x-clickhouse-summary"]).json()["read_rows"]) >= 0
    # the query's FORMAT wins over default_format; the header format is the fallback; TabSeparated by default
    r = httpx.post(f"{base}/?default_format=JSON", content=b"SELECT 1 AS a FORMAT TSVWithNames", auth=auth)
    assert r.text == "a\n1\n" and r.headers["content-type"].startswith("text/tab-separated-values")
    r = httpx.post(f"{base}/", content=b"SELECT 1 AS a", auth=auth, headers={"X-ClickHouse-Format": "JSONEachRow"})
    assert r.text == '{"a":1}\n'
    assert httpx.post(f"{base}/", content=b"SELECT 1", auth=auth).text == "1\n"
    r = httpx.post(f"{base}/", content=b"SELECT 1 AS x FORMAT RowBinaryWithNamesAndTypes", auth=auth)
    assert r.content == b"\x01\x01x\x05UInt8\x01"
    assert httpx.get(f"{base}/ping").text == "Ok.\n" and httpx.get(f"{base}/", auth=auth).text == "Ok.\n"
    # the database parameter: unqualified names resolve in it, for this query only
    r = httpx.post(f"{base}/?database=otel", content=b"SELECT count() > 0 FROM loop_state", auth=auth)
    assert r.text == "1\n"
    assert httpx.post(f"{base}/", content=b"SELECT currentDatabase()", auth=auth).text == "default\n"


@pytest.mark.parametrize("coding", ["gzip", "deflate", "zstd", "lz4"])
def test_response_compression_when_asked(base, client, coding):
    import zlib

    import lz4.frame

    # the bytes as sent (httpx itself decodes some encodings, zstd among them when `zstandard` is installed)
    with httpx.stream("POST", f"{base}/?enable_http_compression=1", content=b"SELECT number FROM numbers(1000)",
                      auth=("default", PASSWORD), headers={"Accept-Encoding": coding}) as r:
        assert r.headers["content-encoding"] == coding
        raw = b"".join(r.iter_raw())
    if coding == "zstd":
        from backports import zstd  # what clickhouse-connect uses on Python < 3.14

        raw = zstd.decompress(raw)
    elif coding == "lz4":
        raw = lz4.frame.decompress(raw)
    elif coding == "gzip":
        raw = zlib.decompress(raw, 16 + zlib.MAX_WBITS)
    else:  # deflate: zlib-wrapped, as HTTP's deflate is meant (raw deflate accepted too)
        try:
            raw = zlib.decompress(raw)
        except zlib.error:
            raw = zlib.decompress(raw, -zlib.MAX_WBITS)
    assert raw.decode().split("\n")[:3] == ["0", "1", "2"]


def test_compressed_clients_and_request_bodies(base):
    host, port = base.removeprefix("http://").split(":")
    for compression in ("lz4", "zstd", "gzip"):
        c = clickhouse_connect.get_client(host=host, port=int(port), username="default", password=PASSWORD,
                                          compress=compression)
        assert c.query("SELECT sum(number) FROM numbers(10000)").result_rows == [(49995000,)]
        c.close()
    r = httpx.post(f"{base}/", content=gzip.compress(b"SELECT 42"), auth=("default", PASSWORD),
                   headers={"Content-Encoding": "gzip"})
    assert r.text == "42\n"
    r = httpx.post(f"{base}/?compress=1", content=b"SELECT 1", auth=("default", PASSWORD))
    assert r.status_code == 400 and r.headers["x-clickhouse-exception-code"] == "48"


@pytest.mark.parametrize(("how", "ok"), [
    ({"auth": ("default", PASSWORD)}, True),
    ({"headers": {"X-ClickHouse-User": "default", "X-ClickHouse-Key": PASSWORD}}, True),
    ({"params": {"user": "default", "password": PASSWORD}}, True),
    ({}, False),
    ({"auth": ("default", "wrong")}, False),
    ({"auth": ("admin", PASSWORD)}, False),
    ({"headers": {"Authorization": "Bearer " + PASSWORD}}, False),
])
def test_authentication(base, how, ok):
    params = {"query": "SELECT 1", **how.pop("params", {})}
    r = httpx.get(f"{base}/", params=params, **how)
    if ok:
        assert r.status_code == 200 and r.text == "1\n"
    else:
        assert r.status_code == 403 and r.headers["x-clickhouse-exception-code"] == "516"
        assert r.text.startswith("Code: 516. DB::Exception: ") and "(AUTHENTICATION_FAILED)" in r.text
        assert PASSWORD not in r.text and "wrong" not in r.text


REFUSED = [
    ("INSERT INTO otel.loop_meta (key, value, version) VALUES ('x', 'y', 1)", 164),
    ("CREATE TABLE otel.evil (a UInt8) ENGINE = Memory", 164),
    ("DROP TABLE otel.loop_meta", 164),
    ("ALTER TABLE otel.loop_meta DELETE WHERE 1", 164),
    ("TRUNCATE TABLE otel.loop_events", 164),
    ("SYSTEM DROP DNS CACHE", 164),
    ("SET readonly = 0", 164),
    ("SELECT * FROM file('/etc/hostname', 'LineAsString')", 164),
    ("SELECT file('/etc/hostname')", 164),
    ("SELECT * FROM url('http://127.0.0.1:9/x', 'CSV', 'a String')", 164),
    ("SELECT * FROM remote('127.0.0.1', system.one)", 164),
    ("SELECT * FROM Python(PASSWORD)", 164),
    ("SELECT * FROM executable('id', 'TSV', 'a String')", 164),
    ("SELECT * FROM (SELECT 1) AS a, (SELECT * FROM s3('http://127.0.0.1:9/b/k', 'CSV', 'a String')) AS b", 164),
    ("SELECT 1 INTO OUTFILE '/tmp/loop-detector-outfile'", 164),
    ("SELECT 1; DROP TABLE otel.loop_meta", 62),
    ("SELECT 1 SETTINGS format_schema = '/etc/passwd'", 164),
    ("SELEC 1", 62),
]


@pytest.mark.parametrize(("sql", "code"), REFUSED)
def test_only_reads_go_through(service, base, sql, code):
    before = service[0].store.rows("SELECT count() AS n FROM system.tables WHERE database = 'otel'")
    r = httpx.post(f"{base}/", content=sql.encode(), auth=("default", PASSWORD))
    assert r.status_code in (400, 403) and r.headers["x-clickhouse-exception-code"] == str(code), r.text
    assert r.text.startswith(f"Code: {code}. DB::Exception: ") and "(version " in r.text
    assert service[0].store.rows("SELECT count() AS n FROM system.tables WHERE database = 'otel'") == before
    assert not os.path.exists("/tmp/loop-detector-outfile")


def test_settings_that_reach_files_or_lift_readonly_are_refused_from_the_url(base):
    for name, value in (("format_template_resultset", "/etc/passwd"), ("readonly", "0"), ("allow_ddl", "1")):
        r = httpx.post(f"{base}/", params={name: value}, content=b"SELECT 1", auth=("default", PASSWORD))
        assert r.status_code == 403 and r.headers["x-clickhouse-exception-code"] == "164", name
    r = httpx.post(f"{base}/", params={"max_threads": "1", "no_such_setting": "1"}, content=b"SELECT 1",
                   auth=("default", PASSWORD))
    assert r.status_code == 404 and r.headers["x-clickhouse-exception-code"] == "115"


def test_errors_carry_clickhouses_codes_to_clickhouse_connect(client):
    with pytest.raises(DatabaseError) as info:
        client.query("SELECT * FROM otel.no_such_table")
    assert "Code: 60" in str(info.value) and "UNKNOWN_TABLE" in str(info.value)
    with pytest.raises(DatabaseError, match="Code: 164"):
        client.command("DROP TABLE otel.loop_meta")


def test_writes_need_the_test_only_setting_and_post(service, base):
    r = httpx.post(f"{base}/", params={"query": "INSERT INTO otel.loop_meta FORMAT JSONEachRow"},
                   content=b'{"key":"k","value":"v","version":1}', auth=("default", PASSWORD))
    assert r.status_code == 403 and "readonly" in r.text
    assert AppConfig().clickhouse_http.allow_writes is False


