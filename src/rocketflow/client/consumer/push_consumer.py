"""`PushConsumer`: the push consumer (RocketMQ's ``DefaultMQPushConsumer``).

```python
consumer = PushConsumer("cg", namesrv="127.0.0.1:9876",
                        consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
consumer.subscribe("Orders", "pay || ship")
consumer.register_concurrent_listener(fn)     # fn(msgs, context) -> ConsumeConcurrentlyStatus
# or consumer.register_orderly_listener(fn)   # fn(msgs, context) -> ConsumeOrderlyStatus
# or consumer.register_key_ordered_listener(fn)   # per-key order, keys in parallel
with consumer:                                 # start() ... shutdown()
    ...
```

Listeners may be plain functions (run on a pool of ``consume_thread_max`` threads) or ``async def``
functions (run on the client instance's event loop; they must not block it). The consumer is the
public face of its parts, wired together in `PushConsumer._start`: `coordinator.push` (which queues
it holds), `fetcher` (pulling and flow control), `consume.concurrent` / `consume.orderly` /
`consume.key_ordered` (listener calls and offsets), `consume.retry`, `undecodable`,
`offset_store`, `stats` and `consume.hooks` (see docs/design/consumer.md). Each part sees the
consumer through a narrow protocol of its own.

Every setting is a keyword argument with RocketMQ 4.9.3's default (see `PushConsumerSettings`;
client settings such as ``instance_name`` or ``rebalance_interval`` are `ClientConfig` fields).
Times are in seconds unless the name says ``millis``.

Differences from RocketMQ 4.9.3 worth knowing:

* ``max_reconsume_times=-1`` means 16 for orderly consumers too (RocketMQ: unlimited); pass
  ``max_reconsume_times=MAX_RECONSUME_TIMES_UNLIMITED`` for RocketMQ's in-place retries forever;
* `shutdown` stops pulling, lets running listener calls finish (up to ``shutdown_timeout``),
  commits the offsets synchronously, then releases the orderly queue locks and unregisters
  (RocketMQ releases the locks first and commits oneway);
* a `reset_offset` from the broker waits for running listener calls of the consumer (at most
  10 s) instead of always sleeping 10 s;
* see `rocketflow.client.consumer.coordinator.rebalance` for the rebalance refinements.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Final

from rocketflow.client.consumer.consume.base import ConsumeMessageService
from rocketflow.client.consumer.consume.concurrent import ConsumeMessageConcurrentlyService
from rocketflow.client.consumer.consume.context import (
    ConcurrentListener,
    ConsumeMessageDirectlyResult,
    OrderlyListener,
)
from rocketflow.client.consumer.consume.hooks import ConsumeHooks, ConsumeTraceHook
from rocketflow.client.consumer.consume.key_ordered import ConsumeMessageKeyOrderedService, KeyFunction
from rocketflow.client.consumer.consume.orderly import ConsumeMessageOrderlyService
from rocketflow.client.consumer.consume.retry import MessageSendBack
from rocketflow.client.consumer.consumer_base import ConsumerBase
from rocketflow.client.consumer.coordinator.push import RebalancePushImpl
from rocketflow.client.consumer.fetcher import PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION, PullMessageService, PullRequest
from rocketflow.client.consumer.options import ServiceState
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.push_settings import (
    DEFAULT_MAX_IN_FLIGHT_PER_QUEUE,
    DEFAULT_MAX_RECONSUME_TIMES,
    KeyOrderedConfig,
    PushConsumerSettings,
)
from rocketflow.client.consumer.stats import ConsumerStats
from rocketflow.client.consumer.subscription import MessageSelector, checked_subscription
from rocketflow.client.consumer.undecodable import UndecodableHandler
from rocketflow.client.errors import MQClientError, MQError
from rocketflow.client.instance import LIFECYCLE_TIMEOUT
from rocketflow.client.producer.producer import new_trace_dispatcher
from rocketflow.client.trace import TraceDispatcher
from rocketflow.protocol.bodies import (
    ConsumerData,
    ConsumerRunningInfo,
    ConsumeStatus,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from rocketflow.protocol.bodies import ProcessQueueInfo as WireProcessQueueInfo
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.protocol.names import retry_topic

logger = logging.getLogger(__name__)

#: Longest a `reset_offset` waits for running listener calls (seconds).
RESET_OFFSET_WAIT: Final = 10.0
#: Running-info property names (RocketMQ's ``ConsumerRunningInfo.PROP_*``).
PROP_CONSUME_ORDERLY: Final = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE: Final = "PROP_CONSUME_TYPE"
PROP_THREADPOOL_CORE_SIZE: Final = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUMER_START_TIMESTAMP: Final = "PROP_CONSUMER_START_TIMESTAMP"


class PushConsumer(ConsumerBase[PushConsumerSettings]):
    """A push consumer; see the module docstring."""

    kind = "push consumer"
    settings_type = PushConsumerSettings

    def _setup(self) -> None:
        if self.client_config.pull_time_delay_is_default():
            self.client_config = self.client_config.copy(
                pull_time_delay_mills_when_exception=PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
        self.retry_topic = retry_topic(self.group)
        #: The effective per-queue thresholds (recomputed from the topic thresholds when those are set).
        self.pull_threshold_for_queue = self.settings.pull_threshold_for_queue
        self.pull_threshold_size_for_queue = self.settings.pull_threshold_size_for_queue
        self.hooks = ConsumeHooks()
        self._tracer: TraceDispatcher | None = None
        self.consumer_stats = ConsumerStats()
        # the parts made now; those that need the client instance are made by `_start`
        self._send_back = MessageSendBack(self)
        self._undecodable = UndecodableHandler(self)
        self.rebalance = RebalancePushImpl(self)
        self._listener: Callable[..., Any] | None = None
        self.consume_orderly = False
        #: Set by `register_key_ordered_listener` (the consumer is then also ``consume_orderly``: broker locks).
        self.key_ordered: KeyOrderedConfig | None = None
        self._paused = False
        self._closing = False
        self._pull_service: PullMessageService | None = None
        self._consume_service: ConsumeMessageService | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self.start_timestamp = 0

    def __repr__(self) -> str:
        return (f"PushConsumer({self.group!r}, {self.message_model.name}, "
                f"{'orderly' if self.consume_orderly else 'concurrently'}, {self._state.name})")

    # ------------------------------------------------------------------ parts (valid once started)

    @property
    def pull_service(self) -> PullMessageService:
        if self._pull_service is None:
            raise MQClientError(f"push consumer {self.group!r} is not started")
        return self._pull_service

    @property
    def consume_service(self) -> ConsumeMessageService:
        if self._consume_service is None:
            raise MQClientError(f"push consumer {self.group!r} is not started")
        return self._consume_service

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def effective_max_reconsume_times(self) -> int:
        """``max_reconsume_times`` with -1 resolved (16)."""
        value = self.settings.max_reconsume_times
        return DEFAULT_MAX_RECONSUME_TIMES if value == -1 else value

    @property
    def _pool_thread_prefix(self) -> str:
        return f"rocketflow-client-consume[{self.group}]"

    def new_process_queue(self) -> ProcessQueue:
        """A process queue with this consumer's idle, lock and consume timeouts."""
        settings = self.settings
        return ProcessQueue(pull_max_idle_ms=round(settings.pull_max_idle_time * 1000),
                            lock_max_live_ms=round(settings.lock_max_live_time * 1000),
                            consume_timeout_ms=round(settings.consume_timeout * 1000))

    def apply_topic_thresholds(self, queue_count: int) -> None:
        """Derive the per-queue thresholds from the topic ones over ``queue_count`` held queues."""
        if queue_count <= 0:
            return
        settings = self.settings
        if settings.pull_threshold_for_topic != -1:
            value = max(1, settings.pull_threshold_for_topic // queue_count)
            if value != self.pull_threshold_for_queue:
                logger.info("%s: pull_threshold_for_queue %d -> %d", self.group, self.pull_threshold_for_queue, value)
            self.pull_threshold_for_queue = value
        if settings.pull_threshold_size_for_topic != -1:
            value = max(1, settings.pull_threshold_size_for_topic // queue_count)
            if value != self.pull_threshold_size_for_queue:
                logger.info("%s: pull_threshold_size_for_queue %d -> %d MiB", self.group,
                            self.pull_threshold_size_for_queue, value)
            self.pull_threshold_size_for_queue = value

    # ------------------------------------------------------------------ subscriptions and listeners

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"*"`` or ``"TagA || TagB"``), or
        those a `MessageSelector` selects (``MessageSelector.by_sql("amount > 100")``)."""
        self.rebalance.put_subscription(checked_subscription(topic, expression))
        if self.is_running:
            self._subscriptions_changed()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues are released at the next rebalance)."""
        if topic == self.retry_topic and self.message_model is MessageModel.CLUSTERING:
            raise MQClientError(f"{topic!r} is the group's retry topic; it stays subscribed while the consumer runs")
        self.rebalance.remove_subscription(topic)
        if self.is_running:
            self._subscriptions_changed()

    def _subscriptions_changed(self) -> None:
        instance = self.instance
        announce = self._heartbeat_and_rebalance("heartbeat after a subscription change")
        if instance.in_loop_thread():
            self.spawn(announce)
        else:
            instance.submit(announce)

    def register_concurrent_listener(self, listener: ConcurrentListener) -> None:
        """``listener(msgs, context) -> ConsumeConcurrentlyStatus``, plain or ``async def``."""
        self._register(listener, orderly=False)

    def register_orderly_listener(self, listener: OrderlyListener) -> None:
        """``listener(msgs, context) -> ConsumeOrderlyStatus``, plain or ``async def``."""
        self._register(listener, orderly=True)

    def register_key_ordered_listener(self, listener: OrderlyListener, key: KeyFunction | None = None,
                                      max_in_flight_per_queue: int = DEFAULT_MAX_IN_FLIGHT_PER_QUEUE) -> None:
        """Key-ordered consumption (`rocketflow.client.consumer.consume.key_ordered`): ``listener([msg], context) ->
        ConsumeOrderlyStatus`` (plain or ``async def``) gets one message at a time per key, keys of a queue in
        parallel (at most ``max_in_flight_per_queue``); ``key(msg) -> str`` overrides the default key (the
        sharding key, else the first of KEYS, else none). A key that keeps failing holds its messages in the
        process queue, so its backlog counts against the queue's flow-control thresholds (see the module)."""
        config = KeyOrderedConfig(key, max_in_flight_per_queue)
        self._register(listener, orderly=True)
        self.key_ordered = config

    def _register(self, listener: Callable[..., Any], *, orderly: bool) -> None:
        if not callable(listener):
            raise MQClientError(f"a listener must be callable, got {listener!r}")
        if self._state is not ServiceState.CREATE_JUST:
            raise MQClientError(f"push consumer {self.group!r} is {self._state.name}; register the listener "
                                "before start()")
        self._listener = listener
        self.consume_orderly = orderly
        self.key_ordered = None

    def register_hook(self, hook: object) -> None:
        """Add a consume hook (``consume_message_before(ctx)`` / ``consume_message_after(ctx)``)."""
        self.hooks.register(hook)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Join (or create) the client instance, start pulling and consuming; raises `MQClientError`."""
        self._start_once()
        logger.info("push consumer %s started on client %s (%s, %s)", self.group, self.client_id,
                    self.message_model.name, "orderly" if self.consume_orderly else "concurrently")

    def _check_startable(self) -> None:
        if self._listener is None:
            raise MQClientError(f"push consumer {self.group!r} has no listener; call "
                                "register_concurrent_listener() or register_orderly_listener() first")

    def _start(self) -> None:
        self._check_name_servers()
        if self.message_model is MessageModel.CLUSTERING:
            self.rebalance.put_subscription(SubscriptionData(self.retry_topic, "*"))
        instance = self._join_instance(self.settings.local_offset_store_dir)
        listener = self._listener
        assert listener is not None
        # The wiring: each part gets this consumer (through its own narrow protocol) and the other
        # parts it hands work to; none reaches another through the consumer.
        service: ConsumeMessageService
        if self.key_ordered is not None:
            service = ConsumeMessageKeyOrderedService(self, listener, self.rebalance, self._send_back,
                                                      self.key_ordered)
        elif self.consume_orderly:
            service = ConsumeMessageOrderlyService(self, listener, self.rebalance, self._send_back)
        else:
            service = ConsumeMessageConcurrentlyService(self, listener, self.rebalance, self._send_back)
        self._consume_service = service
        self._pull_service = PullMessageService(self, self.rebalance, service, self._undecodable)
        self._start_instance(instance)
        if self.settings.enable_msg_trace:
            tracer = new_trace_dispatcher(instance, self.settings.trace_topic)
            tracer.start()
            self._tracer = tracer
            self.hooks.register(ConsumeTraceHook(tracer, self.group))
        service.start()
        self.start_timestamp = int(time.time() * 1000)
        self._state = ServiceState.RUNNING
        instance.run(self._start_async(), LIFECYCLE_TIMEOUT)

    async def _start_async(self) -> None:
        await self.consume_service.start_on_loop()
        for topic in list(self.rebalance.subscription_inner):
            await self.rebalance.refresh_topic_queues(topic)
        await self._heartbeat_and_rebalance("first heartbeat")

    def _abort_start(self) -> None:
        self._state = ServiceState.START_FAILED
        service = self._consume_service
        if service is not None:
            service.stop_dispatch()
            service.close(wait=False)
        self._leave_instance_after_failed_start(self._stop_on_loop())

    def shutdown(self) -> None:
        """Stop pulling, let running listener calls finish (up to ``shutdown_timeout``), commit the
        offsets, release orderly queue locks, unregister and release the client instance. Idempotent;
        must not be called from the client's loop thread or from a listener."""
        if not self._begin_shutdown(self._pool_thread_prefix,
                                    "a consumer cannot be shut down from its own listener (it waits for listener "
                                    "calls to finish); call shutdown() from another thread"):
            return
        instance = self.instance
        service = self.consume_service
        try:
            service.stop_dispatch()
            instance.run(self._stop_on_loop(), LIFECYCLE_TIMEOUT)
            if not service.wait_idle(self.settings.shutdown_timeout):
                logger.warning("%s: listener calls still running after %.3gs; shutting down anyway", self.group,
                               self.settings.shutdown_timeout)
                service.close(wait=False)
            else:
                service.close(wait=True)
            instance.run(self._persist_and_unlock(), LIFECYCLE_TIMEOUT * 2)
        except MQError as exc:
            logger.warning("%s: error while shutting down: %s", self.group, exc)
        finally:
            if self._tracer is not None:
                self._tracer.shutdown()
                self._tracer = None
            self._leave_instance()
            self.rebalance.destroy()    # nothing on the loop touches the table any more
        logger.info("push consumer %s shut down", self.group)

    async def _stop_on_loop(self) -> None:
        self._closing = True
        if self._pull_service is not None:
            await self._pull_service.shutdown()
        if self._consume_service is not None:
            await self._consume_service.stop_on_loop()
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        tasks = [task for task in self._tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _persist_and_unlock(self) -> None:
        # a rebalance still running finishes first; none starts any more (the state is not RUNNING)
        async with self.rebalance.rebalance_lock:
            await self._persist_offsets_now(self.offset_store, list(self.rebalance.process_queue_table))
            if self.consume_orderly and self.message_model is MessageModel.CLUSTERING:
                await self.rebalance.unlock_all(False)
            self.rebalance.destroy()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.shutdown()

    def suspend(self) -> None:
        """Pause pulling (pulls re-check every second) and rebalancing."""
        self._paused = True
        logger.info("%s: suspended", self.group)

    def resume(self) -> None:
        """Resume after `suspend` (and rebalance at once)."""
        self._paused = False
        logger.info("%s: resumed", self.group)
        if self.is_running:
            self.instance.rebalance_immediately()

    # ------------------------------------------------------------------ running work on the loop

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task on the client's loop, cancelled at shutdown (thread-safe)."""
        if self._closing:
            coro.close()
            return
        instance = self.instance
        if not instance.in_loop_thread():
            instance.loop.call_soon_threadsafe(self.spawn, coro)
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the client's loop after ``delay`` seconds, unless shut down (thread-safe)."""
        if self._closing:
            return
        instance = self.instance
        if not instance.in_loop_thread():
            instance.loop.call_soon_threadsafe(self.call_later, delay, callback)
            return

        def fire() -> None:
            self._timers.discard(handle)
            if not self._closing:
                callback()

        handle = asyncio.get_running_loop().call_later(delay, fire)
        self._timers.add(handle)

    # ------------------------------------------------------------------ what the parts ask of the consumer

    def execute_pull_request(self, request: PullRequest) -> None:
        """Start pulling a queue the rebalance took (thread-safe)."""
        self.pull_service.execute_pull_request_immediately(request)

    async def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> None:
        """Return a message whose consumption failed (see `rocketflow.client.consumer.consume.retry`)."""
        await self._send_back.send_message_back(msg, delay_level, broker_name)

    # ------------------------------------------------------------------ the client instance's hooks

    def consumer_data(self) -> ConsumerData:
        """This group as announced in heartbeats."""
        return self._consumer_data(ConsumeType.CONSUME_PASSIVELY)

    async def do_rebalance(self) -> None:
        """Rebalance every subscribed topic (the client instance calls this; skipped while suspended)."""
        if self._state is not ServiceState.RUNNING or self._paused:
            return
        await self.rebalance.do_rebalance(self.consume_orderly)

    async def persist_consumer_offset(self) -> None:
        """Commit the held queues' offsets (the client instance calls this every few seconds)."""
        if self._state is not ServiceState.RUNNING:
            return
        await self.offset_store.persist_all(list(self.rebalance.process_queue_table))

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: restart ``topic``'s queues from ``offsets``."""
        if self._state is not ServiceState.RUNNING:
            return
        was_paused = self._paused
        self._paused = True
        table = self.rebalance.process_queue_table
        try:
            for mq, pq in list(table.items()):
                if mq.topic == topic and mq in offsets:
                    pq.dropped = True
                    pq.clear()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + RESET_OFFSET_WAIT
            while self.consume_service.active_count and loop.time() < deadline:
                await asyncio.sleep(0.05)
            for mq, pq in list(table.items()):
                offset = offsets.get(mq)
                if mq.topic != topic or offset is None:
                    continue
                self.offset_store.update_offset(mq, offset, False)
                await self.rebalance.remove_unnecessary_message_queue(mq, pq)
                if table.get(mq) is pq:
                    del table[mq]
            logger.info("%s: offsets of %s reset: %s", self.group, topic,
                        {str(mq): offset for mq, offset in sorted(offsets.items())})
        finally:
            self._paused = was_paused
            if not was_paused:
                self.instance.rebalance_immediately()

    def running_info(self) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO body: settings, subscriptions, per-queue state, per-topic stats."""
        settings = self.settings
        properties = {
            **self._running_properties(),
            "unitMode": str(self.client_config.unit_mode).lower(),
            PROP_CONSUME_ORDERLY: str(self.consume_orderly).lower(),
            PROP_CONSUME_TYPE: ConsumeType.CONSUME_PASSIVELY.name,
            PROP_THREADPOOL_CORE_SIZE: str(settings.consume_thread_max),
            PROP_CONSUMER_START_TIMESTAMP: str(self.start_timestamp),
        }
        for field in dataclasses.fields(settings):
            value = getattr(settings, field.name)
            if value is not None:
                properties[_camel_case(field.name)] = str(value).lower() if isinstance(value, bool) else str(value)
        info = ConsumerRunningInfo(properties=properties,
                                   subscription_set=list(self.rebalance.subscription_inner.values()))
        offsets = self._offset_store.clone_offset_table() if self._offset_store is not None else {}
        for mq, pq in list(self.rebalance.process_queue_table.items()):
            snapshot = pq.info(offsets.get(mq, -1))
            info.mq_table[mq] = WireProcessQueueInfo(
                commit_offset=snapshot.commit_offset,
                cached_msg_min_offset=snapshot.cached_msg_min_offset,
                cached_msg_max_offset=snapshot.cached_msg_max_offset,
                cached_msg_count=snapshot.cached_msg_count,
                cached_msg_size_in_mib=snapshot.cached_msg_size_in_mib,
                transaction_msg_min_offset=snapshot.consuming_msg_min_offset,
                transaction_msg_max_offset=snapshot.consuming_msg_max_offset,
                transaction_msg_count=snapshot.consuming_msg_count,
                locked=snapshot.locked,
                try_unlock_times=snapshot.try_unlock_times,
                last_lock_timestamp=snapshot.last_lock_timestamp,
                droped=snapshot.dropped,
                last_pull_timestamp=snapshot.last_pull_timestamp,
                last_consume_timestamp=snapshot.last_consume_timestamp,
            )
        info.status_table = self.stats()
        return info

    async def consume_message_directly(self, msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY: run the listener on ``msg`` (no retry, no offset change)."""
        return await self.consume_service.consume_message_directly(msg, broker_name)

    # ------------------------------------------------------------------ statistics

    def stats(self) -> dict[str, ConsumeStatus]:
        """Per subscribed topic: pull RT/TPS, consume RT, consume OK/failed TPS over the last minute
        and the failed messages of the last hour."""
        topics = set(self.rebalance.subscription_inner) | set(self.consumer_stats.topics(self.group))
        return {topic: self.consumer_stats.consume_status(self.group, topic) for topic in sorted(topics)}

    def committed_offsets(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """The in-memory committed offsets (of ``topic`` only, when given)."""
        if self._offset_store is None:
            return {}
        return self._offset_store.clone_offset_table(topic)

    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this consumer holds now, sorted."""
        return sorted(self.rebalance.process_queue_table)


def _camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


__all__ = ["PushConsumer"]
