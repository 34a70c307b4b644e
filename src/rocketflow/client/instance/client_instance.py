"""`ClientInstance`: what every producer and consumer of one client id shares (RocketMQ's ``MQClientInstance``).

One instance per client id per process (`ClientInstance.get_or_create`). It owns one asyncio event
loop running on one background daemon thread, the `RemotingClient` and `ClientAPI` on it, the
topic route / broker address / broker version tables, the registered producers and consumers,
the periodic tasks (route refresh, heartbeat with offline-broker cleanup, offset persistence,
rebalance) and the handlers of broker-initiated requests. Its roles live in one module each:
`runtime` (the loop, `run` / `submit`, registered clients), `routes`, `heartbeats` and
`server_requests`; this module starts and stops them and runs the consumers' periodic services.

Consumers registered here are duck-typed. The instance calls, when present:

* ``consumer_data() -> ConsumerData`` (required: heartbeats, subscribed topics);
* ``do_rebalance()`` (every `ClientConfig.rebalance_interval`, at start, on NOTIFY_CONSUMER_IDS_CHANGED
  and `rebalance_immediately`);
* ``persist_consumer_offset()`` (every `ClientConfig.persist_consumer_offset_interval`);
* ``update_topic_subscribe_info(topic, queues)`` (after a route change of a topic);
* ``reset_offset(topic, {mq: offset})`` (RESET_CONSUMER_CLIENT_OFFSET);
* ``running_info() -> ConsumerRunningInfo`` (GET_CONSUMER_RUNNING_INFO);
* ``consume_message_directly(msg, broker_name) -> WireBody | bytes`` (CONSUME_MESSAGE_DIRECTLY).

Each may be a plain method or a coroutine function (awaited on the loop). A producer registered
here may have ``check_transaction_state(broker_addr, header, msg)`` (CHECK_TRANSACTION_STATE).
Start/shutdown are reference counted: every `start` needs its `shutdown`; the last one unregisters
the clients from the brokers, closes the connections and joins the loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar, Protocol

from rocketflow.acl.signing import AclClientHook
from rocketflow.client.api import ClientAPI, SendResult
from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import MQClientError
from rocketflow.client.instance.heartbeats import CLIENT_INNER_PRODUCER_GROUP, Heartbeats
from rocketflow.client.instance.runtime import LIFECYCLE_TIMEOUT, maybe_await
from rocketflow.client.instance.server_requests import ServerRequestHandlers
from rocketflow.net import RemotingClient
from rocketflow.net.event_loop import new_event_loop
from rocketflow.protocol.message import Message
from rocketflow.remoting.codes import RequestCode

if TYPE_CHECKING:  # prometheus_client is imported only when metrics are enabled
    from rocketflow.client.metrics import ClientMetrics

logger = logging.getLogger(__name__)


class InnerProducer(Protocol):
    """What the instance's inner producer is used for: sending a message (a `Producer` attached to it)."""

    async def send_coro(self, msg: Message) -> SendResult | None: ...


