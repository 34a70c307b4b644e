"""The endpoint's hot answers written straight to protobuf's wire format.

A receive streams one ``ReceiveMessageResponse`` per message and an ack answers one entry per
receipt handle. Building them as protobuf objects field by field and serializing them costs several
times what writing the bytes does, so `ReceiveEncoder` and `ack_response` write the bytes themselves:
the parts every message of a receive shares (topic, store host, invisible duration, encoding) once
per receive, the rest per message. The result parses to exactly what `rocketflow.proxy.convert.incoming`
builds (tests/unit/test_proxy_wire.py checks it over generated messages); other RPCs keep the objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.proxy.convert import DELIVER_MS_PROPERTY, MESSAGE_GROUP_PROPERTY, SYSTEM_PROPERTIES

_SMALL: Final = tuple(bytes((value,)) for value in range(128))
_UINT64: Final = (1 << 64) - 1
_TAGS: Final = MessageConst.TAGS
_KEYS: Final = MessageConst.KEYS
_UNIQ_KEY: Final = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_KEY_SEPARATOR: Final = MessageConst.KEY_SEPARATOR
_TRACE_CONTEXT: Final = "TRACE_CONTEXT"
_GROUP: Final = MESSAGE_GROUP_PROPERTY
_DELIVER_MS: Final = DELIVER_MS_PROPERTY
_PREPARED: Final = MessageConst.TRANSACTION_PREPARED


def varint(value: int) -> bytes:
    """``value`` as a protobuf varint (negative numbers as 64-bit two's complement, as int32/int64 are)."""
    if 0 <= value < 128:
        return _SMALL[value]
    value &= _UINT64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: a Timestamp's or Duration's nanos field (2) for each millisecond of a second, 0 left out
_NANOS: Final = (b"", *(b"\x10" + varint(millis * 1_000_000) for millis in range(1, 1000)))


def length_delimited(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field: its tag bytes, the length, ``data``."""
    size = len(data)
    return tag + (_SMALL[size] if size < 128 else varint(size)) + data


def _text(tag: bytes, text: str) -> bytes:
    return length_delimited(tag, text.encode())


def _timestamp(tag: bytes, ms: int) -> bytes:
    """A ``google.protobuf.Timestamp`` (or ``Duration``) field of ``ms`` milliseconds; zero parts left out
    as protobuf leaves them out, the field itself always present."""
    seconds, millis = divmod(ms, 1000)
    body = (b"\x08" + varint(seconds) if seconds else b"") + (b"\x10" + varint(millis * 1_000_000) if millis else b"")
    return tag + _SMALL[len(body)] + body


def status(code: int, message: str) -> bytes:
    """A ``Status`` message (not a field)."""
    return (b"\x08" + varint(code) if code else b"") + (_text(b"\x12", message) if message else b"")


#: Code.OK with message "OK": the status of every successful answer
STATUS_OK: Final = status(pb.OK, "OK")


class ReceiveEncoder:
    """``ReceiveMessageResponse`` bytes carrying one received message each, for one receive."""

    __slots__ = ("_born_host", "_born_host_field", "_invisible", "_seconds", "_shared", "_topic")

    def __init__(self, topic: str, *, store_host: str, invisible_ms: int | None) -> None:
        # Message.topic (1) = Resource(name=topic) (name is 2)
        self._topic = length_delimited(b"\x0a", _text(b"\x12", topic))
        # SystemProperties.store_host (10)
        self._shared = _text(b"\x52", store_host) if store_host else b""
        # SystemProperties.invisible_duration (15)
        self._invisible = _timestamp(b"\x7a", invisible_ms) if invisible_ms is not None else b""
        # the last born host and timestamp seconds seen (a receive's messages mostly share them)
        self._born_host = ""
        self._born_host_field = b""
        self._seconds = (-1, b"")

    def _timestamp(self, tag: bytes, ms: int) -> bytes:
        seconds, millis = divmod(ms, 1000)
        last, encoded = self._seconds
        if seconds != last:
            encoded = b"\x08" + varint(seconds) if seconds else b""
            self._seconds = (seconds, encoded)
        body = encoded + _NANOS[millis] if millis else encoded
        return tag + _SMALL[len(body)] + body

    def encode(self, message: MessageExt, receipt_handle: str, attempt: int) -> bytes:
        """The response for ``message``, as `convert.incoming` with these arguments builds it."""
        properties = message.properties
        body = message.body
        out = bytearray()  # SystemProperties
        get = properties.get
        tag = get(_TAGS)
        if tag:
            data = tag.encode()
            size = len(data)
            out += b"\x0a"
            out += _SMALL[size] if size < 128 else varint(size)
            out += data
        keys = get(_KEYS)
        if keys:
            for key in keys.split(_KEY_SEPARATOR):
                if key:
                    data = key.encode()
                    size = len(data)
                    out += b"\x12"
                    out += _SMALL[size] if size < 128 else varint(size)
                    out += data
        message_id = get(_UNIQ_KEY) or message.msg_id
        if message_id:
            data = message_id.encode()
            size = len(data)
            out += b"\x1a"
            out += _SMALL[size] if size < 128 else varint(size)
            out += data
        # body_digest (4) = Digest(type=MD5, checksum=...), body_encoding (5) = IDENTITY
        out += b"\x22\x24\x08\x02\x12\x20"
        out += hashlib.md5(body).hexdigest().upper().encode()
        out += b"\x28\x01"
        if _GROUP in properties:
            out += b"\x30\x02"  # FIFO
        elif _DELIVER_MS in properties:
            out += b"\x30\x03"  # DELAY
        elif get(_PREPARED) == "true":
            out += b"\x30\x04"  # TRANSACTION
        else:
            out += b"\x30\x01"  # NORMAL
        out += self._timestamp(b"\x3a", message.born_timestamp)
        born_host = message.born_host[0]
        if born_host != self._born_host:
            self._born_host = born_host
            self._born_host_field = _text(b"\x42", born_host) if born_host else b""
        out += self._born_host_field
        out += self._timestamp(b"\x4a", message.store_timestamp)
        out += self._shared
        deliver = get(_DELIVER_MS)
        if deliver is not None and deliver.isdigit():
            out += _timestamp(b"\x5a", int(deliver))
        data = receipt_handle.encode()
        size = len(data)
        out += b"\x62"
        out += _SMALL[size] if size < 128 else varint(size)
        out += data
        queue_id = message.queue_id
        if queue_id:
            out += b"\x68"
            out += _SMALL[queue_id] if 0 < queue_id < 128 else varint(queue_id)
        out += b"\x70"
        out += varint(message.queue_offset)
        out += self._invisible
        out += b"\x80\x01"
        out += _SMALL[attempt] if 0 <= attempt < 128 else varint(attempt)
        group = get(_GROUP)
        if group is not None:
            out += _text(b"\x8a\x01", group)
        trace = get(_TRACE_CONTEXT)
        if trace:
            out += _text(b"\x92\x01", trace)
        head = bytearray(self._topic)  # Message: topic, user properties, system properties, body
        for key, value in properties.items():
            if key not in SYSTEM_PROPERTIES:  # user_properties (2): map entries
                head += length_delimited(b"\x12", _text(b"\x0a", key) + _text(b"\x12", value))
        size = len(out)
        head += b"\x1a"
        head += _SMALL[size] if size < 128 else varint(size)
        head += out
        if body:
            size = len(body)
            head += b"\x22"
            head += _SMALL[size] if size < 128 else varint(size)
            head += body
        size = len(head)
        return b"\x12" + (_SMALL[size] if size < 128 else varint(size)) + head


def ack_response(overall: bytes, entries: Iterable[tuple[str, str, bytes]]) -> bytes:
    """``AckMessageResponse`` bytes: the overall status (a `status` message) and (message id, receipt
    handle, status message) per entry."""
    out = bytearray(length_delimited(b"\x0a", overall))
    for message_id, handle, entry_status in entries:
        entry = bytearray()
        if message_id:
            data = message_id.encode()
            size = len(data)
            entry += b"\x0a"
            entry += _SMALL[size] if size < 128 else varint(size)
            entry += data
        if handle:
            data = handle.encode()
            size = len(data)
            entry += b"\x12"
            entry += _SMALL[size] if size < 128 else varint(size)
            entry += data
        size = len(entry_status)
        entry += b"\x1a"
        entry += _SMALL[size] if size < 128 else varint(size)
        entry += entry_status
        size = len(entry)
        out += b"\x12"
        out += _SMALL[size] if size < 128 else varint(size)
        out += entry
    return bytes(out)


__all__ = ["STATUS_OK", "ReceiveEncoder", "ack_response", "length_delimited", "status", "varint"]
