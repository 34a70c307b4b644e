"""`Producer`: sends messages to a RocketMQ (or rocketflow) cluster.

```python
with Producer("pg", namesrv="127.0.0.1:9876") as producer:
    producer.send(Message("Orders", b"...", tags="pay", keys="o-1"))   # round robin
    producer.send(msg, sharding_key="o-1")                               # same key -> same queue
    producer.send(msg, selector=lambda queues, msg, arg: queues[arg % len(queues)], arg=7)
    producer.send_batch([...]); producer.send_oneway(msg)
    future = producer.send_async(msg)        # concurrent.futures.Future[SendResult]
    result = await producer.send_async_await(msg)   # from any asyncio loop
```

Sends run on the shared `ClientInstance`'s event loop; the blocking methods wait for it from the
calling thread (so they must not be called on that loop's thread: use the async variants there).

Behaviour follows RocketMQ 4.9.3's ``DefaultMQProducerImpl``: validation, UNIQ_KEY ids, zlib
compression of bodies of at least `ProducerSettings.compress_msg_body_over_howmuch` bytes (not
batches), route lookup with the TBW102 fallback for auto-created topics, SEND_MESSAGE_V2 on the
wire, and up to ``1 + retry_times_when_send_failed`` attempts for sync sends, each avoiding the
broker the previous one failed on, within one overall ``send_msg_timeout``. Differences:

* async sends retry like sync sends (``1 + retry_times_when_send_async_failed`` attempts, on another
  broker) where 4.9.3 re-sends to the same broker;
* ordered sends (``sharding_key`` / ``selector``) make exactly one attempt (as ``sendSelectImpl``);
* the ``DEFAULT`` instance name becomes the pid (so all producers of a process share one client
  instance), where 4.9.3 uses ``pid#nanotime`` per producer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from rocketflow.client.api import (
    CommunicationMode,
    SendResult,
    SendStatus,
    encode_message_properties,
)
from rocketflow.client.config import ClientConfig, check_group, split_settings
from rocketflow.client.errors import MQBrokerError, MQClientError, MQError, MQRemotingError, MQTimeoutError
from rocketflow.client.instance import CLIENT_INNER_PRODUCER_GROUP, ClientInstance
from rocketflow.client.producer.request_reply import is_reply, stamp_request
from rocketflow.client.route import TopicPublishInfo
from rocketflow.client.trace import TraceDispatcher, TraceRecord, TraceType, message_type_of
from rocketflow.protocol.codec import RecordEncodeError, compress_body, encode_batch_body
from rocketflow.protocol.ids import UniqueIdGenerator
from rocketflow.protocol.message import Message, MessageConst, MessageExt, MessageQueue
from rocketflow.protocol.names import (
    DEFAULT_TOPIC,
    MAX_MESSAGE_SIZE,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    InvalidNameError,
    is_retry_topic,
    validate_topic,
)
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.protocol.tags import java_string_hash
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.headers import SendMessageRequestHeader

logger = logging.getLogger(__name__)

#: RocketMQ refuses this group name for user producers.
DEFAULT_PRODUCER_GROUP: Final = "DEFAULT_PRODUCER"
#: Topics no client may send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET, 4.9.3).
NOT_ALLOWED_SEND_TOPICS: Final = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT,
})
#: Broker codes after which a sync send is retried on another broker.
RETRY_RESPONSE_CODES: Final = frozenset({
    ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
    ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT,
})

#: ``selector(queues, msg, arg) -> MessageQueue``
MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


@dataclass(slots=True)
class ProducerSettings:
    """Producer settings with RocketMQ's ``DefaultMQProducer`` defaults (times in seconds)."""

    send_msg_timeout: float = 3.0
    retry_times_when_send_failed: int = 2
    retry_times_when_send_async_failed: int = 2
    compress_msg_body_over_howmuch: int = 4096
    compress_level: int = 5
    max_message_size: int = MAX_MESSAGE_SIZE
    default_topic_queue_nums: int = 4
    create_topic_key: str = DEFAULT_TOPIC
    retry_another_broker_when_not_store_ok: bool = False
    #: record a Pub message trace of every send (``enableMsgTrace``) to ``trace_topic``
    #: (``customizedTraceTopic``; None = RMQ_SYS_TRACE_TOPIC); see `rocketflow.client.trace`
    enable_msg_trace: bool = False
    trace_topic: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.send_msg_timeout, bool) or not isinstance(self.send_msg_timeout, int | float) \
                or not self.send_msg_timeout > 0:
            raise MQClientError(f"send_msg_timeout must be a positive number of seconds, got {self.send_msg_timeout!r}")
        ranges = {
            "retry_times_when_send_failed": (0, 1_000),
            "retry_times_when_send_async_failed": (0, 1_000),
            "compress_msg_body_over_howmuch": (0, 1 << 31),
            "compress_level": (-1, 9),
            "max_message_size": (1, 1 << 31),
            "default_topic_queue_nums": (1, 1 << 16),
        }
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise MQClientError(f"{name} must be an int in {low}..{high}, got {value!r}")
        if not isinstance(self.retry_another_broker_when_not_store_ok, bool):
            raise MQClientError("retry_another_broker_when_not_store_ok must be a bool")
        try:
            validate_topic(self.create_topic_key)
        except InvalidNameError as exc:
            raise MQClientError(f"create_topic_key: {exc}") from None


