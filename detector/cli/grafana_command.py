"""``loop-detector grafana --out DIR``: the dashboards and Grafana's provisioning for a store, written from the
installed package (a wheel carries ``grafana/`` as ``detector/grafana/``; a checkout reads its own ``grafana/``).

``DIR/provisioning`` is Grafana's provisioning directory (the ClickHouse data source for the chosen store, the
dashboard provider, the alert rules) and ``DIR/dashboards`` the dashboards' JSON, which the provider reads at
``/etc/grafana/dashboards/loop-detector`` (``--dashboards-path`` for another place). The data source's server and
password come from Grafana's environment, as the written file's comments say.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

__all__ = ["CHECKOUT", "DASHBOARDS_PATH", "PACKAGED", "STORES", "add_parser", "grafana_dir", "write_provisioning"]

PACKAGED = Path(__file__).resolve().parents[1] / "grafana"  # what setup.py ships (GRAFANA_TARGET)
CHECKOUT = Path(__file__).resolve().parents[2] / "grafana"  # the repository's, for a checkout or editable install
DASHBOARDS_PATH = "/etc/grafana/dashboards/loop-detector"  # where provisioning/dashboards/dashboards.yaml looks
# the data source per store: the embedded store (serve --clickhouse-http-port) or a ClickHouse server
STORES = {"embedded": "provisioning-embedded/datasources", "server": "provisioning/datasources"}
ENVIRONMENT = {
    "embedded": "LOOP_DETECTOR_CLICKHOUSE_HOST, LOOP_DETECTOR_CLICKHOUSE_PORT (serve's --clickhouse-http-port), "
                "LOOP_DETECTOR_CLICKHOUSE_PASSWORD (<data-dir>/clickhouse-password)",
    "server": "CLICKHOUSE_HOST, CLICKHOUSE_PORT (native protocol, 9000), CLICKHOUSE_USER, CLICKHOUSE_PASSWORD",
}


class GrafanaFilesMissing(Exception):
    pass


def grafana_dir() -> Path:
    """The shipped Grafana files: the package's copy, else the checkout's ``grafana/``."""
    for candidate in (PACKAGED, CHECKOUT):
        if any(candidate.glob("dashboards/*.json")):
            return candidate
    raise GrafanaFilesMissing(f"the Grafana files are in neither {PACKAGED} nor {CHECKOUT}: reinstall the package "
                              "from a wheel or a checkout")


def write_provisioning(out: Path, store: str = "embedded", dashboards_path: str = DASHBOARDS_PATH) -> list[Path]:
    """Write ``out/provisioning`` (data source for ``store``, dashboard provider, alert rules) and
    ``out/dashboards`` (the JSON); the files written. Other files in ``out`` are left alone."""
    source = grafana_dir()
    groups = {source / "dashboards": out / "dashboards", source / STORES[store]: out / "provisioning" / "datasources",
              **{source / "provisioning" / folder: out / "provisioning" / folder
                 for folder in ("dashboards", "alerting")}}
    plan: list[tuple[Path, Path]] = []
    for folder, target in groups.items():
        found = sorted(folder.glob("*.json" if target.name == "dashboards" and target.parent == out else "*.yaml"))
        if not found:  # a partial copy would start a Grafana without the dashboards or the rules, saying nothing
            raise GrafanaFilesMissing(f"{folder} holds none of its files: reinstall the package")
        plan += [(path, target / path.name) for path in found]
    for src, dst in plan:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    provider = out / "provisioning" / "dashboards" / "dashboards.yaml"
    if dashboards_path != DASHBOARDS_PATH:
        text = provider.read_text()
        provider.write_text(text.replace(f"path: {DASHBOARDS_PATH}", f"path: {dashboards_path}"))
    return [dst for _, dst in plan]


def _run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    try:
        written = write_provisioning(out, args.store, args.dashboards_path)
    except (GrafanaFilesMissing, OSError) as exc:
        print(f"cannot write the Grafana files: {exc}", file=sys.stderr)
        return 1
    boards = sum(1 for path in written if path.parent == out / "dashboards")
    print(f"wrote {len(written)} files to {out}: {boards} dashboards in {out / 'dashboards'} (mount them at "
          f"{args.dashboards_path}), the provisioning for the {args.store} store in {out / 'provisioning'} (mount "
          f"it at /etc/grafana/provisioning); Grafana's environment sets {ENVIRONMENT[args.store]}, and "
          "LOOP_ALERT_WEBHOOK_URL for the alerts")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("grafana", help="write the Grafana dashboards and provisioning (data source, dashboards, "
                       "alerts) for a store into a directory")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="where to write provisioning/ and dashboards/ (created; other files in it are kept)")
    p.add_argument("--store", choices=sorted(STORES), default="embedded", help=(
        "the data source: embedded (serve --clickhouse-http-port, the default) or server (a ClickHouse server, "
        "native protocol, as docker-compose.yml runs it)"))
    p.add_argument("--dashboards-path", default=DASHBOARDS_PATH, metavar="PATH",
                   help="where Grafana will find the dashboards' JSON (default %(default)s)")
    p.set_defaults(func=_run)
