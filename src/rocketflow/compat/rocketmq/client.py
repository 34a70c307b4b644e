"""``rocketmq.client`` of Apache's ``rocketmq-client-python``, over rocketflow's client.

```python
from rocketflow.compat.rocketmq.client import Producer, PushConsumer, Message, ConsumeStatus

producer = Producer("PID-XXX")
producer.set_name_server_address("127.0.0.1:9876")
producer.start()
msg = Message("YOUR-TOPIC")
msg.set_keys("XXX"); msg.set_tags("XXX"); msg.set_body("XXXX")
ret = producer.send_sync(msg)
print(ret.status, ret.msg_id, ret.offset)
producer.shutdown()
```

Every class maps its calls onto rocketflow's own (`rocketflow.Producer`, `rocketflow.PushConsumer`,
`rocketflow.PullConsumer`, `rocketflow.TransactionProducer`): settings are collected until
``start()``, which builds and starts the rocketflow client; errors come back as the exception classes
of `rocketflow.compat.rocketmq.exceptions`. Defaults are those of the C++ client the original wraps
(a 3 s send timeout, 128 KiB maximum message size, 5 send attempts, one consume thread per CPU, one
message per callback). The 2.0.x API is the reference; the 0.4.x spellings are there too. Where
the two disagree on behaviour, a push consumer whose name server was set with the 0.4.x spelling
(``set_namesrv_addr`` / ``set_namesrv_domain``) gets 0.4.x's callback contract (the callback's return
value is ignored, only an exception means "consume again later"); otherwise 2.0.x's (the callback
must return a `ConsumeStatus`). docs/migrating-from-rocketmq-client-python.md lists every name and
every difference.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import enum
import logging
import os
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, NamedTuple

from rocketflow import (
    ConsumeFromWhere,
    LocalTransactionState,
    MessageExt,
    MessageQueue,
    TransactionProducer,
)
from rocketflow import Message as _RfMessage
from rocketflow import MessageModel as _RfMessageModel
from rocketflow import Producer as _RfProducer
from rocketflow import PullConsumer as _RfPullConsumer
from rocketflow import PushConsumer as _RfPushConsumer
from rocketflow.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MQError,
)
from rocketflow.client import SendResult as _RfSendResult
from rocketflow.client import SendStatus as _RfSendStatus
from rocketflow.client.admin import Admin
from rocketflow.compat.rocketmq.consts import MessageProperty
from rocketflow.compat.rocketmq.exceptions import (
    ConsumerException,
    NullPointerException,
    ProducerSendAsyncFailed,
    ProducerSendOnewayFailed,
    ProducerSendOrderlyFailed,
    ProducerSendSyncFailed,
    ProducerStartFailed,
    PullConsumerFetchMessageFailed,
    PullConsumerFetchMQFailed,
    PullConsumerStartFailed,
    PushConsumerStartFailed,
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
#: How long a 0.4.x ``PullConsumer.pull`` waits for the next batch of a queue before moving on (seconds).
PULL_WAIT: Final = 3.0
#: How long fetching a name server list from a ``set_name_server_domain`` URL may take (seconds).
DOMAIN_FETCH_TIMEOUT: Final = 5.0

# Python 2 compatibility names the original module exports.
PY2: Final = False
text_type = str
binary_type = bytes


class SendResult(NamedTuple):
    """What a send returns: its status, the message id (UNIQ_KEY) and its offset in the queue."""

    status: SendStatus
    msg_id: str
    offset: int


class SendStatus(enum.IntEnum):
    OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3


class TransactionStatus(enum.IntEnum):
    COMMIT = 0
    ROLLBACK = 1
    UNKNOWN = 2


class ConsumeStatus(enum.IntEnum):
    CONSUME_SUCCESS = 0
    RECONSUME_LATER = 1


class MessageModel(enum.IntEnum):
    """How a push consumer's group shares messages (the original's ``rocketmq.ffi.MessageModel``)."""

    BROADCASTING = 0
    CLUSTERING = 1


_SEND_STATUS: Final = {
    _RfSendStatus.SEND_OK: SendStatus.OK,
    _RfSendStatus.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    _RfSendStatus.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    _RfSendStatus.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
_MESSAGE_MODEL: Final = {
    MessageModel.BROADCASTING: _RfMessageModel.BROADCASTING,
    MessageModel.CLUSTERING: _RfMessageModel.CLUSTERING,
}


def _send_result(result: _RfSendResult) -> SendResult:
    return SendResult(_SEND_STATUS[result.send_status], result.msg_id, result.queue_offset)


def _text(value: object, what: str) -> str:
    """A str argument, or bytes decoded as UTF-8 (the original took either)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8")
    raise TypeError(f"{what} must be str or bytes, got {type(value).__name__}")


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    return value


