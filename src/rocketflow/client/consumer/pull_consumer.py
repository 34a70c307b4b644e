"""`PullConsumer`: the application pulls batches (RocketMQ's ``DefaultLitePullConsumer``).

```python
consumer = PullConsumer("cg", namesrv="127.0.0.1:9876",
                        consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
consumer.subscribe("Orders", "pay || ship")    # queues shared in the group by rebalance, or after
                                               # start(): consumer.assign(consumer.fetch_message_queues("Orders"))
with consumer:                                 # start() ... shutdown()
    while running:
        for msg in consumer.poll(timeout=1.0):  # one batch of one queue, in offset order
            handle(msg)
```

Background pull tasks (one per held queue, on the client instance's event loop) fill per-queue
process queues under flow control; each pull result becomes one batch, and `poll` hands out the
oldest batch (never one of a paused queue): see `rocketflow.client.consumer.batch_fetcher`. The
consumer is the public face of that fetcher, of its rebalance (`coordinator.lite_pull`) and of its
offset store.

Offsets: a queue's *position* is the offset after the last batch polled from it. `commit` records
the positions as the group's offsets (sent to the broker - or, broadcasting, written to the local
offset file - by the periodic persistence every ``persist_consumer_offset_interval`` and at
shutdown); `commit_sync` also persists them at once and waits. With ``auto_commit`` (the default),
`poll` commits every ``auto_commit_interval`` the positions of the batches polled before it (the
application is done with them once it polls again).

Differences from RocketMQ 4.9.3, on purpose:

* `poll` does not return batches of paused queues (they stay cached until `resume`);
* with ``auto_commit``, a queue taken away by a rebalance commits the batches polled before the
  latest `poll` (not the one being processed), and `shutdown` commits every polled batch - unless
  the ``with`` block is left by an exception, then also only those polled before the latest `poll`;
* seeking or losing a queue discards a pull in flight for it at once (4.9.3 lets it finish);
* a queue whose pulls find nothing matching the subscription advances its position past the
  skipped messages when nothing of it is cached;
* no retry-topic subscription (the pull consumer never sends messages back).

A pulled record that cannot be decoded (a COMPRESSED body that is not zlib, properties that are not
UTF-8: see `rocketflow.protocol.codec.UndecodableRecord`) is not handed out by `poll` and does not
hold back the records around it: it is logged at ERROR, counted (`undecodable_skipped`) and given,
as stored, to the listener of `register_undecodable_listener` (called in the polling thread by the
`poll` that passes it, before it returns). Its offset counts as polled then, like a batch's. The
pull consumer has no dead-letter queue of its own (it never sends messages back): what to do with
such records is the application's call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import datetime
from enum import Enum
from types import TracebackType
from typing import Any, Final, TypeVar

from rocketflow.client.consumer.batch_fetcher import BatchFetcher
from rocketflow.client.consumer.consumer_base import ConsumerBase
from rocketflow.client.consumer.coordinator.lite_pull import RebalanceLitePullImpl
from rocketflow.client.consumer.fetcher import PullAPIWrapper
from rocketflow.client.consumer.offset_store import (
    ReadOffsetType,
)
from rocketflow.client.consumer.options import ServiceState
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.pull_settings import (
    PullConsumerSettings,
    check_offset,
    check_queue,
    check_queues,
    check_seconds,
)
from rocketflow.client.consumer.subscription import MessageSelector, checked_subscription
from rocketflow.client.errors import MQClientError, MQError
from rocketflow.client.instance import LIFECYCLE_TIMEOUT
from rocketflow.protocol.bodies import (
    ConsumerData,
    ConsumerRunningInfo,
    ConsumeType,
    SubscriptionData,
)
from rocketflow.protocol.bodies import ProcessQueueInfo as WireProcessQueueInfo
from rocketflow.protocol.codec import UndecodableRecord
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.protocol.names import InvalidNameError, validate_topic

logger = logging.getLogger(__name__)

#: Timeout of a blocking call into the client's loop that may do a few RPCs (seconds).
CALL_TIMEOUT: Final = 15.0
_T = TypeVar("_T")

#: ``listener(topic, all_queues, my_queues)``, plain (run on a listener thread) or ``async def``.
QueueListener = Callable[[str, set[MessageQueue], set[MessageQueue]], Any]
#: ``listener(record)``: a pulled record that cannot be decoded (called by `PullConsumer.poll`).
UndecodableListener = Callable[[UndecodableRecord], Any]


class SubscriptionType(Enum):
    """How a pull consumer gets its queues."""

    NONE = "NONE"
    SUBSCRIBE = "SUBSCRIBE"
    ASSIGN = "ASSIGN"


class PullConsumer(ConsumerBase[PullConsumerSettings]):
    """A pull (lite pull) consumer; see the module docstring."""

    kind = "pull consumer"
    settings_type = PullConsumerSettings

    def _setup(self) -> None:
        self.rebalance = RebalanceLitePullImpl(self)
        self._fetcher = BatchFetcher(self, self.rebalance)
        self._subscription_type = SubscriptionType.NONE
        self._assigned: set[MessageQueue] = set()
        self._queue_listeners: dict[str, QueueListener] = {}
        self._next_auto_commit = 0.0
        self._listener_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._undecodable_listener: UndecodableListener | None = None
        self._undecodable_skipped = 0

    def __repr__(self) -> str:
        return (f"PullConsumer({self.group!r}, {self.message_model.name}, {self._subscription_type.name}, "
                f"{self._state.name})")

    # ------------------------------------------------------------------ parts (valid once started)

    @property
    def subscription_type(self) -> SubscriptionType:
        return self._subscription_type

    def new_process_queue(self) -> ProcessQueue:
        """A process queue for a newly held queue."""
        return ProcessQueue()

    # ------------------------------------------------------------------ undecodable records

    def register_undecodable_listener(self, listener: UndecodableListener | None) -> None:
        """Call ``listener(record)`` for each pulled record that cannot be decoded, in the thread that
        polls past it (None: only log them). What it raises is logged; the record counts as polled."""
        if listener is not None and not callable(listener):
            raise MQClientError(f"the undecodable listener must be callable, got {listener!r}")
        self._undecodable_listener = listener

    @property
    def undecodable_skipped(self) -> int:
        """Pulled records that could not be decoded and were skipped by `poll` so far."""
        with self._fetcher.lock:
            return self._undecodable_skipped

    def _report_undecodable(self, mq: MessageQueue, records: list[UndecodableRecord]) -> None:
        """Log, count and hand over the undecodable records a poll passed (outside the lock)."""
        listener = self._undecodable_listener
        with self._fetcher.lock:
            self._undecodable_skipped += len(records)
        for record in records:
            logger.error("%s: the record at offset %d of %s cannot be decoded (%s); skipped", self.group,
                         record.queue_offset, mq, record.reason)
            if listener is None:
                continue
            try:
                listener(record)
            except Exception:
                logger.exception("%s: the undecodable listener failed on offset %d of %s", self.group,
                                 record.queue_offset, mq)

    def _check_running(self) -> None:
        if self._state is not ServiceState.RUNNING:
            raise MQClientError(f"pull consumer {self.group!r} is {self._state.name}; call start() first"
                                if self._state is ServiceState.CREATE_JUST
                                else f"pull consumer {self.group!r} is {self._state.name}")

    def _call(self, coro: Coroutine[Any, Any, _T], timeout: float = CALL_TIMEOUT) -> _T:
        try:
            instance = self.instance
        except MQClientError:
            coro.close()
            raise
        return instance.run(coro, timeout)

    # ------------------------------------------------------------------ subscribe / assign

    def subscribe(self, topic: str, expression: str | MessageSelector = "*",
                  listener: QueueListener | None = None) -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"*"`` or ``"TagA || TagB"``) or
        that a `MessageSelector` selects, sharing its queues with the group's other members (rebalance).

        ``listener(topic, all_queues, my_queues)`` is called after each change of this consumer's share
        of ``topic`` (plain functions on a listener thread, where they may call `seek` and `commit`;
        ``async def`` ones on the client's loop). Exclusive with `assign`.
        """
        if self._subscription_type is SubscriptionType.ASSIGN:
            raise MQClientError("subscribe and assign are mutually exclusive: this consumer uses assign()")
        subscription = checked_subscription(topic, expression)
        if listener is not None and not callable(listener):
            raise MQClientError(f"a queue listener must be callable, got {listener!r}")
        self._subscription_type = SubscriptionType.SUBSCRIBE
        self.rebalance.put_subscription(subscription)
        if listener is not None:
            self._queue_listeners[topic] = listener
        else:
            self._queue_listeners.pop(topic, None)
        if self.is_running:
            self._call(self._announce_subscriptions())

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``: its queues are given up (positions persisted) at once."""
        if topic not in self.rebalance.subscription_inner:
            return
        self.rebalance.remove_subscription(topic)
        self._queue_listeners.pop(topic, None)
        if self.is_running:
            self._call(self._release_topic(topic))
            self._call(self._announce_subscriptions())

    async def _release_topic(self, topic: str) -> None:
        async with self.rebalance.rebalance_lock:
            with self._fetcher.lock:
                held = [(mq, state.process_queue) for mq, state in self._fetcher.queues.items() if mq.topic == topic]
            for mq, pq in held:
                await self.release_queue(mq, pq)
                self.rebalance.process_queue_table.pop(mq, None)

    async def _announce_subscriptions(self) -> None:
        instance = self.instance
        for topic in sorted({mq.topic for mq in self._assigned}):
            if instance.topic_route(topic) is None:
                await instance.update_topic_route(topic)
        for topic in list(self.rebalance.subscription_inner):
            if topic not in self.rebalance.topic_subscribe_info_table:
                await self.rebalance.refresh_topic_queues(topic)
        await self._heartbeat_and_rebalance("heartbeat after a subscription change")

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly ``queues`` (no rebalance; replaces an earlier assignment). Exclusive with
        `subscribe`. Each queue starts at the group's committed offset, else per ``consume_from``."""
        if self._subscription_type is SubscriptionType.SUBSCRIBE:
            raise MQClientError("subscribe and assign are mutually exclusive: this consumer uses subscribe()")
        wanted = check_queues(queues)
        if not wanted:
            raise MQClientError("assign() needs at least one message queue")
        for mq in wanted:
            try:
                validate_topic(mq.topic)
            except InvalidNameError as exc:
                raise MQClientError(f"assign {mq}: {exc}") from None
        self._subscription_type = SubscriptionType.ASSIGN
        self._assigned = wanted
        if self.is_running:
            self._call(self._apply_assignment())
            self._call(self._announce_subscriptions())

    async def _apply_assignment(self) -> None:
        wanted = set(self._assigned)
        fetcher = self._fetcher
        for mq, state in list(fetcher.queues.items()):
            if mq not in wanted:
                await fetcher.release_queue(mq, state.process_queue)
        for mq in sorted(wanted):
            if mq not in fetcher.queues:
                self.start_queue(mq, self.new_process_queue(), -1)

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer holds now, sorted."""
        with self._fetcher.lock:
            return sorted(self._fetcher.queues)

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """``topic``'s readable queues, from the name server (raises `MQClientError` for an unknown topic)."""
        self._check_running()
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            raise MQClientError(f"fetch_message_queues: {exc}") from None
        instance = self.instance

        async def fetch() -> list[MessageQueue]:
            await instance.update_topic_route(topic)
            return instance.topic_subscribe_info(topic)

        queues = self._call(fetch())
        if not queues:
            raise MQClientError(f"no message queue of topic {topic!r} found (does the topic exist?)")
        return sorted(queues)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Join (or create) the client instance and start pulling; raises `MQClientError`."""
        self._start_once()
        logger.info("pull consumer %s started on client %s (%s)", self.group, self.client_id,
                    self.message_model.name)

    def _start(self) -> None:
        self._check_name_servers()
        instance = self._join_instance(self.settings.local_offset_store_dir)
        self._fetcher.wrapper = PullAPIWrapper(instance, self.group)
        self._listener_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"rocketflow-client-queue-listener[{self.group}]")
        self._start_instance(instance)
        self._next_auto_commit = time.monotonic() + self.settings.auto_commit_interval
        self._state = ServiceState.RUNNING
        instance.run(self._start_async(), LIFECYCLE_TIMEOUT)

    async def _start_async(self) -> None:
        if self._subscription_type is SubscriptionType.ASSIGN:
            await self._apply_assignment()
        await self._announce_subscriptions()

    def _abort_start(self) -> None:
        self._state = ServiceState.START_FAILED
        if self._listener_pool is not None:
            self._listener_pool.shutdown(wait=False, cancel_futures=True)
        self._leave_instance_after_failed_start(self._stop_on_loop(commit_polled=False))

    def shutdown(self) -> None:
        """Stop pulling, commit (with ``auto_commit``: every polled batch) and persist the offsets,
        unregister and release the client instance. Idempotent; not from a queue listener."""
        self._shutdown(commit_polled=True)

    def _shutdown(self, *, commit_polled: bool) -> None:
        if not self._begin_shutdown(f"rocketflow-client-queue-listener[{self.group}]",
                                    "a consumer cannot be shut down from its own queue listener"):
            return
        instance = self.instance
        try:
            instance.run(self._stop_on_loop(commit_polled=commit_polled), LIFECYCLE_TIMEOUT * 2)
        except MQError as exc:
            logger.warning("%s: error while shutting down: %s", self.group, exc)
        finally:
            self._fetcher.wake_pollers()
            if self._listener_pool is not None:
                self._listener_pool.shutdown(wait=True, cancel_futures=True)
            self._leave_instance()
            self.rebalance.destroy()
        logger.info("pull consumer %s shut down", self.group)

    async def _stop_on_loop(self, *, commit_polled: bool) -> None:
        await self._fetcher.stop_tasks()
        async with self.rebalance.rebalance_lock:
            store = self._offset_store
            if store is not None:
                if self.settings.auto_commit:
                    self._fetcher.commit_positions(polled=commit_polled)
                await self._persist_offsets_now(store, self.assignment())
            self._fetcher.forget_all()
            self.rebalance.destroy()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._shutdown(commit_polled=exc_type is None)

    # ------------------------------------------------------------------ held queues (the rebalance's calls)

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        """Hold ``mq`` and start pulling it (on the client's loop; -1: ask where it starts)."""
        self._fetcher.start_queue(mq, pq, next_offset)

    async def release_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Give up ``mq`` (on the loop): with ``auto_commit`` commit what the application is done with,
        persist the queue's offset, stop pulling it, forget its cached batches and offset."""
        await self._fetcher.release_queue(mq, pq)

    def subscription_for(self, topic: str) -> SubscriptionData | None:
        """The subscription a pull of ``topic`` sends (every tag for an assigned queue)."""
        if self._subscription_type is SubscriptionType.ASSIGN:
            return SubscriptionData(topic, "*", sub_version=0)
        return self.rebalance.subscription_inner.get(topic)

    # ------------------------------------------------------------------ polling

    def _before_poll(self) -> float:
        self._check_running()
        now = time.monotonic()
        with self._fetcher.lock:
            self._fetcher.ack_polled_locked()
            if self.settings.auto_commit and now >= self._next_auto_commit:
                self._fetcher.commit_positions(polled=True)
                self._next_auto_commit = now + self.settings.auto_commit_interval
        return now

    def poll(self, timeout: float | None = None) -> list[MessageExt]:
        """The next batch (messages of one queue, in offset order; at most ``pull_batch_size``), waiting
        up to ``timeout`` seconds (default ``poll_timeout``); [] when none came. With ``auto_commit``
        this also commits, every ``auto_commit_interval``, the batches polled before."""
        wait = self.settings.poll_timeout if timeout is None else check_seconds("timeout", timeout, allow_zero=True)
        deadline = self._before_poll() + wait
        fetcher = self._fetcher
        while True:
            with fetcher.cond:
                while True:
                    batch = fetcher.take_batch_locked()
                    if batch is not None:
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._state is not ServiceState.RUNNING:
                        return []
                    fetcher.cond.wait(remaining)
            if batch.undecodable:
                self._report_undecodable(batch.state.mq, batch.undecodable)
            if batch.messages:
                return list(batch.messages)

    async def poll_async(self, timeout: float | None = None) -> list[MessageExt]:
        """`poll` for asyncio code: waits without blocking the caller's event loop."""
        wait = self.settings.poll_timeout if timeout is None else check_seconds("timeout", timeout, allow_zero=True)
        self._before_poll()
        fetcher = self._fetcher
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            with fetcher.lock:
                batch = fetcher.take_batch_locked()
                if batch is None:
                    remaining = deadline - loop.time()
                    if remaining <= 0 or self._state is not ServiceState.RUNNING:
                        return []
                    future: asyncio.Future[None] = loop.create_future()
                    waiter = (loop, future)
                    fetcher.async_waiters.append(waiter)
            if batch is not None:
                if batch.undecodable:
                    self._report_undecodable(batch.state.mq, batch.undecodable)
                if batch.messages:
                    return list(batch.messages)
                continue
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await future
            finally:
                with fetcher.lock:
                    fetcher.async_waiters.remove(waiter)

    def cached_messages(self, mq: MessageQueue | None = None) -> int:
        """How many pulled messages wait to be polled (of ``mq`` only, when given)."""
        with self._fetcher.lock:
            if mq is None:
                return self._fetcher.cached_count
            state = self._fetcher.queues.get(check_queue(mq))
            return state.process_queue.msg_count if state is not None else 0

    # ------------------------------------------------------------------ pause / resume

    def pause(self, queues: Iterable[MessageQueue] | MessageQueue) -> None:
        """Stop pulling ``queues`` and handing out their cached batches until `resume` (a queue not held
        yet is paused once it is)."""
        wanted = check_queues(queues)
        with self._fetcher.lock:
            self._fetcher.paused |= wanted

    def resume(self, queues: Iterable[MessageQueue] | MessageQueue) -> None:
        """Undo `pause` for ``queues``."""
        wanted = check_queues(queues)
        fetcher = self._fetcher
        with fetcher.cond:
            fetcher.paused -= wanted
            states = [state for mq, state in fetcher.queues.items() if mq in wanted]
            if states:
                fetcher.notify_locked()
        instance = self._instance
        if instance is not None and instance.started:
            for state in states:
                with contextlib.suppress(RuntimeError, MQClientError):
                    instance.loop.call_soon_threadsafe(state.wake.set)

    def paused(self) -> set[MessageQueue]:
        """The paused queues."""
        with self._fetcher.lock:
            return set(self._fetcher.paused)

    def is_paused(self, mq: MessageQueue) -> bool:
        with self._fetcher.lock:
            return mq in self._fetcher.paused

    # ------------------------------------------------------------------ seeking

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Make the next batches of the held queue ``mq`` start at ``offset`` (between its min and max
        offset); cached batches of ``mq`` are dropped. The position becomes ``offset`` (committed by the
        next commit)."""
        self._check_running()
        check_queue(mq)
        check_offset(offset)
        self._call(self._seek(mq, lambda: _const(offset)))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        """`seek` to the smallest offset ``mq`` still stores."""
        self._check_running()
        check_queue(mq)
        self._call(self._seek(mq, lambda: self.rebalance.min_offset(mq)))

    def seek_to_end(self, mq: MessageQueue) -> None:
        """`seek` to ``mq``'s max offset: only messages sent from now on."""
        self._check_running()
        check_queue(mq)
        self._call(self._seek(mq, lambda: self.rebalance.max_offset(mq)))

    async def _seek(self, mq: MessageQueue, target: Callable[[], Coroutine[Any, Any, int]]) -> None:
        if mq not in self._fetcher.queues:
            raise MQClientError(f"{mq} is not held by this consumer (assigned: {self.assignment()}); "
                                "it may be rebalancing")
        offset = await target()
        min_offset = await self.rebalance.min_offset(mq)
        max_offset = await self.rebalance.max_offset(mq)
        if not min_offset <= offset <= max_offset:
            raise MQClientError(f"cannot seek {mq} to {offset}: offsets go from {min_offset} to {max_offset}")
        if self._fetcher.restart_at(mq, offset) is None:
            raise MQClientError(f"{mq} was given up while seeking")
        logger.info("%s: %s sought to offset %d", self.group, mq, offset)

    def offset_for_timestamp(self, mq: MessageQueue, timestamp: int | float | datetime) -> int:
        """The offset of the message of ``mq`` stored closest to ``timestamp`` (epoch milliseconds or a
        datetime), as the broker's SEARCH_OFFSET_BY_TIMESTAMP finds it; use it with `seek`."""
        self._check_running()
        check_queue(mq)
        if isinstance(timestamp, datetime):
            millis = int(timestamp.timestamp() * 1000)
        elif isinstance(timestamp, bool) or not isinstance(timestamp, int | float) or timestamp != timestamp:
            raise MQClientError(f"timestamp must be epoch milliseconds or a datetime, got {timestamp!r}")
        else:
            millis = int(timestamp)
        return self._call(self.rebalance.search_offset(mq, millis))

    # ------------------------------------------------------------------ committing

    def _commit_offsets(self, offsets: Mapping[MessageQueue, int] | None) -> list[MessageQueue]:
        self._check_running()
        store = self.offset_store
        if offsets is None:
            self._fetcher.commit_positions(polled=True)
            return self.assignment()
        if not isinstance(offsets, Mapping):
            raise MQClientError(f"offsets must be a mapping of MessageQueue to offset, got {offsets!r}")
        checked = {check_queue(mq): check_offset(offset) for mq, offset in offsets.items()}
        with self._fetcher.lock:
            missing = sorted(mq for mq in checked if mq not in self._fetcher.queues)
            if missing:
                raise MQClientError(f"cannot commit queues this consumer does not hold: {missing}")
            for mq, offset in checked.items():
                store.update_offset(mq, offset, False)
        return sorted(checked)

    def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Record the positions (or the given ``{queue: next offset}``) as the group's offsets; they are
        persisted by the periodic persistence and at shutdown."""
        self._commit_offsets(offsets)

    def commit_sync(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """`commit`, then persist now: UPDATE_CONSUMER_OFFSET to the brokers (acknowledged) or the local
        offset file. Raises `MQClientError` if a broker refused or could not be reached."""
        mqs = self._commit_offsets(offsets)
        failures = self._call(self._persist_offsets_now(self.offset_store, mqs))
        if failures:
            raise MQClientError(f"committing offsets failed: {'; '.join(failures)}")

    def committed(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq`` (this consumer's last commit, else the broker's or
        the local file's); None when the group has none."""
        self._check_running()
        check_queue(mq)
        offset = self._call(self.offset_store.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE))
        if offset == -2:
            raise MQClientError(f"cannot read the committed offset of {mq}: the broker could not be asked")
        return offset if offset >= 0 else None

    # ------------------------------------------------------------------ the client instance's hooks

    def consumer_data(self) -> ConsumerData:
        """This group as announced in heartbeats (CONSUME_ACTIVELY)."""
        return self._consumer_data(ConsumeType.CONSUME_ACTIVELY)

    async def do_rebalance(self) -> None:
        """Rebalance the subscribed topics (the client instance calls this)."""
        if self._state is not ServiceState.RUNNING or self._subscription_type is not SubscriptionType.SUBSCRIBE:
            return
        await self.rebalance.do_rebalance(False)

    async def persist_consumer_offset(self) -> None:
        """Persist the held queues' committed offsets (the client instance calls this every few seconds)."""
        if self._state is not ServiceState.RUNNING or self._offset_store is None:
            return
        await self._offset_store.persist_all(self.assignment())

    def running_info(self) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO body: settings, subscriptions and the held queues' caches."""
        properties = {
            **self._running_properties(),
            "subscriptionType": self._subscription_type.name,
            "PROP_CONSUME_TYPE": ConsumeType.CONSUME_ACTIVELY.name,
        }
        for field in dataclasses.fields(self.settings):
            value = getattr(self.settings, field.name)
            if value is not None:
                properties[field.name] = str(value).lower() if isinstance(value, bool) else str(value)
        info = ConsumerRunningInfo(properties=properties,
                                   subscription_set=list(self.rebalance.subscription_inner.values()))
        offsets = self._offset_store.clone_offset_table() if self._offset_store is not None else {}
        with self._fetcher.lock:
            states = list(self._fetcher.queues.values())
        for state in states:
            snapshot = state.process_queue.info(offsets.get(state.mq, -1))
            info.mq_table[state.mq] = WireProcessQueueInfo(
                commit_offset=snapshot.commit_offset, cached_msg_min_offset=snapshot.cached_msg_min_offset,
                cached_msg_max_offset=snapshot.cached_msg_max_offset, cached_msg_count=snapshot.cached_msg_count,
                cached_msg_size_in_mib=snapshot.cached_msg_size_in_mib, droped=snapshot.dropped,
                last_pull_timestamp=snapshot.last_pull_timestamp,
                last_consume_timestamp=snapshot.last_consume_timestamp)
        return info

    async def notify_queue_listener(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """Call ``topic``'s queue listener (the rebalance calls this after a change of the share)."""
        listener = self._queue_listeners.get(topic)
        if listener is None or self._fetcher.closing:
            return
        try:
            if inspect.iscoroutinefunction(listener):
                await listener(topic, mq_all, mq_divided)
            else:
                pool = self._listener_pool
                assert pool is not None
                result = await asyncio.get_running_loop().run_in_executor(pool, listener, topic, mq_all, mq_divided)
                if inspect.isawaitable(result):
                    await result
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s: the queue listener of %s failed", self.group, topic)


async def _const(value: int) -> int:
    return value


__all__ = [
    "PullConsumer",
    "QueueListener",
    "SubscriptionType",
    "UndecodableListener",
]
