"""SEND_BATCH_MESSAGE bodies: the messages of one topic a producer sends in one request.

The element layout is `record_layout`'s (``BATCH_ELEMENT_HEAD`` and what follows it).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from rocketflow.protocol.message import Message
from rocketflow.protocol.properties import InvalidPropertyError, decode_properties, encode_properties
from rocketflow.protocol.record_layout import (
    BATCH_ELEMENT_FIXED_SIZE,
    BATCH_ELEMENT_HEAD,
    MAX_BODY_BYTES,
    MAX_PROPERTIES_BYTES,
    PROPERTIES_LENGTH,
    RecordDecodeError,
    RecordEncodeError,
)


def encode_batch_body(messages: Sequence[Message]) -> bytes:
    """The body of SEND_BATCH_MESSAGE.

    Per message: ``[i32 size][i32 magic 0][i32 crc 0][i32 flag][i32 bodyLen][body][i16 propLen][props]``.

    All messages must share one topic (the body carries none; the request header does).
    """
    parts: list[bytes] = []
    topic: str | None = None
    for index, message in enumerate(messages):
        if topic is None:
            topic = message.topic
        elif message.topic != topic:
            raise RecordEncodeError(
                f"batch message {index} has topic {message.topic!r}; a batch holds one topic ({topic!r})"
            )
        try:
            properties = encode_properties(message.properties).encode("utf-8")
        except InvalidPropertyError as exc:
            raise RecordEncodeError(f"batch message {index}: {exc}") from None
        except UnicodeEncodeError as exc:
            raise RecordEncodeError(
                f"batch message {index}: properties are not UTF-8 encodable: {exc.reason}"
            ) from None
        body = message.body
        if len(properties) > MAX_PROPERTIES_BYTES:
            raise RecordEncodeError(
                f"batch message {index}: properties are {len(properties)} bytes; "
                f"at most {MAX_PROPERTIES_BYTES}"
            )
        if len(body) > MAX_BODY_BYTES:
            raise RecordEncodeError(f"batch message {index}: body of {len(body)} bytes is too large")
        size = BATCH_ELEMENT_FIXED_SIZE + len(body) + len(properties)
        try:
            head = BATCH_ELEMENT_HEAD.pack(size, 0, 0, message.flag, len(body))
        except struct.error as exc:
            raise RecordEncodeError(f"batch message {index}: flag out of range: {exc}") from None
        parts += (head, body, PROPERTIES_LENGTH.pack(len(properties)), properties)
    return b"".join(parts)


def decode_batch_body(body: bytes | bytearray | memoryview, topic: str) -> list[Message]:
    """The messages of a SEND_BATCH_MESSAGE body, all given ``topic``.

    Magic and CRC fields are ignored (clients write 0); each element's size must match its content.
    """
    messages: list[Message] = []
    pos = 0
    end = len(body)
    while pos < end:
        index = len(messages)
        if end - pos < BATCH_ELEMENT_FIXED_SIZE:
            raise RecordDecodeError(f"batch message {index}: truncated ({end - pos} bytes left)")
        total_size, _magic, _crc, flag, body_len = BATCH_ELEMENT_HEAD.unpack_from(body, pos)
        body_start = pos + BATCH_ELEMENT_HEAD.size
        body_end = body_start + body_len
        if body_len < 0 or body_end + 2 > end:
            raise RecordDecodeError(f"batch message {index}: body length {body_len} exceeds the batch")
        props_len = (body[body_end] << 8) | body[body_end + 1]
        if props_len > MAX_PROPERTIES_BYTES:
            raise RecordDecodeError(
                f"batch message {index}: properties length {props_len} is negative as an i16"
            )
        element_end = body_end + 2 + props_len
        if element_end > end:
            raise RecordDecodeError(f"batch message {index}: properties length {props_len} exceeds the batch")
        if total_size != element_end - pos:
            raise RecordDecodeError(
                f"batch message {index}: declared size {total_size} != actual size {element_end - pos}"
            )
        try:
            properties = decode_properties(str(body[body_end + 2:element_end], "utf-8")) if props_len else {}
        except UnicodeDecodeError as exc:
            raise RecordDecodeError(
                f"batch message {index}: properties are not valid UTF-8: {exc.reason}"
            ) from None
        messages.append(Message(topic, bytes(body[body_start:body_end]), flag=flag, properties=properties))
        pos = element_end
    return messages




__all__ = ["decode_batch_body", "encode_batch_body"]
