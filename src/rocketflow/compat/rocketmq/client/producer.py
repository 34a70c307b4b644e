"""``Producer``: the sends of 2.0.x and 0.4.x (sync, oneway, orderly, async, batch) over rocketflow's producer."""

from __future__ import annotations

import concurrent.futures
import ctypes
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from rocketflow import Message as _RfMessage
from rocketflow import MessageQueue
from rocketflow import Producer as _RfProducer
from rocketflow.client import MQError
from rocketflow.client import SendResult as _RfSendResult
from rocketflow.client import SendStatus as _RfSendStatus
from rocketflow.compat.rocketmq.client._common import ClientSettings, ClientState, Connection, as_int, as_text
from rocketflow.compat.rocketmq.client.message import (
    Message,
    ReceivedMessage,
    RecvMessage,
    SendResult,
    copy_for_send,
    send_result_of,
)
from rocketflow.compat.rocketmq.exceptions import (
    NullPointerException,
    ProducerSendAsyncFailed,
    ProducerSendOnewayFailed,
    ProducerSendOrderlyFailed,
    ProducerSendSyncFailed,
    ProducerStartFailed,
    RocketMQException,
)

logger = logging.getLogger(__name__)

#: The C++ client's producer defaults (``DefaultMQProducerImpl``): send timeout (ms), the largest body,
#: zlib level of bodies over 4 KiB, attempts of a sync send, retries of an async one.
CPP_SEND_MSG_TIMEOUT_MS: Final = 3000
CPP_MAX_MESSAGE_SIZE: Final = 128 * 1024
CPP_COMPRESS_LEVEL: Final = 5
CPP_SEND_ATTEMPTS: Final = 5
CPP_ASYNC_SEND_RETRIES: Final = 1
#: Retries of ``send_orderly_with_sharding_key`` (each on the queue after the one that failed).
CPP_SHARDING_KEY_RETRIES: Final = 3


def cxx_string_hash(data: bytes) -> int:
    """``std::hash<std::string>`` of libstdc++ on 64-bit Linux (``_Hash_bytes`` with its seed): the C++
    client's ``send_orderly_with_sharding_key`` picks queue ``hash % len(queues)``, and so does this
    layer, so that old and new producers put a key on the same queue while both run."""
    mask = (1 << 64) - 1
    mul = 0xC6A4A7935BD1E995
    length = len(data)
    aligned = length & ~7
    value = (0xC70F6907 ^ (length * mul)) & mask
    for start in range(0, aligned, 8):
        word = (int.from_bytes(data[start:start + 8], "little") * mul) & mask
        word = ((word ^ (word >> 47)) * mul) & mask
        value = ((value ^ word) * mul) & mask
    if length & 7:
        value = ((value ^ int.from_bytes(data[aligned:], "little")) * mul) & mask
    value = ((value ^ (value >> 47)) * mul) & mask
    return value ^ (value >> 47)


def hashing_queue_selector(mq_size: int, msg: ReceivedMessage, arg: int) -> int:
    """0.4.x's default selector of ``send_orderly``: ``arg % mq_size``. As there, ``arg`` is the
    address of a C int holding the value given to ``send_orderly``."""
    value: int = ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0]
    return value % mq_size



