"""`DevCluster`: a name server and a broker (and optionally its slaves) in one process and loop, for
demos and tests.

Use it as ``async with DevCluster() as cluster:`` inside a running loop, or from synchronous
code with ``cluster = DevCluster.start_in_thread()`` ... ``cluster.close()`` (the servers then run
on a background thread's loop). Without a ``store_dir`` the store lives in a temporary directory
removed at close (unless ``keep_store``).
"""

from __future__ import annotations

import asyncio
import shutil
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


class DevCluster:
    """Name server + broker on 127.0.0.1 (ports 0 = free ports)."""

    def __init__(self, *, namesrv_port: int = 0, broker_port: int = 0, store_dir: str | Path | None = None,
                 host: str = "127.0.0.1", keep_store: bool = False,
                 broker_settings: Mapping[str, object] | None = None, slaves: int = 0,
                 event_loop: str = "auto") -> None:
        """``broker_settings`` are `BrokerConfig` fields (``"store.<name>"`` for store fields); the name
        server takes the ``tls_mode`` / ``tls_server_*`` ones too. ``slaves`` > 0 also runs that many
        slaves of the broker (ids 1..n, free ports, stores under ``slave-<id>`` of the store dir).
        ``event_loop`` is the loop `start_background` serves on (see `rocketflow.net.event_loop`)."""
        self.host = host
        self.namesrv_port = namesrv_port
        self.broker_port = broker_port
        self.keep_store = keep_store or store_dir is not None
        self._temp_dir: str | None = None
        self._store_dir = Path(store_dir) if store_dir is not None else None
        self.broker_settings = dict(broker_settings or {})
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
            self._temp_dir = tempfile.mkdtemp(prefix="rocketflow-dev-")
            self._store_dir = Path(self._temp_dir)
        namesrv_tls = {key: value for key, value in self.broker_settings.items()
                       if key == "tls_mode" or key.startswith("tls_server_")}
        namesrv = NameServer(NamesrvConfig(host=self.host, port=self.namesrv_port, **namesrv_tls))  # type: ignore[arg-type]
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
            broker = BrokerController(build_broker_config(settings))
            await broker.start()
        except BaseException:
            await namesrv.stop()
            self.namesrv = None
            self._remove_temp_dir()
            raise
        self.broker = broker
        try:
            for broker_id in range(1, self.slave_count + 1):
                slave_settings = {**settings, "listen_port": 0, "broker_id": broker_id,
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


__all__ = ["DevCluster"]
