"""Messages between the 5.x protocol and the store: a `v2.Message` to be sent, a stored one received.

A 5.x message keeps its own id as the 4.x ``UNIQ_KEY`` (what 4.x consumers see as its msgId), its
tag as ``TAGS``, keys as ``KEYS``, message group as ``__SHARDINGKEY`` and delivery time as
``TIMER_DELIVER_MS``, as RocketMQ 5 stores them; user properties are stored as they are, so a
message crosses protocols with body, keys, tag and properties intact.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from google.protobuf.timestamp_pb2 import Timestamp

from rocketflow.errors import RocketflowError
from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.protocol.message import MessageConst, MessageExt

#: RocketMQ 5's property of a message's group (FIFO) and of its delivery time (epoch ms)
MESSAGE_GROUP_PROPERTY: Final = MessageConst.SHARDING_KEY
DELIVER_MS_PROPERTY: Final = "TIMER_DELIVER_MS"
#: properties the store or RocketMQ sets: a 5.x client may not send them as user properties
SYSTEM_PROPERTIES: Final = frozenset(
    value for name, value in vars(MessageConst).items() if name.isupper() and isinstance(value, str)
) | frozenset({
    DELIVER_MS_PROPERTY, "__STARTDELIVERTIME", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS",
    "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "TRACE_CONTEXT", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "INNER_NUM", "MSG_REGION",
    "TRACE_ON", "UNIQ_KEY", "bname",
}) - {" ", ""}
#: a delivery "timestamp" this many seconds or more is taken as milliseconds (the Python client puts
#: its millisecond value in the seconds field): 10^11 s is the year 5138
_SECONDS_THAT_ARE_MILLIS: Final = 100_000_000_000
_TYPE_NAMES: Final[dict[int, str]] = {pb.NORMAL: "NORMAL", pb.FIFO: "FIFO", pb.DELAY: "DELAY",
                                       pb.TRANSACTION: "TRANSACTION"}
TYPES_BY_NAME: Final[dict[str, pb.MessageType.ValueType]] = {
    "NORMAL": pb.NORMAL, "FIFO": pb.FIFO, "DELAY": pb.DELAY, "TRANSACTION": pb.TRANSACTION}


class BadMessage(RocketflowError, ValueError):
    """A message that cannot be stored; ``code`` is the status code to answer with."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


def type_name(message_type: int) -> str:
    return _TYPE_NAMES.get(message_type, "UNSPECIFIED")