class Producer(ClientSettings):
    """A producer: ``Producer(group_id)``, the setters, ``start()``, the sends, ``shutdown()``.

    ``Producer(group_id, orderly=False, timeout=None, compress_level=None, max_message_size=None)`` is
    2.0.x's signature; 0.4.x's ``Producer(group_id, timeout, compress_level, max_message_size)`` works too
    (an int second argument is a timeout). ``timeout`` is in milliseconds.
    """

    def __init__(self, group_id: str | bytes, orderly: bool | int = False, timeout: int | None = None,
                 compress_level: int | None = None, max_message_size: int | None = None) -> None:
        if group_id is None:
            raise NullPointerException("Returned null pointer when create Producer")
        if not isinstance(orderly, bool) and isinstance(orderly, int):
            # 0.4.x: Producer(group_id, timeout, compress_level, max_message_size)
            orderly, timeout, compress_level, max_message_size = False, orderly, timeout, compress_level
        self._group = as_text(group_id, "group_id")
        self._orderly = bool(orderly)
        self._connection = Connection()
        self._timeout_ms = CPP_SEND_MSG_TIMEOUT_MS
        self._compress_level = CPP_COMPRESS_LEVEL
        self._max_message_size = CPP_MAX_MESSAGE_SIZE
        self._state = ClientState.CREATED
        self._lock = threading.Lock()
        self._producer: _RfProducer | None = None
        self._callbacks: concurrent.futures.ThreadPoolExecutor | None = None
        if timeout is not None:
            self.set_timeout(timeout)
        if compress_level is not None:
            self.set_compress_level(compress_level)
        if max_message_size is not None:
            self.set_max_message_size(max_message_size)

    # ------------------------------------------------------------------ settings

    def set_group(self, group_name: str | bytes) -> None:
        self._group = as_text(group_name, "group_name")

    #: 0.4.x spellings
    set_namesrv_addr = ClientSettings.set_name_server_address
    set_namesrv_domain = ClientSettings.set_name_server_domain

    def set_timeout(self, timeout: int) -> None:
        """The send timeout, in milliseconds."""
        self._timeout_ms = as_int(timeout, "timeout")
        self._apply_live_settings()

    def set_compress_level(self, level: int) -> None:
        """zlib level (-1, 0..9) of bodies of 4 KiB or more."""
        self._compress_level = as_int(level, "level")
        self._apply_live_settings()

    def set_max_message_size(self, max_size: int) -> None:
        """The largest body a send accepts, in bytes (128 KiB by default, as the C++ client)."""
        self._max_message_size = as_int(max_size, "max_size")
        self._apply_live_settings()

    def _apply_live_settings(self) -> None:
        producer = self._producer
        if producer is None:
            return
        settings = producer.settings
        if self._timeout_ms > 0:
            settings.send_msg_timeout = self._timeout_ms / 1000
        if -1 <= self._compress_level <= 9:
            settings.compress_level = self._compress_level
        if self._max_message_size > 0:
            settings.max_message_size = self._max_message_size

    def _producer_settings(self) -> dict[str, Any]:
        return {
            "send_msg_timeout": self._timeout_ms / 1000 if self._timeout_ms > 0 else self._timeout_ms,
            "compress_level": self._compress_level,
            "max_message_size": self._max_message_size,
            "retry_times_when_send_failed": CPP_SEND_ATTEMPTS - 1,
            "retry_times_when_send_async_failed": CPP_ASYNC_SEND_RETRIES,
            **self._connection.client_settings(),
        }

    # ------------------------------------------------------------------ lifecycle

    def _create(self, settings: dict[str, Any]) -> _RfProducer:
        return _RfProducer(self._group, **settings)

    def start(self) -> None:
        """Start sending (a second call, or one after ``shutdown()``, does nothing, as in the original)."""
        with self._lock:
            if self._state is not ClientState.CREATED:
                return
            try:
                producer = self._create(self._producer_settings())
                producer.start()
            except (MQError, ValueError) as exc:
                raise ProducerStartFailed(str(exc)) from exc
            self._producer = producer
            self._callbacks = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"rocketmq-compat-send-callback[{self._group}]")
            self._state = ClientState.RUNNING

    def shutdown(self) -> None:
        """Stop (idempotent; as in the C++ client, one never started may still start afterwards)."""
        with self._lock:
            if self._state is not ClientState.RUNNING:
                return
            self._state = ClientState.SHUT_DOWN
            producer, self._producer = self._producer, None
            callbacks, self._callbacks = self._callbacks, None
        if producer is None:
            return
        try:
            producer.shutdown()
        except MQError as exc:
            raise ProducerStartFailed(str(exc)) from exc
        finally:
            if callbacks is not None:
                callbacks.shutdown(wait=True)

    def _running(self, error: type[RocketMQException]) -> _RfProducer:
        producer = self._producer
        if producer is None:
            state = "shut down" if self._state is ClientState.SHUT_DOWN else "not started"
            raise error(f"the producer of group {self._group!r} is {state}")
        return producer

    # ------------------------------------------------------------------ sends

    def send_sync(self, msg: Message) -> SendResult:
        """Send and wait for the broker; raises `ProducerSendSyncFailed`."""
        producer = self._running(ProducerSendSyncFailed)
        try:
            return send_result_of(producer.send(copy_for_send(msg)))
        except MQError as exc:
            raise ProducerSendSyncFailed(str(exc)) from exc

    def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer; raises `ProducerSendOnewayFailed`."""
        producer = self._running(ProducerSendOnewayFailed)
        try:
            producer.send_oneway(copy_for_send(msg))
        except MQError as exc:
            raise ProducerSendOnewayFailed(str(exc)) from exc

    def send_orderly_with_sharding_key(self, msg: Message, sharding_key: str | bytes) -> SendResult:
        """Send to the queue of ``sharding_key`` (the C++ client's: ``std::hash(key) % queues``); a
        failed attempt is retried up to 3 times, each on the next queue. Raises `ProducerSendOrderlyFailed`."""
        key = as_text(sharding_key, "sharding_key")
        producer = self._running(ProducerSendOrderlyFailed)
        to_send = copy_for_send(msg)
        to_send.properties["__SHARDINGKEY"] = key
        key_hash = cxx_string_hash(key.encode("utf-8"))
        result = self._send_selected(producer, to_send, lambda queues: key_hash % len(queues),
                                     CPP_SHARDING_KEY_RETRIES, ProducerSendOrderlyFailed)
        assert result is not None
        return result

    def send_orderly(self, msg: Message, arg: int, retry_times: int = 3,
                     queue_selector: Callable[[int, Any, Any], int] = hashing_queue_selector) -> SendResult:
        """0.4.x: send to queue ``queue_selector(queue_count, msg, arg)`` (``arg % queue_count`` by default;
        the selector gets the address of a C int holding ``arg``, as in 0.4.x), retrying up to
        ``retry_times`` times on the next queue. Raises `ProducerSendOrderlyFailed`."""
        producer = self._running(ProducerSendOrderlyFailed)
        to_send = copy_for_send(msg)
        first = _selector_index(queue_selector, to_send, arg)
        result = self._send_selected(producer, to_send, first, retry_times, ProducerSendOrderlyFailed)
        assert result is not None
        return result

    def send_oneway_orderly(self, msg: Message, arg: int,
                            queue_selector: Callable[[int, Any, Any], int] = hashing_queue_selector) -> None:
        """0.4.x: `send_orderly` without waiting for an answer (one attempt); raises `ProducerSendOnewayFailed`."""
        producer = self._running(ProducerSendOnewayFailed)
        to_send = copy_for_send(msg)
        first = _selector_index(queue_selector, to_send, arg)
        self._send_selected(producer, to_send, first, 0, ProducerSendOnewayFailed, oneway=True)

    def _send_selected(self, producer: _RfProducer, msg: _RfMessage, first: Callable[[list[MessageQueue]], int],
                       retries: int, error: type[RocketMQException], *, oneway: bool = False) -> SendResult | None:
        """Attempt 1 goes to ``queues[first(queues)]``, each retry to the queue after the last one tried."""
        tried: list[MessageQueue] = []

        def select(queues: list[MessageQueue], _msg: _RfMessage, _arg: object) -> MessageQueue:
            if not tried:
                index = first(queues)
                if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(queues):
                    raise ValueError(f"the queue selector chose {index!r}, not an index of the "
                                     f"{len(queues)} queues")
            else:
                last = tried[-1]
                index = (queues.index(last) + 1) % len(queues) if last in queues else 0
            tried.append(queues[index])
            return queues[index]

        failure: MQError | None = None
        result: _RfSendResult | None = None
        for _ in range(max(0, retries) + 1):
            try:
                if oneway:
                    producer.send_oneway(msg, selector=select)
                    return None
                result = producer.send(msg, selector=select)
            except MQError as exc:
                failure = exc
                logger.warning("ordered send to %s failed: %s", tried[-1] if tried else msg.topic, exc)
                continue
            if result.send_status is _RfSendStatus.SEND_OK:
                break
        if result is None:
            raise error(str(failure)) from failure
        return send_result_of(result)

    def send_async(self, msg: Message, success_callback: Callable[[SendResult], Any] | None,
                   exception_callback: Callable[[ProducerSendAsyncFailed], Any] | None) -> None:
        """0.4.x: send without blocking; ``success_callback(SendResult)`` or
        ``exception_callback(ProducerSendAsyncFailed)`` runs later on the producer's callback thread.
        A message that cannot be sent at all (empty body, too big, producer not started) raises
        `RocketMQException` here instead, and no callback runs."""
        producer = self._running(RocketMQException)
        callbacks = self._callbacks
        to_send = copy_for_send(msg)
        _check_sendable(to_send, self._max_message_size)
        try:
            future = producer.send_async(to_send)
        except MQError as exc:
            raise RocketMQException(str(exc)) from exc

        def deliver(done: concurrent.futures.Future[_RfSendResult]) -> None:
            try:
                result: _RfSendResult | None = done.result()
                failure: BaseException | None = None
            except BaseException as exc:
                result, failure = None, exc
            try:
                if result is not None:
                    if success_callback is not None:
                        success_callback(send_result_of(result))
                    return
                wrapped = ProducerSendAsyncFailed(str(failure), int(getattr(failure, "code", None) or -1), "", 0,
                                                  type(failure).__name__)
                if exception_callback is None:
                    logger.error("async send to %s failed (no exception callback): %s", to_send.topic, failure)
                else:
                    exception_callback(wrapped)
            except Exception:
                logger.exception("a send_async callback raised")

        def hand_over(done: concurrent.futures.Future[_RfSendResult]) -> None:
            try:
                if callbacks is None:
                    raise RuntimeError("no callback thread")
                callbacks.submit(deliver, done)
            except RuntimeError:  # shut down meanwhile: run it here, on the client's thread
                deliver(done)

        future.add_done_callback(hand_over)

    def send_batch(self, msgs: list[Message]) -> SendResult:
        """0.4.x: send messages of one topic as one batch; raises `ProducerSendSyncFailed`."""
        if len(msgs) == 0:
            raise AssertionError("Batch message length should be greater than 0")
        producer = self._running(ProducerSendSyncFailed)
        try:
            return send_result_of(producer.send_batch([copy_for_send(msg) for msg in msgs]))
        except MQError as exc:
            raise ProducerSendSyncFailed(str(exc)) from exc



def _check_sendable(msg: _RfMessage, max_size: int) -> None:
    """The checks the C++ client makes before an async send is under way."""
    if not msg.topic:
        raise RocketMQException("the topic is empty")
    if not msg.body:
        raise RocketMQException("the message body is empty")
    if len(msg.body) > max_size:
        raise RocketMQException(f"the message body is {len(msg.body)} bytes, over the maximum of {max_size}")


def _selector_index(queue_selector: Callable[[int, Any, Any], int], msg: _RfMessage,
                    arg: int) -> Callable[[list[MessageQueue]], int]:
    """0.4.x's selector call: ``queue_selector(queue_count, RecvMessage(msg), address of a C int arg)``."""
    holder = ctypes.c_int(arg)

    def first(queues: list[MessageQueue]) -> int:
        return queue_selector(len(queues), RecvMessage(msg), ctypes.addressof(holder))

    return first

