"""Fixtures for driving real RocketMQ 4.x clients against `rocketflow dev`.

The clients are installed from the registries, once, into the git-ignored ``.interop/`` cache at the
repo root: npm ``ali-ons`` (pure JavaScript, run with the machine's ``node``) into ``.interop/node``
and PyPI ``rocketmq`` (Apache's C++ client in ``librocketmq.so``) into its own venv
``.interop/venv-cpp``. A failed install fails the tests; nothing here is skipped.

Every client runs as a subprocess (the scripts in ``clients/``) that prints one JSON object per line;
`ClientProcess` collects those lines, and `ClientRunner` starts processes and stops them by pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".interop"
CLIENTS_DIR = Path(__file__).resolve().parent / "clients"

ALI_ONS_VERSION = "3.12.0"
ROCKETMQ_CPP_VERSION = "0.4.4"
#: Apache's official RocketMQ 5.x clients (gRPC): PyPI rocketmq-python-client and npm rocketmq-client-nodejs
PY5_CLIENT_VERSION = "5.1.2"
NODE5_CLIENT_VERSION = "1.0.8"
INSTALL_TIMEOUT = 600.0
PROBE_TAGS = "rf-probe"

Event = dict[str, Any]


# ============================================================================ installs


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    """One installer at a time across processes (parallel pytest runs, several checkouts' CI)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / ".lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _run_install_step(argv: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        completed = subprocess.run(
            argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
        )
    except FileNotFoundError as error:
        pytest.fail(f"cannot install {what}: {error.filename} is not on this machine", pytrace=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"installing {what} took over {INSTALL_TIMEOUT:.0f}s (is the registry reachable?)", pytrace=False)
    if completed.returncode != 0:
        output = (completed.stdout + completed.stderr).strip()[-3000:]
        pytest.fail(
            f"installing {what} failed (exit {completed.returncode}; is the registry reachable?): "
            f"{' '.join(argv)}\n{output}",
            pytrace=False,
        )


