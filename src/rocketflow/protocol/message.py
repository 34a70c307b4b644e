"""Messages as producers build them (`Message`) and as brokers store and deliver them (`MessageExt`)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from rocketflow.protocol.ids import offset_msg_id_from_packed, pack_decoded_host
from rocketflow.protocol.properties import decode_properties
from rocketflow.remoting.fastjson import register_bean


class MessageConst:
    """Well-known property keys (MessageConst.java, 4.9.3) plus rocketflow's own."""

    KEYS: Final = "KEYS"
    TAGS: Final = "TAGS"
    WAIT_STORE_MSG_OK: Final = "WAIT"
    DELAY_TIME_LEVEL: Final = "DELAY"
    RETRY_TOPIC: Final = "RETRY_TOPIC"
    REAL_TOPIC: Final = "REAL_TOPIC"
    REAL_QUEUE_ID: Final = "REAL_QID"
    TRANSACTION_PREPARED: Final = "TRAN_MSG"
    PRODUCER_GROUP: Final = "PGROUP"
    MIN_OFFSET: Final = "MIN_OFFSET"
    MAX_OFFSET: Final = "MAX_OFFSET"
    BUYER_ID: Final = "BUYER_ID"
    ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG: Final = "TRANSFER_FLAG"
    CORRECTION_FLAG: Final = "CORRECTION_FLAG"
    MQ2_FLAG: Final = "MQ2_FLAG"
    RECONSUME_TIME: Final = "RECONSUME_TIME"
    MSG_REGION: Final = "MSG_REGION"
    TRACE_SWITCH: Final = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX: Final = "UNIQ_KEY"
    MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP: Final = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID: Final = "INSTANCE_ID"
    CORRELATION_ID: Final = "CORRELATION_ID"
    REPLY_TO_CLIENT: Final = "REPLY_TO_CLIENT"
    TTL: Final = "TTL"
    ARRIVE_TIME: Final = "ARRIVE_TIME"
    PUSH_REPLY_TIME: Final = "PUSH_REPLY_TIME"
    CLUSTER: Final = "CLUSTER"
    MSG_TYPE: Final = "MSG_TYPE"
    INNER_MULTI_DISPATCH: Final = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET: Final = "INNER_MULTI_QUEUE_OFFSET"
    #: rocketflow: the sharding key a producer hashed to pick the queue (4.9.3 has no such property;
    #: 5.x calls it ``__SHARDINGKEY`` and so do we, so 5.x tools read it too).
    SHARDING_KEY: Final = "__SHARDINGKEY"
    #: rocketflow: why a consumer could not decode the record it sent to the dead-letter queue as it was
    #: stored (its body not inflated), e.g. "compressed body is not valid zlib data: ...".
    DECODE_ERROR: Final = "ROCKETFLOW_DECODE_ERROR"

    KEY_SEPARATOR: Final = " "


@register_bean
@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker. Sorts by topic, broker name, queue id (as RocketMQ does)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json_dict(self) -> dict[str, object]:
        """The fastjson shape: ``{"brokerName":..,"queueId":..,"topic":..}`` (keys sorted)."""
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, object]) -> MessageQueue:
        queue_id = data.get("queueId", 0)
        return cls(
            topic=str(data.get("topic", "")),
            broker_name=str(data.get("brokerName", "")),
            queue_id=int(queue_id) if isinstance(queue_id, int | str) else 0,
        )

    def __str__(self) -> str:
        # Java's MessageQueue.toString(); the consistent-hash allocation hashes exactly this text.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"


class Message:
    """A message as a producer sends it: topic, body, user flag and string properties.

    Tags, keys and the delay level live in the properties, as in RocketMQ; the attributes here
    are views of them.
    """

    __slots__ = ("body", "flag", "properties", "topic")

    def __init__(
        self,
        topic: str,
        body: bytes = b"",
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        *,
        flag: int = 0,
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        wait_store_msg_ok: bool = True,
    ) -> None:
        self.topic = topic
        self.body = bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = dict(properties) if properties else {}
        if tags:
            self.tags = tags
        if keys:
            self.keys = keys if isinstance(keys, str) else MessageConst.KEY_SEPARATOR.join(keys)
        if delay_level > 0:
            self.delay_level = delay_level
        if not wait_store_msg_ok:
            self.properties[MessageConst.WAIT_STORE_MSG_OK] = "false"

    # -- property views -------------------------------------------------------------------
    def get_property(self, name: str, default: str | None = None) -> str | None:
        """One property (RocketMQ's ``getProperty``), or ``default``."""
        return self.properties.get(name, default)

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        self._set(MessageConst.TAGS, value)

    @property
    def keys(self) -> str | None:
        """Space-separated keys (RocketMQ's KEYS property)."""
        return self.properties.get(MessageConst.KEYS)

    @keys.setter
    def keys(self, value: str | None) -> None:
        self._set(MessageConst.KEYS, value)

    @property
    def key_list(self) -> list[str]:
        keys = self.keys
        return [k for k in keys.split(MessageConst.KEY_SEPARATOR) if k] if keys else []

    @property
    def delay_level(self) -> int:
        return _int_property(self.properties.get(MessageConst.DELAY_TIME_LEVEL), 0)

    @delay_level.setter
    def delay_level(self, value: int) -> None:
        self._set(MessageConst.DELAY_TIME_LEVEL, str(value) if value > 0 else None)

    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(MessageConst.WAIT_STORE_MSG_OK, "true") != "false"

    @property
    def uniq_key(self) -> str | None:
        """The client-assigned unique id (UNIQ_KEY), which `SendResult.msg_id` returns."""
        return self.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def sharding_key(self) -> str | None:
        return self.properties.get(MessageConst.SHARDING_KEY)

    def _set(self, key: str, value: str | None) -> None:
        if value is None or value == "":
            self.properties.pop(key, None)
        else:
            self.properties[key] = value

    # -- value semantics --------------------------------------------------------------------
    def _fields(self) -> tuple[object, ...]:
        return (self.topic, self.body, self.flag, self.properties)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Message)
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 32 else self.body[:32] + b"..."
        return f"{type(self).__name__}(topic={self.topic!r}, body={body!r}, properties={self.properties!r})"