def maybe_decode(val: str | bytes) -> str:
    """``val`` as str (bytes are decoded as UTF-8); raises TypeError for anything else."""
    if isinstance(val, bytes):
        return val.decode("utf-8")
    if isinstance(val, str):
        return val
    raise TypeError(f"Expects string types, but got {type(val)}")


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


# =========================================================================== messages


class Message:
    """A message to send: ``Message(topic)``, then the setters."""

    __slots__ = ("_message",)

    def __init__(self, topic: str | bytes) -> None:
        self._message = _RfMessage(_text(topic, "topic"))

    def set_keys(self, keys: str | bytes) -> None:
        """Space-separated keys (the KEYS property)."""
        self._message.keys = _text(keys, "keys")

    def set_tags(self, tags: str | bytes) -> None:
        self._message.tags = _text(tags, "tags")

    def set_body(self, body: str | bytes) -> None:
        """The body: bytes as they are, a str as UTF-8 (all of it, NUL bytes included)."""
        self._message.body = body.encode("utf-8") if isinstance(body, str) else bytes(_check_bytes(body))

    def set_property(self, key: str | bytes, value: str | bytes) -> None:
        self._message.properties[_text(key, "key")] = _text(value, "value")

    def set_delay_time_level(self, delay_time_level: int) -> None:
        """Deliver after the broker's delay level (1 = 1 s, 2 = 5 s, 3 = 10 s, ... by default)."""
        self._message.delay_level = _int(delay_time_level, "delay_time_level")

    def _copy_for_send(self) -> _RfMessage:
        """What a send sends: a rocketflow `rocketflow.Message` copy of this one."""
        msg = self._message
        return _RfMessage(msg.topic, msg.body, flag=msg.flag, properties=msg.properties)


def _check_bytes(value: object) -> bytes | bytearray:
    if not isinstance(value, bytes | bytearray):
        raise TypeError(f"body must be str or bytes, got {type(value).__name__}")
    return value


class ReceivedMessage:
    """A consumed message as the callbacks get it: ``body``, ``keys``, ``tags`` and property values
    are bytes (b"" when absent), ``topic`` and ``id`` are str, the numbers are ints."""

    __slots__ = ("_message",)

    def __init__(self, message: _RfMessage) -> None:
        self._message = message

    @property
    def topic(self) -> str:
        return self._message.topic

    @property
    def tags(self) -> bytes:
        return (self._message.tags or "").encode("utf-8")

    @property
    def keys(self) -> bytes:
        return (self._message.keys or "").encode("utf-8")

    @property
    def body(self) -> bytes:
        return self._message.body

    @property
    def id(self) -> str:
        """The UNIQ_KEY the producer gave the message, else the broker's offset message id."""
        msg = self._message
        if isinstance(msg, MessageExt):
            return msg.client_msg_id
        return msg.uniq_key or ""

    @property
    def delay_time_level(self) -> int:
        return self._message.delay_level

    @property
    def queue_id(self) -> int:
        return self._ext_int("queue_id")

    @property
    def reconsume_times(self) -> int:
        return self._ext_int("reconsume_times")

    @property
    def store_size(self) -> int:
        return self._ext_int("store_size")

    @property
    def born_timestamp(self) -> int:
        return self._ext_int("born_timestamp")

    @property
    def store_timestamp(self) -> int:
        return self._ext_int("store_timestamp")

    @property
    def queue_offset(self) -> int:
        return self._ext_int("queue_offset")

    @property
    def commit_log_offset(self) -> int:
        return self._ext_int("commit_log_offset")

    @property
    def prepared_transaction_offset(self) -> int:
        return self._ext_int("prepared_transaction_offset")

    def _ext_int(self, name: str) -> int:
        # the message of a local transaction is the one sent, not a stored one: its store fields are 0
        msg = self._message
        return int(getattr(msg, name)) if isinstance(msg, MessageExt) else 0

    def get_property(self, prop: MessageProperty | str | bytes) -> bytes:
        """A property's value as bytes (b"" when the message has none)."""
        name = prop.value if isinstance(prop, MessageProperty) else _text(prop, "prop")
        return (self._message.get_property(name) or "").encode("utf-8")

    def __getitem__(self, key: MessageProperty | str | bytes) -> bytes:
        return self.get_property(key)

    def __str__(self) -> str:
        return self.body.decode("utf-8")

    def __bytes__(self) -> bytes:
        return self.body

    def __repr__(self) -> str:
        return f"<{type(self).__name__} topic={self.topic!r} id={self.id!r} body={self.body!r}>"