def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (RocketMQ picks a message group's queue by it)."""
    data = text.encode("utf-16-be")
    value = 0
    for i in range(0, len(data), 2):
        value = (31 * value + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def timestamp_ms(stamp: Timestamp) -> int:
    seconds = stamp.seconds
    if seconds >= _SECONDS_THAT_ARE_MILLIS:
        return seconds + stamp.nanos // 1_000_000
    return seconds * 1000 + stamp.nanos // 1_000_000


def to_timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


@dataclass(slots=True)
class OutgoingMessage:
    """A 5.x message as the send path stores it."""

    topic: str
    body: bytes
    properties: dict[str, str]
    message_id: str
    message_type: int
    message_group: str | None
    deliver_ms: int | None
    born_ms: int
    born_host: str


def check_digest(body: bytes, digest: pb.Digest) -> bool:
    expected = digest.checksum.strip()
    if digest.type == pb.CRC32:
        value = zlib.crc32(body) & 0xFFFFFFFF
        return expected.upper() in (f"{value:08X}", str(value))
    if digest.type == pb.MD5:
        return expected.upper() == hashlib.md5(body).hexdigest().upper()
    if digest.type == pb.SHA1:
        return expected.upper() == hashlib.sha1(body).hexdigest().upper()
    return True


def outgoing(message: pb.Message, *, max_body_size: int, max_decompressed: int) -> OutgoingMessage:
    """Check a message of SendMessage; raises `BadMessage` with the code to answer."""
    system = message.system_properties
    topic = message.topic.name
    if not system.message_id:
        raise BadMessage(pb.ILLEGAL_MESSAGE_ID, "the message has no message_id")
    body = message.body
    if len(body) > max_body_size:
        raise BadMessage(pb.MESSAGE_BODY_TOO_LARGE,
                         f"the message body is {len(body)} bytes, more than the maximum {max_body_size}")
    if system.HasField("body_digest") and system.body_digest.type and not check_digest(body, system.body_digest):
        raise BadMessage(pb.MESSAGE_CORRUPTED, "the message body does not match its digest")
    if system.body_encoding == pb.GZIP:
        try:
            inflater = zlib.decompressobj(wbits=47)
            body = inflater.decompress(body, max_decompressed)
            if inflater.unconsumed_tail:
                raise BadMessage(pb.MESSAGE_BODY_TOO_LARGE, f"the body inflates to more than {max_decompressed} bytes")
        except zlib.error as exc:
            raise BadMessage(pb.MESSAGE_CORRUPTED, f"the body is not gzip data: {exc}") from None
    properties: dict[str, str] = {}
    for key, value in message.user_properties.items():
        if key in SYSTEM_PROPERTIES or not key:
            raise BadMessage(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"the user property {key!r} is a reserved name")
        properties[key] = value
    if system.HasField("tag"):
        if not system.tag.strip() or "|" in system.tag:
            raise BadMessage(pb.ILLEGAL_MESSAGE_TAG, f"illegal tag {system.tag!r}")
        properties[MessageConst.TAGS] = system.tag
    keys = [key for key in system.keys]
    if any(not key.strip() or MessageConst.KEY_SEPARATOR in key for key in keys):
        raise BadMessage(pb.ILLEGAL_MESSAGE_KEY, f"illegal message keys {keys!r}")
    if keys:
        properties[MessageConst.KEYS] = MessageConst.KEY_SEPARATOR.join(keys)
    properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = system.message_id
    group = system.message_group if system.HasField("message_group") else None
    if group is not None:
        if not group.strip() or len(group) > 64:
            raise BadMessage(pb.ILLEGAL_MESSAGE_GROUP, f"illegal message group {group!r}")
        properties[MESSAGE_GROUP_PROPERTY] = group
    deliver_ms = timestamp_ms(system.delivery_timestamp) if system.HasField("delivery_timestamp") else None
    if system.HasField("trace_context") and system.trace_context:
        properties["TRACE_CONTEXT"] = system.trace_context
    message_type = system.message_type
    if message_type == pb.FIFO and group is None:
        raise BadMessage(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message needs a message group")
    if message_type == pb.DELAY and deliver_ms is None:
        raise BadMessage(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a DELAY message needs a delivery timestamp")
    if message_type in (pb.NORMAL, pb.TRANSACTION) and (group is not None or deliver_ms is not None):
        raise BadMessage(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                         f"a {type_name(message_type)} message has no message group and no delivery time")
    if message_type not in _TYPE_NAMES:
        raise BadMessage(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                         f"message type {message_type} is not supported (NORMAL, FIFO, DELAY, TRANSACTION)")
    born_ms = timestamp_ms(system.born_timestamp) if system.HasField("born_timestamp") else 0
    return OutgoingMessage(topic, body, properties, system.message_id, message_type, group, deliver_ms, born_ms,
                           system.born_host)


def message_type_of(properties: Mapping[str, str]) -> pb.MessageType.ValueType:
    if MESSAGE_GROUP_PROPERTY in properties:
        return pb.FIFO
    if DELIVER_MS_PROPERTY in properties:
        return pb.DELAY
    if properties.get(MessageConst.TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    return pb.NORMAL


def incoming(message: MessageExt, *, topic: str, receipt_handle: str | None = None, attempt: int | None = None,
             invisible_ms: int | None = None, store_host: str = "") -> pb.Message:
    """A stored message as a 5.x client receives it."""
    properties = message.properties
    out = pb.Message()
    out.topic.name = topic
    for key, value in properties.items():
        if key not in SYSTEM_PROPERTIES:
            out.user_properties[key] = value
    system = out.system_properties
    tag = properties.get(MessageConst.TAGS)
    if tag:
        system.tag = tag
    keys = properties.get(MessageConst.KEYS)
    if keys:
        system.keys.extend(key for key in keys.split(MessageConst.KEY_SEPARATOR) if key)
    system.message_id = properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or message.msg_id
    body = message.body
    system.body_digest.type = pb.MD5
    system.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    system.body_encoding = pb.IDENTITY
    system.message_type = message_type_of(properties)
    system.born_timestamp.CopyFrom(to_timestamp(message.born_timestamp))
    system.born_host = message.born_host[0]
    system.store_timestamp.CopyFrom(to_timestamp(message.store_timestamp))
    system.store_host = store_host
    deliver = properties.get(DELIVER_MS_PROPERTY)
    if deliver is not None and deliver.isdigit():
        system.delivery_timestamp.CopyFrom(to_timestamp(int(deliver)))
    if receipt_handle is not None:
        system.receipt_handle = receipt_handle
    system.queue_id = message.queue_id
    system.queue_offset = message.queue_offset
    if invisible_ms is not None:
        system.invisible_duration.seconds = invisible_ms // 1000
        system.invisible_duration.nanos = (invisible_ms % 1000) * 1_000_000
    system.delivery_attempt = attempt if attempt is not None else message.reconsume_times + 1
    group = properties.get(MESSAGE_GROUP_PROPERTY)
    if group is not None:
        system.message_group = group
    trace = properties.get("TRACE_CONTEXT")
    if trace:
        system.trace_context = trace
    out.body = body
    return out


__all__ = ["DELIVER_MS_PROPERTY", "MESSAGE_GROUP_PROPERTY", "SYSTEM_PROPERTIES", "TYPES_BY_NAME", "BadMessage",
           "OutgoingMessage", "check_digest", "incoming", "java_hash", "message_type_of", "outgoing", "timestamp_ms",
           "to_timestamp", "type_name"]
