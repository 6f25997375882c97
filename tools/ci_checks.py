"""The checks CI runs beside the test suite (``.ci/run``), each printing what it measured.

    python3 tools/ci_checks.py first-command   # README's first command, as written there, until /healthz answers
    python3 tools/ci_checks.py wheel           # the wheel, installed into a clean venv outside the checkout, serves

``first-command`` reads the first command of README.md's set-up (the runtime install, then ``loop-detector serve``)
and runs it from the checkout with only ``serve``'s ports and data directory added (free ports, a temporary
directory: nothing else on this machine is disturbed). ``wheel`` builds the wheel, installs it with its
dependencies into a new virtualenv in a temporary directory, and runs ``loop-detector serve`` there, from a
directory that holds nothing of the checkout: the package must find its DDL inside itself; its Grafana dashboards
too (in the wheel, and written by ``loop-detector grafana --out``).

Standard library only: it runs with the ``python3`` that runs CI, before the project's virtualenv exists.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
STARTUP = re.compile(r"API on (http://\S+) ")
FREE_PORTS = ["--otlp-port", "0", "--api-port", "0", "--otlp-grpc-port", "0"]
START_TIMEOUT_S = 600.0


def first_command(readme: Path = README) -> str:
    """The first shell block of the README's set-up section: the runtime install, ending in ``loop-detector serve``."""
    setup = readme.read_text().split("\n## Set-up", 1)[1]
    block = re.search(r"```bash\n(.*?)```", setup, re.S)
    if block is None:
        raise SystemExit("README.md: no bash block in the Set-up section")
    command = " ".join(line.rstrip("\\").strip() for line in block.group(1).strip().splitlines())
    if not command.endswith("loop-detector serve"):
        raise SystemExit(f"README.md: the first command does not end in `loop-detector serve`: {command}")
    return command


class Serving:
    """A shell command that ends in ``loop-detector serve``, in its own process group, watched until /healthz."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[str] = []
        self.installed_at: float | None = None  # when pip said it was done
        self.api: str | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("Successfully installed"):
                self.installed_at = time.monotonic()
            if self.api is None and (match := STARTUP.search(line)):
                self.api = match.group(1)
                self._ready.set()

    def wait_healthy(self) -> float:
        """Seconds from the start until ``/healthz`` answered ``ok``."""
        deadline = self.started + START_TIMEOUT_S
        while not self._ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.fail("did not start")
        while True:
            try:
                with urllib.request.urlopen(f"{self.api}/healthz", timeout=5) as response:
                    if b'"ok"' in response.read():
                        return time.monotonic() - self.started
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.fail("did not answer /healthz")
            time.sleep(0.1)

    def stop(self) -> int:
        """SIGTERM to the group (serve stops gracefully); its exit code."""
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(120)

    def fail(self, what: str) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        raise SystemExit(f"{what}:\n" + "".join(self.lines[-40:]))


def run(cmd: list[str], cwd: Path | None = None) -> float:
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.monotonic() - started


def check_first_command() -> None:
    command = first_command()
    with tempfile.TemporaryDirectory(prefix="loop-detector-first-") as tmp:
        extra = shlex.join([*FREE_PORTS, "--data-dir", str(Path(tmp) / "data")])
        print(f"README's first command: {command}  (+ {extra})", flush=True)
        serving = Serving(f"{command} {extra}", cwd=ROOT)
        healthy = serving.wait_healthy()
        code = serving.stop()
    install = (serving.installed_at or serving.started) - serving.started
    print(f"  install (venv + pip): {install:.1f} s; /healthz answered at {healthy:.1f} s; serve exited {code}")
    if code != 0:
        raise SystemExit("serve did not stop cleanly on SIGTERM:\n" + "".join(serving.lines[-20:]))


GRAFANA_PROVISIONING = ("datasources/clickhouse.yaml", "dashboards/dashboards.yaml", "alerting/alerts.yaml")


def check_wheel() -> None:
    with tempfile.TemporaryDirectory(prefix="loop-detector-wheel-") as tmp:
        base = Path(tmp)
        venv, dist, away = base / "venv", base / "dist", base / "elsewhere"
        away.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("LOOP_DETECTOR_COMPILE", "LOOP_DETECTOR_SQL_DIR",
                                                                 "PYTHONPATH", "VIRTUAL_ENV")}
        timings = {"venv": run([sys.executable, "-m", "venv", str(venv)])}
        pip = [str(venv / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
        timings["build"] = run([*pip, "wheel", "--no-deps", "-w", str(dist), str(ROOT)])
        (wheel,) = dist.glob("loop_detector-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
        sql = [n for n in names if n.startswith("detector/storage/clickhouse/") and n.endswith(".sql")]
        if not sql or any("recordings/" in n for n in names):
            raise SystemExit(f"{wheel.name}: {len(sql)} DDL files, recordings inside: {[n for n in names if 'recordings/' in n][:3]}")
        boards = [n for n in names if n.startswith("detector/grafana/dashboards/") and n.endswith(".json")]
        if len(boards) != len(list((ROOT / "grafana" / "dashboards").glob("*.json"))):
            raise SystemExit(f"{wheel.name}: {len(boards)} Grafana dashboards inside, grafana/dashboards/ has more")
        timings["install"] = run([*pip, "install", str(wheel)])
        where = subprocess.run([str(venv / "bin" / "python"), "-c", "import detector; print(detector.__file__)"],
                               cwd=away, env=env, capture_output=True, text=True, check=True).stdout.strip()
        if Path(where).is_relative_to(ROOT):
            raise SystemExit(f"the installed package is imported from the checkout: {where}")
        grafana = subprocess.run([str(venv / "bin" / "loop-detector"), "grafana", "--out", str(away / "grafana")],
                                 cwd=away, env=env, capture_output=True, text=True)
        provisioning = [away / "grafana" / "provisioning" / f for f in GRAFANA_PROVISIONING]
        if (grafana.returncode or len(list((away / "grafana" / "dashboards").glob("*.json"))) != len(boards)
                or not all(path.is_file() for path in provisioning)):
            raise SystemExit(f"loop-detector grafana --out, from the wheel, did not write every dashboard and "
                             f"{', '.join(GRAFANA_PROVISIONING)}: {grafana.stderr[-2000:]}")
        serve = shlex.join([str(venv / "bin" / "loop-detector"), "serve", *FREE_PORTS, "--data-dir", str(base / "data")])
        serving = Serving(serve, cwd=away, env=env)
        timings["serve until /healthz"] = serving.wait_healthy()
        code = serving.stop()
        print(f"wheel {wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB, {len(names)} files ({len(sql)} DDL, {len(boards)} Grafana dashboards); "
              + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in timings.items()) + f"; serve exited {code}")
        if code != 0:
            raise SystemExit("serve did not stop cleanly on SIGTERM:\n" + "".join(serving.lines[-20:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=["first-command", "wheel"])
    args = parser.parse_args()
    {"first-command": check_first_command, "wheel": check_wheel}[args.check]()


if __name__ == "__main__":
    main()
