"""Helpers of the reliability suites: server subprocesses, soak scaling, a blocking raw remoting client.

Also puts tests/integration/{broker,client} on ``sys.path`` (no conftest here: the unit tests import
their own ``conftest`` by name) and re-exports the broker tests' request builders.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.frame import FrameDecoder, encode_frame
from testkit import wait_until

SRC = Path(__file__).resolve().parents[2] / "src"
for _directory in ("broker", "client"):
    _path = str(Path(__file__).resolve().parents[1] / "integration" / _directory)
    if _path not in sys.path:
        sys.path.append(_path)

from broker_helpers import heartbeat_request, pull_request, send_request  # noqa: E402

__all__ = ["SOAK", "LoopProbe", "RawConnection", "ServerProcess", "broker_args", "heartbeat_request", "pull_request",
           "scaled", "send_request", "wait_until"]
#: `make soak` sets ROCKETFLOW_SOAK=1: the suites run their long variants
SOAK = os.environ.get("ROCKETFLOW_SOAK", "").strip() not in ("", "0", "false", "no")


def scaled(ci: int, soak: int) -> int:
    """`ci` in the normal suite, `soak` under ROCKETFLOW_SOAK=1."""
    return soak if SOAK else ci




class ServerProcess:
    """A ``rocketflow namesrv`` / ``rocketflow broker`` subprocess; `address` is where it listens."""

    def __init__(self, args: Sequence[str], log_path: Path, *, start_timeout: float = 60.0) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        self.args = list(args)
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in `_reap`
        self.proc = subprocess.Popen([sys.executable, "-c", "from rocketflow.cli.main import cli; cli()", *args],
                                     stdout=subprocess.PIPE, stderr=self._log, env=env, text=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        self.address = self._wait_for_address(start_timeout)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _wait_for_address(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.kill()
                raise AssertionError(f"{self.args[0]} did not start within {timeout:.0f}s") from None
            if line is None:
                self._reap()
                raise AssertionError(f"{self.args[0]} exited at start with code {self.proc.returncode}")
            if " listening on " in line:
                return line.rsplit(" ", 1)[1].strip()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kb(self) -> int:
        """Resident memory of the process (VmRSS of /proc/PID/status), in KiB."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS line")

    def kill(self) -> None:
        """kill -9."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self._reap()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (clean stop), SIGKILL if it does not exit in time; returns the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
        self._reap()
        return self.proc.returncode

    def _reap(self) -> None:
        self.proc.wait(30)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


def broker_args(store_dir: Path, *settings: str, flush: str = "sync", namesrv: str | None = None) -> list[str]:
    """Arguments of a ``rocketflow broker`` on a free port with small store files."""
    args = ["broker", "--port", "0", "--store-dir", str(store_dir), "--flush", flush,
            "--set", "mappedFileSizeCommitLog=262144", "--set", "max_hash_slot_num=4096",
            "--set", "max_index_num=65536", "--set", "consume_queue_segment_units=4096"]
    if namesrv is not None:
        args += ["--namesrv", namesrv]
    for setting in settings:
        args += ["--set", setting]
    return args


class RawConnection:
    """A blocking remoting connection for tests that need byte-level control (fuzzing, slow readers)."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder()
        self.responses: dict[int, RemotingCommand] = {}
        self.server_requests: list[RemotingCommand] = []
        self.closed_by_peer = False

    def send_bytes(self, data: bytes) -> bool:
        """False if the peer already closed the connection."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            self.closed_by_peer = True
            return False
        return True

    def send(self, command: RemotingCommand) -> bool:
        return self.send_bytes(encode_frame(command))

    def wait_response(self, opaque: int, timeout: float) -> RemotingCommand | None:
        """The response with `opaque`; None if the peer closed first. Raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while opaque not in self.responses:
            if self.closed_by_peer:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no response to opaque {opaque} within {timeout}s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed_by_peer = True
                return None
            for command in self.decoder.feed(data):
                if command.is_response:
                    self.responses[command.opaque] = command
                else:  # the server's own requests (NOTIFY_CONSUMER_IDS_CHANGED...) have opaques of their own
                    self.server_requests.append(command)
        return self.responses.pop(opaque)

    def request(self, command: RemotingCommand, timeout: float = 10.0) -> RemotingCommand | None:
        if not self.send(command):
            return None
        return self.wait_response(command.opaque, timeout)

    def close(self) -> None:
        self.sock.close()


def frame_length_word(frame: bytes) -> int:
    return int(struct.unpack_from(">i", frame, 0)[0]) if len(frame) >= 4 else -1


class LoopProbe:
    """How long a server's event loop is held: a thread sends a cheap request, waits for its answer, and
    sends the next, recording each latency. `worst` is the slowest answer since the last `reset`,
    counting a request still unanswered as pending for as long as it has been."""

    def __init__(self, address: str, make_request: Callable[[], RemotingCommand], *, interval: float = 0.001) -> None:
        self.address = address
        self.make_request = make_request
        self.interval = interval
        self.latencies: list[float] = []
        self._lock = threading.Lock()
        self._pending_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loop-probe", daemon=True)
        self.failures: list[str] = []

    def __enter__(self) -> LoopProbe:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.latencies and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.latencies, f"no answer to the probe's first request: {self.failures}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        connection = RawConnection(self.address, timeout=60)
        try:
            while not self._stop.is_set():
                request = self.make_request()
                with self._lock:
                    self._pending_since = time.perf_counter()
                response = connection.request(request, 60)
                with self._lock:
                    started, self._pending_since = self._pending_since, None
                    self.latencies.append(time.perf_counter() - (started or 0.0))
                if response is None:
                    self.failures.append("connection closed")
                    return
                time.sleep(self.interval)
        except Exception as exc:  # reported by the test through `failures`
            self.failures.append(repr(exc))
        finally:
            connection.close()

    def reset(self) -> None:
        with self._lock:
            self.latencies.clear()

    def worst(self) -> float:
        """The slowest answer since `reset`, once at least one request sent since has been answered (so a
        request in flight during the measured work is counted; waits at most 60 s)."""
        deadline = time.monotonic() + 60
        while True:
            with self._lock:
                answered = bool(self.latencies) and self._pending_since is None
                latencies = list(self.latencies)
            if answered or self.failures or time.monotonic() > deadline:
                break
            time.sleep(0.001)
        assert not self.failures, self.failures
        assert latencies, "the probe got no answer"
        return max(latencies)

