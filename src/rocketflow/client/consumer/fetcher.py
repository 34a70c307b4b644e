"""Pulling for the push consumer (RocketMQ's ``PullMessageService`` and ``PullAPIWrapper``).

* `PullRequest`: one queue's pull cursor (next offset) and its process queue.
* `PullAPIWrapper`: PULL_MESSAGE to the right broker address (remembering which broker the last
  response suggested), and the client-side processing of a result: decoding, the tag re-filter,
  MIN_OFFSET / MAX_OFFSET properties and the broker name.
* `PullMessageService`: runs pull requests on the client instance's event loop, at once or after
  a delay, with the push consumer's pull flow (`PullMessageService.pull_message`): drop checks,
  pause, flow control, the orderly lock rules, long polling with the piggy-backed commit offset,
  and the handling of the four pull statuses.

A FOUND answer of ``ANSWER_LATER_MIN_UNITS`` queue units or more is decoded and put in the process
queue just after the next pull is on its way (`PullMessageService._answer_later`), when the
flow-control checks would let that pull go after the put anyway: so the broker reads the next pull
while this loop decodes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from rocketflow.client.api import PullResult, PullStatus, pull_offset_properties
from rocketflow.client.config import ClientConfig
from rocketflow.client.consumer.offset_store import OffsetStore
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.push_settings import PushConsumerSettings
from rocketflow.client.consumer.stats import ConsumerStats
from rocketflow.client.errors import (
    MQBrokerError,
    MQClientError,
    MQConnectError,
    MQConnectionClosedError,
    MQRemotingError,
)
from rocketflow.client.instance import ClientInstance
from rocketflow.client.repeated_log import RepeatedLog
from rocketflow.client.route import MASTER_ID
from rocketflow.protocol.bodies import MessageModel, SubscriptionData
from rocketflow.protocol.codec import RecordDecodeError, UndecodableRecord, decode_records
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.protocol.names import is_retry_topic
from rocketflow.protocol.sysflag import build_pull_sys_flag, clear_commit_offset_flag
from rocketflow.remoting.codes import ResponseCode, code_name
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers import PullMessageRequestHeader

logger = logging.getLogger(__name__)

#: The push consumer's default re-pull delay after an error, when the client config leaves it unset
#: (``DefaultMQPushConsumerImpl.pullTimeDelayMillsWhenException``; ClientConfig's own default is 1000).
PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION: Final = 3000
#: Re-pull delay under flow control (``PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL``).
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL: Final = 50
#: Re-pull delay while the consumer is suspended (``PULL_TIME_DELAY_MILLS_WHEN_SUSPEND``).
PULL_TIME_DELAY_MILLS_WHEN_SUSPEND: Final = 1000
#: How long the broker may hold a pull that found nothing (``BROKER_SUSPEND_MAX_TIME_MILLIS``).
BROKER_SUSPEND_MAX_TIME_MILLIS: Final = 15_000
#: Timeout of a long-polling pull RPC (``CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND``).
CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND: Final = 30_000
#: Delay before an OFFSET_ILLEGAL queue is fixed up and removed.
OFFSET_ILLEGAL_FIX_DELAY_MILLS: Final = 10_000
#: Fewest queue units an answer spans for it to be taken after the next pull goes out: for fewer, the
#: decoding that would overlap the broker's work costs less than the two loop passes of the hand-over.
ANSWER_LATER_MIN_UNITS: Final = 8
#: Log flow control once per this many occurrences.
_FLOW_CONTROL_LOG_EVERY: Final = 1000
#: Pull answers a heartbeat fixes: the broker lost (a restart) or has an older copy of our subscription.
_HEARTBEAT_FIXES: Final = frozenset({ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.SUBSCRIPTION_NOT_LATEST})
_MIB: Final = 1024 * 1024


@dataclass(slots=True, eq=False)
class PullRequest:
    """The pull cursor of one queue (RocketMQ's ``PullRequest``)."""

    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    #: Orderly: whether the first pull after the broker lock was won already re-read the offset.
    previously_locked: bool = False
    #: Set when an answer handled after the next pull went out could not be taken: its offset. The
    #: pull in flight is then ignored and pulling starts again from here (see `PullMessageService`).
    rewind_offset: int | None = None
    #: The last pull was answered SUBSCRIPTION_NOT_EXIST and retried right after a heartbeat out of turn.
    retried_after_heartbeat: bool = False

    def __repr__(self) -> str:
        return (f"PullRequest(group={self.consumer_group!r}, mq={self.message_queue}, "
                f"next_offset={self.next_offset}, previously_locked={self.previously_locked})")


class PullingConsumer(Protocol):
    """What the pull loop reads of its consumer (a `PushConsumer`), as it runs: the thresholds and
    settings may change meanwhile."""

    @property
    def group(self) -> str: ...

    @property
    def message_model(self) -> MessageModel: ...

    @property
    def client_config(self) -> ClientConfig: ...

    @property
    def settings(self) -> PushConsumerSettings: ...

    @property
    def consume_orderly(self) -> bool: ...

    @property
    def is_running(self) -> bool: ...

    @property
    def paused(self) -> bool: ...

    @property
    def pull_threshold_for_queue(self) -> int: ...

    @property
    def pull_threshold_size_for_queue(self) -> int: ...

    @property
    def instance(self) -> ClientInstance: ...

    @property
    def offset_store(self) -> OffsetStore: ...

    @property
    def consumer_stats(self) -> ConsumerStats: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...


class PulledQueues(Protocol):
    """What the pull loop uses of the rebalance that holds the queues (a `RebalancePushImpl`)."""

    @property
    def process_queue_table(self) -> Mapping[MessageQueue, ProcessQueue]: ...

    @property
    def subscription_inner(self) -> Mapping[str, SubscriptionData]: ...

    def pull_sub_version(self, topic: str, subscription: SubscriptionData) -> int: ...

    async def compute_pull_from_where(self, mq: MessageQueue) -> int: ...

    async def remove_process_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool: ...


class ConsumeRequestSink(Protocol):
    """Where pulled messages go once in their process queue (a consume service)."""

    def submit_consume_request(self, msgs: list[MessageExt], process_queue: ProcessQueue,
                               message_queue: MessageQueue, dispatch_to_consume: bool) -> None: ...


class UndecodableSink(Protocol):
    """Where pulled records that cannot be decoded go (an `UndecodableHandler`)."""

    def take(self, mq: MessageQueue, pq: ProcessQueue, records: list[UndecodableRecord]) -> None: ...


class PullAPIWrapper:
    """PULL_MESSAGE plumbing shared by consumers: broker selection and result processing."""

    def __init__(self, instance: ClientInstance, consumer_group: str) -> None:
        self.instance = instance
        self.consumer_group = consumer_group
        #: queue -> the broker id the last response suggested (master unless slave reads are on).
        self.pull_from_which_node_table: dict[MessageQueue, int] = {}

    def update_pull_from_which_node(self, mq: MessageQueue, broker_id: int) -> None:
        self.pull_from_which_node_table[mq] = broker_id

    def recalculate_pull_from_which_node(self, mq: MessageQueue) -> int:
        return self.pull_from_which_node_table.get(mq, MASTER_ID)

    def pull_kernel_impl(self, mq: MessageQueue, sub_expression: str | None, expression_type: str,
                         sub_version: int, offset: int, max_nums: int, sys_flag: int, commit_offset: int,
                         broker_suspend_max_time_millis: int, timeout_millis: int) -> Awaitable[PullResult]:
        """Send PULL_MESSAGE for ``mq`` to the suggested broker (the master by default); await the result.

        The result raises `MQClientError` when no address of the broker is known, `MQBrokerError` for
        an error response and `MQRemotingError` for transport failures. (A plain function returning the
        request's awaitable, not a coroutine of its own: one layer less on every pull.)
        """
        found = self.instance.find_broker_address_in_subscribe(mq.broker_name,
                                                                self.recalculate_pull_from_which_node(mq), False)
        if found is None:
            return self._pull_after_route_update(mq, sub_expression, expression_type, sub_version, offset, max_nums,
                                                 sys_flag, commit_offset, broker_suspend_max_time_millis,
                                                 timeout_millis)
        if found.slave:
            sys_flag = clear_commit_offset_flag(sys_flag)
        header = PullMessageRequestHeader(
            consumer_group=self.consumer_group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset,
            suspend_timeout_millis=broker_suspend_max_time_millis, sub_version=sub_version,
            subscription=sub_expression, expression_type=expression_type)
        return self.instance.api.pull_message(found.broker_addr, header, timeout_millis / 1000)

    async def _pull_after_route_update(self, mq: MessageQueue, sub_expression: str | None, expression_type: str,
                                       sub_version: int, offset: int, max_nums: int, sys_flag: int,
                                       commit_offset: int, broker_suspend_max_time_millis: int,
                                       timeout_millis: int) -> PullResult:
        """`pull_kernel_impl` once the topic's route is fetched again (no address of the broker was known)."""
        await self.instance.update_topic_route(mq.topic)
        if self.instance.find_broker_address_in_subscribe(mq.broker_name, self.recalculate_pull_from_which_node(mq),
                                                          False) is None:
            raise MQClientError(f"the broker {mq.broker_name!r} of {mq} does not exist")
        return await self.pull_kernel_impl(mq, sub_expression, expression_type, sub_version, offset, max_nums,
                                           sys_flag, commit_offset, broker_suspend_max_time_millis, timeout_millis)

    def process_pull_result(self, mq: MessageQueue, result: PullResult,
                            subscription: SubscriptionData | None) -> list[MessageExt]:
        """Decode a FOUND result (RocketMQ's ``processPullResult``) into ``result.messages``.

        Messages are re-filtered by tag when the subscription names tags (untagged ones dropped),
        get MIN_OFFSET / MAX_OFFSET and ``mq``'s broker name. Records that cannot be decoded go to
        ``result.undecodable`` (the tag re-filter drops those whose tags are readable and do not match);
        the others are decoded all the same. Raises `MQRemotingError` for a body that is not a
        sequence of records.
        """
        self.update_pull_from_which_node(mq, result.suggest_which_broker_id)
        if result.status is not PullStatus.FOUND or not result.body:
            result.messages = []
            return result.messages
        undecodable: list[UndecodableRecord] = []
        try:
            messages = decode_records(result.body, broker_name=mq.broker_name,
                                      extra_properties=pull_offset_properties(result), undecodable=undecodable)
        except (RecordDecodeError, ProtocolError) as exc:
            raise MQRemotingError(f"malformed pull body for {mq}: {exc}") from exc
        result.body = b""
        if subscription is not None and subscription.tags_set and not subscription.class_filter_mode:
            tags_set = subscription.tags_set
            messages = [msg for msg in messages if msg.tags is not None and msg.tags in tags_set]
            if undecodable:
                undecodable = [bad for bad in undecodable if bad.message.tags is None or bad.message.tags in tags_set]
        result.messages = messages
        result.undecodable = undecodable
        return messages


class PullMessageService:
    """Runs a push consumer's pull requests on the client's event loop."""

    def __init__(self, consumer: PullingConsumer, queues: PulledQueues, consume: ConsumeRequestSink,
                 undecodable: UndecodableSink) -> None:
        self.consumer = consumer
        self.queues = queues
        self.consume = consume
        self.undecodable = undecodable
        self.wrapper = PullAPIWrapper(consumer.instance, consumer.group)
        self._stopped = False
        self._timers: set[asyncio.TimerHandle] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._queue_flow_control_times = 0
        self._size_flow_control_times = 0
        self._span_flow_control_times = 0
        #: flow-control pauses ended by the drained cache before the re-check
        self._drained_resume_times = 0
        self._failure_log = RepeatedLog(logger, consumer.client_config.repeated_failure_log_interval)

    # ------------------------------------------------------------------ scheduling

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        instance = self.consumer.instance
        if instance.in_loop_thread():
            fn(*args)
        else:
            instance.loop.call_soon_threadsafe(fn, *args)

    def execute_pull_request_immediately(self, request: PullRequest) -> None:
        """Pull ``request`` as soon as the loop gets to it (thread-safe)."""
        self._on_loop(self._start_pull, request)

    def execute_pull_request_later(self, request: PullRequest, delay_ms: int) -> None:
        """Pull ``request`` after ``delay_ms`` (thread-safe)."""
        self.execute_task_later(lambda: self._start_pull(request), delay_ms)

    def execute_task_later(self, task: Callable[[], None], delay_ms: int) -> None:
        """Run ``task`` on the loop after ``delay_ms`` unless the service stopped meanwhile (thread-safe)."""
        self._on_loop(self._schedule, task, delay_ms)

    def _schedule(self, task: Callable[[], None], delay_ms: int) -> None:
        if self._stopped:
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            if not self._stopped:
                task()

        handle = loop.call_later(delay_ms / 1000, fire)
        self._timers.add(handle)

    def _start_pull(self, request: PullRequest) -> None:
        if self._stopped:
            return
        task = asyncio.get_running_loop().create_task(self.pull_message(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        """Stop: pending pulls are forgotten, in-flight ones cancelled (on the loop)."""
        self._stopped = True
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ the pull flow

    async def pull_message(self, request: PullRequest) -> None:
        """The pull flow for ``request``, step after step while each asks for the next at once.

        The next pull goes on in this task rather than in a new one: a task per pull costs the loop a
        task creation a pull, and its request is only queued once every answer read with this one has
        been handled, so the broker would get the requests in bursts while this loop waited.
        """
        while await self.pull_once(request) and not self._stopped:
            pass

    async def pull_once(self, request: PullRequest) -> bool:
        """One step of the pull flow; True when the next pull should follow at once (else it is scheduled)."""
        consumer = self.consumer
        pq = request.process_queue
        if pq.dropped:
            logger.debug("%s: pull request of dropped %s forgotten", consumer.group, request.message_queue)
            return False
        pq.last_pull_timestamp = pq.now_ms()
        exception_delay = consumer.client_config.pull_time_delay_mills_when_exception
        if not consumer.is_running:
            self.execute_pull_request_later(request, exception_delay)
            return False
        if consumer.paused:
            self.execute_pull_request_later(request, PULL_TIME_DELAY_MILLS_WHEN_SUSPEND)
            return False
        cached_count = pq.msg_count
        if cached_count > consumer.pull_threshold_for_queue:
            self._pull_when_drained(request)
            if self._queue_flow_control_times % _FLOW_CONTROL_LOG_EVERY == 0:
                logger.warning("%s: %s holds %d messages (threshold %d): flow control (%d times)", consumer.group,
                               request.message_queue, cached_count, consumer.pull_threshold_for_queue,
                               self._queue_flow_control_times)
            self._queue_flow_control_times += 1
            return False
        cached_mib = pq.msg_size // _MIB
        if cached_mib > consumer.pull_threshold_size_for_queue:
            self._pull_when_drained(request)
            if self._size_flow_control_times % _FLOW_CONTROL_LOG_EVERY == 0:
                logger.warning("%s: %s holds %d MiB (threshold %d MiB): flow control (%d times)", consumer.group,
                               request.message_queue, cached_mib, consumer.pull_threshold_size_for_queue,
                               self._size_flow_control_times)
            self._size_flow_control_times += 1
            return False
        if not consumer.consume_orderly:
            span = pq.max_span
            if span > consumer.settings.consume_concurrently_max_span:
                self.execute_pull_request_later(request, PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL)
                if self._span_flow_control_times % _FLOW_CONTROL_LOG_EVERY == 0:
                    logger.warning("%s: %s offset span %d is over %d: flow control (%d times)", consumer.group,
                                   request.message_queue, span, consumer.settings.consume_concurrently_max_span,
                                   self._span_flow_control_times)
                self._span_flow_control_times += 1
                return False
        elif pq.locked:
            if not request.previously_locked:
                try:
                    offset = await self.queues.compute_pull_from_where(request.message_queue)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    logger.warning("%s: cannot re-read the offset of %s: %s", consumer.group, request.message_queue,
                                   exc)
                    self.execute_pull_request_later(request, exception_delay)
                    return False
                if offset < 0:
                    self.execute_pull_request_later(request, exception_delay)
                    return False
                if offset < request.next_offset:
                    logger.info("%s: first pull of %s after locking: the broker says %d, we were at %d",
                                consumer.group, request.message_queue, offset, request.next_offset)
                request.previously_locked = True
                request.next_offset = offset
        else:
            self.execute_pull_request_later(request, exception_delay)
            logger.debug("%s: %s is not locked at the broker yet; pulling later", consumer.group,
                         request.message_queue)
            return False

        mq = request.message_queue
        subscription = self.queues.subscription_inner.get(mq.topic)
        if subscription is None:
            self.execute_pull_request_later(request, exception_delay)
            logger.warning("%s: no subscription for %s; pulling later", consumer.group, mq)
            return False

        commit_offset_enable = False
        commit_offset_value = 0
        if consumer.message_model is MessageModel.CLUSTERING:
            # read_offset(READ_FROM_MEMORY) without its coroutine: every pull asks
            memory_offset = consumer.offset_store.memory_offset(mq)
            commit_offset_value = -1 if memory_offset is None else memory_offset
            commit_offset_enable = commit_offset_value > 0
        class_filter = subscription.class_filter_mode
        sub_expression = (subscription.sub_string if consumer.settings.post_subscription_when_pull and not class_filter
                          else None)
        sys_flag = build_pull_sys_flag(commit_offset_enable, True, sub_expression is not None, class_filter)
        begin = time.monotonic()
        try:
            result = await self.wrapper.pull_kernel_impl(
                mq, sub_expression, subscription.expression_type,
                self.queues.pull_sub_version(mq.topic, subscription), request.next_offset,
                consumer.settings.pull_batch_size, sys_flag, max(commit_offset_value, 0),
                BROKER_SUSPEND_MAX_TIME_MILLIS, CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND)
            return self._on_pull_result(request, result, subscription, begin)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._rewind(request)
            self._pull_failed(request, exc, exception_delay)
            return False

    def _pull_failed(self, request: PullRequest, exc: Exception, delay_ms: int) -> None:
        """A pull failed: retry it after ``delay_ms``, or at once after a heartbeat when the broker has
        forgotten the subscription (a restarted broker knows consumers from their heartbeats only)."""
        consumer = self.consumer
        mq = request.message_queue
        code = exc.code if isinstance(exc, MQBrokerError) else None
        if code in _HEARTBEAT_FIXES and not request.retried_after_heartbeat:
            request.retried_after_heartbeat = True
            heartbeat = consumer.instance.heartbeat_soon(f"{code_name(code, response=True)} from the broker of {mq}",
                                                         join_running=True)
            heartbeat.add_done_callback(lambda _done: self._start_pull(request))
            return
        if not is_retry_topic(mq.topic):
            kind = (mq.broker_name, code if code is not None else type(exc).__name__)
            self._failure_log.log(logging.WARNING, kind, "%s: pull of %s from offset %d failed: %s", consumer.group,
                                  mq, request.next_offset, " ".join(str(exc).split("\n")))
        if not (isinstance(exc, MQConnectError | MQConnectionClosedError) and exc.addr):
            self.execute_pull_request_later(request, delay_ms)
            return
        # the broker is down (or restarting): retry after the delay, or as soon as it can be reached
        retried = False

        def retry(*_args: object) -> None:
            nonlocal retried
            if not retried:
                retried = True
                self._start_pull(request)

        self.execute_task_later(retry, delay_ms)
        consumer.instance.broker_reachable(exc.addr, delay_ms / 1000).add_done_callback(
            lambda reached: retry() if not reached.cancelled() and reached.result() else None)

    def _pull_when_drained(self, request: PullRequest) -> None:
        """Flow control on the cache's count or size: pull ``request`` again after
        PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL (RocketMQ's re-check), or as soon as consumption has drained
        the cache to ``flow_control_resume_ratio`` of both thresholds, whichever comes first.

        RocketMQ only re-checks, so a queue that drains within the 50 ms sits empty until then; with a
        fast listener every queue does, and consumption waits on pulling.
        """
        consumer = self.consumer
        ratio = consumer.settings.flow_control_resume_ratio
        if ratio <= 0:
            self.execute_pull_request_later(request, PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL)
            return
        resumed = False

        def resume(drained: bool) -> None:  # on the loop, from the timer or the drained cache, whichever is first
            nonlocal resumed
            if not resumed:
                resumed = True
                if drained:
                    self._drained_resume_times += 1
                self._start_pull(request)

        self.execute_task_later(lambda: resume(False), PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL)
        request.process_queue.call_when_drained(
            lambda: self._on_loop(resume, True), int(consumer.pull_threshold_for_queue * ratio),
            int(consumer.pull_threshold_size_for_queue * _MIB * ratio))

    def _on_pull_result(self, request: PullRequest, result: PullResult, subscription: SubscriptionData,
                        begin: float) -> bool:
        """Handle a pull's answer; True when the next pull should follow at once (else it is scheduled)."""
        consumer = self.consumer
        mq = request.message_queue
        pq = request.process_queue
        if self._rewind(request):
            # an earlier answer was not taken: this one (which follows it) is dropped too
            self.execute_pull_request_later(request, consumer.client_config.pull_time_delay_mills_when_exception)
            return False
        request.retried_after_heartbeat = False
        status = result.status
        later = status is PullStatus.FOUND and bool(result.body) and self._answer_later(request, result)
        if later:
            self.wrapper.update_pull_from_which_node(mq, result.suggest_which_broker_id)
            messages: list[MessageExt] = []
        else:
            messages = self.wrapper.process_pull_result(mq, result, subscription)
        if status is PullStatus.FOUND:
            previous_offset = request.next_offset
            request.next_offset = result.next_begin_offset
            consumer.consumer_stats.inc_pull_rt(request.consumer_group, mq.topic, (time.monotonic() - begin) * 1000)
            if later:
                # Two hops: after the channel's flush, which the next pull's request (sent by this task
                # right after it returns) schedules in the loop's next pass.
                loop = asyncio.get_running_loop()
                loop.call_soon(loop.call_soon, self._take_answer, request, result, subscription, previous_offset)
                return True
            self._take_messages(request, result, messages, previous_offset)
            pull_interval = consumer.settings.pull_interval
            if messages and pull_interval > 0:
                self.execute_pull_request_later(request, round(pull_interval * 1000))
                return False
            return True
        elif status is PullStatus.NO_NEW_MSG or status is PullStatus.NO_MATCHED_MSG:
            request.next_offset = result.next_begin_offset
            self.correct_tags_offset(request)
            return True
        elif status is PullStatus.OFFSET_ILLEGAL:
            if result.next_begin_offset > request.next_offset:
                self._move_past_deleted(request, result)
                return True
            logger.warning("%s: offset %d of %s is illegal (broker: min %d, max %d, next %d)", consumer.group,
                           request.next_offset, mq, result.min_offset, result.max_offset, result.next_begin_offset)
            request.next_offset = result.next_begin_offset
            pq.dropped = True
            self.execute_task_later(lambda: consumer.spawn(self._fix_illegal_offset(request)),
                                    OFFSET_ILLEGAL_FIX_DELAY_MILLS)
        return False

    def _move_past_deleted(self, request: PullRequest, result: PullResult) -> None:
        """The broker's retention deleted the messages from ``request.next_offset`` on before this group read
        them: go on at once from the queue's minimum, which the broker sends as the next offset.

        RocketMQ drops the process queue, stores the new offset 10 s later and picks the queue up again at
        the next rebalance, so a lagging consumer stalls up to 30 s, and by then retention may have moved
        the minimum again. Here the process queue stays (what it caches is still consumed) and only the
        pull cursor moves; the committed offset follows as messages from the new minimum are consumed.
        """
        mq = request.message_queue
        skipped_from = request.next_offset
        request.next_offset = result.next_begin_offset
        logger.warning("%s: messages %d..%d of %s were deleted by the broker's retention before the group consumed "
                       "them (%d messages); going on from offset %d", self.consumer.group, skipped_from,
                       result.next_begin_offset - 1, mq, result.next_begin_offset - skipped_from,
                       result.next_begin_offset)
        self.correct_tags_offset(request)

    def _answer_later(self, request: PullRequest, result: PullResult) -> bool:
        """Whether a FOUND answer may be taken after the next pull is sent: no pull interval, and the
        process queue would pass every flow-control check with all the answer's queue units in it
        (an upper bound on its messages: the checks after the put would pass too)."""
        consumer = self.consumer
        if self._stopped or consumer.settings.pull_interval > 0:
            return False
        pq = request.process_queue
        first = request.next_offset
        last = result.next_begin_offset - 1
        if last - first + 1 < ANSWER_LATER_MIN_UNITS:
            return False
        if pq.msg_count + (last - first + 1) > consumer.pull_threshold_for_queue:
            return False
        if (pq.msg_size + len(result.body)) // _MIB > consumer.pull_threshold_size_for_queue:
            return False
        return consumer.consume_orderly or pq.span_with(first, last) <= consumer.settings.consume_concurrently_max_span

    def _take_answer(self, request: PullRequest, result: PullResult, subscription: SubscriptionData,
                     previous_offset: int) -> None:
        """`_on_pull_result`'s work on a FOUND answer, once the next pull went out (a loop callback)."""
        if self._stopped or request.rewind_offset is not None:
            return
        consumer = self.consumer
        mq = request.message_queue
        try:
            messages = self.wrapper.process_pull_result(mq, result, subscription)
        except Exception as exc:
            # Nothing of the answer may be skipped: the pull in flight is ignored and pulling starts
            # again from this answer's offset after the usual delay.
            logger.warning("%s: pull of %s from offset %d failed: %s", consumer.group, mq, previous_offset, exc)
            request.rewind_offset = previous_offset
            return
        self._take_messages(request, result, messages, previous_offset)

    def _take_messages(self, request: PullRequest, result: PullResult, messages: list[MessageExt],
                       previous_offset: int) -> None:
        """A FOUND answer's decoded messages into the process queue and on to the consume service; its
        undecodable records to the consumer's dead-letter path (held in the process queue first, so no
        offset committed meanwhile passes them)."""
        consumer = self.consumer
        mq = request.message_queue
        first_offset = None
        if result.undecodable:
            self.undecodable.take(mq, request.process_queue, result.undecodable)
        if messages:
            first_offset = messages[0].queue_offset
            pq = request.process_queue
            consumer.consumer_stats.inc_pull_tps(request.consumer_group, mq.topic, len(messages))
            dispatch_to_consume = pq.put_messages(messages)
            self.consume.submit_consume_request(messages, pq, mq, dispatch_to_consume)
        if result.next_begin_offset < previous_offset or (first_offset is not None and first_offset < previous_offset):
            logger.warning("%s: pull result of %s looks wrong: next %d, first %s, requested %d", consumer.group,
                           mq, result.next_begin_offset, first_offset, previous_offset)

    @staticmethod
    def _rewind(request: PullRequest) -> bool:
        """Go back to the offset of an answer that was not taken, if there is one; True if so."""
        offset = request.rewind_offset
        if offset is None:
            return False
        request.rewind_offset = None
        request.next_offset = offset
        return True

    def correct_tags_offset(self, request: PullRequest) -> None:
        """Nothing cached: the stored offset may advance to the next pull offset (increase only)."""
        if request.process_queue.msg_count == 0:
            self.consumer.offset_store.update_offset(request.message_queue, request.next_offset, True)

    async def _fix_illegal_offset(self, request: PullRequest) -> None:
        consumer = self.consumer
        mq = request.message_queue
        if self.queues.process_queue_table.get(mq) is not request.process_queue:
            # Removed meanwhile (rebalance, offset reset), perhaps restarted already: the queue's offset
            # is no longer this process queue's to fix.
            logger.info("%s: %s was removed meanwhile; its OFFSET_ILLEGAL fix-up is skipped", consumer.group, mq)
            return
        try:
            consumer.offset_store.update_offset(mq, request.next_offset, False)
            await consumer.offset_store.persist(mq)
            await self.queues.remove_process_queue(mq, request.process_queue)
            logger.warning("%s: fixed the offset of %s to %d", consumer.group, mq, request.next_offset)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s: fixing the offset of %s failed", consumer.group, mq)


__all__ = [
    "ANSWER_LATER_MIN_UNITS",
    "BROKER_SUSPEND_MAX_TIME_MILLIS",
    "CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND",
    "OFFSET_ILLEGAL_FIX_DELAY_MILLS",
    "PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION",
    "PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL",
    "PULL_TIME_DELAY_MILLS_WHEN_SUSPEND",
    "ConsumeRequestSink",
    "PullAPIWrapper",
    "PullMessageService",
    "PullRequest",
    "PulledQueues",
    "PullingConsumer",
    "UndecodableSink",
]
