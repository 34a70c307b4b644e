"""`DevCluster`: a name server and a broker (and optionally its slaves) in one process and loop, for
demos and tests. It starts both servers, so it sits above the broker and name server packages.

Use it as ``async with DevCluster() as cluster:`` inside a running loop, or from synchronous
code with ``cluster = DevCluster.start_in_thread()`` ... ``cluster.close()`` (the servers then run
on a background thread's loop). Without a ``store_dir`` the store lives in a temporary directory
removed at close (unless ``keep_store``). A process killed outright (SIGKILL, a crash, a power cut)
cannot remove its own; the next cluster to make one removes the ones whose owner is gone
(`sweep_stale_temp_stores`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType

from rocketflow.broker.config import BrokerConfig, build_broker_config
from rocketflow.broker.controller import BrokerController
from rocketflow.namesrv import NameServer, NamesrvConfig
from rocketflow.net.event_loop import parse_event_loop_kind, resolve_event_loop_kind, run
from rocketflow.store import BrokerRole

logger = logging.getLogger(__name__)

#: the name prefix of a dev cluster's temporary store directory
TEMP_STORE_PREFIX = "rocketflow-dev-"
#: the file in a temporary store naming the process that made it: "<pid> <start time> <pid namespace>"
TEMP_STORE_OWNER_FILE = "rocketflow-dev.owner"


def new_broker(config: BrokerConfig) -> BrokerController:
    """A broker for ``config``, with the gRPC endpoint for RocketMQ 5.x clients when ``grpc_port`` is set
    (`rocketflow.proxy`, loaded only then: it needs the ``grpc`` extra)."""
    if config.grpc_port is None:
        return BrokerController(config)
    from rocketflow.proxy import grpc_endpoint

    return BrokerController(config, grpc_endpoint=grpc_endpoint)


def _pid_namespace() -> str:
    """This process's pid namespace (Linux): a pid means nothing to a process in another one, such as
    a container sharing the temporary directory; "-" where it cannot be told."""
    try:
        return os.readlink("/proc/self/ns/pid").replace(" ", "")
    except OSError:
        return "-"


def _process_start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), so that a reused pid is told apart;
    "" where ``/proc`` does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()
    except (OSError, IndexError):
        return ""


def _owner_is_alive(pid: int, start_time: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return not start_time or _process_start_time(pid) in ("", start_time)


def mark_temp_store(directory: Path) -> None:
    """Name this process as the owner of the temporary store ``directory``."""
    pid = os.getpid()
    (directory / TEMP_STORE_OWNER_FILE).write_text(f"{pid} {_process_start_time(pid) or '-'} {_pid_namespace()}\n")


def sweep_stale_temp_stores(temp_root: str | Path | None = None) -> list[Path]:
    """Remove the dev clusters' temporary stores under ``temp_root`` (the system's temporary directory by
    default) whose owning process is gone; returns the directories removed.

    Only a directory with the prefix, owned by this user, with a readable owner file naming a process
    of this pid namespace that no longer runs (or whose pid now belongs to a later process) is
    removed. A kept store (``keep_store``) has no owner file and stays, as does anything this cannot read.
    Nothing is removed on Windows, where a process cannot be probed without ending it.
    """
    root = Path(temp_root if temp_root is not None else tempfile.gettempdir())
    removed: list[Path] = []
    if sys.platform == "win32":
        return removed
    try:
        candidates = [entry for entry in root.iterdir() if entry.name.startswith(TEMP_STORE_PREFIX)]
    except OSError:
        return removed
    uid = os.getuid()
    namespace = _pid_namespace()
    for directory in candidates:
        try:
            if directory.is_symlink() or not directory.is_dir() or directory.stat().st_uid != uid:
                continue
            pid_text, start_time, owner_namespace = (directory / TEMP_STORE_OWNER_FILE).read_text().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if pid <= 0 or owner_namespace != namespace or _owner_is_alive(pid, start_time.strip("-")):
            continue
        shutil.rmtree(directory, ignore_errors=True)
        if not directory.exists():
            logger.info("removed the temporary store %s of dev cluster process %d, which is gone", directory, pid)
            removed.append(directory)
    return removed


class DevCluster:
    """Name server + broker on 127.0.0.1 (ports 0 = free ports)."""

    def __init__(self, *, namesrv_port: int = 0, broker_port: int = 0, store_dir: str | Path | None = None,
                 host: str = "127.0.0.1", keep_store: bool = False,
                 broker_settings: Mapping[str, object] | None = None, slaves: int = 0,
                 event_loop: str = "auto", sweep_stale_stores: bool = True,
                 namesrv_settings: Mapping[str, object] | None = None) -> None:
        """``broker_settings`` are `BrokerConfig` fields (``"store.<name>"`` for store fields); the name
        server takes the ``tls_mode`` / ``tls_server_*`` ones too, and ``namesrv_settings`` (`NamesrvConfig`
        fields, e.g. ``acl_enable`` and ``acl_file``). ``slaves`` > 0 also runs that many
        slaves of the broker (ids 1..n, free ports, stores under ``slave-<id>`` of the store dir).
        ``event_loop`` is the loop `start_background` serves on (see `rocketflow.net.event_loop`).
        ``sweep_stale_stores``: making a temporary store first removes those of dev clusters whose
        process is gone (`sweep_stale_temp_stores`)."""
        self.host = host
        self.namesrv_port = namesrv_port
        self.broker_port = broker_port
        self.keep_store = keep_store or store_dir is not None
        self.sweep_stale_stores = sweep_stale_stores
        self._temp_dir: str | None = None
        self._store_dir = Path(store_dir) if store_dir is not None else None
        self.broker_settings = dict(broker_settings or {})
        self.namesrv_settings = dict(namesrv_settings or {})
        self.namesrv: NameServer | None = None
        self.broker: BrokerController | None = None
        self.slave_count = slaves
        self.event_loop = parse_event_loop_kind(event_loop)
        #: the running slaves of `broker` (empty unless ``slaves`` was given)
        self.slaves: list[BrokerController] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None

    # ------------------------------------------------------------------ addresses

    @property
    def store_dir(self) -> Path:
        if self._store_dir is None:
            raise RuntimeError("the dev cluster is not started")
        return self._store_dir

    @property
    def namesrv_addr(self) -> str:
        if self.namesrv is None:
            raise RuntimeError("the dev cluster is not started")
        return self.namesrv.address

    @property
    def broker_addr(self) -> str:
        if self.broker is None:
            raise RuntimeError("the dev cluster is not started")
        return self.broker.address

    @property
    def broker_config(self) -> BrokerConfig:
        if self.broker is None:
            raise RuntimeError("the dev cluster is not started")
        return self.broker.config

    # ------------------------------------------------------------------ async use

    async def start(self) -> None:
        if self._store_dir is None:
            if self.sweep_stale_stores:
                sweep_stale_temp_stores()
            self._temp_dir = tempfile.mkdtemp(prefix=TEMP_STORE_PREFIX)
            self._store_dir = Path(self._temp_dir)
            if not self.keep_store:
                mark_temp_store(self._store_dir)
        namesrv_tls = {key: value for key, value in self.broker_settings.items()
                       if key == "tls_mode" or key.startswith("tls_server_")}
        namesrv_settings = {"host": self.host, "port": self.namesrv_port, **namesrv_tls, **self.namesrv_settings}
        namesrv = NameServer(NamesrvConfig(**namesrv_settings))  # type: ignore[arg-type]
        await namesrv.start()
        self.namesrv = namesrv
        settings: dict[str, object] = {
            "listen_host": self.host,
            "listen_port": self.broker_port,
            "namesrv_addr": namesrv.address,
            "store.store_root": self._store_dir,
        }
        settings.update(self.broker_settings)
        try:
            broker = new_broker(build_broker_config(settings))
            await broker.start()
        except BaseException:
            await namesrv.stop()
            self.namesrv = None
            self._remove_temp_dir()
            raise
        self.broker = broker
        try:
            for broker_id in range(1, self.slave_count + 1):
                slave_settings = {**settings, "listen_port": 0, "broker_id": broker_id, "grpc_port": None,
                                  "store.broker_role": BrokerRole.SLAVE,
                                  "store.store_root": self._store_dir / f"slave-{broker_id}"}
                slave = BrokerController(build_broker_config(slave_settings))
                await slave.start()
                self.slaves.append(slave)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for slave in reversed(self.slaves):
            await slave.stop()
        self.slaves.clear()
        if self.broker is not None:
            await self.broker.stop()
            self.broker = None
        if self.namesrv is not None:
            await self.namesrv.stop()
            self.namesrv = None
        self._remove_temp_dir()

    def _remove_temp_dir(self) -> None:
        if self._temp_dir is not None and not self.keep_store:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
            self._store_dir = None

    async def __aenter__(self) -> DevCluster:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.stop()

    # ------------------------------------------------------------------ background thread

    @classmethod
    def start_in_thread(cls, **kwargs: object) -> DevCluster:
        """Create a cluster (same arguments as the constructor) serving on a background thread."""
        cluster = cls(**kwargs)  # type: ignore[arg-type]
        cluster.start_background()
        return cluster

    def start_background(self, timeout: float = 30.0) -> None:
        """Start serving on a daemon thread; returns once both servers listen (raises if they cannot)."""
        ready: Future[None] = Future()

        loop_kind = resolve_event_loop_kind(self.event_loop)  # here, so that a missing uvloop raises here

        def main() -> None:
            run(self._serve(ready), loop_kind)

        self._thread = threading.Thread(target=main, name="rocketflow-dev-cluster", daemon=True)
        self._thread.start()
        ready.result(timeout)

    async def _serve(self, ready: Future[None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        try:
            await self.start()
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            await self._stop_event.wait()
        finally:
            await self.stop()

    def close(self, timeout: float = 30.0) -> None:
        """Stop a cluster started with `start_in_thread` and wait for its thread."""
        loop, event, thread = self._loop, self._stop_event, self._thread
        if loop is None or event is None or thread is None:
            return
        if not loop.is_closed():
            loop.call_soon_threadsafe(event.set)
        thread.join(timeout)
        self._thread = None

    def __enter__(self) -> DevCluster:
        if self._thread is None:
            self.start_background()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["TEMP_STORE_OWNER_FILE", "TEMP_STORE_PREFIX", "DevCluster", "mark_temp_store", "new_broker",
           "sweep_stale_temp_stores"]