def _installed_ali_ons_version(node_modules: Path) -> str | None:
    try:
        return str(json.loads((node_modules / "ali-ons" / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


@dataclass(frozen=True)
class AliOnsInstall:
    """Where ``ali-ons`` lives: run ``node`` with ``NODE_PATH`` set to ``node_modules``."""

    node: str
    node_modules: Path


@dataclass(frozen=True)
class CppClientInstall:
    """The venv whose ``python`` imports ``rocketmq`` (the C++ client)."""

    python: Path


@pytest.fixture(scope="session")
def alions_install() -> AliOnsInstall:
    """npm ``ali-ons`` installed (once) into ``.interop/node``."""
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("the ali-ons interop tests need node and npm on PATH", pytrace=False)
    node_dir = CACHE_DIR / "node"
    node_modules = node_dir / "node_modules"
    marker = node_dir / f".installed-ali-ons-{ALI_ONS_VERSION}"
    with _cache_lock():
        if not (marker.exists() and _installed_ali_ons_version(node_modules) == ALI_ONS_VERSION):
            shutil.rmtree(node_dir, ignore_errors=True)
            node_dir.mkdir(parents=True)
            (node_dir / "package.json").write_text('{"name": "rocketflow-interop-clients", "private": true}\n')
            _run_install_step(
                [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", f"ali-ons@{ALI_ONS_VERSION}"],
                f"npm ali-ons@{ALI_ONS_VERSION}",
                cwd=node_dir,
            )
            found = _installed_ali_ons_version(node_modules)
            if found != ALI_ONS_VERSION:
                pytest.fail(f"npm installed ali-ons {found!r}, expected {ALI_ONS_VERSION}", pytrace=False)
            marker.touch()
    return AliOnsInstall(node=node, node_modules=node_modules)


@pytest.fixture(scope="session")
def cpp_client_install() -> CppClientInstall:
    """PyPI ``rocketmq`` installed (once) into the venv ``.interop/venv-cpp``."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.fail(
            f"rocketmq {ROCKETMQ_CPP_VERSION} bundles librocketmq.so for x86_64 Linux only; "
            f"this is {sys.platform}/{platform.machine()}",
            pytrace=False,
        )
    venv_dir = CACHE_DIR / "venv-cpp"
    python = venv_dir / "bin" / "python"
    marker = venv_dir / f".installed-rocketmq-{ROCKETMQ_CPP_VERSION}"
    with _cache_lock():
        if not (marker.exists() and python.exists()):
            shutil.rmtree(venv_dir, ignore_errors=True)
            _run_install_step([sys.executable, "-m", "venv", str(venv_dir)], "a venv for the C++ client")
            _run_install_step(
                [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 f"rocketmq=={ROCKETMQ_CPP_VERSION}"],
                f"PyPI rocketmq=={ROCKETMQ_CPP_VERSION}",
            )
            _run_install_step([str(python), "-c", "import rocketmq.client"], "a loadable librocketmq.so")
            marker.touch()
    return CppClientInstall(python=python)


@dataclass(frozen=True)
class Clients5Install:
    """The official 5.x clients: a venv whose ``python`` imports ``rocketmq`` (rocketmq-python-client), and
    ``node_modules`` holding ``rocketmq-client-nodejs``."""

    python: Path
    node: str
    node_modules: Path


def _installed_npm_version(node_modules: Path, package: str) -> str | None:
    try:
        return str(json.loads((node_modules / package / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="session")
def clients5_install() -> Clients5Install:
    """PyPI ``rocketmq-python-client`` (venv ``.interop/venv-py5``) and npm ``rocketmq-client-nodejs``
    (``.interop/node5``), installed once from the registries."""
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("the 5.x Node.js client tests need node and npm on PATH", pytrace=False)
    venv_dir = CACHE_DIR / "venv-py5"
    python = venv_dir / "bin" / "python"
    py_marker = venv_dir / f".installed-rocketmq-python-client-{PY5_CLIENT_VERSION}"
    node_dir = CACHE_DIR / "node5"
    node_modules = node_dir / "node_modules"
    node_marker = node_dir / f".installed-rocketmq-client-nodejs-{NODE5_CLIENT_VERSION}"
    with _cache_lock():
        if not (py_marker.exists() and python.exists()):
            shutil.rmtree(venv_dir, ignore_errors=True)
            _run_install_step([sys.executable, "-m", "venv", str(venv_dir)], "a venv for the 5.x Python client")
            _run_install_step(
                [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 f"rocketmq-python-client=={PY5_CLIENT_VERSION}"],
                f"PyPI rocketmq-python-client=={PY5_CLIENT_VERSION}",
            )
            _run_install_step([str(python), "-c", "import rocketmq"], "an importable rocketmq-python-client")
            py_marker.touch()
        if not (node_marker.exists()
                and _installed_npm_version(node_modules, "rocketmq-client-nodejs") == NODE5_CLIENT_VERSION):
            shutil.rmtree(node_dir, ignore_errors=True)
            node_dir.mkdir(parents=True)
            (node_dir / "package.json").write_text('{"name": "rocketflow-interop-clients5", "private": true}\n')
            _run_install_step(
                [npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
                 f"rocketmq-client-nodejs@{NODE5_CLIENT_VERSION}"],
                f"npm rocketmq-client-nodejs@{NODE5_CLIENT_VERSION}",
                cwd=node_dir,
            )
            found = _installed_npm_version(node_modules, "rocketmq-client-nodejs")
            if found != NODE5_CLIENT_VERSION:
                pytest.fail(f"npm installed rocketmq-client-nodejs {found!r}, expected {NODE5_CLIENT_VERSION}",
                            pytrace=False)
            node_marker.touch()
    return Clients5Install(python=python, node=node, node_modules=node_modules)


# ============================================================================ client processes


def _problem_lines(paths: list[Path], limit: int = 12) -> list[str]:
    """The last ``limit`` warning/error lines of some log files (client and broker logs)."""
    lines: list[str] = []
    for path in paths:
        try:
            text = path.read_text("utf-8", errors="replace")
        except OSError:
            continue
        lines += [line for line in text.splitlines()
                  if any(word in line.lower() for word in ("error", "warn", "traceback", "exception"))]
    return [line[:300] for line in lines[-limit:]]


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")


class ClientProcess:
    """One client script: its JSON-lines stdout collected into `events`, its stderr in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], work_dir: Path,
                 changed: threading.Condition) -> None:
        self.name = name
        self.argv = argv
        self.work_dir = work_dir
        self.stderr_path = work_dir / "stderr.log"
        self.events: list[Event] = []
        self.counts: Counter[str] = Counter()
        self.stdout_closed = False
        self._changed = changed
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env, cwd=work_dir
        )
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        with open(self.work_dir / "stdout.jsonl", "wb") as copy:
            self._collect(stdout, copy)
        with self._changed:
            self.stdout_closed = True
            self._changed.notify_all()

    def _collect(self, stdout: IO[bytes], copy: IO[bytes]) -> None:
        for raw in stdout:
            copy.write(raw)
            try:
                event = json.loads(raw)
                if not isinstance(event, dict):
                    raise ValueError("not an object")
            except ValueError:
                event = {"event": "unparsed", "text": raw.decode("utf-8", errors="replace")}
            with self._changed:
                self.events.append(event)
                self.counts[str(event.get("event"))] += 1
                self._changed.notify_all()

    def of(self, kind: str) -> list[Event]:
        """The events named ``kind`` so far, in arrival order."""
        return [event for event in list(self.events) if event.get("event") == kind]

    def received(self, *, probes: bool = False) -> list[Event]:
        """Received messages: the real ones, or only the probes."""
        return [e for e in self.of("recv") if (e.get("tags") == PROBE_TAGS) == probes]

    def send_line(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def close_stdin(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(OSError):
                self.process.stdin.close()

    def stop(self, timeout: float = 20.0) -> int:
        """Ask it to finish (stdin closed), then SIGTERM, then SIGKILL, always by its own pid."""
        self.close_stdin()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(5.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.process.wait(5.0)
        self._reader.join(5.0)
        self._stderr.close()
        return self.process.returncode

    def describe(self) -> str:
        state = "running" if self.process.poll() is None else f"exited {self.process.returncode}"
        counts = ", ".join(f"{kind}={count}" for kind, count in sorted(self.counts.items()))
        errors = [json.dumps(e)[:500] for e in self.of("error")[:3]]
        text = f"- {self.name} (pid {self.pid}, {state}): {counts or 'no output'}"
        if errors:
            text += "\n  errors: " + "\n  ".join(errors)
        stderr = _tail(self.stderr_path, 1500).strip()
        if stderr:
            text += "\n  stderr tail: " + stderr.replace("\n", "\n    ")
        if errors or self.process.poll() not in (None, 0):
            # The C++ client logs under $HOME/logs/rocketmq-cpp; its warnings say why a send or pull failed.
            problems = _problem_lines(sorted(self.work_dir.glob("logs/**/*.log*")))
            if problems:
                text += "\n  client log: " + "\n    ".join(problems)
        return text


class ClientRunner:
    """Starts client scripts (each in its own directory, which is also its HOME) and stops them all."""

    def __init__(self, base_dir: Path, alions: AliOnsInstall | None, cpp: CppClientInstall | None,
                 clients5: Clients5Install | None = None) -> None:
        self.base_dir = base_dir
        self.alions = alions
        self.cpp = cpp
        self.clients5 = clients5
        self.processes: list[ClientProcess] = []
        self.changed = threading.Condition()

    def _start(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> ClientProcess:
        work_dir = self.base_dir / name
        suffix = 1
        while work_dir.exists():
            suffix += 1
            work_dir = self.base_dir / f"{name}-{suffix}"
        name = work_dir.name
        work_dir.mkdir(parents=True)
        env = {key: value for key, value in os.environ.items()
               if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "NODE_OPTIONS")}
        env.update({"HOME": str(work_dir), "PYTHONUNBUFFERED": "1", **(extra_env or {})})
        process = ClientProcess(name, argv, env, work_dir, self.changed)
        self.processes.append(process)
        return process

    def _node(self, name: str, script: str, args: list[str]) -> ClientProcess:
        assert self.alions is not None
        argv = [self.alions.node, str(CLIENTS_DIR / script), *args]
        return self._start(name, argv, {"NODE_PATH": str(self.alions.node_modules)})

    def _cpp(self, name: str, script: str, args: list[str]) -> ClientProcess:
        assert self.cpp is not None
        return self._start(name, [str(self.cpp.python), str(CLIENTS_DIR / script), *args])

    def py5(self, name: str, role: str, endpoint: str, topic: str, *args: str) -> ClientProcess:
        """The official 5.x Python client (``clients/py5_client.py``) in a role: produce, simple or push."""
        assert self.clients5 is not None
        argv = [str(self.clients5.python), str(CLIENTS_DIR / "py5_client.py"), role, "--endpoint", endpoint,
                "--topic", topic, *args]
        return self._start(name, argv)

    def node5(self, name: str, role: str, endpoint: str, topic: str, *args: str) -> ClientProcess:
        """The official 5.x Node.js client (``clients/node5_client.js``) in a role."""
        assert self.clients5 is not None
        argv = [self.clients5.node, str(CLIENTS_DIR / "node5_client.js"), role, "--endpoint", endpoint,
                "--topic", topic, *args]
        return self._start(name, argv, {"NODE_PATH": str(self.clients5.node_modules)})

    def alions_producer(self, name: str, namesrv: str, topic: str, group: str, messages: Path, *,
                        probe: bool = False) -> ClientProcess:
        args = ["--namesrv", namesrv, "--topic", topic, "--group", group, "--messages", str(messages)]
        return self._node(name, "alions_producer.js", args + (["--probe"] if probe else []))

    def alions_consumer(self, name: str, namesrv: str, topic: str, group: str, *, broadcast: bool = False,
                        from_where: str = "last", delay_ms: float = 0, sql: str | None = None) -> ClientProcess:
        args = ["--namesrv", namesrv, "--topic", topic, "--group", group, "--instance", name,
                "--from", from_where, "--delay-ms", str(delay_ms)]
        args += ["--sql", sql] if sql else []
        return self._node(name, "alions_consumer.js", args + (["--broadcast"] if broadcast else []))

    def cpp_producer(self, name: str, namesrv: str, topic: str, group: str, messages: Path, *,
                     orderly: bool = False, probe: bool = False, threads: int = 1) -> ClientProcess:
        args = ["--namesrv", namesrv, "--topic", topic, "--group", group, "--messages", str(messages)]
        args += ["--orderly"] if orderly else []
        args += ["--probe"] if probe else []
        args += ["--threads", str(threads)] if threads > 1 else []
        return self._cpp(name, "cpp_producer.py", args)

    def cpp_consumer(self, name: str, namesrv: str, topic: str, group: str, *, broadcast: bool = False,
                     orderly: bool = False, props: tuple[str, ...] = (), delay_ms: float = 0) -> ClientProcess:
        args = ["--namesrv", namesrv, "--topic", topic, "--group", group, "--instance", name,
                "--model", "broadcasting" if broadcast else "clustering", "--props", ",".join(props),
                "--delay-ms", str(delay_ms)]
        return self._cpp(name, "cpp_consumer.py", args + (["--orderly"] if orderly else []))

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str, *,
                   must_keep_running: tuple[ClientProcess, ...] = ()) -> float:
        """Poll ``predicate`` until true; fail with every process's state on timeout or if one of
        ``must_keep_running`` exits first. Returns the seconds waited."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            if predicate():
                return time.monotonic() - started
            for process in must_keep_running:
                if process.process.poll() is not None and process.stdout_closed and not predicate():
                    pytest.fail(f"{process.name} exited while waiting for {what}\n{self.describe()}", pytrace=False)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{self.describe()}", pytrace=False)
            with self.changed:
                self.changed.wait(min(0.2, remaining))

    def stop(self, *processes: ClientProcess, expect_clean: bool = True) -> None:
        """Stop these processes (all at once: stdin closed first, then each waited for)."""
        for process in processes:
            process.close_stdin()
        failures = []
        for process in processes:
            code = process.stop()
            if expect_clean and (code != 0 or (not process.of("stopped") and not process.of("done"))):
                failures.append(f"{process.name} exited {code}")
        if failures:
            pytest.fail("clients did not stop cleanly: " + "; ".join(failures) + f"\n{self.describe()}",
                        pytrace=False)

    def stop_all(self) -> None:
        for process in self.processes:
            process.close_stdin()
        for process in self.processes:
            if process.process.returncode is None:
                process.stop(timeout=10.0)

    def describe(self) -> str:
        return "\n".join(process.describe() for process in self.processes)


@pytest.fixture
def clients5(tmp_path: Path, clients5_install: Clients5Install) -> Iterator[ClientRunner]:
    """Starts official 5.x client processes for one test; whatever is still running at the end is stopped."""
    runner = ClientRunner(tmp_path / "clients5", None, None, clients5_install)
    try:
        yield runner
    finally:
        runner.stop_all()


@pytest.fixture
def clients(tmp_path: Path, alions_install: AliOnsInstall, cpp_client_install: CppClientInstall
            ) -> Iterator[ClientRunner]:
    """Starts client processes for one test; whatever is still running at the end is stopped."""
    runner = ClientRunner(tmp_path / "clients", alions_install, cpp_client_install)
    try:
        yield runner
    finally:
        runner.stop_all()


# ============================================================================ rocketflow dev


def rocketflow_command() -> list[str]:
    script = Path(sys.executable).with_name("rocketflow")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')"]


@dataclass
class DevCluster:
    """A running ``rocketflow dev`` (name server + one broker) subprocess."""

    namesrv_addr: str
    broker_name: str
    broker_addr: str
    process: subprocess.Popen[bytes]
    log_path: Path
    output: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, limit: int = 3000) -> str:
        return _tail(self.log_path, limit)


NAMESRV_LINE = re.compile(r"namesrv listening on (\S+)")
BROKER_LINE = re.compile(r"broker (\S+) listening on (\S+)")
DEV_START_TIMEOUT = 30.0
DEV_STOP_TIMEOUT = 20.0


@pytest.fixture
def dev_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """``rocketflow dev`` on free ports with a fresh store, stopped by its pid (SIGTERM) afterwards; a test
    marked ``@pytest.mark.dev_settings("KEY=VALUE", ...)`` gets those broker settings."""
    store_dir = tmp_path / "store"
    log_path = tmp_path / "rocketflow-dev.log"
    marker = request.node.get_closest_marker("dev_settings")
    settings = [arg for setting in (marker.args if marker else ()) for arg in ("--set", setting)]
    argv = [*rocketflow_command(), "dev", "--namesrv-port", "0", "--broker-port", "0",
            "--store-dir", str(store_dir), *settings]
    log_file = open(log_path, "wb")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               cwd=tmp_path)
    found: dict[str, str] = {}
    ready = threading.Event()
    output: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            log_file.write(raw)
            log_file.flush()
            line = raw.decode("utf-8", errors="replace")
            if len(output) < 200:
                output.append(line)
            if (match := NAMESRV_LINE.search(line)) and "namesrv" not in found:
                found["namesrv"] = match.group(1)
            elif (match := BROKER_LINE.search(line)) and "broker" not in found:
                found["broker_name"], found["broker"] = match.group(1), match.group(2)
            if "namesrv" in found and "broker" in found:
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, name="rocketflow-dev-output", daemon=True)
    reader.start()
    cluster: DevCluster | None = None
    try:
        ready.wait(DEV_START_TIMEOUT)
        if "namesrv" not in found or "broker" not in found:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(1.0)
            state = "still running" if process.poll() is None else f"exited {process.returncode}"
            pytest.fail(f"`{' '.join(argv)}` did not print both listening lines within {DEV_START_TIMEOUT:.0f}s "
                        f"({state}); output:\n{''.join(output)[-3000:]}", pytrace=False)
        cluster = DevCluster(found["namesrv"], found["broker_name"], found["broker"], process, log_path, output)
        yield cluster
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
        try:
            code = process.wait(DEV_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(5.0)
            code = None
        reader.join(5.0)
        log_file.close()
        # Shown by pytest only when the test failed: what the broker complained about meanwhile.
        for line in _problem_lines([log_path], limit=30):
            print(f"rocketflow dev: {line}")
    if cluster is not None and code != 0:
        pytest.fail(f"rocketflow dev did not stop cleanly on SIGTERM (exit {code}); log tail:\n{cluster.log_tail()}",
                    pytrace=False)


# ============================================================================ rocketflow dev with restarts

GRPC_LINE = re.compile(r"grpc endpoint for 5\.x clients listening on (\S+)")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DevServer:
    """``rocketflow dev`` on fixed free ports and one store directory, so it can be killed (SIGKILL) and
    started again where clients expect it; `namesrv`, `broker` and `grpc` are its addresses."""

    def __init__(self, work_dir: Path, *extra_args: str) -> None:
        self.work_dir = work_dir
        self.store_dir = work_dir / "store"
        self.ports = {name: free_port() for name in ("namesrv", "broker", "grpc")}
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.namesrv = f"127.0.0.1:{self.ports['namesrv']}"
        self.broker = f"127.0.0.1:{self.ports['broker']}"
        self.grpc = f"127.0.0.1:{self.ports['grpc']}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / f"rocketflow-dev-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        argv = [*rocketflow_command(), "dev", "--namesrv-port", str(self.ports["namesrv"]),
                "--broker-port", str(self.ports["broker"]), "--grpc-port", str(self.ports["grpc"]),
                "--store-dir", str(self.store_dir), *self.extra_args]
        log = open(self.log_path, "wb")  # noqa: SIM115 (the child holds it)
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        cwd=self.work_dir)
        log.close()
        deadline = time.monotonic() + DEV_START_TIMEOUT
        while time.monotonic() < deadline:
            text = _tail(self.log_path, 20_000)
            if GRPC_LINE.search(text):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        pytest.fail(f"`{' '.join(argv)}` did not start its gRPC endpoint:\n{_tail(self.log_path)}", pytrace=False)

    def kill9(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> int | None:
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        os.kill(process.pid, signal.SIGTERM)
        try:
            return process.wait(DEV_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(5.0)
            return None

    def problems(self) -> list[str]:
        return _problem_lines(sorted(self.work_dir.glob("rocketflow-dev-*.log")), limit=30)


@pytest.fixture
def dev5(tmp_path: Path) -> Iterator[DevServer]:
    """``rocketflow dev`` with its gRPC endpoint, short transaction check-backs and long polling for tests."""
    server = DevServer(tmp_path, "--set", "transactionCheckInterval=1000", "--set", "transactionTimeOut=1000",
                       "--set", "grpc_long_polling_timeout_ms=3000", "--set", "grpc_consumer_backoff=1s 1s 2s")
    server.start()
    try:
        yield server
    finally:
        code = server.stop()
        for line in server.problems():
            print(f"rocketflow dev: {line}")
    if code not in (0, None):
        pytest.fail(f"rocketflow dev did not stop cleanly (exit {code}):\n{_tail(server.log_path)}", pytrace=False)