class RecvMessage(ReceivedMessage):
    """0.4.x's name of `ReceivedMessage` (what its callbacks and ``PullConsumer.pull`` gave)."""

    __slots__ = ()


def hashing_queue_selector(mq_size: int, msg: ReceivedMessage, arg: int) -> int:
    """0.4.x's default selector of ``send_orderly``: ``arg % mq_size``. As there, ``arg`` is the
    address of a C int holding the value given to ``send_orderly``."""
    value: int = ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0]
    return value % mq_size


# =========================================================================== shared settings


@dataclass(slots=True)
class _Connection:
    """Where and as whom a client connects; applied when it starts."""

    namesrv_addr: str | None = None
    namesrv_domain: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    channel: str | None = None
    instance_name: str | None = None

    def client_settings(self) -> dict[str, Any]:
        """`rocketflow.client.ClientConfig` fields; raises ValueError when the domain serves no list."""
        settings: dict[str, Any] = {}
        addr = self.namesrv_addr or (_fetch_namesrv_addr(self.namesrv_domain) if self.namesrv_domain else None)
        if addr:
            settings["namesrv_addr"] = addr
        if self.access_key and self.secret_key:
            settings["access_key"] = self.access_key
            settings["secret_key"] = self.secret_key
        if self.instance_name:
            settings["instance_name"] = self.instance_name
        return settings

    def set_credentials(self, access_key: str | bytes, access_secret: str | bytes, channel: str | bytes) -> None:
        # empty keys mean "no signing", as in the C++ client; the channel (an Aliyun ONS hint) is kept only
        self.access_key = _text(access_key, "access_key") or None
        self.secret_key = _text(access_secret, "access_secret") or None
        self.channel = _text(channel, "channel")