PRODUCER_SETTING_FIELDS: Final = frozenset(field.name for field in dataclasses.fields(ProducerSettings))


def select_queue_by_sharding_key(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
    """``queues[abs(java_string_hash(key)) % len(queues)]``: what Java's ``SelectMessageQueueByHash``
    picks for the same key and queue list, in any process."""
    if not queues:
        raise MQClientError("no queue to select from")
    return queues[abs(java_string_hash(key)) % len(queues)]


def check_message(msg: object, max_message_size: int = MAX_MESSAGE_SIZE) -> None:
    """RocketMQ's ``Validators.checkMessage``: raise `MQClientError` (code MESSAGE_ILLEGAL) for a
    message that cannot be sent."""
    illegal = ResponseCode.MESSAGE_ILLEGAL
    if not isinstance(msg, Message):
        raise MQClientError(f"expected a Message, got {type(msg).__name__}", illegal)
    check_topic(msg.topic)
    if not isinstance(msg.body, bytes | bytearray):
        raise MQClientError("the message body must be bytes", illegal)
    if len(msg.body) == 0:
        raise MQClientError("the message body is empty", illegal)
    if len(msg.body) > max_message_size:
        raise MQClientError(f"the message body is {len(msg.body)} bytes, over the maximum of {max_message_size}",
                            illegal)


#: Topics `check_topic` passed (a send checks its topic every time; a process sends to few topics).
_SENDABLE_TOPICS: set[str] = set()
_SENDABLE_TOPICS_MAX: Final = 4096


def check_topic(topic: object) -> None:
    """Raise `MQClientError` for a topic a producer may not send to."""
    if type(topic) is str and topic in _SENDABLE_TOPICS:
        return
    illegal = ResponseCode.MESSAGE_ILLEGAL
    try:
        validate_topic(topic)  # type: ignore[arg-type]
    except InvalidNameError as exc:
        raise MQClientError(str(exc), illegal) from None
    assert isinstance(topic, str)
    if topic == DEFAULT_TOPIC:
        raise MQClientError(f"the topic {topic!r} is the auto-create template topic; it cannot be sent to", illegal)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise MQClientError(f"sending to the system topic {topic!r} is not allowed", illegal)
    if type(topic) is str:
        if len(_SENDABLE_TOPICS) >= _SENDABLE_TOPICS_MAX:
            _SENDABLE_TOPICS.clear()
        _SENDABLE_TOPICS.add(topic)


class Producer:
    """A message producer; see the module docstring."""

    def __init__(self, group: str, namesrv: str | None = None, *, client_config: ClientConfig | None = None,
                 **settings: Any) -> None:
        """``settings`` are `ProducerSettings` fields and `ClientConfig` fields (e.g. ``instance_name``,
        ``client_ip``, ``mq_client_api_timeout``); ``namesrv`` is ``"host:port;host:port"``."""
        check_group("producer", group, DEFAULT_PRODUCER_GROUP)
        config, self.settings = split_settings("producer", ProducerSettings, settings, namesrv, client_config)
        self.group = group
        self.client_config = config
        self._instance: ClientInstance | None = None
        self._owns_instance = True
        self._running = False
        self._shut_down = False
        self._ids: UniqueIdGenerator | None = None
        self._tracer: TraceDispatcher | None = None

    @classmethod
    def _attached(cls, group: str, instance: ClientInstance) -> Producer:
        """A running producer that borrows ``instance`` without registering or referencing it."""
        producer = cls(group, client_config=instance.config)
        producer._instance = instance
        producer._owns_instance = False
        producer._running = True
        producer._ids = UniqueIdGenerator(instance.config.resolved_client_ip())
        return producer

    # ------------------------------------------------------------------ lifecycle

    @property
    def instance(self) -> ClientInstance:
        """The client instance this producer sends through (raises if not started)."""
        if self._instance is None or not self._running:
            raise MQClientError(f"producer {self.group!r} is not running; call start() first")
        return self._instance

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    def start(self) -> None:
        """Join (or create and start) the process's client instance and register the group."""
        if self._running or self._shut_down:
            state = "running" if self._running else "shut down"
            raise MQClientError(f"producer {self.group!r} is already {state}; a producer starts once")
        if self.group != CLIENT_INNER_PRODUCER_GROUP:
            self.client_config.change_instance_name_to_pid(unique=False)
        if not self.client_config.namesrv_addresses():
            raise MQClientError("no name server address: pass namesrv='host:port' "
                                "(or set the NAMESRV_ADDR environment variable)")
        instance = ClientInstance.get_or_create(self.client_config)
        instance.register_producer(self.group, self)
        try:
            instance.start()
        except BaseException:
            instance.unregister_producer(self.group)
            raise
        self._instance = instance
        self._ids = UniqueIdGenerator(instance.config.resolved_client_ip())
        self._running = True
        if self.settings.enable_msg_trace:
            tracer = new_trace_dispatcher(instance, self.settings.trace_topic)
            tracer.start()
            self._tracer = tracer
        try:
            instance.run(instance.send_heartbeat_to_all_brokers(), instance.config.mq_client_api_timeout * 2)
        except MQError as exc:
            logger.warning("producer %s: first heartbeat failed: %s", self.group, exc)
        logger.info("producer %s started on client %s", self.group, instance.client_id)

    def shutdown(self) -> None:
        """Unregister the group and release the client instance (idempotent)."""
        if not self._running:
            self._shut_down = True
            return
        self._running = False
        self._shut_down = True
        if self._tracer is not None:
            self._tracer.shutdown()
            self._tracer = None
        instance = self._instance
        if instance is not None and self._owns_instance:
            instance.unregister_producer(self.group)
            instance.shutdown()
        logger.info("producer %s shut down", self.group)

    def __enter__(self) -> Producer:
        if not self._running:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ public sends

    def send(self, msg: Message, *, sharding_key: str | None = None, selector: MessageQueueSelector | None = None,
             arg: Any = None, timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer.

        With ``sharding_key`` the queue is ``queues[abs(java_string_hash(key)) % len(queues)]`` and the
        key is recorded in the ``__SHARDINGKEY`` property; with ``selector`` the queue is
        ``selector(queues, msg, arg)``. Ordered sends are not retried on another queue.
        """
        return self.instance.run(self._send_async_coro(msg, sharding_key, selector, arg, timeout,
                                                       CommunicationMode.SYNC))

    def send_oneway(self, msg: Message, *, sharding_key: str | None = None,
                    selector: MessageQueueSelector | None = None, arg: Any = None) -> None:
        """Send without waiting for (or getting) an answer; returns once the request is written."""
        self.instance.run(self.send_coro(msg, sharding_key=sharding_key, selector=selector, arg=arg,
                                         mode=CommunicationMode.ONEWAY))

    def send_async(self, msg: Message, *, sharding_key: str | None = None,
                   selector: MessageQueueSelector | None = None, arg: Any = None,
                   timeout: float | None = None) -> concurrent.futures.Future[SendResult]:
        """Start a send; the future resolves to its `SendResult` or its error (`asyncio.wrap_future`
        turns it into an awaitable on any loop; see also `send_async_await`)."""
        return self.instance.submit(self._send_async_coro(msg, sharding_key, selector, arg, timeout))

    async def send_async_await(self, msg: Message, *, sharding_key: str | None = None,
                               selector: MessageQueueSelector | None = None, arg: Any = None,
                               timeout: float | None = None) -> SendResult:
        """`send_async` awaited: usable from any event loop, including the client's own."""
        instance = self.instance
        if instance.in_loop_thread():
            result = await self.send_coro(msg, sharding_key=sharding_key, selector=selector, arg=arg, timeout=timeout,
                                          mode=CommunicationMode.ASYNC)
            assert result is not None
            return result
        return await asyncio.wrap_future(self.send_async(msg, sharding_key=sharding_key, selector=selector,
                                                         arg=arg, timeout=timeout))

    def send_batch(self, msgs: Iterable[Message], *, timeout: float | None = None) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE (no delay levels, no retry topics)."""
        return self.instance.run(self.send_batch_coro(list(msgs), timeout=timeout))

    def request(self, msg: Message, timeout: float | None = None, *, sharding_key: str | None = None,
                selector: MessageQueueSelector | None = None, arg: Any = None) -> MessageExt:
        """Send ``msg`` as a request and wait up to ``timeout`` seconds (``send_msg_timeout``) for its reply.

        A consumer of ``msg.topic`` answers with `rocketflow.client.create_reply_message`. Raises
        `MQTimeoutError` when the request was sent but no reply came in time, `MQClientError` when it
        could not be sent.
        """
        return self.instance.run(self.request_coro(msg, timeout, sharding_key=sharding_key, selector=selector,
                                                   arg=arg))

    def request_async(self, msg: Message, timeout: float | None = None, *, sharding_key: str | None = None,
                      selector: MessageQueueSelector | None = None,
                      arg: Any = None) -> concurrent.futures.Future[MessageExt]:
        """`request` without blocking: the future resolves to the reply (or the error)."""
        return self.instance.submit(self.request_coro(msg, timeout, sharding_key=sharding_key, selector=selector,
                                                      arg=arg))

    async def request_coro(self, msg: Message, timeout: float | None = None, *, sharding_key: str | None = None,
                           selector: MessageQueueSelector | None = None, arg: Any = None) -> MessageExt:
        """`request` as a coroutine for the client's loop."""
        instance = self.instance
        timeout = self.settings.send_msg_timeout if timeout is None else timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise MQClientError(f"timeout must be a positive number of seconds, got {timeout!r}")
        check_message(msg, self.settings.max_message_size)
        started = time.monotonic()
        if msg.topic not in instance.topic_route_table:
            # the broker finds the requester by the client id it heartbeats with: be known before the reply
            await self._find_publish_info(msg.topic)
            await instance.send_heartbeat_to_all_brokers()
        correlation_id = stamp_request(msg, instance.client_id, timeout)
        reply = instance.expect_reply(correlation_id)
        try:
            await self.send_coro(msg, sharding_key=sharding_key, selector=selector, arg=arg,
                                 timeout=max(timeout - (time.monotonic() - started), 0.001))
            remaining = timeout - (time.monotonic() - started)
            try:
                async with asyncio.timeout(max(remaining, 0.0)):
                    return await reply
            except TimeoutError:
                raise MQTimeoutError(f"sent the request to {msg.topic!r}, but no reply came within "
                                     f"{timeout * 1000:.0f} ms") from None
        finally:
            instance.forget_reply(correlation_id)

    async def _send_async_coro(self, msg: Message, sharding_key: str | None, selector: MessageQueueSelector | None,
                               arg: Any, timeout: float | None,
                               mode: CommunicationMode = CommunicationMode.ASYNC) -> SendResult:
        result = await self.send_coro(msg, sharding_key=sharding_key, selector=selector, arg=arg, timeout=timeout,
                                      mode=mode)
        assert result is not None
        return result

    # ------------------------------------------------------------------ the send path (on the loop)

    async def send_coro(self, msg: Message, *, sharding_key: str | None = None,
                        selector: MessageQueueSelector | None = None, arg: Any = None, timeout: float | None = None,
                        mode: CommunicationMode = CommunicationMode.SYNC) -> SendResult | None:
        """The send as a coroutine for the client's loop (None for ONEWAY)."""
        instance = self.instance
        check_message(msg, self.settings.max_message_size)
        if sharding_key is not None and selector is not None:
            raise MQClientError("pass either sharding_key or selector, not both")
        if sharding_key is not None and (not isinstance(sharding_key, str) or not sharding_key):
            raise MQClientError(f"sharding_key must be a non-empty string, got {sharding_key!r}")
        timeout = self.settings.send_msg_timeout if timeout is None else timeout
        if not timeout > 0:
            raise MQClientError(f"timeout must be positive, got {timeout!r}")
        started = time.monotonic()
        info = await self._find_publish_info(msg.topic)
        if not info.ok():
            raise MQClientError(f"no route info for topic {msg.topic!r} (name servers "
                                f"{instance.config.namesrv_addr}); is the topic created or auto-creation enabled?")
        if sharding_key is not None or selector is not None:
            queues = list(info.message_queues)
            if sharding_key is not None:
                msg.properties[MessageConst.SHARDING_KEY] = sharding_key
                mq = select_queue_by_sharding_key(queues, sharding_key)
            else:
                assert selector is not None
                try:
                    mq = selector(queues, msg, arg)
                except Exception as exc:
                    raise MQClientError(f"the message queue selector failed: {exc!r}") from exc
                if not isinstance(mq, MessageQueue) or mq not in queues:
                    raise MQClientError(f"the selector returned {mq!r}, which is not one of the topic's queues")
            return await self._send_kernel(msg, mq, info, mode, timeout)
        return await self._send_default(msg, info, mode, timeout, started)

    async def _find_publish_info(self, topic: str) -> TopicPublishInfo:
        """The topic's route, fetched when there is none yet (then that of the auto-creation topic).

        When no route comes and a lookup failed (no name server answers, a TLS-only one refused our
        plaintext, ACL refused), that failure is raised: it, not a missing topic, is what the user must fix.
        """
        instance = self.instance
        info = instance.topic_publish_info(topic)
        if info.ok():
            return info
        failure: MQError | None = None
        try:
            await instance.update_topic_route(topic, raise_errors=True)
        except MQError as exc:
            failure = exc
        info = instance.topic_publish_info(topic)
        if info.have_topic_router_info or info.ok():
            return info
        if failure is None:
            try:
                await instance.update_topic_route(topic, is_default=True,
                                                  default_topic_queue_nums=self.settings.default_topic_queue_nums,
                                                  create_topic_key=self.settings.create_topic_key, raise_errors=True)
            except MQError as exc:
                failure = exc
        info = instance.topic_publish_info(topic)
        if failure is not None and not info.ok():
            raise failure
        return info

    async def _send_default(self, msg: Message, info: TopicPublishInfo, mode: CommunicationMode, timeout: float,
                            started: float) -> SendResult | None:
        if mode is CommunicationMode.SYNC:
            attempts = 1 + self.settings.retry_times_when_send_failed
        elif mode is CommunicationMode.ASYNC:
            attempts = 1 + self.settings.retry_times_when_send_async_failed
        else:
            attempts = 1
        brokers_sent: list[str] = []
        last_error: MQError | None = None
        result: SendResult | None = None
        mq: MessageQueue | None = None
        for _ in range(attempts):
            mq = info.select_one_message_queue(mq.broker_name if mq is not None else None)
            brokers_sent.append(mq.broker_name)
            remaining = timeout - (time.monotonic() - started)
            if remaining <= 0:
                raise MQClientError(f"sending to {msg.topic!r} timed out after {timeout}s "
                                    f"(brokers tried: {brokers_sent[:-1]})") from last_error
            try:
                result = await self._send_kernel(msg, mq, info, mode, remaining)
            except MQBrokerError as exc:
                if exc.code not in RETRY_RESPONSE_CODES:
                    raise
                last_error = exc
                logger.warning("producer %s: send to %s failed, retrying: %s", self.group, mq, exc)
                continue
            except (MQRemotingError, MQClientError) as exc:
                last_error = exc
                logger.warning("producer %s: send to %s failed, retrying: %s", self.group, mq, exc)
                continue
            if (result is not None and result.send_status is not SendStatus.SEND_OK
                    and self.settings.retry_another_broker_when_not_store_ok):
                continue
            return result
        if result is not None:
            return result
        cost = (time.monotonic() - started) * 1000
        error = MQClientError(f"send to topic {msg.topic!r} failed {len(brokers_sent)} times in {cost:.0f} ms "
                              f"(brokers tried: {brokers_sent}): {last_error}",
                              getattr(last_error, "code", None))
        raise error from last_error

    async def _send_kernel(self, msg: Message, mq: MessageQueue, info: TopicPublishInfo, mode: CommunicationMode,
                           timeout: float) -> SendResult | None:
        instance = self.instance
        addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await self._find_publish_info(mq.topic)
            addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise MQClientError(f"the broker {mq.broker_name!r} does not exist (no master address in the route)")
        addr = instance.vip_address(addr)
        if msg.uniq_key is None:
            assert self._ids is not None
            msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = self._ids.next_id()
        sys_flag = 0
        body = msg.body
        if len(body) >= self.settings.compress_msg_body_over_howmuch:
            body = compress_body(body, self.settings.compress_level)
            sys_flag |= MessageSysFlag.COMPRESSED
        if msg.properties.get(MessageConst.TRANSACTION_PREPARED) == "true":
            sys_flag |= MessageSysFlag.TRANSACTION_PREPARED
        header = self._header(msg, mq, sys_flag)
        code = RequestCode.SEND_REPLY_MESSAGE_V2 if is_reply(msg) else RequestCode.SEND_MESSAGE_V2
        metrics = instance.metrics
        tracer = self._tracer
        msg_id = msg.uniq_key or ""
        if metrics is None and tracer is None:
            return await instance.api.send_message(addr, mq.broker_name, body, msg_id, header, timeout, mode,
                                                   code=code)
        began = time.monotonic()
        try:
            result = await instance.api.send_message(addr, mq.broker_name, body, msg_id, header, timeout, mode,
                                                     code=code)
        except MQError:
            if metrics is not None:
                metrics.send_failed(self.group, mq.topic)
            raise
        cost = time.monotonic() - began
        if metrics is not None:
            metrics.observe_send(self.group, mq.topic, cost)
        if tracer is not None and result is not None and msg.topic != tracer.trace_topic:
            tracer.append(TraceRecord(
                TraceType.PUB, timestamp=int((time.time() - cost) * 1000), region_id=result.region_id,
                group=self.group, topic=msg.topic, msg_id=result.msg_id, tags=msg.tags or "", keys=msg.keys or "",
                store_host=addr, body_length=len(msg.body), cost_ms=int(cost * 1000), msg_type=message_type_of(msg),
                offset_msg_id=result.offset_msg_id, success=result.send_status is SendStatus.SEND_OK))
        return result

    def _header(self, msg: Message, mq: MessageQueue, sys_flag: int, *,
                batch: bool = False) -> SendMessageRequestHeader:
        properties = msg.properties
        reconsume_times: int | None = 0
        max_reconsume_times: int | None = None
        if is_retry_topic(msg.topic):
            properties = dict(properties)  # the two below travel in the header, not as properties
            reconsume = properties.pop(MessageConst.RECONSUME_TIME, None)
            if reconsume is not None:
                reconsume_times = _int_or_none(reconsume)
            max_reconsume = properties.pop(MessageConst.MAX_RECONSUME_TIMES, None)
            if max_reconsume is not None:
                max_reconsume_times = _int_or_none(max_reconsume)
        return SendMessageRequestHeader(
            producer_group=self.group,
            topic=msg.topic,
            default_topic=self.settings.create_topic_key,
            default_topic_queue_nums=self.settings.default_topic_queue_nums,
            queue_id=mq.queue_id,
            sys_flag=sys_flag,
            born_timestamp=time.time_ns() // 1_000_000,
            flag=msg.flag,
            properties=encode_message_properties(properties),
            reconsume_times=reconsume_times,
            unit_mode=self.client_config.unit_mode,
            batch=batch,
            max_reconsume_times=max_reconsume_times,
        )

    # ------------------------------------------------------------------ batches

    async def send_batch_coro(self, msgs: list[Message], *, timeout: float | None = None) -> SendResult:
        """`send_batch` as a coroutine for the client's loop."""
        instance = self.instance
        if not msgs:
            raise MQClientError("a batch needs at least one message", ResponseCode.MESSAGE_ILLEGAL)
        first = msgs[0]
        for index, msg in enumerate(msgs):
            if not isinstance(msg, Message):
                raise MQClientError(f"batch item {index} is a {type(msg).__name__}, not a Message")
            check_message(msg, self.settings.max_message_size)
            if msg.delay_level > 0:
                raise MQClientError(f"batch message {index} has a delay level; delayed messages cannot be batched")
            if is_retry_topic(msg.topic):
                raise MQClientError(f"batch message {index} is for the retry topic {msg.topic!r}; "
                                    "retry topics cannot be batched")
            if msg.topic != first.topic:
                raise MQClientError(f"batch message {index} has topic {msg.topic!r} but the batch is for "
                                    f"{first.topic!r}; a batch holds one topic")
            if msg.wait_store_msg_ok != first.wait_store_msg_ok:
                raise MQClientError(f"batch message {index} differs in wait_store_msg_ok from the first message")
        assert self._ids is not None
        for msg in msgs:
            if msg.uniq_key is None:
                msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = self._ids.next_id()
        try:
            body = encode_batch_body(msgs)
        except RecordEncodeError as exc:
            raise MQClientError(f"cannot encode the batch: {exc}", ResponseCode.MESSAGE_ILLEGAL) from None
        if len(body) > self.settings.max_message_size:
            raise MQClientError(f"the encoded batch is {len(body)} bytes, over the maximum of "
                                f"{self.settings.max_message_size}; split it", ResponseCode.MESSAGE_ILLEGAL)
        timeout = self.settings.send_msg_timeout if timeout is None else timeout
        started = time.monotonic()
        info = await self._find_publish_info(first.topic)
        if not info.ok():
            raise MQClientError(f"no route info for topic {first.topic!r}")
        carrier = Message(first.topic, wait_store_msg_ok=first.wait_store_msg_ok)
        carrier.properties[MessageConst.WAIT_STORE_MSG_OK] = "true" if first.wait_store_msg_ok else "false"
        attempts = 1 + self.settings.retry_times_when_send_failed
        mq: MessageQueue | None = None
        last_error: MQError | None = None
        brokers_sent: list[str] = []
        for _ in range(attempts):
            mq = info.select_one_message_queue(mq.broker_name if mq is not None else None)
            brokers_sent.append(mq.broker_name)
            remaining = timeout - (time.monotonic() - started)
            if remaining <= 0:
                break
            addr = instance.find_broker_address_in_publish(mq.broker_name)
            if addr is None:
                last_error = MQClientError(f"the broker {mq.broker_name!r} does not exist")
                continue
            header = self._header(carrier, mq, 0, batch=True)
            metrics = instance.metrics
            began = time.monotonic()
            try:
                result = await instance.api.send_batch(instance.vip_address(addr), mq.broker_name, msgs, body,
                                                       header, remaining)
            except MQBrokerError as exc:
                if metrics is not None:
                    metrics.send_failed(self.group, first.topic)
                if exc.code not in RETRY_RESPONSE_CODES:
                    raise
                last_error = exc
                continue
            except (MQRemotingError, MQClientError) as exc:
                if metrics is not None:
                    metrics.send_failed(self.group, first.topic)
                last_error = exc
                continue
            assert result is not None
            if metrics is not None:
                metrics.observe_send(self.group, first.topic, time.monotonic() - began)
            return result
        raise MQClientError(f"batch send to topic {first.topic!r} failed (brokers tried: {brokers_sent}): "
                            f"{last_error}", getattr(last_error, "code", None)) from last_error


def new_trace_dispatcher(instance: ClientInstance, trace_topic: str | None) -> TraceDispatcher:
    """A trace dispatcher of ``instance`` whose trace messages go out through producers attached to it."""
    return TraceDispatcher(instance, lambda group: Producer._attached(group, instance), trace_topic)


ClientInstance.inner_producer_factory = functools.partial(Producer._attached, CLIENT_INNER_PRODUCER_GROUP)


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


__all__ = [
    "DEFAULT_PRODUCER_GROUP",
    "NOT_ALLOWED_SEND_TOPICS",
    "PRODUCER_SETTING_FIELDS",
    "RETRY_RESPONSE_CODES",
    "MessageQueueSelector",
    "Producer",
    "ProducerSettings",
    "SendResult",
    "SendStatus",
    "check_message",
    "check_topic",
    "new_trace_dispatcher",
    "select_queue_by_sharding_key",
]
