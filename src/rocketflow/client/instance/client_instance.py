"""`ClientInstance`: what every producer and consumer of one client id shares (RocketMQ's ``MQClientInstance``).

One instance per client id per process (`ClientInstance.get_or_create`). It owns one asyncio event
loop running on one background daemon thread, the `RemotingClient` and `ClientAPI` on it, the
topic route / broker address / broker version tables, the registered producers and consumers,
the periodic tasks (route refresh, heartbeat with offline-broker cleanup, offset persistence,
rebalance) and the handlers of broker-initiated requests.

Consumers registered here are duck-typed. The instance calls, when present:

* ``consumer_data() -> ConsumerData`` (required: heartbeats, subscribed topics);
* ``do_rebalance()`` (every `ClientConfig.rebalance_interval`, at start, on NOTIFY_CONSUMER_IDS_CHANGED
  and `rebalance_immediately`);
* ``persist_consumer_offset()`` (every `ClientConfig.persist_consumer_offset_interval`);
* ``update_topic_subscribe_info(topic, queues)`` (after a route change of a topic);
* ``reset_offset(topic, {mq: offset})`` (RESET_CONSUMER_CLIENT_OFFSET);
* ``running_info() -> ConsumerRunningInfo`` (GET_CONSUMER_RUNNING_INFO);
* ``consume_message_directly(msg, broker_name) -> WireBody | bytes`` (CONSUME_MESSAGE_DIRECTLY).

Each may be a plain method or a coroutine function (awaited on the loop). Start/shutdown are
reference counted: every `start` needs its `shutdown`; the last one unregisters the clients from
the brokers, closes the connections and joins the loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import math
import random
import sys
import threading
import traceback
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar, cast

from rocketflow import __version__
from rocketflow.acl.signing import AclClientHook
from rocketflow.client.api import ClientAPI
from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import MQClientError, MQError, MQTimeoutError
from rocketflow.client.producer.request_reply import reply_from_push
from rocketflow.client.route import (
    MASTER_ID,
    FindBrokerResult,
    TopicPublishInfo,
    normalized_route,
    route_to_publish_info,
    route_to_subscribe_info,
    shrink_default_route,
)
from rocketflow.net import RemotingClient, RemotingError, RequestContext
from rocketflow.net.event_loop import new_event_loop
from rocketflow.protocol.bodies import (
    ConsumerData,
    ConsumerRunningInfo,
    HeartbeatData,
    ProducerData,
    ResetOffsetBody,
    TopicRouteData,
    WireBody,
)
from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue
from rocketflow.protocol.names import DEFAULT_TOPIC
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers import (
    CheckTransactionStateRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    ReplyMessageRequestHeader,
    ResetOffsetRequestHeader,
)

if TYPE_CHECKING:  # prometheus_client is imported only when metrics are enabled
    from rocketflow.client.metrics import ClientMetrics

logger = logging.getLogger("rocketflow.client")

#: The producer group every instance announces (RocketMQ's ``MixAll.CLIENT_INNER_PRODUCER_GROUP``).
CLIENT_INNER_PRODUCER_GROUP: Final = "CLIENT_INNER_PRODUCER"
#: How long starting or stopping the loop thread may take.
LIFECYCLE_TIMEOUT: Final = 15.0

_T = TypeVar("_T")


def _settle_submitted(running: set[asyncio.Task[Any]], future: concurrent.futures.Future[_T],
                      task: asyncio.Task[_T]) -> None:
    """Copy a finished `ClientInstance.submit` task's outcome to its future (unless that was cancelled)."""
    running.discard(task)
    if task.cancelled():
        future.cancel()
        return
    if not future.set_running_or_notify_cancel():
        return
    error = task.exception()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())


def _cancel_submitted(loop: asyncio.AbstractEventLoop, task_ref: weakref.ref[asyncio.Task[Any]],
                      future: concurrent.futures.Future[Any]) -> None:
    """A `ClientInstance.submit` future is done: if it was cancelled, cancel its task (from any thread)."""
    if not future.cancelled():
        return
    task = task_ref()
    if task is not None and not task.done() and not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(task.cancel)


