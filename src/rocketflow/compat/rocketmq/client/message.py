"""Messages (to send and received), send results and the statuses and enums of ``rocketmq.client``."""

from __future__ import annotations

import enum
from typing import Final, NamedTuple

from rocketflow import Message as _RfMessage
from rocketflow import MessageExt
from rocketflow.client import SendResult as _RfSendResult
from rocketflow.client import SendStatus as _RfSendStatus
from rocketflow.compat.rocketmq.client._common import as_int, as_text
from rocketflow.compat.rocketmq.consts import MessageProperty


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


def send_result_of(result: _RfSendResult) -> SendResult:
    return SendResult(_SEND_STATUS[result.send_status], result.msg_id, result.queue_offset)


class Message:
    """A message to send: ``Message(topic)``, then the setters."""

    __slots__ = ("_message",)

    def __init__(self, topic: str | bytes) -> None:
        self._message = _RfMessage(as_text(topic, "topic"))

    def set_keys(self, keys: str | bytes) -> None:
        """Space-separated keys (the KEYS property)."""
        self._message.keys = as_text(keys, "keys")

    def set_tags(self, tags: str | bytes) -> None:
        self._message.tags = as_text(tags, "tags")

    def set_body(self, body: str | bytes) -> None:
        """The body: bytes as they are, a str as UTF-8 (all of it, NUL bytes included)."""
        self._message.body = body.encode("utf-8") if isinstance(body, str) else bytes(_check_bytes(body))

    def set_property(self, key: str | bytes, value: str | bytes) -> None:
        self._message.properties[as_text(key, "key")] = as_text(value, "value")

    def set_delay_time_level(self, delay_time_level: int) -> None:
        """Deliver after the broker's delay level (1 = 1 s, 2 = 5 s, 3 = 10 s, ... by default)."""
        self._message.delay_level = as_int(delay_time_level, "delay_time_level")

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
        name = prop.value if isinstance(prop, MessageProperty) else as_text(prop, "prop")
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


def copy_for_send(msg: object) -> _RfMessage:
    """A copy of a `Message` argument for one send (each send stamps its own UNIQ_KEY on what it sends)."""
    if not isinstance(msg, Message):
        raise TypeError(f"expected a rocketflow.compat.rocketmq.client.Message, got {type(msg).__name__}")
    return msg._copy_for_send()

