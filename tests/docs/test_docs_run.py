"""The pages a person follows first run as written: every code block of README.md, docs/sdk.md and
examples/README.md runs here against a real ``loop-detector serve`` (started with the configuration the page shows)
or is marked, on the page, as a fragment, or as a command CI runs (``tests/support/doc_blocks.py``: the markers).

Only what cannot be written portably is changed before a block runs: the documented ports become free ones
(``127.0.0.1:8080`` the page's serve's API, ``:4318`` its OTLP/HTTP receiver, ``:8765`` a stub model), ``.venv/bin/``
this environment's, and ``SESSION_ID`` a session the service knows. What a block must print is on the page too
(``expect`` markers), said in terms that survive tuning the detector: "the stuck agent is warned, the healthy one is
allowed", "the configured rule refuses the repeat", never "at call 5".
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from support.doc_blocks import DocBlock, bash_commands, doc_blocks
from support.sdk import SDK_TYPESCRIPT, npm_ci
from support.serve_process import STARTUP_LINE, ServeProcess

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "sdk.md", ROOT / "examples" / "README.md"]
BLOCKS = [block for page in PAGES for block in doc_blocks(page, ROOT)]
RUNNABLE = {"python", "bash", "ts", "yaml"}
NODE, NPM = shutil.which("node"), shutil.which("npm")
BIN = Path(sys.executable).parent
API, OTLP, STUB = "http://127.0.0.1:8080", "http://127.0.0.1:4318", "http://127.0.0.1:8765"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Page:
    """What the blocks of one page run against: a working directory (the checkout's examples/ and sdk/ beside the
    files the page writes), the page's serve, a stub model, and what its commands started in the background."""

    def __init__(self, page: Path, workdir: Path) -> None:
        self.page = page
        self.workdir = workdir
        for name in ("examples", "sdk"):
            (workdir / name).symlink_to(ROOT / name)
        blocks = [b for b in BLOCKS if b.page == page]
        for block in blocks:
            for name in block.values("file"):
                (workdir / name).write_text(block.text)
        configs = [b for b in blocks if b.marked("serve-config")]
        assert len(configs) <= 1, f"{page.name}: one serve-config per page"
        self.config = None
        if configs:
            self.config = workdir / "serve-config.yaml"
            self.config.write_text(configs[0].text)
        self.stack = ExitStack()
        self.serve: ServeProcess | None = None
        self.urls: dict[str, str] = {}
        self.background: list[subprocess.Popen[str]] = []

    def close(self) -> None:
        for proc in self.background:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
                proc.wait(60)
        self.stack.close()

    # -- what the documented addresses stand for ------------------------------------------------------------
    def page_serve(self) -> None:
        """The page's serve, as its first command starts it (default data directory, in the working directory)."""
        if self.serve is None:
            self.serve = self.stack.enter_context(
                ServeProcess(self.workdir / ".loop-detector", self.config, cwd=self.workdir))
            self.urls.setdefault(API, self.serve.api)
            self.urls.setdefault(OTLP, self.serve.otlp)

    def stub(self) -> None:
        if STUB not in self.urls:
            sys.path.insert(0, str(ROOT / "examples"))
            from openai_stub import serve_stub

            self.urls[STUB] = self.stack.enter_context(serve_stub()).rstrip("/").removesuffix("/v1")

    def localize(self, text: str) -> str:
        if API in text or OTLP in text:
            self.page_serve()
        if STUB in text:
            self.stub()
        for documented, actual in self.urls.items():
            text = text.replace(documented, actual)
        return text

    def session_id(self) -> str:
        self.page_serve()
        assert self.serve is not None
        token = (self.workdir / ".loop-detector" / "admin-token").read_text().strip()
        deadline = time.monotonic() + 30  # sessions are listed from the store: after the next checkpoint (5 s)
        while time.monotonic() < deadline:
            sessions = httpx.get(f"{self.serve.api}/admin/loop-detection/sessions", timeout=10,
                                 headers={"Authorization": f"Bearer {token}"}).json()["sessions"]
            if sessions:
                return sessions[0]["session_id"]
            time.sleep(0.5)
        pytest.fail("SESSION_ID: the service knows no session (the page's demo runs before this block)")

    # -- running ---------------------------------------------------------------------------------------------
    def command(self, command: str) -> str:
        """A shell command as it runs here: this environment's binaries, free ports, a known session."""
        command = command.replace(".venv/bin/", f"{BIN}/")
        if re.search(r"loop-detector (demo|sessions|session)\b", command) and "--endpoint" not in command:
            self.page_serve()
            command += " --endpoint " + API  # (demo asks that service where it receives OTLP: no --otlp-endpoint)
        if "SESSION_ID" in command:
            command = command.replace("SESSION_ID", self.session_id())
        return self.localize(command)

    def start(self, command: str) -> None:
        """A command the page puts in the background (``&``): a serve or the stub, waited for until it answers."""
        if re.search(r"loop-detector serve\b", command):
            data = self.workdir / f".serve-{len(self.background)}"
            command += f" --otlp-port 0 --api-port 0 --otlp-grpc-port 0 --data-dir {data}"
            proc = self._spawn(command, stderr=subprocess.PIPE)
            assert proc.stderr is not None
            for line in proc.stderr:
                if match := STARTUP_LINE.search(line):
                    self.urls[OTLP], self.urls[API] = match.group(1), match.group(2)
                    break
            else:
                pytest.fail(f"{command}: serve did not start")
            _wait_http(self.urls[API] + "/healthz")
        elif "openai_stub.py" in command and "--port 8765" in command:
            port = free_port()
            self._spawn(command.replace("--port 8765", f"--port {port}"), stderr=subprocess.DEVNULL)
            self.urls[STUB] = f"http://127.0.0.1:{port}"
            _wait_port(port)
        else:
            pytest.fail(f"a background command this test does not know how to wait for: {command}")

    def _spawn(self, command: str, stderr: int) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["bash", "-c", command], cwd=self.workdir, stdout=subprocess.DEVNULL, stderr=stderr,
                                text=True, start_new_session=True)
        self.background.append(proc)
        return proc

    def run_bash(self, block: DocBlock) -> str:
        printed = []
        for line in bash_commands(block.text):
            background = line.endswith("&")
            line = line.rstrip("&").strip()
            # this test's environment is the page's .venv: creating it is the set-up CI runs, not this test
            line = re.sub(r"^python3 -m venv \.venv && ", "", line)
            if re.match(r"^(\.venv/bin/)?pip3? install ", line):
                check_installed(line)
                continue
            command = self.command(line)
            if background:
                self.start(command)
                continue
            done = subprocess.run(["bash", "-c", command], cwd=self.workdir, capture_output=True, text=True,
                                  timeout=600)
            assert done.returncode == 0, f"{block.id}: {command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            printed.append(done.stdout + done.stderr)
        return "".join(printed)

    def run_python(self, block: DocBlock) -> str:
        code = self.localize(block.text)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "sdk" / "python")])}
        done = subprocess.run([sys.executable, "-c", code], cwd=self.workdir, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{block.id}:\n{code}\n---\n{done.stderr[-3000:]}"
        return done.stdout + done.stderr

    def run_typescript(self, block: DocBlock) -> str:
        if not (NODE and NPM):
            pytest.skip("node and npm are needed for the TypeScript blocks")
        npm_ci(SDK_TYPESCRIPT, NPM)
        built = subprocess.run([NPM, "run", "build", "--silent"], cwd=SDK_TYPESCRIPT, capture_output=True,
                               text=True, timeout=300)
        assert built.returncode == 0, built.stderr[-3000:]
        example = ROOT / "examples" / "vercel-ai"  # has ai, @ai-sdk/openai and the SDK installed
        npm_ci(example, NPM)
        script = example / f".doc-snippet-{uuid.uuid4().hex[:8]}.mjs"
        script.write_text(self.localize(block.text))
        try:
            done = subprocess.run([NODE, str(script)], cwd=example, capture_output=True, text=True, timeout=120)
        finally:
            script.unlink()
        assert done.returncode == 0, f"{block.id}:\n{done.stderr[-3000:]}"
        return done.stdout + done.stderr

    def run_config(self, block: DocBlock) -> str:
        """A configuration: check-config accepts it and serve starts with it (on free ports)."""
        path = self.workdir / f"config-{block.line}.yaml"
        path.write_text(block.text)
        checked = subprocess.run([f"{BIN}/loop-detector", "check-config", str(path)], capture_output=True, text=True,
                                 timeout=120)
        assert checked.returncode == 0, f"{block.id}: {checked.stderr}"
        with ServeProcess(self.workdir / f".config-{block.line}", path, cwd=self.workdir,
                          extra_args=("--clickhouse-http-port", "0")) as proc:
            assert httpx.get(proc.api + "/healthz", timeout=10).json()["status"] == "ok"
        return checked.stdout


def check_installed(command: str) -> None:
    """A documented ``pip install``: not run again here, but what it installs must be installed (the test
    environment holds the runtime and these extras), and every extra it names must exist."""
    extras = re.search(r"\.\[([\w,-]+)\]", command)
    if extras is None:
        return
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in extras.group(1).split(","):
        assert extra in declared, f"{command}: there is no extra {extra!r}"
        for requirement in declared[extra]:
            name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]
            if name == "loop-detector":
                continue
            metadata.version(name)  # PackageNotFoundError: the extra is not what the test environment has