class ClientInstance(Heartbeats, ServerRequestHandlers):
    """The shared per-client-id runtime; see the module docstring."""

    #: Keyed by client id AND name servers: unlike RocketMQ (client id only), a second client pointed
    #: at another cluster must not silently reuse the first one's name servers.
    _registry: ClassVar[dict[tuple[str, tuple[str, ...]], ClientInstance]] = {}
    _registry_lock: ClassVar[threading.RLock] = threading.RLock()
    #: Builds an instance's inner producer. `rocketflow.client.producer.producer` sets it when imported:
    #: producers are built on the instance, so the instance does not import them.
    inner_producer_factory: ClassVar[Callable[[ClientInstance], InnerProducer] | None] = None

    # ------------------------------------------------------------------ registry

    @classmethod
    def get_or_create(cls, config: ClientConfig) -> ClientInstance:
        """The live instance of ``config``'s client id, or a new one (not started) built from ``config``.

        As in RocketMQ, an existing instance keeps the settings it was created with; clients that name
        other name servers get an instance of their own.
        """
        client_id = config.build_client_id()
        key = (client_id, tuple(sorted(config.namesrv_addresses())))
        with cls._registry_lock:
            instance = cls._registry.get(key)
            if instance is None:
                instance = cls(config.copy(), client_id)
                instance._registry_key = key
                cls._registry[key] = instance
            return instance

    def discard(self) -> None:
        """Forget an instance that was created but never started (a started one is shut down instead)."""
        if self.started:
            raise MQClientError("discard() is for instances that were never started; call shutdown()")
        with self._registry_lock:
            key = self._registry_key
            if key is not None and ClientInstance._registry.get(key) is self:
                del ClientInstance._registry[key]

    @classmethod
    def live_instances(cls) -> list[ClientInstance]:
        """Every instance currently registered (for diagnostics and tests)."""
        with cls._registry_lock:
            return list(cls._registry.values())

    def __init__(self, config: ClientConfig, client_id: str | None = None) -> None:
        super().__init__(config, client_id)
        self._registry_key: tuple[str, tuple[str, ...]] | None = None
        self._ref_count = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._inner_producer: InnerProducer | None = None
        #: Prometheus metrics, once enabled (``metrics_port`` setting or `enable_metrics`)
        self.metrics: ClientMetrics | None = None

    def __repr__(self) -> str:
        return f"ClientInstance({self.client_id!r}, started={self.started}, refs={self._ref_count})"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start (first call) or add a reference (later calls). Raises `MQClientError` after final shutdown."""
        with self._registry_lock:
            if self._closed:
                raise MQClientError(f"client instance {self.client_id} was shut down; "
                                    "get a new one with ClientInstance.get_or_create")
            self._ref_count += 1
            if self._ref_count > 1:
                return
            try:
                self._start_loop()
            except BaseException:
                self._ref_count -= 1
                raise

    def shutdown(self) -> None:
        """Drop one reference; the last one stops everything and removes the instance from the registry."""
        if self.in_loop_thread():
            raise MQClientError("a client cannot be shut down from its own event loop thread "
                                "(call shutdown() from another thread)")
        with self._registry_lock:
            if self._ref_count == 0:
                return
            self._ref_count -= 1
            if self._ref_count > 0:
                return
            self._closed = True
            key = self._registry_key
            if key is not None and ClientInstance._registry.get(key) is self:
                del ClientInstance._registry[key]
        self._stop_loop()

    def _start_loop(self) -> None:
        loop = new_event_loop(self.config.event_loop)
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        def main() -> None:
            self._thread_id = threading.get_ident()
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set_result, None)
            try:
                loop.run_forever()
            finally:
                try:
                    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
                    for task in pending:
                        task.cancel()
                    if pending:
                        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                    loop.run_until_complete(loop.shutdown_asyncgens())
                finally:
                    loop.close()

        thread = threading.Thread(target=main, name=f"rocketflow-client[{self.client_id}]", daemon=True)
        thread.start()
        started.result(LIFECYCLE_TIMEOUT)
        self._loop = loop
        self._thread = thread
        try:
            asyncio.run_coroutine_threadsafe(self._start_async(), loop).result(LIFECYCLE_TIMEOUT)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(LIFECYCLE_TIMEOUT)
            self._loop = None
            self._thread = None
            self._thread_id = None
            raise
        if self.config.metrics_port:
            try:
                self.enable_metrics(self.config.metrics_port, self.config.metrics_host)
            except MQClientError:
                self._stop_loop()
                raise
        logger.info("client instance %s started", self.client_id)

    async def _start_async(self) -> None:
        config = self.config
        credentials = config.credentials()
        remoting = RemotingClient(name=f"client {self.client_id}", tls=config.tls_settings(),
                                  rpc_hook=AclClientHook(credentials) if credentials is not None else None,
                                  on_connect=self._on_connect)
        remoting.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_notify_consumer_ids_changed)
        remoting.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset)
        remoting.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_get_consumer_running_info)
        remoting.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._on_consume_message_directly)
        remoting.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check_transaction_state)
        remoting.register(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, self._on_push_reply_message)
        self._remoting = remoting
        self._api = ClientAPI(remoting, config.namesrv_addresses(), language=config.language,
                              default_timeout=config.mq_client_api_timeout)
        self._route_lock = asyncio.Lock()
        self._heartbeat_lock = asyncio.Lock()
        self._rebalance_event = asyncio.Event()
        self._rebalance_event.set()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._periodic("route refresh", config.route_first_delay,
                                            config.poll_name_server_interval, self.update_all_topic_routes)),
            loop.create_task(self._periodic("heartbeat", config.heartbeat_first_delay,
                                            config.heartbeat_broker_interval, self._heartbeat_round)),
            loop.create_task(self._periodic("offset persistence", config.persist_first_delay,
                                            config.persist_consumer_offset_interval,
                                            self.persist_all_consumer_offsets)),
            loop.create_task(self._rebalance_service()),
        ]

    def _stop_loop(self) -> None:
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            metrics.stop()
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown_async(), loop).result(LIFECYCLE_TIMEOUT)
        except Exception as exc:
            logger.warning("%s: error while shutting down: %s", self.client_id, exc)
        finally:
            if not loop.is_closed():
                loop.call_soon_threadsafe(loop.stop)
            thread.join(LIFECYCLE_TIMEOUT)
            self._loop = None
            self._thread = None
            self._thread_id = None
            self._api = None
            self._remoting = None
        logger.info("client instance %s shut down", self.client_id)

    async def _shutdown_async(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        groups = [(group, None) for group in self.producers()] + [(None, group) for group in self.consumers()]
        for producer_group, consumer_group in groups:
            await self.unregister_client(producer_group=producer_group, consumer_group=consumer_group)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._remoting is not None:
            await self._remoting.close()

    # ------------------------------------------------------------------ metrics

    def enable_metrics(self, port: int, host: str = "127.0.0.1") -> ClientMetrics:
        """Serve this instance's Prometheus metrics at ``http://host:port/metrics`` until shutdown.

        ``port`` 0 picks a free port (see ``metrics.port``). Raises `MQClientError` when the instance is
        not started, metrics are already served, or the port cannot be bound.
        """
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise MQClientError(f"metrics port must be an int in 0..65535, got {port!r}")
        if not self.started:
            raise MQClientError(f"client instance {self.client_id} is not started; start a client first")
        if self.metrics is not None:
            raise MQClientError(f"metrics of client {self.client_id} are already served on {self.metrics.address}")
        # imported here, not at the top: prometheus_client loads only for an instance that serves metrics
        from rocketflow.client.metrics import ClientMetrics

        metrics = ClientMetrics(self)
        try:
            metrics.serve(port, host)
        except OSError as exc:
            raise MQClientError(str(exc.strerror or exc)) from None
        self.metrics = metrics
        return metrics


    # ------------------------------------------------------------------ consumers: offsets and rebalance

    async def persist_all_consumer_offsets(self) -> None:
        """Call every consumer's ``persist_consumer_offset()``."""
        await self._call_consumers("persist_consumer_offset")

    async def do_rebalance(self) -> None:
        """Call every consumer's ``do_rebalance()``."""
        await self._call_consumers("do_rebalance")

    async def _call_consumers(self, method: str) -> None:
        for group, consumer in self.consumers().items():
            action = getattr(consumer, method, None)
            if not callable(action):
                continue
            try:
                await maybe_await(action())
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s: %s() of consumer group %s failed", self.client_id, method, group)


    async def _rebalance_service(self) -> None:
        event = self._rebalance_event
        assert event is not None
        while not self._stopping:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel racing a set event
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.rebalance_interval):
                    await event.wait()
            event.clear()
            await self.do_rebalance()

    # ------------------------------------------------------------------ the inner producer

    @property
    def inner_producer(self) -> InnerProducer:
        """A producer of group ``CLIENT_INNER_PRODUCER`` on this instance (used to send messages back
        to retry topics when CONSUMER_SEND_MSG_BACK fails). Valid while the instance is started."""
        if self._inner_producer is None:
            factory = ClientInstance.inner_producer_factory
            if factory is None:
                raise MQClientError("no inner producer: rocketflow.client.producer is not imported")
            self._inner_producer = factory(self)
        return self._inner_producer


def shutdown_all(instances: Iterable[ClientInstance] | None = None) -> None:
    """Force every (or the given) live instance down, whatever its reference count (tests, atexit)."""
    for instance in list(instances if instances is not None else ClientInstance.live_instances()):
        while instance._ref_count > 0:
            instance.shutdown()



__all__ = [
    "CLIENT_INNER_PRODUCER_GROUP",
    "LIFECYCLE_TIMEOUT",
    "ClientInstance",
    "InnerProducer",
    "shutdown_all",
]
