"""A real ``loop-detector serve`` in a child process, for crash and signal tests and the reliability benches.

    with ServeProcess(data_dir, config_path) as proc:
        proc.otlp, proc.api          # the endpoints it bound (ports chosen by the OS: --otlp-port 0 --api-port 0)
        proc.kill9() / proc.terminate()  # signals go to this child only, by its pid
        proc.wait()

Its stderr is collected in the background (``proc.lines``); the endpoints come from its startup line.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

__all__ = ["ServeProcess", "STARTUP_LINE"]

STARTUP_LINE = re.compile(r"OTLP/HTTP on (https?://\S+)/v1/traces [^,]*, API on (http://\S+) ")
ROOT = Path(__file__).resolve().parents[2]


class ServeProcess:
    def __init__(self, data_dir: str | os.PathLike[str], config_path: str | os.PathLike[str] | None = None,
                 host: str = "127.0.0.1", extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 start_timeout: float = 120.0, cwd: str | os.PathLike[str] = ROOT) -> None:
        self.cwd = Path(cwd)
        self.data_dir = Path(data_dir)
        self.config_path = config_path
        self.host = host
        self.extra_args = extra_args
        self.env = env
        self.start_timeout = start_timeout
        self.lines: list[str] = []
        self.otlp = ""
        self.api = ""
        self.proc: subprocess.Popen[str] | None = None
        self._ready = threading.Event()

    def start(self) -> ServeProcess:
        cmd = [sys.executable, "-m", "detector", "serve", "--data-dir", str(self.data_dir), "--host", self.host,
               "--otlp-port", "0", "--api-port", "0", "--otlp-grpc-port", "0", *self.extra_args]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        env = {**os.environ, **(self.env or {})}
        self.proc = subprocess.Popen(cmd, cwd=self.cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("serve did not start:\n" + "".join(self.lines[-30:]))
        for url in (self.api + "/healthz", self.otlp + "/healthz"):
            while True:
                try:
                    if httpx.get(url, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("serve did not become ready:\n" + "".join(self.lines[-30:]))
                time.sleep(0.05)
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            match = STARTUP_LINE.search(line)
            if match:
                self.otlp, self.api = match.group(1), match.group(2)
                self._ready.set()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill9(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def terminate(self) -> None:
        os.kill(self.pid, signal.SIGTERM)

    def interrupt(self) -> None:
        os.kill(self.pid, signal.SIGINT)

    def wait(self, timeout: float = 120.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill9()
            self.proc.wait(30)
