"""A data directory on a small filesystem that fills up, and senders that time every answer: what the disk-full test
(``tests/service/test_disk_full.py``) and probe (``bench/probes/disk_full.py``) are made of.

    with small_tmpfs(path, "48m") as mount:             # root only: mount -t tmpfs (skipped otherwise)
        ...
        filler = Filler(mount / "filler").fill()         # grows beside the data directory until ENOSPC
        filler.free()

``TimedHttpSenders`` / ``TimedGrpcSenders`` are :class:`support.otlp_load.Senders` (each request resent with the same
bytes until acknowledged, as exporters do) over OTLP/HTTP and OTLP/gRPC, recording every answer: when it was
asked, how long it took, the status, and whether a refusal said when to retry.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
from google.rpc.error_details_pb2 import RetryInfo

from support.otlp_load import Request, Senders
from support.otlp_senders import PROTOBUF

__all__ = ["Answer", "Filler", "MemorySampler", "TimedGrpcSenders", "TimedHttpSenders", "mount_refusal", "rss_mb",
           "small_tmpfs"]

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# A client gives up on an answer after this long: what "hung" means (the operator used 15 s).
CLIENT_TIMEOUT_SECONDS = 15.0
FILL_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Answer:
    transport: str  # "http" | "grpc"
    asked: float  # time.monotonic() when the request was sent
    seconds: float  # until its answer (or the client's timeout)
    status: str  # "200", "503", "OK", "UNAVAILABLE", ... or "timeout" / the transport error's name
    retry_hint: bool  # a refusal that said when to retry (Retry-After, RetryInfo)
    message: str = ""  # a refusal's message


def mount_refusal() -> str | None:
    """Why a tmpfs cannot be mounted here (None: it can)."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root (CI runs as root)"
    return None


@contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` (created), unmounted afterwards whatever happens."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode:
        raise OSError(f"mount -t tmpfs failed: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@dataclass
class Filler:
    """A file beside the data directory that takes every free byte (an operator's full disk)."""

    path: Path
    full_at: float = 0.0  # time.monotonic() of the ENOSPC

    def fill(self, chunk_pause: float = 0.01) -> Filler:
        chunk = b"\0" * FILL_CHUNK
        with open(self.path, "ab") as fh:
            while True:
                try:
                    fh.write(chunk)
                    fh.flush()
                except OSError:
                    break
                time.sleep(chunk_pause)
        # what the service frees meanwhile (a journal file removed) is taken too, a few times over
        for _ in range(20):
            try:
                with open(self.path, "ab") as fh:
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
        self.full_at = time.monotonic()
        return self

    def free(self) -> None:
        self.path.unlink(missing_ok=True)


@dataclass
class _Timed:
    answers: list[Answer] = field(default_factory=list)

    def record(self, answer: Answer) -> None:
        self.answers.append(answer)  # (list.append is atomic)


@dataclass
class TimedHttpSenders(Senders):
    """OTLP/HTTP senders recording every answer."""

    log: _Timed = field(default_factory=_Timed)
    timeout_seconds: float = CLIENT_TIMEOUT_SECONDS

    def _post(self, client: httpx.Client, request: Request) -> bool:
        asked = time.monotonic()
        try:
            response = client.post(self.url() + "/v1/traces", content=request.body, headers={"Content-Type": PROTOBUF})
        except httpx.HTTPError as exc:
            status = "timeout" if isinstance(exc, httpx.TimeoutException) else type(exc).__name__
            self.log.record(Answer("http", asked, time.monotonic() - asked, status, False))
            with self._lock:
                self.errors += 1
            return False
        seconds = time.monotonic() - asked
        ok = response.status_code == 200
        message = "" if ok else response.text[:300]
        self.log.record(Answer("http", asked, seconds, str(response.status_code),
                               "retry-after" in response.headers, message))
        with self._lock:
            self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        if ok:
            request.acked_at = time.time()
        return ok


@dataclass
class TimedGrpcSenders(Senders):
    """OTLP/gRPC senders (the exporter's Export call, raw bytes) recording every answer; ``url`` gives host:port."""

    log: _Timed = field(default_factory=_Timed)
    codes: dict[str, int] = field(default_factory=dict)
    timeout_seconds: float = CLIENT_TIMEOUT_SECONDS

    @contextmanager
    def _connected(self) -> Iterator[grpc.UnaryUnaryMultiCallable]:
        with grpc.insecure_channel(self.url()) as channel:
            yield channel.unary_unary(TRACES_METHOD, request_serializer=None, response_deserializer=None)

    def _send(self, connection: grpc.UnaryUnaryMultiCallable, request: Request) -> bool:
        return self._export(connection, request)

    def _export(self, export: grpc.UnaryUnaryMultiCallable, request: Request) -> bool:
        asked = time.monotonic()
        try:
            export(request.body, timeout=self.timeout_seconds)
        except grpc.RpcError as error:
            code = error.code()
            trailers = dict(error.trailing_metadata() or ())
            hint = "google.rpc.retryinfo-bin" in trailers and RetryInfo.FromString(
                trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds > 0
            status = "timeout" if code == grpc.StatusCode.DEADLINE_EXCEEDED else code.name
            self.log.record(Answer("grpc", asked, time.monotonic() - asked, status, hint, error.details() or ""))
            with self._lock:
                self.codes[status] = self.codes.get(status, 0) + 1
                if status == "timeout":
                    self.errors += 1
            return False
        self.log.record(Answer("grpc", asked, time.monotonic() - asked, "OK", False))
        with self._lock:
            self.codes["OK"] = self.codes.get("OK", 0) + 1
        request.acked_at = time.time()
        return True


def rss_mb(pid: int) -> float:
    """A process's resident memory (VmRSS), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class MemorySampler:
    """A process's resident memory every ``every`` seconds, in the background: (time.monotonic(), MiB)."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), rss_mb(self.pid)))
            except OSError:
                return
            self._stop.wait(self.every)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
