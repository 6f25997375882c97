"""`loop-detector grafana --out DIR`: the dashboards and the provisioning for a store, written from the package, as
Grafana accepts them (the checks of tests/stack/test_grafana_provisioning.py, run on what the command wrote)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support import grafana_provisioning as gp

from detector.cli.grafana_command import DASHBOARDS_PATH, grafana_dir
from detector.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = {"grafana-clickhouse-datasource": "4.20.0"}
ENV = {
    "embedded": {"LOOP_DETECTOR_CLICKHOUSE_HOST": "127.0.0.1", "LOOP_DETECTOR_CLICKHOUSE_PORT": "8123",
                 "LOOP_DETECTOR_CLICKHOUSE_PASSWORD": "from-the-password-file"},
    "server": {"CLICKHOUSE_HOST": "clickhouse", "CLICKHOUSE_PORT": "9000", "CLICKHOUSE_USER": "default",
               "CLICKHOUSE_PASSWORD": "secret"},
}


def files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("store", "protocol", "port"), [("embedded", "http", 8123), ("server", "native", 9000)])
def test_the_written_provisioning_is_what_grafana_accepts_for_the_store(tmp_path, capsys, store, protocol, port):
    out = tmp_path / "grafana"
    assert main(["grafana", "--out", str(out), "--store", store]) == 0
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and f"wrote 7 files to {out}" in said and "/etc/grafana/provisioning" in said

    boards = sorted(p.name for p in (ROOT / "grafana" / "dashboards").glob("*.json"))
    assert files(out) == {*(f"dashboards/{b}" for b in boards), "provisioning/datasources/clickhouse.yaml",
                          "provisioning/dashboards/dashboards.yaml", "provisioning/alerting/alerts.yaml"}
    for board in boards:  # byte for byte the committed JSON
        assert (out / "dashboards" / board).read_bytes() == (ROOT / "grafana" / "dashboards" / board).read_bytes()

    env = {**ENV[store], "LOOP_ALERT_WEBHOOK_URL": "http://127.0.0.1:9/hook"}
    written = gp.load(out / "provisioning", out / "dashboards", env, PLUGINS)
    errors = gp.all_errors(written)
    assert not errors, "\n".join(errors)
    (ds,) = written.datasources["clickhouse.yaml"]["datasources"]
    json_data = gp.interpolate_tree(ds["jsonData"], env)
    assert ds["uid"] == "loop-clickhouse" and json_data["protocol"] == protocol
    assert gp.go_parse_int(json_data["port"], 0) == port


def test_the_dashboards_path_is_where_the_provider_looks(tmp_path):
    out = tmp_path / "g"
    assert main(["grafana", "--out", str(out), "--dashboards-path", "/var/lib/grafana/loop"]) == 0
    (provider,) = yaml.safe_load((out / "provisioning/dashboards/dashboards.yaml").read_text())["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/loop"
    assert main(["grafana", "--out", str(tmp_path / "default")]) == 0
    text = (tmp_path / "default" / "provisioning/dashboards/dashboards.yaml").read_text()
    assert f"path: {DASHBOARDS_PATH}" in text


def test_writing_again_keeps_the_other_files(tmp_path):
    out = tmp_path / "g"
    (out / "provisioning" / "datasources").mkdir(parents=True)
    (out / "provisioning" / "datasources" / "prometheus.yaml").write_text("apiVersion: 1\n")
    assert main(["grafana", "--out", str(out)]) == 0
    assert main(["grafana", "--out", str(out)]) == 0
    assert (out / "provisioning" / "datasources" / "prometheus.yaml").read_text() == "apiVersion: 1\n"


def test_an_unwritable_directory_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["grafana", "--out", str(blocker / "g")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cannot write the Grafana files: ")


def test_a_checkout_reads_its_own_grafana_folder():
    assert grafana_dir() in (ROOT / "grafana", ROOT / "detector" / "grafana")


def test_every_grafana_option_says_what_it_does():
    grafana = build_parser()._subparsers._group_actions[0].choices["grafana"]
    assert all(action.help for action in grafana._actions), [a.dest for a in grafana._actions if not a.help]


def test_a_partial_copy_of_the_files_is_refused_not_written_half(tmp_path, monkeypatch, capsys):
    from detector.cli import grafana_command

    partial = tmp_path / "partial"
    (partial / "dashboards").mkdir(parents=True)
    (partial / "dashboards" / "board.json").write_text("{}")
    monkeypatch.setattr(grafana_command, "PACKAGED", partial)
    assert main(["grafana", "--out", str(tmp_path / "g")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds none of its files" in err
    assert not (tmp_path / "g").exists()
