"""The ``loop-detector`` command line: serve, demo, check-config, apply-schema, grafana, and the operator commands."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from detector import __version__, native
from detector.cli.arg_types import LOG_LEVELS, bounded_int, log_level, port
from detector.cli.parser import Parser
from detector.settings.config import ConfigError, load_config
from detector.settings.vocabulary import PRESETS

__all__ = ["DEFAULT_DATA_DIR", "Parser", "build_parser", "main", "port"]

DEFAULT_DATA_DIR = ".loop-detector"


def _cmd_serve(args: argparse.Namespace) -> int:
    """Everything that can refuse is checked in the order that creates least: the configuration, then the ports
    (bound now, nothing written yet), then the data directory (locked), then the store. Each refusal is one line."""
    from detector.service.data_dir import DataDirInUse, DataDirLock
    from detector.service.listeners import ListenError, open_listeners
    from detector.service.log_output import configure_logging
    from detector.service.process import Endpoints, Service
    from detector.storage.transport import StoreError

    configure_logging(args.log_level)
    # everything serve creates (the store's files, the journal, the token files) is its user's only: 0600 / 0700
    os.umask(0o077)
    try:
        config = load_config(args.config, preset=args.preset)
    except ConfigError as exc:
        return _refuse(f"invalid configuration\n{exc}")
    if args.shard:
        config.detector.shard = args.shard
    if args.clickhouse_http_port is not None:
        config.clickhouse_http.port = args.clickhouse_http_port
    try:
        listeners = open_listeners(args.host, args.otlp_port, args.api_port, config.clickhouse_http.port,
                                   None if args.no_otlp_grpc else args.otlp_grpc_port)
    except ListenError as exc:
        return _refuse(str(exc))
    lock = DataDirLock(args.data_dir)
    try:
        lock.acquire()
        service = Service(config, args.data_dir, config_path=args.config, preset=args.preset)
    except (DataDirInUse, StoreError) as exc:  # held by another process, or a store that cannot be reached
        listeners.close()
        lock.release()
        return _refuse(_first_line(exc))
    except PermissionError as exc:  # a data directory this user cannot write
        listeners.close()
        lock.release()
        return _refuse(f"cannot use the data directory {args.data_dir}: {exc.strerror} ({exc.filename}): choose "
                       "another with --data-dir")
    except ConfigError as exc:
        listeners.close()
        lock.release()
        return _refuse(f"invalid configuration\n{exc}")

    def announce(endpoints: Endpoints) -> None:
        grpc = (f"OTLP/gRPC on {endpoints.otlp_grpc} (--otlp-grpc-port), " if endpoints.otlp_grpc
                else "OTLP/gRPC off, ")
        clickhouse = (f", ClickHouse HTTP (read-only, user default) on {endpoints.clickhouse}"
                      if endpoints.clickhouse else "")
        print(f"loop-detector: OTLP/HTTP on {endpoints.otlp}/v1/traces (and /v1/logs), "
              f"API on {endpoints.api} (docs at /docs), {grpc}data in {args.data_dir}{clickhouse}; "
              f"detection core: {native.status()}", file=sys.stderr, flush=True)

    try:
        service.listen_on(listeners)
        # SIGTERM and SIGINT stop it gracefully (Service.serve); close() then runs the last cycle and checkpoint
        asyncio.run(service.serve(otlp_grpc_port=None if args.no_otlp_grpc else args.otlp_grpc_port,
                                  on_ready=announce))
    except KeyboardInterrupt:  # a SIGINT before the handlers were installed
        pass
    except ListenError as exc:  # the gRPC port, taken between the check and the receiver's own bind
        return _refuse(str(exc))
    finally:
        service.close()
        lock.release()
    return 0


def _refuse(reason: str) -> int:
    print(f"refusing to start: {reason}", file=sys.stderr)
    return 2


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _cmd_apply_schema(args: argparse.Namespace) -> int:
    """The DDL applied once, by a deployment's init job, before the collector writes and the detectors start (each
    ``serve`` applies it too: idempotent, so whichever comes first creates, and the rest find it current)."""
    from detector.storage.schema import apply_schema
    from detector.storage.transport import CLICKHOUSE_URL_ENV, StoreError, open_store, redact_url

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"invalid configuration\n{exc}", file=sys.stderr)
        return 2
    url = config.store.url or os.environ.get(CLICKHOUSE_URL_ENV)
    where = f"ClickHouse at {redact_url(url)}" if url else f"the embedded store in {args.data_dir}"
    try:
        store = open_store(args.data_dir, url)
        try:
            count = apply_schema(store, cluster=config.store.cluster)
        finally:
            store.close()
    except StoreError as exc:
        print(f"cannot apply the schema: {_first_line(exc)}", file=sys.stderr)
        return 2
    cluster = f" (cluster {config.store.cluster})" if config.store.cluster else ""
    print(f"schema applied to {where}{cluster}: {count} statements, every one idempotent")
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    """The effective configuration (defaults, preset and file merged; secrets masked) as YAML, then OK as a YAML
    comment, so the whole output still reads as YAML; --quiet: the OK alone."""
    from detector.cli.effective_config import effective_config_yaml

    try:
        config = load_config(args.file, preset=args.preset)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    if not args.quiet:
        preset = config.preset or "none"
        print(f"# the effective configuration of {args.file} (preset: {preset}; defaults filled in, secrets masked)")
        print(effective_config_yaml(config), end="")
    print(f"# {args.file}: OK")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from detector.cli.demo import run_demo

    return run_demo(endpoint=args.endpoint, otlp_endpoint=args.otlp_endpoint, calls=args.calls,
                    color=not args.no_color)


def _cmd_sessions(args: argparse.Namespace) -> int:
    from detector.cli.session_commands import AdminCommandError, find_token, run_sessions

    try:
        return run_sessions(args.endpoint, find_token(args.token, args.data_dir), args.limit, args.offset,
                            not args.no_color)
    except AdminCommandError as exc:
        print(exc, file=sys.stderr)
        return 1


def _cmd_session(args: argparse.Namespace) -> int:
    from detector.cli.session_commands import AdminCommandError, find_token, run_session

    try:
        return run_session(args.endpoint, find_token(args.token, args.data_dir), args.session_id,
                           not args.no_color)
    except AdminCommandError as exc:
        print(exc, file=sys.stderr)
        return 1


def _cmd_eval(args: argparse.Namespace) -> int:
    from detector.cli.eval_command import run_cli

    return run_cli(args)


def _add_admin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint", default="http://127.0.0.1:8080",
                   help="the API of the running service (default %(default)s: serve's --api-port on --host)")
    p.add_argument("--token", help="admin token (default: $LOOP_DETECTOR_ADMIN_TOKEN or <data-dir>/admin-token)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="the service's data directory (serve's --data-dir), where it wrote admin-token (default "
                        "%(default)s, relative to where you run this)")
    p.add_argument("--no-color", action="store_true", help="no colours (the default off a terminal)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="loop-detector", description=__doc__)
    parser.add_argument("--version", action="version",
                        version=f"loop-detector {__version__} (detection core: {native.status()})")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the OTLP receiver, the detector and the API in one process")
    serve.add_argument("--config", help="YAML config file (defaults apply without one)")
    serve.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="embedded store directory (default %(default)s)")
    serve.add_argument("--otlp-port", type=port, default=4318,
                       help="OTLP/HTTP receiver (default %(default)s; 0: a free port, the startup line says which); "
                            "the gRPC receiver has its own --otlp-grpc-port")
    serve.add_argument("--otlp-grpc-port", type=port, default=4317,
                       help="OTLP/gRPC receiver, trace and logs services, on --host as the others (default "
                            "%(default)s, whatever --otlp-port is; 0: a free port)")
    serve.add_argument("--no-otlp-grpc", action="store_true", help="no OTLP/gRPC receiver")
    serve.add_argument("--api-port", type=port, default=8080,
                       help="the API (default %(default)s; 0: a free port, the startup line says which)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address every listener binds: OTLP/HTTP, OTLP/gRPC, the API, ClickHouse HTTP "
                            "(default %(default)s; 0.0.0.0: every interface)")
    serve.add_argument("--shard", help="I/N: this detector replica's share of sessions (scaled mode)")
    serve.add_argument("--preset", choices=PRESETS, help=(
        "protect: blocking that is safe for honest work (calls repeating without progress, the failure loop); the "
        "config file's own settings override it; default: the file's `preset:`, else never block"))
    serve.add_argument("--clickhouse-http-port", type=port, metavar="PORT",
                       help="also serve a read-only ClickHouse-compatible HTTP endpoint over the embedded store on "
                            "this port (conventionally 8123), for Grafana's ClickHouse plugin (config: "
                            "clickhouse_http.port; off when not set)")
    serve.add_argument("--log-level", type=log_level, default="INFO", metavar="LEVEL",
                       help=f"the log's threshold: {', '.join(LOG_LEVELS)} (any case; default info)")
    serve.set_defaults(func=_cmd_serve)

    check = sub.add_parser("check-config", help="validate a config file, listing every error; when valid, print "
                           "the effective configuration (defaults and preset applied, secrets masked)")
    check.add_argument("file")
    check.add_argument("--preset", choices=PRESETS, help="validate the file over this preset (as serve --preset)")
    check.add_argument("-q", "--quiet", action="store_true",
                       help="print only OK, not the effective configuration")
    check.set_defaults(func=_cmd_check_config)

    schema = sub.add_parser("apply-schema", help="create or upgrade the tables, views and columns in the store "
                            "(a deployment's init job; serve does it too at start)")
    schema.add_argument("--config", help="YAML config file: store.url, store.cluster (default: "
                        "$LOOP_DETECTOR_CLICKHOUSE_URL, else the embedded store)")
    schema.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the embedded store, when no URL is set "
                        "(default %(default)s)")
    schema.set_defaults(func=_cmd_apply_schema)

    demo = sub.add_parser("demo", help="two simulated agents, one looping, one healthy, and their decisions")
    demo.add_argument("--endpoint", metavar="URL", help=(
        "API of a running service, e.g. http://127.0.0.1:18080 (default: the one on 127.0.0.1:8080 when it answers, "
        "else one started in-process)"))
    demo.add_argument("--otlp-endpoint", metavar="URL", help=(
        "where to send the agents' spans (OTLP/HTTP; default: where that service says it receives them, at its "
        "/healthz, on the --endpoint host)"))
    demo.add_argument("--calls", type=int, default=14,
                      help="model calls per agent (default %(default)s): enough for the stuck one to escalate")
    demo.add_argument("--no-color", action="store_true", help="no colours (the default off a terminal)")
    demo.set_defaults(func=_cmd_demo)

    sessions = sub.add_parser("sessions", help="tracked sessions: level, confidence, dominant signal")
    _add_admin_args(sessions)
    sessions.add_argument("--limit", type=bounded_int(1, 1000, "sessions per page"), default=50,
                          help="how many sessions to list, most recently active first (1-1000, default %(default)s)")
    sessions.add_argument("--offset", type=bounded_int(0, 2**31, "sessions to skip"), default=0,
                          help="skip this many sessions first, to page through (default %(default)s)")
    sessions.set_defaults(func=_cmd_sessions)

    session = sub.add_parser("session", help="one session: escalation timeline and signals")
    _add_admin_args(session)
    session.add_argument("session_id")
    session.set_defaults(func=_cmd_session)

    from detector.cli.grafana_command import add_parser as add_grafana

    add_grafana(sub)

    ev = sub.add_parser("eval", help="replay a labeled corpus of agent runs through the real pipeline: recall, "
                        "false positives and detection delay, beside published baselines")
    ev.add_argument("--corpus", help=(
        "directory of scenario JSON files, or of recorded sessions (a manifest.json and OTLP/JSON files, as "
        "the repository's recordings/); default: the built-in generated corpus"))
    ev.add_argument("--recorded", action="store_true",
                    help="evaluate the recorded corpus (real frameworks' spans): the repository's recordings/ when "
                         "run from a checkout, else --recordings DIR or $LOOP_DETECTOR_RECORDINGS")
    ev.add_argument("--recordings", metavar="DIR", help="evaluate the recorded corpus in DIR (implies --recorded)")
    ev.add_argument("--real-runs", metavar="FILE", help=(
        "real agents' runs labeled by review (the yardstick: corpora/real-runs/README.md says how to rebuild them "
        "with extract.py): replayed in each content mode (--content), with both presets, beside the peers' rules"))
    ev.add_argument("--labels", metavar="FILE", help="the labels of --real-runs (default: corpora/real-runs/labels.jsonl)")
    ev.add_argument("--content", metavar="MODES", default="on,off,fingerprints", help=(
        "with --real-runs: the content modes to replay, comma-separated: on (content captured), off (not), "
        "fingerprints (not, with the app's fingerprints on the chat spans, as the completion hook sets them); "
        "default: all three"))
    ev.add_argument("--tool-errors", action="store_true",
                    help="with --real-runs: send error-looking results as failed execute_tool spans (default: as text)")
    ev.add_argument("--keep-replay", metavar="DIR", help=(
        "with --real-runs: keep the replay's data directory (the default preset's) in DIR, a new directory, for "
        "tools/progress_ablation.py to score again offline"))
    ev.add_argument("--config", help="YAML config file to evaluate (default: the default configuration)")
    ev.add_argument("--json", help="also write the results as JSON to this file")
    ev.add_argument("--write-corpus", metavar="DIR", help="write the built-in corpus to DIR as JSON files and exit")
    ev.add_argument("--seed", type=int, help="seed of the built-in corpus (default: the published one)")
    ev.add_argument("--variants", type=int, help="runs per family in the built-in corpus (default 8)")
    ev.add_argument("--families", help="comma-separated families to keep (default: all)")
    ev.add_argument("--no-blocking-pass", action="store_true",
                    help="skip the second pass, with the protect preset (blocking that is safe for honest work)")
    ev.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.set_defaults(func=_cmd_eval)
    for command in sub.choices.values():
        command.set_defaults(parser=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, which has the help that lists its options
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