def _wait_http(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{url} did not answer")


def _wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail(f"nothing listens on {port}")


class Pages(dict):
    """The pages' environments, made on first use; one at a time (the previous page's processes stop)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.tmp_path_factory = tmp_path_factory

    def __missing__(self, page: Path) -> Page:
        self.close()
        self[page] = Page(page, self.tmp_path_factory.mktemp(page.parent.name + "-" + page.stem))
        return self[page]

    def close(self) -> None:
        for opened in self.values():
            opened.close()
        self.clear()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Iterator[Pages]:
    opened = Pages(tmp_path_factory)
    yield opened
    opened.close()


# -- what the pages must hold --------------------------------------------------------------------------------

def test_every_block_runs_or_says_why_not():
    for block in BLOCKS:
        if block.marked("fragment"):
            assert all(block.values("fragment")), f"{block.id}: a fragment says why it is not run"
            assert not block.marked("expect") and not block.marked("expect-re"), block.id
        elif block.marked("ci"):
            continue
        else:
            assert block.language in RUNNABLE, f"{block.id}: a {block.language or 'plain'} block runs nowhere: " \
                                               "mark it as a fragment (<!-- fragment: why -->)"


def test_the_blocks_ci_runs_are_what_it_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    sys.path.insert(0, str(ROOT / "tools"))
    from ci_checks import first_command

    for block in (b for b in BLOCKS if b.marked("ci")):
        commands = bash_commands(block.text)
        if commands == [first_command()]:
            assert "tools/ci_checks.py first-command" in ci
        else:
            for command in commands:
                assert command in ci.splitlines(), f"{block.id}: .ci/run does not run {command!r} as written"


def test_the_readme_starts_with_its_two_commands_then_shows_it_work():
    text = (ROOT / "README.md").read_text()
    setup = [b for b in doc_blocks(ROOT / "README.md") if b.marked("ci")]
    assert len(setup) == 2 and "pip install -e . " in setup[0].text and '".[test]"' in setup[1].text
    see_it_work = text.index("## See it work")
    assert text.index(setup[1].text) < see_it_work < text.index("loop-detector demo") < text.index("openai_agent.py")


# -- running them --------------------------------------------------------------------------------------------

RUN = [b for b in BLOCKS if not (b.marked("fragment") or b.marked("ci") or b.marked("serve-config"))]


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_block_runs(block, pages):
    page = pages[block.page]
    runner = {"python": page.run_python, "bash": page.run_bash, "ts": page.run_typescript,
              "yaml": page.run_config}[block.language]
    printed = runner(block)
    for text in block.values("expect"):
        assert text in printed, f"{block.id}: expected {text!r} in:\n{printed[-4000:]}"
    for pattern in block.values("expect-re"):
        assert re.search(pattern, printed), f"{block.id}: expected /{pattern}/ in:\n{printed[-4000:]}"


def test_the_example_agent_against_a_service_that_requires_the_api_token(tmp_path):
    """docs/scaling.md's last step: the README's example agent against the compose stack's loop-detector, whose API
    requires the token (it listens beyond loopback in its container), given in the environment as the page says."""
    token = uuid.uuid4().hex * 2
    config = tmp_path / "config.yaml"
    config.write_text("api: {require_api_token: always}\n")
    env = {**os.environ, "LOOP_DETECTOR_API_TOKEN": token}
    with ServeProcess(tmp_path / "data", config, env=env) as proc:
        assert httpx.get(f"{proc.api}/v1/decision", params={"session_id": "s"}, timeout=10).status_code == 401
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "openai_agent.py"), "--steps", "3",
                               "--loop-detector", proc.api, "--otlp", proc.otlp], env=env, capture_output=True,
                              text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len([line for line in done.stdout.splitlines() if line.strip()[:1].isdigit()]) == 3, done.stdout
    scaling = (ROOT / "docs" / "scaling.md").read_text()
    assert "examples/openai_agent.py --loop-detector http://127.0.0.1:8080 --otlp http://127.0.0.1:4318" in scaling
    assert 'export LOOP_DETECTOR_API_TOKEN="$(' in scaling