def _fetch_namesrv_addr(domain: str) -> str:
    """The name server list a ``set_name_server_domain`` URL serves: the first line of an HTTP GET,
    ``host:port;host:port`` (as the C++ client's TopAddressing reads it). Raises ValueError."""
    url = domain if "://" in domain else f"http://{domain}"
    if urllib.parse.urlparse(url).scheme not in ("http", "https"):
        raise ValueError(f"the name server domain {domain!r} is not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=DOMAIN_FETCH_TIMEOUT) as response:
            raw: bytes = response.read(65536)
        text = raw.decode("utf-8", "replace")
    except OSError as exc:
        raise ValueError(f"cannot fetch the name server list from {url}: {exc}") from exc
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise ValueError(f"{url} served no name server address")
    return lines[0].strip()


class _State(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    SHUT_DOWN = "SHUT_DOWN"


# =========================================================================== producers


class Producer:
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
        self._group = _text(group_id, "group_id")
        self._orderly = bool(orderly)
        self._connection = _Connection()
        self._timeout_ms = CPP_SEND_MSG_TIMEOUT_MS
        self._compress_level = CPP_COMPRESS_LEVEL
        self._max_message_size = CPP_MAX_MESSAGE_SIZE
        self._state = _State.CREATED
        self._lock = threading.Lock()
        self._producer: _RfProducer | None = None
        self._callbacks: concurrent.futures.ThreadPoolExecutor | None = None
        if timeout is not None:
            self.set_timeout(timeout)
        if compress_level is not None:
            self.set_compress_level(compress_level)
        if max_message_size is not None:
            self.set_max_message_size(max_message_size)

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ settings

    def set_group(self, group_name: str | bytes) -> None:
        self._group = _text(group_name, "group_name")

    def set_name_server_address(self, addr: str | bytes) -> None:
        """``"host:port"`` or ``"host:port;host:port"``."""
        self._connection.namesrv_addr = _text(addr, "addr")

    def set_name_server_domain(self, domain: str | bytes) -> None:
        """A URL serving the name server list (fetched once, at ``start()``, when no address is set)."""
        self._connection.namesrv_domain = _text(domain, "domain")

    #: 0.4.x spellings
    set_namesrv_addr = set_name_server_address
    set_namesrv_domain = set_name_server_domain

    def set_session_credentials(self, access_key: str | bytes, access_secret: str | bytes,
                                channel: str | bytes) -> None:
        """ACL keys: every request is signed with them (``channel`` is accepted and not used)."""
        self._connection.set_credentials(access_key, access_secret, channel)

    def set_instance_name(self, name: str | bytes) -> None:
        """The client instance name (part of the client id); the C library had it, the wrapper did not."""
        self._connection.instance_name = _text(name, "name")

    def set_timeout(self, timeout: int) -> None:
        """The send timeout, in milliseconds."""
        self._timeout_ms = _int(timeout, "timeout")
        self._apply_live_settings()

    def set_compress_level(self, level: int) -> None:
        """zlib level (-1, 0..9) of bodies of 4 KiB or more."""
        self._compress_level = _int(level, "level")
        self._apply_live_settings()

    def set_max_message_size(self, max_size: int) -> None:
        """The largest body a send accepts, in bytes (128 KiB by default, as the C++ client)."""
        self._max_message_size = _int(max_size, "max_size")
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
            if self._state is not _State.CREATED:
                return
            try:
                producer = self._create(self._producer_settings())
                producer.start()
            except (MQError, ValueError) as exc:
                raise ProducerStartFailed(str(exc)) from exc
            self._producer = producer
            self._callbacks = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"rocketmq-compat-send-callback[{self._group}]")
            self._state = _State.RUNNING

    def shutdown(self) -> None:
        """Stop (idempotent; as in the C++ client, one never started may still start afterwards)."""
        with self._lock:
            if self._state is not _State.RUNNING:
                return
            self._state = _State.SHUT_DOWN
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
            state = "shut down" if self._state is _State.SHUT_DOWN else "not started"
            raise error(f"the producer of group {self._group!r} is {state}")
        return producer

    # ------------------------------------------------------------------ sends

    def send_sync(self, msg: Message) -> SendResult:
        """Send and wait for the broker; raises `ProducerSendSyncFailed`."""
        producer = self._running(ProducerSendSyncFailed)
        try:
            return _send_result(producer.send(_to_send(msg)))
        except MQError as exc:
            raise ProducerSendSyncFailed(str(exc)) from exc

    def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer; raises `ProducerSendOnewayFailed`."""
        producer = self._running(ProducerSendOnewayFailed)
        try:
            producer.send_oneway(_to_send(msg))
        except MQError as exc:
            raise ProducerSendOnewayFailed(str(exc)) from exc

    def send_orderly_with_sharding_key(self, msg: Message, sharding_key: str | bytes) -> SendResult:
        """Send to the queue of ``sharding_key`` (the C++ client's: ``std::hash(key) % queues``); a
        failed attempt is retried up to 3 times, each on the next queue. Raises `ProducerSendOrderlyFailed`."""
        key = _text(sharding_key, "sharding_key")
        producer = self._running(ProducerSendOrderlyFailed)
        to_send = _to_send(msg)
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
        to_send = _to_send(msg)
        first = _selector_index(queue_selector, to_send, arg)
        result = self._send_selected(producer, to_send, first, retry_times, ProducerSendOrderlyFailed)
        assert result is not None
        return result

    def send_oneway_orderly(self, msg: Message, arg: int,
                            queue_selector: Callable[[int, Any, Any], int] = hashing_queue_selector) -> None:
        """0.4.x: `send_orderly` without waiting for an answer (one attempt); raises `ProducerSendOnewayFailed`."""
        producer = self._running(ProducerSendOnewayFailed)
        to_send = _to_send(msg)
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
        return _send_result(result)

    def send_async(self, msg: Message, success_callback: Callable[[SendResult], Any] | None,
                   exception_callback: Callable[[ProducerSendAsyncFailed], Any] | None) -> None:
        """0.4.x: send without blocking; ``success_callback(SendResult)`` or
        ``exception_callback(ProducerSendAsyncFailed)`` runs later on the producer's callback thread.
        A message that cannot be sent at all (empty body, too big, producer not started) raises
        `RocketMQException` here instead, and no callback runs."""
        producer = self._running(RocketMQException)
        callbacks = self._callbacks
        to_send = _to_send(msg)
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
                        success_callback(_send_result(result))
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
            return _send_result(producer.send_batch([_to_send(msg) for msg in msgs]))
        except MQError as exc:
            raise ProducerSendSyncFailed(str(exc)) from exc


def _to_send(msg: object) -> _RfMessage:
    """A copy of a `Message` argument for one send (each send stamps its own UNIQ_KEY on what it sends)."""
    if not isinstance(msg, Message):
        raise TypeError(f"expected a rocketflow.compat.rocketmq.client.Message, got {type(msg).__name__}")
    return msg._copy_for_send()


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


class _TransactionListener:
    """rocketflow's transaction listener, calling the compat callbacks."""

    def __init__(self, owner: TransactionMQProducer) -> None:
        self._owner = owner

    def execute_local_transaction(self, msg: _RfMessage, arg: Any) -> LocalTransactionState:
        local_execute, user_args = arg
        return _transaction_state(lambda: local_execute(ReceivedMessage(msg), user_args), "local_execute")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        checker = self._owner._checker_callback
        return _transaction_state(lambda: checker(ReceivedMessage(msg)), "checker_callback")


_TRANSACTION_STATES: Final = {
    TransactionStatus.COMMIT: LocalTransactionState.COMMIT_MESSAGE,
    TransactionStatus.ROLLBACK: LocalTransactionState.ROLLBACK_MESSAGE,
    TransactionStatus.UNKNOWN: LocalTransactionState.UNKNOW,
}


def _transaction_state(call: Callable[[], Any], what: str) -> LocalTransactionState:
    """A callback's `TransactionStatus` as rocketflow's state; an exception or another value is UNKNOWN."""
    try:
        status = call()
    except Exception:
        logger.exception("the transaction's %s raised; its state is UNKNOWN (the broker checks back)", what)
        return LocalTransactionState.UNKNOW
    for known, state in _TRANSACTION_STATES.items():
        if status == known:
            return state
    logger.error("the transaction's %s returned %r, not a TransactionStatus; its state is UNKNOWN "
                 "(the broker checks back)", what, status)
    return LocalTransactionState.UNKNOW


class TransactionMQProducer(Producer):
    """A producer of transactional messages (2.0.x).

    ``checker_callback(ReceivedMessage) -> TransactionStatus`` answers the broker's check of a
    transaction left UNKNOWN; ``send_message_in_transaction(msg, local_execute, user_args)`` stores a
    half message, runs ``local_execute(ReceivedMessage, user_args) -> TransactionStatus`` and ends the
    transaction accordingly. ``user_args`` of the constructor is accepted and not used (as there).
    """

    def __init__(self, group_id: str | bytes, checker_callback: Callable[[ReceivedMessage], Any],
                 user_args: Any = None, timeout: int | None = None, compress_level: int | None = None,
                 max_message_size: int | None = None) -> None:
        if not callable(checker_callback):
            raise TypeError(f"checker_callback must be callable, got {checker_callback!r}")
        super().__init__(group_id, False, timeout, compress_level, max_message_size)
        self._checker_callback = checker_callback
        self._user_args = user_args

    def _create(self, settings: dict[str, Any]) -> _RfProducer:
        return TransactionProducer(self._group, listener=_TransactionListener(self), **settings)

    def send_message_in_transaction(self, message: Message, local_execute: Callable[[ReceivedMessage, Any], Any],
                                    user_args: Any = None) -> SendResult:
        """Send ``message`` as a half message, run ``local_execute``, commit or roll back (UNKNOWN: the
        broker asks ``checker_callback`` later). Raises `RocketMQException` when it cannot be sent."""
        producer = self._running(RocketMQException)
        assert isinstance(producer, TransactionProducer)
        if not callable(local_execute):
            raise TypeError(f"local_execute must be callable, got {local_execute!r}")
        try:
            result = producer.send_message_in_transaction(_to_send(message), (local_execute, user_args))
        except MQError as exc:
            raise RocketMQException(str(exc)) from exc
        return _send_result(result)


# =========================================================================== push consumer


class PushConsumer:
    """A push consumer: ``PushConsumer(group_id)``, the setters, ``subscribe(topic, callback)``, ``start()``.

    ``callback(ReceivedMessage)`` is called once per message, on one of ``set_thread_count`` threads;
    it returns ``ConsumeStatus.CONSUME_SUCCESS`` or ``ConsumeStatus.RECONSUME_LATER`` (anything else,
    or an exception, is logged and counts as RECONSUME_LATER: the broker redelivers the message later).
    With 0.4.x's ``set_namesrv_addr`` / ``set_namesrv_domain`` the return value is ignored instead.
    Each topic's messages go to the callback of its own ``subscribe``.
    """

    def __init__(self, group_id: str | bytes, orderly: bool = False,
                 message_model: MessageModel | int = MessageModel.CLUSTERING) -> None:
        if group_id is None:
            raise NullPointerException("Returned null pointer when create PushConsumer")
        self._group = _text(group_id, "group_id")
        self._orderly = bool(orderly)
        self._message_model: MessageModel | int = message_model
        self._connection = _Connection()
        self._thread_count = os.cpu_count() or 1
        self._batch_max_size = 1
        self._subscriptions: dict[str, tuple[str, Callable[[ReceivedMessage], Any]]] = {}
        self._last_callback: Callable[[ReceivedMessage], Any] | None = None
        #: 0.4.x's callback contract (return value ignored), chosen by the 0.4.x name server setters
        self._legacy = False
        self._state = _State.CREATED
        self._lock = threading.Lock()
        self._consumer: _RfPushConsumer | None = None
        self.set_message_model(message_model)

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ settings

    def set_message_model(self, model: MessageModel | int) -> None:
        """CLUSTERING (the group shares the messages) or BROADCASTING (every consumer gets all)."""
        self._message_model = model

    def set_group(self, group_id: str | bytes) -> None:
        self._group = _text(group_id, "group_id")

    def set_name_server_address(self, addr: str | bytes) -> None:
        self._connection.namesrv_addr = _text(addr, "addr")

    def set_name_server_domain(self, domain: str | bytes) -> None:
        self._connection.namesrv_domain = _text(domain, "domain")

    def set_namesrv_addr(self, addr: str | bytes) -> None:
        """0.4.x spelling of `set_name_server_address`; also selects 0.4.x's callback contract."""
        self._legacy = True
        self.set_name_server_address(addr)

    def set_namesrv_domain(self, domain: str | bytes) -> None:
        """0.4.x spelling of `set_name_server_domain`; also selects 0.4.x's callback contract."""
        self._legacy = True
        self.set_name_server_domain(domain)

    def set_session_credentials(self, access_key: str | bytes, access_secret: str | bytes,
                                channel: str | bytes) -> None:
        self._connection.set_credentials(access_key, access_secret, channel)

    def set_instance_name(self, name: str | bytes) -> None:
        self._connection.instance_name = _text(name, "name")

    def set_thread_count(self, thread_count: int) -> None:
        """Consume threads (default: one per CPU, as the C++ client); applied at ``start()``."""
        count = _int(thread_count, "thread_count")
        if count == 0:
            raise NullPointerException("thread_count must not be 0")
        if count < 0:
            logger.error("set_thread_count(%d) ignored: the count must be positive", count)
            return
        self._thread_count = count

    def set_message_batch_max_size(self, max_size: int) -> None:
        """Messages per consume task (default 1); the callback still gets them one at a time, and one
        that is not consumed makes the rest of its batch come again too (as in the C++ client)."""
        size = _int(max_size, "max_size")
        if size == 0:
            raise NullPointerException("max_size must not be 0")
        if size < 0:
            return
        self._batch_max_size = size

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, topic: str | bytes, callback: Callable[[ReceivedMessage], Any],
                  expression: str | bytes = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"*"``, ``"TagA || TagB"``)."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        name = _text(topic, "topic")
        sub_expression = _text(expression, "expression") or "*"
        self._subscriptions[name] = (sub_expression, callback)
        self._last_callback = callback
        consumer = self._consumer
        if consumer is not None:
            try:
                consumer.subscribe(name, sub_expression)
            except MQError as exc:
                raise ConsumerException(str(exc)) from exc

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start consuming; raises `PushConsumerStartFailed` (e.g. without a subscription). A second
        call, or one after ``shutdown()``, does nothing."""
        with self._lock:
            if self._state is not _State.CREATED:
                return
            if not self._subscriptions:
                raise PushConsumerStartFailed("messageListener is null: call subscribe(topic, callback) "
                                              "before start()")
            try:
                consumer = self._create()
                for topic, (expression, _) in self._subscriptions.items():
                    consumer.subscribe(topic, expression)
                if self._orderly:
                    consumer.register_orderly_listener(self._consume_orderly)
                else:
                    consumer.register_concurrent_listener(self._consume_concurrently)
                consumer.start()
            except (MQError, ValueError) as exc:
                raise PushConsumerStartFailed(str(exc)) from exc
            self._consumer = consumer
            self._state = _State.RUNNING

    def _create(self) -> _RfPushConsumer:
        try:
            model = _MESSAGE_MODEL[MessageModel(self._message_model)]
        except ValueError:
            raise ValueError(f"messageModel {self._message_model!r} is not valid") from None
        threads = min(self._thread_count, 1000)
        return _RfPushConsumer(
            self._group, message_model=model, consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            consume_thread_min=threads, consume_thread_max=threads,
            consume_message_batch_max_size=min(self._batch_max_size, 1024), **self._connection.client_settings())

    def shutdown(self) -> None:
        """Stop consuming: running callbacks finish and the offsets are committed (idempotent; as in the
        C++ client, one never started may still start afterwards). Not from a callback."""
        with self._lock:
            if self._state is not _State.RUNNING:
                return
            self._state = _State.SHUT_DOWN
            consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.shutdown()
            except MQError as exc:
                raise ConsumerException(str(exc)) from exc

    # ------------------------------------------------------------------ consumption

    def _consume_one(self, msg: MessageExt) -> bool:
        entry = self._subscriptions.get(msg.topic)
        callback = entry[1] if entry is not None else self._last_callback
        if callback is None:
            return False
        wrapped = RecvMessage(msg) if self._legacy else ReceivedMessage(msg)
        try:
            status = callback(wrapped)
        except Exception:
            logger.exception("the consume callback raised on message %s of %s; it will be consumed again later",
                             wrapped.id, msg.topic)
            return False
        if self._legacy or status == ConsumeStatus.CONSUME_SUCCESS:
            return True
        if status != ConsumeStatus.RECONSUME_LATER:
            logger.error("the consume callback returned %r for message %s of %s, not a ConsumeStatus; it will be "
                         "consumed again later (return ConsumeStatus.CONSUME_SUCCESS)", status, wrapped.id, msg.topic)
        return False

    def _consume_concurrently(self, msgs: list[MessageExt],
                              context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        for msg in msgs:
            if not self._consume_one(msg):
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def _consume_orderly(self, msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        for msg in msgs:
            if not self._consume_one(msg):
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS


# =========================================================================== pull consumer (0.4.x)


def _tag_filter(expression: str) -> Callable[[str | None], bool]:
    """The tags a subscription expression (``"*"`` or ``"TagA || TagB"``) accepts."""
    if expression.strip() in ("", "*"):
        return lambda tags: True
    wanted = {tag.strip() for tag in expression.split("||") if tag.strip()}
    return lambda tags: tags is not None and tags in wanted


class PullConsumer:
    """0.4.x's pull consumer: ``for msg in consumer.pull(topic): ...`` reads every queue of the topic
    from where the previous ``pull`` left it (offset 0 at first) to its end.

    Positions live in the class attribute ``offset_table`` (shared by the process's pull consumers and
    never committed to the broker), as in 0.4.x.
    """

    offset_table: dict[str, int] = {}  # shared by every instance, as in 0.4.x

    def __init__(self, group_id: str | bytes) -> None:
        if group_id is None:
            raise NullPointerException("CreatePullConsumer returned null pointer")
        self._group = _text(group_id, "group_id")
        self._connection = _Connection()
        self._state = _State.CREATED
        self._lock = threading.Lock()
        self._consumer: _RfPullConsumer | None = None
        self._admin: Admin | None = None
        self._assigned: set[MessageQueue] = set()

    def __enter__(self) -> PullConsumer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.shutdown()

    def set_group(self, group_id: str | bytes) -> None:
        self._group = _text(group_id, "group_id")

    def set_namesrv_addr(self, addr: str | bytes) -> None:
        self._connection.namesrv_addr = _text(addr, "addr")

    def set_namesrv_domain(self, domain: str | bytes) -> None:
        self._connection.namesrv_domain = _text(domain, "domain")

    #: 2.0.x spellings (rocketflow's additions: 2.0.x has no pull consumer)
    set_name_server_address = set_namesrv_addr
    set_name_server_domain = set_namesrv_domain

    def set_session_credentials(self, access_key: str | bytes, access_secret: str | bytes,
                                channel: str | bytes) -> None:
        self._connection.set_credentials(access_key, access_secret, channel)

    def start(self) -> None:
        """Connect; raises `PullConsumerStartFailed`. A second call does nothing."""
        with self._lock:
            if self._state is not _State.CREATED:
                return
            admin: Admin | None = None
            try:
                settings = self._connection.client_settings()
                consumer = _RfPullConsumer(self._group, auto_commit=False, pull_batch_size=32, **settings)
                admin = Admin(**{name: value for name, value in settings.items() if name != "instance_name"})
                consumer.start()
                try:
                    admin.start()
                except BaseException:
                    consumer.shutdown()
                    raise
            except (MQError, ValueError) as exc:
                raise PullConsumerStartFailed(str(exc)) from exc
            self._consumer, self._admin = consumer, admin
            self._state = _State.RUNNING

    def shutdown(self) -> None:
        """Disconnect (idempotent)."""
        with self._lock:
            if self._state is not _State.RUNNING:
                return
            self._state = _State.SHUT_DOWN
            consumer, self._consumer = self._consumer, None
            admin, self._admin = self._admin, None
        try:
            if consumer is not None:
                consumer.shutdown()
        except MQError as exc:
            raise ConsumerException(str(exc)) from exc
        finally:
            if admin is not None:
                admin.shutdown()

    def _get_mq_key(self, mq: Any) -> str:
        # 0.4.x keys the table by the C struct's topic, which is bytes: "b'Topic'@0"
        topic = mq.topic if isinstance(mq.topic, bytes) else str(mq.topic).encode("utf-8")
        queue_id = getattr(mq, "queueId", None)
        if queue_id is None:
            queue_id = mq.queue_id
        return f"{topic!s}@{queue_id}"

    def get_message_queue_offset(self, mq: Any) -> int:
        return self.offset_table.get(self._get_mq_key(mq), 0)

    def set_message_queue_offset(self, mq: Any, offset: int) -> None:
        self.offset_table[self._get_mq_key(mq)] = offset

    def pull(self, topic: str | bytes, expression: str | bytes = "*", max_num: int = 32) -> Iterator[RecvMessage]:
        """Every message of ``topic`` whose tag matches ``expression``, queue after queue, from each
        queue's position in `offset_table` to the queue's end as of the call; the positions advance as
        the batches are read. ``max_num`` is accepted (each pull reads up to 32 messages)."""
        consumer, admin = self._consumer, self._admin
        if consumer is None or admin is None:
            raise PullConsumerFetchMQFailed(f"the pull consumer of group {self._group!r} is not started")
        name = _text(topic, "topic")
        accepts = _tag_filter(_text(expression, "expression"))
        try:
            stats = admin.topic_stats(name)
        except MQError as exc:
            raise PullConsumerFetchMQFailed(str(exc)) from exc
        queues = [MessageQueue(row.topic, row.broker_name, row.queue_id) for row in stats]
        try:
            new = set(queues) - self._assigned
            if new:
                consumer.pause(new)
                self._assigned |= new
                consumer.assign(self._assigned)
        except MQError as exc:
            raise PullConsumerFetchMQFailed(str(exc)) from exc
        for mq, row in zip(queues, stats, strict=True):
            key = self._get_mq_key(mq)
            offset = min(max(self.offset_table.get(key, 0), row.min_offset), row.max_offset)
            self.offset_table[key] = offset
            if offset >= row.max_offset:
                continue
            yield from self._read_queue(consumer, mq, key, offset, row.max_offset, accepts)

    def _read_queue(self, consumer: _RfPullConsumer, mq: MessageQueue, key: str, offset: int, end: int,
                    accepts: Callable[[str | None], bool]) -> Iterator[RecvMessage]:
        try:
            consumer.seek(mq, offset)
            consumer.resume(mq)
        except MQError as exc:
            raise PullConsumerFetchMessageFailed(str(exc)) from exc
        try:
            while offset < end:
                try:
                    batch = consumer.poll(timeout=PULL_WAIT)
                except MQError as exc:
                    raise PullConsumerFetchMessageFailed(str(exc)) from exc
                if not batch:
                    break
                offset = batch[-1].queue_offset + 1
                self.offset_table[key] = offset
                for msg in batch:
                    if accepts(msg.tags):
                        yield RecvMessage(msg)
        finally:
            consumer.pause(mq)


__all__ = [
    "PY2",
    "ConsumeStatus",
    "Message",
    "MessageModel",
    "MessageProperty",
    "NullPointerException",
    "Producer",
    "ProducerSendAsyncFailed",
    "PullConsumer",
    "PushConsumer",
    "PushConsumerStartFailed",
    "ReceivedMessage",
    "RecvMessage",
    "SendResult",
    "SendStatus",
    "TransactionMQProducer",
    "TransactionStatus",
    "binary_type",
    "hashing_queue_selector",
    "maybe_decode",
    "text_type",
]