class MessageExt(Message):
    """A stored message: what the commit log holds and what a pull returns."""

    __slots__ = (
        "_later_properties",
        "_msg_id",
        "_properties",
        "_raw_properties",
        "body_crc",
        "born_host",
        "born_timestamp",
        "broker_name",
        "commit_log_offset",
        "prepared_transaction_offset",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_host",
        "store_size",
        "store_timestamp",
        "sys_flag",
    )
    _properties: dict[str, str] | None
    #: the properties' ASCII bytes while they are not decoded, and pairs to set on them once they are
    _raw_properties: bytes
    _later_properties: tuple[tuple[str, str], ...]
    _msg_id: str | None

    def __init__(
        self,
        topic: str,
        body: bytes = b"",
        *,
        flag: int = 0,
        properties: Mapping[str, str] | None = None,
        queue_id: int = 0,
        queue_offset: int = 0,
        commit_log_offset: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        store_timestamp: int = 0,
        store_host: tuple[str, int] = ("127.0.0.1", 0),
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        body_crc: int = 0,
        store_size: int = 0,
        msg_id: str = "",
        broker_name: str = "",
    ) -> None:
        self._raw_properties = b""
        self._later_properties = ()
        super().__init__(topic, body, flag=flag, properties=properties)
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self.store_size = store_size
        self.msg_id = msg_id
        self.broker_name = broker_name

    # A message decoded from a pull keeps its properties as the record's (ASCII) text until they are first
    # read, and its offset id until it is first asked for: a consumer often reads neither.
    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = decode_properties(self._raw_properties.decode("ascii"))
            for key, value in self._later_properties:
                props[key] = value
            self._properties = props
            self._raw_properties = b""
            self._later_properties = ()
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    def get_property(self, name: str, default: str | None = None) -> str | None:
        """One property, or ``default``; one set after the pull (MAX_OFFSET, CONSUME_START_TIME, ...) is
        read without decoding the record's own."""
        props = self._properties
        if props is None:
            for key, value in reversed(self._later_properties):
                if key == name:
                    return value
            props = self.properties
        return props.get(name, default)

    def put_properties(self, pairs: tuple[tuple[str, str], ...]) -> None:
        """Set these properties (later pairs win), without decoding the message's properties to do it."""
        if self._properties is None:
            self._later_properties += pairs
        else:
            self._properties.update(pairs)

    @property
    def msg_id(self) -> str:
        """The broker-assigned id (store host + commit log offset), as ``offset_msg_id``."""
        msg_id = self._msg_id
        if msg_id is None:
            msg_id = self._msg_id = offset_msg_id_of(self.store_host, self.commit_log_offset)
        return msg_id

    @msg_id.setter
    def msg_id(self, value: str) -> None:
        self._msg_id = value

    @property
    def offset_msg_id(self) -> str:
        """The broker-assigned id (store host + commit log offset)."""
        return self.msg_id

    @property
    def client_msg_id(self) -> str:
        """What RocketMQ's `MessageClientExt.getMsgId()` returns: UNIQ_KEY if present, else the offset id."""
        return self.uniq_key or self.msg_id

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def _fields(self) -> tuple[object, ...]:
        return (
            *Message._fields(self),
            self.queue_id,
            self.queue_offset,
            self.commit_log_offset,
            self.sys_flag,
            self.born_timestamp,
            self.born_host,
            self.store_timestamp,
            self.store_host,
            self.reconsume_times,
            self.prepared_transaction_offset,
        )

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
            f"msg_id={self.client_msg_id!r}, tags={self.tags!r}, keys={self.keys!r}, "
            f"reconsume_times={self.reconsume_times}, body={len(self.body)}B)"
        )


@functools.lru_cache(maxsize=256)
def _packed_host(host: tuple[str, int]) -> bytes:
    return pack_decoded_host(*host)


def offset_msg_id_of(store_host: tuple[str, int], commit_log_offset: int) -> str:
    """The offset msg id of a record stored at ``commit_log_offset`` by ``store_host``."""
    return offset_msg_id_from_packed(_packed_host(store_host), commit_log_offset)


def _int_property(value: str | None, default: int) -> int:
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        return default


__all__ = ["Message", "MessageConst", "MessageExt", "MessageQueue"]