class _Waiter:
    """What `ClientInstance.run` blocks on: a lock the loop releases once the task is done.

    Lighter than a ``concurrent.futures.Future`` (no condition variable, no callbacks list, no
    chaining), which matters for a synchronous send: this hand-back is paid once a call.
    """

    __slots__ = ("done", "error", "result", "task")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.result: Any = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[Any] | None = None

    def start(self, running: set[asyncio.Task[Any]], coro: Coroutine[Any, Any, Any]) -> None:
        """On the loop: run ``coro`` as a task that settles this waiter."""
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except BaseException as exc:
            coro.close()
            self.error = exc
            self.done.release()
            raise
        self.task = task
        running.add(task)
        task.add_done_callback(functools.partial(self._settle, running))

    def _settle(self, running: set[asyncio.Task[Any]], task: asyncio.Task[Any]) -> None:
        running.discard(task)
        self.task = None
        if task.cancelled():
            self.error = concurrent.futures.CancelledError()
        else:
            self.error = task.exception()
            if self.error is None:
                self.result = task.result()
        self.done.release()

    def cancel(self) -> None:
        """On the loop: cancel the task if it still runs."""
        task = self.task
        if task is not None and not task.done():
            task.cancel()


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class ClientInstance:
    """The shared per-client-id runtime; see the module docstring."""

    #: Keyed by client id AND name servers: unlike RocketMQ (client id only), a second client pointed
    #: at another cluster must not silently reuse the first one's name servers.
    _registry: ClassVar[dict[tuple[str, tuple[str, ...]], ClientInstance]] = {}
    _registry_lock: ClassVar[threading.RLock] = threading.RLock()

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
        self.config = config
        self.client_id = client_id or config.build_client_id()
        self._registry_key: tuple[str, tuple[str, ...]] | None = None
        # never the registry lock here: start() holds that one while it waits for the loop
        self._clients_lock = threading.Lock()
        self._producers: dict[str, Any] = {}
        self._reply_futures: dict[str, asyncio.Future[MessageExt]] = {}
        self._consumers: dict[str, Any] = {}
        self._ref_count = 0
        self._closed = False
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_id: int | None = None
        self._remoting: RemotingClient | None = None
        self._api: ClientAPI | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._route_lock: asyncio.Lock | None = None
        self._heartbeat_lock: asyncio.Lock | None = None
        #: the heartbeats out of turn waiting to start and running (see `heartbeat_soon`)
        self._pending_heartbeat: asyncio.Future[None] | None = None
        self._running_heartbeat: asyncio.Future[None] | None = None
        self._last_on_demand_heartbeat = -math.inf
        #: broker addresses this instance had a connection to (a new one to them is a reconnection)
        self._connected_before: set[str] = set()
        #: broker address -> resolved when a connection to it opens (see `broker_reachable`)
        self._reconnect_waiters: dict[str, asyncio.Future[bool]] = {}
        self._rebalance_event: asyncio.Event | None = None
        self._background: set[asyncio.Task[Any]] = set()
        #: tasks of `submit` still running (not cancelled at shutdown, as run_coroutine_threadsafe's are not)
        self._submitted: set[asyncio.Task[Any]] = set()
        self._inner_producer: Any = None
        #: topic -> the (normalized) route last fetched
        self.topic_route_table: dict[str, TopicRouteData] = {}
        #: broker name -> {broker id: address}
        self.broker_addr_table: dict[str, dict[int, str]] = {}
        #: broker name -> {address: version reported in heartbeat responses}
        self.broker_version_table: dict[str, dict[str, int]] = {}
        self._publish_table: dict[str, TopicPublishInfo] = {}
        self._subscribe_table: dict[str, list[MessageQueue]] = {}
        #: Prometheus metrics, once enabled (``metrics_port`` setting or `enable_metrics`)
        self.metrics: ClientMetrics | None = None

    def __repr__(self) -> str:
        return f"ClientInstance({self.client_id!r}, started={self.started}, refs={self._ref_count})"

    # ------------------------------------------------------------------ properties

    @property
    def started(self) -> bool:
        return self._loop is not None and not self._closed

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The instance's event loop (raises `MQClientError` if not started)."""
        if self._loop is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        return self._loop

    @property
    def api(self) -> ClientAPI:
        """The RPC layer (use it on `loop`)."""
        if self._api is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        return self._api

    @property
    def loop_thread(self) -> threading.Thread | None:
        return self._thread

    def in_loop_thread(self) -> bool:
        return self._thread_id is not None and threading.get_ident() == self._thread_id

    # ------------------------------------------------------------------ registration

    def register_producer(self, group: str, producer: Any) -> None:
        """Register a producer group; a second producer of the same group raises `MQClientError`."""
        with self._clients_lock:
            if group in self._producers:
                raise MQClientError(f"the producer group {group!r} is already registered on client {self.client_id} "
                                    "in this process; use another group name or share the producer")
            self._producers[group] = producer

    def register_consumer(self, group: str, consumer: Any) -> None:
        """Register a consumer group; a second consumer of the same group raises `MQClientError`."""
        if not callable(getattr(consumer, "consumer_data", None)):
            raise MQClientError(f"consumer {consumer!r} has no consumer_data() method")
        with self._clients_lock:
            if group in self._consumers:
                raise MQClientError(f"the consumer group {group!r} is already registered on client {self.client_id} "
                                    "in this process; use another group name or share the consumer")
            self._consumers[group] = consumer

    def unregister_producer(self, group: str) -> None:
        """Forget a producer group and tell the brokers (UNREGISTER_CLIENT), best effort."""
        with self._clients_lock:
            removed = self._producers.pop(group, None) is not None
        if removed:
            self._unregister_remote(producer_group=group)

    def unregister_consumer(self, group: str) -> None:
        """Forget a consumer group and tell the brokers (UNREGISTER_CLIENT), best effort."""
        with self._clients_lock:
            removed = self._consumers.pop(group, None) is not None
        if removed:
            self._unregister_remote(consumer_group=group)

    def _unregister_remote(self, *, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        if not self.started:
            return
        coro = self.unregister_client(producer_group=producer_group, consumer_group=consumer_group)
        if self.in_loop_thread():
            self._spawn(coro)
        else:
            try:
                self.run(coro, LIFECYCLE_TIMEOUT)
            except MQError as exc:
                logger.warning("%s: unregistering %s from the brokers failed: %s", self.client_id,
                               producer_group or consumer_group, exc)

    def producers(self) -> dict[str, Any]:
        with self._clients_lock:
            return dict(self._producers)

    def consumers(self) -> dict[str, Any]:
        with self._clients_lock:
            return dict(self._consumers)

    def select_consumer(self, group: str) -> Any:
        with self._clients_lock:
            return self._consumers.get(group)

    def select_producer(self, group: str) -> Any:
        with self._clients_lock:
            return self._producers.get(group)

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
        from rocketflow.client.metrics import ClientMetrics

        metrics = ClientMetrics(self)
        try:
            metrics.serve(port, host)
        except OSError as exc:
            raise MQClientError(str(exc.strerror or exc)) from None
        self.metrics = metrics
        return metrics

    # ------------------------------------------------------------------ running coroutines

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        """Run ``coro`` on the instance's loop and wait for its result (from any other thread).

        Raises `MQClientError` when called on the loop thread (waiting there would deadlock: await
        the coroutine instead) or when the instance is not started; `MQTimeoutError` after ``timeout``.
        """
        if self.in_loop_thread():
            coro.close()
            raise MQClientError("blocking call on the client's own event loop thread would deadlock; "
                                "await the coroutine (or use the *_async variant) instead")
        loop = self._loop
        if loop is None or loop.is_closed():
            coro.close()
            raise MQClientError(f"client instance {self.client_id} is not started")
        waiter = _Waiter()
        try:
            loop.call_soon_threadsafe(waiter.start, self._submitted, coro)
        except RuntimeError:  # closed since the check above
            coro.close()
            raise MQClientError(f"client instance {self.client_id} is not started") from None
        if not waiter.done.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(waiter.cancel)
            raise MQTimeoutError(f"no result within {timeout}s")
        error = waiter.error
        if error is not None:
            waiter.error = None  # no cycle through the traceback's frames
            raise error
        return cast(_T, waiter.result)

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Schedule ``coro`` on the instance's loop; returns a thread-safe future.

        As `asyncio.run_coroutine_threadsafe` (cancelling the future cancels the task), except that
        the finished future keeps no reference to the task: the stdlib's chaining callbacks keep the
        task, its coroutine and context alive for as long as the future (~20 GC-tracked objects), so
        a caller holding many ``send_async`` futures grew the heap, and the full collections that
        growth triggers stalled the process for 100s of ms.
        """
        loop = self._loop
        if loop is None or loop.is_closed():
            coro.close()
            raise MQClientError(f"client instance {self.client_id} is not started")
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        loop.call_soon_threadsafe(self._start_submitted, coro, future)
        return future

    def _start_submitted(self, coro: Coroutine[Any, Any, _T], future: concurrent.futures.Future[_T]) -> None:
        """On the loop: run a `submit`-ted coroutine as a task whose outcome settles ``future``."""
        if future.cancelled():
            coro.close()
            return
        try:
            loop = asyncio.get_running_loop()
            task = loop.create_task(coro)
        except BaseException as exc:
            coro.close()
            if future.set_running_or_notify_cancel():
                future.set_exception(exc)
            raise
        # Strong reference while it runs (the future no longer holds the task); a weak one to cancel it.
        self._submitted.add(task)
        task.add_done_callback(functools.partial(_settle_submitted, self._submitted, future))
        future.add_done_callback(functools.partial(_cancel_submitted, loop, weakref.ref(task)))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _periodic(self, name: str, first_delay: float, interval: float,
                        action: Callable[[], Awaitable[object]]) -> None:
        await asyncio.sleep(first_delay)
        while not self._stopping:
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s: periodic %s failed", self.client_id, name)
            await asyncio.sleep(interval)

    # ------------------------------------------------------------------ routes

    def _topics_in_use(self) -> set[str]:
        topics = set(self._publish_table)
        for consumer in self.consumers().values():
            try:
                data = consumer.consumer_data()
            except Exception:
                logger.exception("%s: consumer_data() failed", self.client_id)
                continue
            if isinstance(data, ConsumerData):
                topics.update(sub.topic for sub in data.subscription_data_set)
        return topics

    async def update_all_topic_routes(self) -> None:
        """Refresh the route of every topic a producer published to or a consumer subscribes."""
        for topic in sorted(self._topics_in_use()):
            await self.update_topic_route(topic)

    async def update_topic_route(self, topic: str, *, is_default: bool = False, default_topic_queue_nums: int = 4,
                                 create_topic_key: str = DEFAULT_TOPIC, raise_errors: bool = False) -> bool:
        """Fetch ``topic``'s route (or, with ``is_default``, the route of ``create_topic_key`` shrunk to
        ``default_topic_queue_nums`` queues per broker) and apply it if it changed. False if no route.

        A failed lookup (no name server answers, or one refuses) is logged and gives False, or with
        ``raise_errors`` is raised (`MQError`) for the caller to report."""
        lock = self._route_lock
        if lock is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        async with lock:
            try:
                if is_default:
                    route = await self.api.get_topic_route(create_topic_key)
                    if route is not None:
                        route = shrink_default_route(route, default_topic_queue_nums)
                else:
                    route = await self.api.get_topic_route(topic)
            except MQError as exc:
                if raise_errors:
                    raise
                logger.warning("%s: route lookup of %s failed: %s", self.client_id,
                               create_topic_key if is_default else topic, exc)
                return False
            if route is None:
                logger.debug("%s: no route for %s", self.client_id, create_topic_key if is_default else topic)
                return False
            route = normalized_route(route)
            if self.topic_route_table.get(topic) != route or self._route_needs_update(topic):
                self._apply_route(topic, route)
            return True

    def _route_needs_update(self, topic: str) -> bool:
        info = self._publish_table.get(topic)
        if info is None or not info.ok():
            return True
        return topic not in self._subscribe_table

    def _apply_route(self, topic: str, route: TopicRouteData) -> None:
        known = {addr for addrs in self.broker_addr_table.values() for addr in addrs.values()}
        new_broker = False
        for broker in route.broker_datas:
            self.broker_addr_table[broker.broker_name] = dict(broker.broker_addrs)
            new_broker = new_broker or any(addr not in known for addr in broker.broker_addrs.values())
        if new_broker and self.producers():
            # a broker learns of a producer group from its heartbeat, and looks there for whom to ask when it
            # checks a transaction back: introduce ourselves now rather than at the next 30 s round
            self.heartbeat_soon("a broker joined a route")
        self._publish_table[topic] = route_to_publish_info(topic, route)
        subscribe = route_to_subscribe_info(topic, route)
        self._subscribe_table[topic] = subscribe
        self.topic_route_table[topic] = route
        logger.info("%s: route of %s is now %s", self.client_id, topic, route.encode().decode())
        for consumer in self.consumers().values():
            hook = getattr(consumer, "update_topic_subscribe_info", None)
            if callable(hook):
                try:
                    result = hook(topic, list(subscribe))
                    if inspect.isawaitable(result):
                        self._spawn(_maybe_await(result))
                except Exception:
                    logger.exception("%s: update_topic_subscribe_info(%s) failed", self.client_id, topic)

    def topic_route(self, topic: str) -> TopicRouteData | None:
        return self.topic_route_table.get(topic)

    def topic_publish_info(self, topic: str) -> TopicPublishInfo:
        """The topic's publish queues from the last route (an empty, not-ok info if none yet)."""
        return self._publish_table.get(topic) or TopicPublishInfo()

    def topic_subscribe_info(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues from the last route, sorted ([] if no route yet)."""
        return list(self._subscribe_table.get(topic, ()))

    # ------------------------------------------------------------------ broker addresses

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        """The master's address of ``broker_name``."""
        addrs = self.broker_addr_table.get(broker_name)
        return addrs.get(MASTER_ID) if addrs else None

    def find_broker_address_in_subscribe(self, broker_name: str, broker_id: int = MASTER_ID,
                                         only_this_broker: bool = False) -> FindBrokerResult | None:
        """``broker_name``'s address with ``broker_id``; for a slave id also id + 1; unless
        ``only_this_broker``, any address of it (lowest id) as a last resort."""
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        slave = broker_id != MASTER_ID
        if addr is None and slave:
            addr = addrs.get(broker_id + 1)
        if addr is None and not only_this_broker:
            first_id = min(addrs)
            addr, slave = addrs[first_id], first_id != MASTER_ID
        if addr is None:
            return None
        return FindBrokerResult(addr, slave, self.find_broker_version(broker_name, addr))

    def find_broker_address_in_admin(self, broker_name: str) -> FindBrokerResult | None:
        """Any address of ``broker_name``, the master's if it has one."""
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        broker_id = min(addrs)
        addr = addrs[broker_id]
        return FindBrokerResult(addr, broker_id != MASTER_ID, self.find_broker_version(broker_name, addr))

    def find_broker_version(self, broker_name: str, addr: str) -> int:
        return self.broker_version_table.get(broker_name, {}).get(addr, 0)

    def find_broker_addr_by_topic(self, topic: str) -> str | None:
        """The master (else a slave) of a random broker of ``topic``'s route."""
        route = self.topic_route_table.get(topic)
        if route is None or not route.broker_datas:
            return None
        broker = random.choice(route.broker_datas)
        return broker.select_broker_addr()

    def vip_address(self, addr: str) -> str:
        """``addr`` on the VIP channel (port - 2) when `ClientConfig.vip_channel_enabled`."""
        if not self.config.vip_channel_enabled:
            return addr
        host, _, port = addr.rpartition(":")
        return f"{host}:{int(port) - 2}" if port.isdigit() else addr

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP to a broker of ``topic``; [] when unknown (no route, RPC failure)."""
        addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            await self.update_topic_route(topic)
            addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            return []
        try:
            return await self.api.get_consumer_id_list(addr, group, self.config.mq_client_api_timeout)
        except MQError as exc:
            logger.warning("%s: consumer list of %s from %s failed: %s", self.client_id, group, addr, exc)
            return []

    # ------------------------------------------------------------------ heartbeats

    async def _prepare_heartbeat(self) -> HeartbeatData:
        producers = [ProducerData(group) for group in sorted(self.producers())]
        if CLIENT_INNER_PRODUCER_GROUP not in self.producers():
            producers.append(ProducerData(CLIENT_INNER_PRODUCER_GROUP))
        consumers: list[ConsumerData] = []
        for group, consumer in sorted(self.consumers().items()):
            try:
                data = await _maybe_await(consumer.consumer_data())
            except Exception:
                logger.exception("%s: consumer_data() of %s failed", self.client_id, group)
                continue
            if isinstance(data, ConsumerData):
                consumers.append(data)
        return HeartbeatData(self.client_id, producers, consumers)

    async def send_heartbeat_to_all_brokers(self) -> None:
        """HEART_BEAT to every known broker: all addresses if there are consumers, masters otherwise."""
        lock = self._heartbeat_lock
        if lock is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        async with lock:
            if not self.producers() and not self.consumers():
                return
            data = await self._prepare_heartbeat()
            targets = [
                (broker_name, addr)
                for broker_name, addrs in list(self.broker_addr_table.items())
                for broker_id, addr in sorted(addrs.items())
                if data.consumer_data_set or broker_id == MASTER_ID
            ]
            results = await asyncio.gather(
                *(self.api.heartbeat(addr, data, self.config.mq_client_api_timeout) for _, addr in targets),
                return_exceptions=True)
            for (broker_name, addr), result in zip(targets, results, strict=True):
                if isinstance(result, int):
                    self.broker_version_table.setdefault(broker_name, {})[addr] = result
                elif isinstance(result, MQError):
                    logger.warning("%s: heartbeat to %s (%s) failed: %s", self.client_id, broker_name, addr, result)
                elif isinstance(result, BaseException):
                    raise result

    def clean_offline_brokers(self) -> None:
        """Drop broker addresses no route mentions any more."""
        known = {addr for route in self.topic_route_table.values() for broker in route.broker_datas
                 for addr in broker.broker_addrs.values()}
        for broker_name in list(self.broker_addr_table):
            addrs = {broker_id: addr for broker_id, addr in self.broker_addr_table[broker_name].items()
                     if addr in known}
            if addrs:
                self.broker_addr_table[broker_name] = addrs
            else:
                del self.broker_addr_table[broker_name]
                self.broker_version_table.pop(broker_name, None)
                logger.info("%s: broker %s is offline, removed", self.client_id, broker_name)

    def heartbeat_soon(self, reason: str, *, join_running: bool = False) -> asyncio.Future[None]:
        """A heartbeat to every broker out of turn (on the loop), done when the returned future is.

        Callers asking before it starts share it; with ``join_running``, a caller may also share one that
        already runs (its data and targets were taken before the call). One starts at most once per
        ``heartbeat_on_demand_interval``, so a broker that keeps refusing costs a heartbeat a second, not
        one per failed pull. Failures are logged; the future completes either way.
        """
        running = self._running_heartbeat
        if join_running and running is not None and not running.done():
            return running
        pending = self._pending_heartbeat
        if pending is not None and not pending.done():
            return pending
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending_heartbeat = future
        delay = self._last_on_demand_heartbeat + self.config.heartbeat_on_demand_interval - loop.time()

        async def run() -> None:
            if delay > 0:
                await asyncio.sleep(delay)
            self._pending_heartbeat = None
            self._running_heartbeat = future
            self._last_on_demand_heartbeat = loop.time()
            logger.info("%s: heartbeat to every broker out of turn (%s)", self.client_id, reason)
            await self._heartbeat_quietly()

        def settle(_task: asyncio.Task[None]) -> None:
            if self._pending_heartbeat is future:
                self._pending_heartbeat = None
            if not future.done():
                future.set_result(None)

        task = loop.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(settle)
        return future

    def broker_reachable(self, addr: str, within: float) -> asyncio.Future[bool]:
        """Resolves True as soon as a connection to ``addr`` opens (a probe tries to connect every
        ``broker_reconnect_probe_interval``), or False after ``within`` seconds: so the pulls of a broker
        that went down resume as soon as it is back rather than at their next retry."""
        waiter = self._reconnect_waiters.get(addr)
        if waiter is not None and not waiter.done():
            return waiter
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._reconnect_waiters[addr] = waiter
        self._spawn(self._probe_broker(addr, waiter, loop.time() + within))
        return waiter

    async def _probe_broker(self, addr: str, waiter: asyncio.Future[bool], deadline: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not waiter.done() and not self._stopping:
                pause = min(self.config.broker_reconnect_probe_interval, deadline - loop.time())
                if pause <= 0:
                    break
                await asyncio.sleep(pause)
                if waiter.done():
                    break
                try:
                    await self.api.remoting.get_channel(addr)
                except RemotingError:
                    continue
                if not waiter.done():  # the connection was open already (no `_on_connect`)
                    waiter.set_result(True)
        finally:
            if self._reconnect_waiters.get(addr) is waiter:
                del self._reconnect_waiters[addr]
            if not waiter.done():
                waiter.set_result(False)

    def _on_connect(self, addr: str) -> None:
        """A new connection: to a broker we were connected to before, it may have restarted and forgotten
        our producers and consumers, so introduce ourselves now (not at the next periodic round)."""
        waiter = self._reconnect_waiters.pop(addr, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(True)
        if not any(addr in addrs.values() for addrs in self.broker_addr_table.values()):
            return
        if addr in self._connected_before and (self.consumers() or self.producers()) and not self._stopping:
            self.heartbeat_soon(f"reconnected to {addr}")
        self._connected_before.add(addr)

    async def _heartbeat_quietly(self) -> None:
        try:
            await self.send_heartbeat_to_all_brokers()
        except Exception as exc:  # the periodic round retries
            logger.warning("%s: heartbeat out of turn failed: %s", self.client_id, exc)

    async def _heartbeat_round(self) -> None:
        self.clean_offline_brokers()
        await self.send_heartbeat_to_all_brokers()

    async def unregister_client(self, *, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        """UNREGISTER_CLIENT to every known broker address (failures are logged)."""
        addrs = [addr for addrs in list(self.broker_addr_table.values()) for addr in addrs.values()]
        if not addrs or self._api is None:
            return
        results = await asyncio.gather(
            *(self._api.unregister_client(addr, self.client_id, producer_group=producer_group,
                                          consumer_group=consumer_group, timeout=self.config.mq_client_api_timeout)
              for addr in addrs),
            return_exceptions=True)
        for addr, result in zip(addrs, results, strict=True):
            if isinstance(result, BaseException):
                logger.info("%s: unregister from %s failed: %s", self.client_id, addr, result)

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
                await _maybe_await(action())
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s: %s() of consumer group %s failed", self.client_id, method, group)

    def rebalance_immediately(self) -> None:
        """Wake the rebalance service now (thread-safe)."""
        loop, event = self._loop, self._rebalance_event
        if loop is None or event is None or loop.is_closed():
            return
        if self.in_loop_thread():
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

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
    def inner_producer(self) -> Any:
        """A producer of group ``CLIENT_INNER_PRODUCER`` on this instance (used to send messages back
        to retry topics when CONSUMER_SEND_MSG_BACK fails). Valid while the instance is started."""
        if self._inner_producer is None:
            from rocketflow.client.producer.producer import Producer

            self._inner_producer = Producer._attached(CLIENT_INNER_PRODUCER_GROUP, self)
        return self._inner_producer

    # ------------------------------------------------------------------ broker -> client requests

    def _on_notify_consumer_ids_changed(self, context: RequestContext,
                                        request: RemotingCommand) -> RemotingCommand | None:
        header = NotifyConsumerIdsChangedRequestHeader.from_command(request)
        logger.info("%s: consumer ids of %s changed (from %s), rebalancing", self.client_id,
                    header.consumer_group, context.remote_address)
        self.rebalance_immediately()
        return None

    async def _on_reset_offset(self, context: RequestContext, request: RemotingCommand) -> RemotingCommand | None:
        header = ResetOffsetRequestHeader.from_command(request)
        table = ResetOffsetBody.decode(request.body).offset_table if request.body else {}
        consumer = self.select_consumer(header.group)
        hook = getattr(consumer, "reset_offset", None)
        if callable(hook):
            logger.info("%s: resetting offsets of %s/%s from %s", self.client_id, header.group, header.topic,
                        context.remote_address)
            await _maybe_await(hook(header.topic, dict(table)))
        if request.is_oneway:
            return None
        return request.make_response(ResponseCode.SUCCESS)

    async def _on_get_consumer_running_info(self, context: RequestContext,
                                            request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_command(request)
        consumer = self.select_consumer(header.consumer_group)
        hook = getattr(consumer, "running_info", None)
        if not callable(hook):
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"The Consumer Group <{header.consumer_group}> not exist in this consumer")
        info = await _maybe_await(hook())
        if isinstance(info, ConsumerRunningInfo):
            info.properties.setdefault("PROP_NAMESERVER_ADDR", self.config.namesrv_addr or "")
            info.properties.setdefault("PROP_CLIENT_VERSION", f"rocketflow {__version__}")
            if header.jstack_enable:
                info.jstack = _thread_stacks()
            body = info.encode()
        elif isinstance(info, WireBody):
            body = info.encode()
        else:
            body = bytes(info)
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def _on_consume_message_directly(self, context: RequestContext,
                                           request: RemotingCommand) -> RemotingCommand:
        header = ConsumeMessageDirectlyResultRequestHeader.from_command(request)
        consumer = self.select_consumer(header.consumer_group)
        if consumer is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"The Consumer Group <{header.consumer_group}> not exist in this consumer")
        hook = getattr(consumer, "consume_message_directly", None)
        if not callable(hook):
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"the consumer of group <{header.consumer_group}> does not support consuming a message directly")
        msg, _ = decode_record(request.body)
        result = await _maybe_await(hook(msg, header.broker_name))
        body = result.encode() if isinstance(result, WireBody) else bytes(result)
        return request.make_response(ResponseCode.SUCCESS, body=body)


    def _on_check_transaction_state(self, context: RequestContext, request: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE: hand the half message to its group's transactional producer."""
        header = CheckTransactionStateRequestHeader.from_command(request)
        try:
            msg, _ = decode_record(request.body)
        except RecordDecodeError as exc:
            logger.warning("%s: undecodable message in a transaction check from %s: %s", self.client_id,
                           context.remote_address, exc)
            return
        group = msg.properties.get(MessageConst.PRODUCER_GROUP)
        producer = self.select_producer(group) if group else None
        check = getattr(producer, "check_transaction_state", None)
        if not callable(check):
            logger.warning("%s: transaction check for group %r from %s, but no transactional producer of it runs "
                           "here", self.client_id, group, context.remote_address)
            return
        check(context.remote_address, header, msg)


    def expect_reply(self, correlation_id: str) -> asyncio.Future[MessageExt]:
        """A future for the reply to the request ``correlation_id`` (call on the loop; `forget_reply` after)."""
        future: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self._reply_futures[correlation_id] = future
        return future

    def forget_reply(self, correlation_id: str) -> None:
        self._reply_futures.pop(correlation_id, None)

    def _on_push_reply_message(self, context: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: a reply to one of our requests (unmatched ones are logged)."""
        header = ReplyMessageRequestHeader.from_command(request)
        try:
            reply = reply_from_push(header, request.body)
        except (ValueError, ProtocolError) as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"cannot read the reply: {exc}")
        correlation_id = reply.properties.get(MessageConst.CORRELATION_ID, "")
        future = self._reply_futures.get(correlation_id)
        if future is None or future.done():
            logger.warning("%s: a reply (correlation id %r) from %s matches no waiting request", self.client_id,
                           correlation_id, context.remote_address)
        else:
            future.set_result(reply)
        return request.make_response(ResponseCode.SUCCESS)


def _thread_stacks() -> str:
    frames = sys._current_frames()
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in frames.items():
        parts.append(f'"{names.get(ident, ident)}"\n' + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def shutdown_all(instances: Iterable[ClientInstance] | None = None) -> None:
    """Force every (or the given) live instance down, whatever its reference count (tests, atexit)."""
    for instance in list(instances if instances is not None else ClientInstance.live_instances()):
        while instance._ref_count > 0:
            instance.shutdown()


__all__ = [
    "CLIENT_INNER_PRODUCER_GROUP",
    "ClientInstance",
    "shutdown_all",
]
