"""The message record: commit log entry and pull-response element (PROTOCOL.md 3.3), and batch bodies.

A record, all big-endian::

    i32 totalSize | i32 magic | i32 bodyCRC | i32 queueId | i32 flag | i64 queueOffset
    | i64 commitLogOffset | i32 sysFlag | i64 bornTimestamp | bornHost (4|16 IP + i32 port)
    | i64 storeTimestamp | storeHost (4|16 IP + i32 port) | i32 reconsumeTimes
    | i64 preparedTransactionOffset | i32 bodyLen + body | i8 topicLen + topic | i16 propLen + props

Decoding and compression errors always surface as `RecordDecodeError`; values that cannot be
encoded raise `RecordEncodeError` (a ValueError).

A record whose frame is sound (magic code, a size that fits) but whose content cannot be decoded
(a COMPRESSED body that is not zlib, properties or topic that are not UTF-8, lengths inside it that
do not add up) is *undecodable*: `decode_records` can hand such records over as `UndecodableRecord`
and go on with the next one, so one bad record does not cost the records around it. Bytes that
cannot even be split into records still raise.

Compressed bodies: `decode_record` inflates a COMPRESSED body by default and then clears the
COMPRESSED bit of the returned ``sys_flag``, so that ``sys_flag`` always describes ``body`` (and
re-encoding the message cannot store an inflated body flagged as compressed). ``body_crc`` and
``store_size`` keep describing the stored record.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rocketflow.errors import RocketflowError
from rocketflow.protocol.ids import (
    HOST_SIZE_V4,
    HOST_SIZE_V6,
    _ip_text,
    pack_host,
    unpack_host,
)
from rocketflow.protocol.message import Message, MessageExt
from rocketflow.protocol.properties import (
    InvalidPropertyError,
    decode_properties,
    encode_properties,
)
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.errors import ProtocolError

MAGIC_CODE: Final = -626843481
BLANK_MAGIC_CODE: Final = -875286124

#: Fixed bytes of a record (everything but body, topic and properties) with IPv4 hosts.
RECORD_FIXED_SIZE_V4: Final = 91
#: Fixed bytes of a record with both hosts IPv6.
RECORD_FIXED_SIZE_V6: Final = 91 + 2 * (HOST_SIZE_V6 - HOST_SIZE_V4)

#: Byte positions of fields inside a record (the ones before the first host are fixed).
TOTAL_SIZE_POSITION: Final = 0
MAGIC_POSITION: Final = 4
BODY_CRC_POSITION: Final = 8
QUEUE_ID_POSITION: Final = 12
FLAG_POSITION: Final = 16
QUEUE_OFFSET_POSITION: Final = 20
COMMIT_LOG_OFFSET_POSITION: Final = 28
SYS_FLAG_POSITION: Final = 36
BORN_TIMESTAMP_POSITION: Final = 40
BORN_HOST_POSITION: Final = 48

MAX_TOPIC_BYTES: Final = 127
MAX_PROPERTIES_BYTES: Final = 0x7FFF
MAX_BODY_BYTES: Final = 0x7FFFFFFF - RECORD_FIXED_SIZE_V6
DEFAULT_COMPRESS_LEVEL: Final = 5

_V6_BITS: Final = int(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)
_COMPRESSED: Final = int(MessageSysFlag.COMPRESSED)
_BORN_V6: Final = int(MessageSysFlag.BORNHOST_V6)
_STORE_V6: Final = int(MessageSysFlag.STOREHOST_V6)


class RecordDecodeError(ProtocolError):
    """Bytes that do not form a valid message record, batch body or compressed body."""


class RecordEncodeError(RocketflowError, ValueError):
    """Message fields that cannot be written as a record (too long, out of range, not encodable)."""


@dataclass(frozen=True, slots=True)
class UndecodableRecord:
    """A record that could be told apart from its neighbours but not decoded (see the module doc).

    ``message`` holds what could be read: the fixed fields (queue id and offset, commit-log offset,
    timestamps, hosts, reconsume times, ``sys_flag`` as stored), the body as stored (not inflated; the
    whole record when the body cannot be located), the topic and properties when they are readable
    (else ``""`` and none). ``reason`` says what is wrong; ``record`` is the record's bytes.
    """

    message: MessageExt
    reason: str
    record: bytes

    @property
    def queue_offset(self) -> int:
        return self.message.queue_offset


# Head = every field up to and including bodyLen. Encoding takes packed hosts ("8s"/"20s"),
# decoding splits them into IP bytes and port. Index: born v6 bit | store v6 bit << 1.
def _head_format(born_host: str, store_host: str) -> str:
    return f">iiiiiqqiq{born_host}q{store_host}iqi"


_ENCODE_HEADS: Final = (
    struct.Struct(_head_format("8s", "8s")),
    struct.Struct(_head_format("20s", "8s")),
    struct.Struct(_head_format("8s", "20s")),
    struct.Struct(_head_format("20s", "20s")),
)
#: Decoding reads the hosts packed (IP and port together), as encoding writes them.
_DECODE_HEADS: Final = _ENCODE_HEADS
_I16: Final = struct.Struct(">h")
_I32_I32: Final = struct.Struct(">ii")
_TOPIC_LENGTH_BYTES: Final = tuple(bytes((length,)) for length in range(MAX_TOPIC_BYTES + 1))
_MIN_HEAD: Final = SYS_FLAG_POSITION + 4


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """The record's BODYCRC: CRC32 of the stored body, masked to a non-negative int32."""
    return zlib.crc32(body) & 0x7FFFFFFF


def record_size(
    body_len: int, topic_len: int, props_len: int, born_v6: bool = False, store_v6: bool = False
) -> int:
    """Total size of a record with these byte lengths of body, topic and properties."""
    size = RECORD_FIXED_SIZE_V4 + body_len + topic_len + props_len
    if born_v6:
        size += HOST_SIZE_V6 - HOST_SIZE_V4
    if store_v6:
        size += HOST_SIZE_V6 - HOST_SIZE_V4
    return size


# --------------------------------------------------------------------------- encoding


def encode_record_fields(
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    commit_log_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body_crc: int,
) -> bytes:
    """A record from already encoded parts (the store's fast path).

    ``topic`` and ``properties`` are UTF-8, hosts come from `pack_host`. The IPv6 bits of
    ``sys_flag`` are set from the widths of the hosts, whatever the caller passed.
    """
    topic_len = len(topic)
    props_len = len(properties)
    body_len = len(body)
    born_len = len(born_host)
    store_len = len(store_host)
    if topic_len > MAX_TOPIC_BYTES:
        raise RecordEncodeError(
            f"topic is {topic_len} bytes in UTF-8; a record holds at most {MAX_TOPIC_BYTES}"
        )
    if props_len > MAX_PROPERTIES_BYTES:
        raise RecordEncodeError(
            f"properties are {props_len} bytes in UTF-8; a record holds at most {MAX_PROPERTIES_BYTES}"
        )
    if body_len > MAX_BODY_BYTES:
        raise RecordEncodeError(f"body of {body_len} bytes does not fit in a record")
    variant = 0
    sys_flag &= ~_V6_BITS
    if born_len != HOST_SIZE_V4:
        if born_len != HOST_SIZE_V6:
            raise RecordEncodeError(f"born host must be 8 or 20 packed bytes, got {born_len}")
        variant = 1
        sys_flag |= _BORN_V6
    if store_len != HOST_SIZE_V4:
        if store_len != HOST_SIZE_V6:
            raise RecordEncodeError(f"store host must be 8 or 20 packed bytes, got {store_len}")
        variant |= 2
        sys_flag |= _STORE_V6
    head = _ENCODE_HEADS[variant]
    try:
        packed = head.pack(
            head.size + body_len + 3 + topic_len + props_len,
            MAGIC_CODE,
            body_crc,
            queue_id,
            flag,
            queue_offset,
            commit_log_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            body_len,
        )
    except struct.error as exc:
        raise RecordEncodeError(f"a record field is out of range or of the wrong type: {exc}") from None
    return b"".join((packed, body, _TOPIC_LENGTH_BYTES[topic_len], topic, _I16.pack(props_len), properties))


def encode_record(msg: MessageExt) -> bytes:
    """The full record of ``msg``.

    ``msg.body`` is the stored body (already deflated if ``sys_flag`` has COMPRESSED); the body
    CRC is computed, ``msg.body_crc`` ignored; the IPv6 bits follow the hosts.
    """
    try:
        topic = msg.topic.encode("utf-8")
        properties = encode_properties(msg.properties).encode("utf-8")
        born_host = pack_host(*msg.born_host)
        store_host = pack_host(*msg.store_host)
    except InvalidPropertyError as exc:
        raise RecordEncodeError(str(exc)) from None
    except UnicodeEncodeError as exc:
        raise RecordEncodeError(f"topic or properties are not encodable as UTF-8: {exc.reason}") from None
    except (ValueError, TypeError) as exc:
        raise RecordEncodeError(f"bad host: {exc}") from None
    body = msg.body
    return encode_record_fields(
        topic=topic,
        body=body,
        properties=properties,
        queue_id=msg.queue_id,
        flag=msg.flag,
        queue_offset=msg.queue_offset,
        commit_log_offset=msg.commit_log_offset,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=born_host,
        store_timestamp=msg.store_timestamp,
        store_host=store_host,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        body_crc=body_crc(body),
    )


# --------------------------------------------------------------------------- decoding


def peek_record(data: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """``(total_size, magic)`` of the record at ``pos`` without decoding it."""
    if pos < 0 or len(data) - pos < 8:
        raise RecordDecodeError(f"need 8 bytes at position {pos} to read a record's size and magic")
    total_size, magic = _I32_I32.unpack_from(data, pos)
    return total_size, magic


def _describe_bad_start(data: bytes | bytearray | memoryview, pos: int, origin: int = 0) -> str:
    available = len(data) - pos
    where = pos + origin
    if pos < 0 or pos > len(data):
        return f"position {where} is outside the buffer of {len(data) + origin} bytes"
    if available >= 8:
        total_size, magic = _I32_I32.unpack_from(data, pos)
        if magic == BLANK_MAGIC_CODE:
            return f"blank end-of-file marker at position {where} (size {total_size}), not a message record"
        if magic != MAGIC_CODE:
            return f"bad magic code {magic & 0xFFFFFFFF:#010x} at position {where}"
    return f"truncated record at position {where}: only {available} bytes left"


# Small caches of decoded topics and hosts: a pull body or a store scan repeats the same few.
_CACHE_LIMIT: Final = 4096
_topic_cache: dict[bytes, str] = {}
_host_cache: dict[bytes, tuple[str, int]] = {}


def _topic_text(raw: bytes) -> str:
    text = _topic_cache.get(raw)
    if text is None:
        text = raw.decode("utf-8")  # UnicodeDecodeError is handled by the caller
        if len(_topic_cache) >= _CACHE_LIMIT:
            _topic_cache.clear()
        _topic_cache[raw] = text
    return text


def _host_pair(packed: bytes) -> tuple[str, int]:
    """(IP text, port) of a host packed as records store it (IP bytes, then a 4-byte port)."""
    host = _host_cache.get(packed)
    if host is None:
        host = (_ip_text(packed[:-4]), int.from_bytes(packed[-4:], "big", signed=True))
        if len(_host_cache) >= _CACHE_LIMIT:
            _host_cache.clear()
        _host_cache[packed] = host
    return host


def decode_record(
    data: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    decompress: bool = True,
    verify_crc: bool = False,
    with_body: bool = True,
) -> tuple[MessageExt, int]:
    """Decode the record at ``pos``; returns the message and the position just after the record.

    ``msg_id`` is the offset msg id (store host + commit log offset). With ``decompress`` a
    COMPRESSED body is inflated and the flag cleared (see the module doc); with ``verify_crc``
    the body CRC is checked; without ``with_body`` the body is left empty (and not inflated).
    """
    if type(data) is bytes:
        return _decode_bytes(data, pos, 0, decompress, verify_crc, with_body)
    # Other buffers (bytearray, memoryview over a mapped file): copy just this record.
    if pos < 0 or len(data) - pos < _MIN_HEAD:
        raise RecordDecodeError(_describe_bad_start(data, pos))
    total_size, magic = _I32_I32.unpack_from(data, pos)
    if magic != MAGIC_CODE:
        raise RecordDecodeError(_describe_bad_start(data, pos))
    if total_size < 0:
        raise RecordDecodeError(f"record at position {pos} declares a negative size ({total_size})")
    record = bytes(data[pos:pos + total_size])
    msg, end = _decode_bytes(record, 0, pos, decompress, verify_crc, with_body)
    return msg, pos + end


def _decode_bytes(
    data: bytes, pos: int, origin: int, decompress: bool, verify_crc: bool, with_body: bool
) -> tuple[MessageExt, int]:
    """`decode_record` over bytes; ``origin`` is added to positions in error messages only."""
    end_of_data = len(data)
    if pos < 0 or end_of_data - pos < _MIN_HEAD:
        raise RecordDecodeError(_describe_bad_start(data, pos, origin))
    variant = (data[pos + SYS_FLAG_POSITION + 3] >> 4) & 3
    head = _DECODE_HEADS[variant]
    head_size = head.size
    if end_of_data - pos < head_size:
        raise RecordDecodeError(_describe_bad_start(data, pos, origin))
    (
        total_size,
        magic,
        stored_crc,
        queue_id,
        flag,
        queue_offset,
        commit_log_offset,
        sys_flag,
        born_timestamp,
        born_packed,
        store_timestamp,
        store_packed,
        reconsume_times,
        prepared_transaction_offset,
        body_len,
    ) = head.unpack_from(data, pos)
    if magic != MAGIC_CODE:
        raise RecordDecodeError(_describe_bad_start(data, pos, origin))
    record_end = pos + total_size
    if total_size < head_size + 3:
        raise RecordDecodeError(
            f"record at position {pos + origin} declares a size of {total_size} bytes, below the minimum"
        )
    if record_end > end_of_data:
        raise RecordDecodeError(
            f"truncated record at position {pos + origin}: declares {total_size} bytes, "
            f"{end_of_data - pos} available"
        )
    body_start = pos + head_size
    body_end = body_start + body_len
    if body_len < 0 or body_end + 3 > record_end:
        raise RecordDecodeError(
            f"record at position {pos + origin}: body length {body_len} does not fit its size"
        )
    topic_len = data[body_end]
    topic_end = body_end + 1 + topic_len
    if topic_len > MAX_TOPIC_BYTES or topic_end + 2 > record_end:
        raise RecordDecodeError(
            f"record at position {pos + origin}: topic length {topic_len} does not fit its size"
        )
    props_len = (data[topic_end] << 8) | data[topic_end + 1]
    if props_len > MAX_PROPERTIES_BYTES or topic_end + 2 + props_len != record_end:
        if props_len > MAX_PROPERTIES_BYTES:
            reason = f"properties length {props_len} is negative as an i16"
        else:
            actual = topic_end + 2 + props_len - pos
            reason = f"properties end at byte {actual}, the declared size is {total_size}"
        raise RecordDecodeError(f"record at position {pos + origin}: {reason}")
    try:
        topic = _topic_text(data[body_end + 1:topic_end])
        properties = decode_properties(data[topic_end + 2:record_end].decode("utf-8")) if props_len else {}
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(
            f"record at position {pos + origin}: topic or properties are not valid UTF-8: {exc.reason}"
        ) from None
    if verify_crc:
        actual_crc = zlib.crc32(data[body_start:body_end]) & 0x7FFFFFFF
        if actual_crc != stored_crc:
            raise RecordDecodeError(
                f"record at position {pos + origin}: body CRC {actual_crc} != stored {stored_crc}"
            )
    if with_body:
        body = data[body_start:body_end]
        if decompress and sys_flag & _COMPRESSED:
            body = decompress_body(body)
            sys_flag &= ~_COMPRESSED
    else:
        body = b""

    # Built without __init__ (which copies and re-checks every field): decoding is the hot path.
    # tests/unit/test_record_codec.py checks that every slot gets set.
    msg = _new_message_ext(MessageExt)
    msg.topic = topic
    msg.body = body
    msg.flag = flag
    msg.properties = properties
    msg._raw_properties = b""
    msg._later_properties = ()
    msg.queue_id = queue_id
    msg.queue_offset = queue_offset
    msg.commit_log_offset = commit_log_offset
    msg.sys_flag = sys_flag
    msg.born_timestamp = born_timestamp
    host = _host_cache.get(born_packed)
    msg.born_host = host if host is not None else _host_pair(born_packed)
    msg.store_timestamp = store_timestamp
    host = _host_cache.get(store_packed)
    msg.store_host = host if host is not None else _host_pair(store_packed)
    msg.reconsume_times = reconsume_times
    msg.prepared_transaction_offset = prepared_transaction_offset
    msg.body_crc = stored_crc
    msg.store_size = total_size
    msg.msg_id = (store_packed + data[pos + COMMIT_LOG_OFFSET_POSITION:pos + SYS_FLAG_POSITION]).hex().upper()
    msg.broker_name = ""
    return msg, record_end


_new_message_ext = MessageExt.__new__


def decode_records(data: bytes | bytearray | memoryview, *, decompress: bool = True, broker_name: str = "",
                   extra_properties: tuple[tuple[str, str], ...] = (),
                   undecodable: list[UndecodableRecord] | None = None) -> list[MessageExt]:
    """All records of a buffer holding nothing but concatenated records (a pull response body).

    The same checks and results as `decode_record` at each position, in one loop: this is the
    consumer's hottest path. A record the loop does not take as it is (anything malformed, or a
    compressed body) goes through `decode_record`'s own code, which decodes it or raises. Every
    message gets ``broker_name`` and the ``extra_properties`` pairs (a pull's MIN_OFFSET and
    MAX_OFFSET). ASCII properties (valid by construction) are decoded when first read.

    With an ``undecodable`` list, a record whose frame is sound but whose content cannot be decoded
    is appended there (its message gets ``broker_name`` too) instead of raising, and decoding goes
    on after it; only bytes that cannot be split into records raise.
    """
    if type(data) is not bytes:
        data = bytes(data)
    messages: list[MessageExt] = []
    append = messages.append
    pos = 0
    end = len(data)
    heads = _DECODE_HEADS
    host_cache = _host_cache
    topic_cache = _topic_cache
    new_message = _new_message_ext
    message_class = MessageExt
    flag_byte = SYS_FLAG_POSITION + 3

    def fallback(at: int) -> int:
        """Decode the record at ``at`` with `decode_record`'s code (or raise); where the next one starts."""
        try:
            msg, after = _decode_bytes(data, at, 0, decompress, False, True)
        except RecordDecodeError as exc:
            if undecodable is None:
                raise
            bad = _undecodable_record(data, at, str(exc))
            if bad is None:
                raise
            bad.message.broker_name = broker_name
            undecodable.append(bad)
            return at + bad.message.store_size
        msg.broker_name = broker_name
        msg.put_properties(extra_properties)
        append(msg)
        return after

    while pos < end:
        if end - pos < _MIN_HEAD:
            pos = fallback(pos)  # raises
            continue
        head = heads[(data[pos + flag_byte] >> 4) & 3]
        body_start = pos + head.size
        if body_start > end:
            pos = fallback(pos)
            continue
        (total_size, magic, stored_crc, queue_id, flag, queue_offset, commit_log_offset, sys_flag, born_timestamp,
         born_packed, store_timestamp, store_packed, reconsume_times, prepared_transaction_offset,
         body_len) = head.unpack_from(data, pos)
        record_end = pos + total_size
        body_end = body_start + body_len
        if (magic != MAGIC_CODE or sys_flag & _COMPRESSED or body_len < 0 or record_end > end
                or body_end + 3 > record_end):
            pos = fallback(pos)
            continue
        topic_end = body_end + 1 + data[body_end]
        if topic_end + 2 > record_end or topic_end - body_end - 1 > MAX_TOPIC_BYTES:
            pos = fallback(pos)
            continue
        props_len = (data[topic_end] << 8) | data[topic_end + 1]
        if props_len > MAX_PROPERTIES_BYTES or topic_end + 2 + props_len != record_end:
            pos = fallback(pos)
            continue
        raw_topic = data[body_end + 1:topic_end]
        topic = topic_cache.get(raw_topic)
        raw_properties = data[topic_end + 2:record_end]
        try:
            if topic is None:
                topic = _topic_text(raw_topic)
            properties: dict[str, str] | None = None
            if not raw_properties.isascii():
                properties = {}
                for segment in raw_properties.decode("utf-8").split("\x02"):
                    key, _, value = segment.partition("\x01")
                    if key and value:
                        properties[key] = value
                properties.update(extra_properties)
        except UnicodeDecodeError:
            pos = fallback(pos)  # raises
            continue
        msg = new_message(message_class)
        msg.topic = topic
        msg.body = data[body_start:body_end]
        msg.flag = flag
        msg._properties = properties
        msg._raw_properties = raw_properties
        msg._later_properties = extra_properties
        msg.queue_id = queue_id
        msg.queue_offset = queue_offset
        msg.commit_log_offset = commit_log_offset
        msg.sys_flag = sys_flag
        msg.born_timestamp = born_timestamp
        host = host_cache.get(born_packed)
        msg.born_host = host if host is not None else _host_pair(born_packed)
        msg.store_timestamp = store_timestamp
        host = host_cache.get(store_packed)
        msg.store_host = host if host is not None else _host_pair(store_packed)
        msg.reconsume_times = reconsume_times
        msg.prepared_transaction_offset = prepared_transaction_offset
        msg.body_crc = stored_crc
        msg.store_size = total_size
        msg._msg_id = None
        msg.broker_name = broker_name
        append(msg)
        pos = record_end
    return messages


def _undecodable_record(data: bytes, pos: int, reason: str) -> UndecodableRecord | None:
    """What can be read of the undecodable record at ``pos``, or None when its frame is not sound either."""
    end = len(data)
    if pos < 0 or end - pos < _MIN_HEAD:
        return None
    head = _DECODE_HEADS[(data[pos + SYS_FLAG_POSITION + 3] >> 4) & 3]
    total_size, magic = _I32_I32.unpack_from(data, pos)
    record_end = pos + total_size
    if magic != MAGIC_CODE or total_size < head.size + 3 or record_end > end:
        return None
    (_, _, stored_crc, queue_id, flag, queue_offset, commit_log_offset, sys_flag, born_timestamp, born_packed,
     store_timestamp, store_packed, reconsume_times, prepared_transaction_offset,
     body_len) = head.unpack_from(data, pos)
    body_start = pos + head.size
    body_end = body_start + body_len
    # the body, topic and properties only when their lengths add up; else the body is the whole record
    topic = ""
    properties: dict[str, str] = {}
    body = data[pos:record_end]
    topic_end = body_end + 1 + data[body_end] if body_len >= 0 and body_end + 3 <= record_end else record_end
    if topic_end + 2 <= record_end and topic_end + 2 + ((data[topic_end] << 8) | data[topic_end + 1]) == record_end:
        body = data[body_start:body_end]
        topic = data[body_end + 1:topic_end].decode("utf-8", "replace")
        try:
            properties = decode_properties(data[topic_end + 2:record_end].decode("utf-8"))
        except UnicodeDecodeError:
            properties = {}
    msg = MessageExt(topic, body, flag=flag, properties=properties, queue_id=queue_id, queue_offset=queue_offset,
                     commit_log_offset=commit_log_offset, sys_flag=sys_flag, born_timestamp=born_timestamp,
                     born_host=_host_pair(born_packed), store_timestamp=store_timestamp,
                     store_host=_host_pair(store_packed), reconsume_times=reconsume_times,
                     prepared_transaction_offset=prepared_transaction_offset, body_crc=stored_crc,
                     store_size=total_size)
    msg.msg_id = (store_packed + data[pos + COMMIT_LOG_OFFSET_POSITION:pos + SYS_FLAG_POSITION]).hex().upper()
    # the position in this buffer means nothing to whoever reads the reason later
    reason = reason.removeprefix(f"record at position {pos}: ")
    return UndecodableRecord(msg, reason, data[pos:record_end])


# --------------------------------------------------------------------------- compression


def compress_body(body: bytes | bytearray | memoryview, level: int = DEFAULT_COMPRESS_LEVEL) -> bytes:
    """Deflate ``body`` in the zlib format (Java's ``Deflater``), as producers do for large bodies."""
    if not -1 <= level <= 9:
        raise ValueError(f"compression level must be in -1..9, got {level}")
    return zlib.compress(body, level)


#: The shortest complete zlib stream: 2 header bytes, an empty final deflate block, the Adler-32.
MIN_ZLIB_BYTES: Final = 8


def has_zlib_header(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` can be a zlib stream (RFC 1950) as Java's ``Inflater`` reads it, by its first two
    bytes and its length only: deflate method, a window of at most 32 KiB, a valid check value, no preset
    dictionary. Cheap proof that a body flagged COMPRESSED is not; not that it inflates."""
    if len(data) < MIN_ZLIB_BYTES:
        return False
    cmf, flg = data[0], data[1]
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and ((cmf << 8) | flg) % 31 == 0 and not flg & 0x20


def decompress_body(data: bytes | bytearray | memoryview, max_size: int | None = None) -> bytes:
    """Inflate a zlib body.

    Raises `RecordDecodeError` if it is not a complete zlib stream or inflates past ``max_size``.
    """
    try:
        inflater = zlib.decompressobj()
        if max_size is None:
            body = inflater.decompress(data)
        else:
            body = inflater.decompress(data, max_size + 1)
            if len(body) > max_size:
                raise RecordDecodeError(f"compressed body inflates to more than {max_size} bytes")
        body += inflater.flush()
    except zlib.error as exc:
        raise RecordDecodeError(f"compressed body is not valid zlib data: {exc}") from None
    if not inflater.eof:
        raise RecordDecodeError("compressed body is truncated (incomplete zlib stream)")
    return body


# --------------------------------------------------------------------------- batch bodies

_BATCH_HEAD: Final = struct.Struct(">iiiii")
_BATCH_FIXED_SIZE: Final = _BATCH_HEAD.size + 2


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
        size = _BATCH_FIXED_SIZE + len(body) + len(properties)
        try:
            head = _BATCH_HEAD.pack(size, 0, 0, message.flag, len(body))
        except struct.error as exc:
            raise RecordEncodeError(f"batch message {index}: flag out of range: {exc}") from None
        parts += (head, body, _I16.pack(len(properties)), properties)
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
        if end - pos < _BATCH_FIXED_SIZE:
            raise RecordDecodeError(f"batch message {index}: truncated ({end - pos} bytes left)")
        total_size, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(body, pos)
        body_start = pos + _BATCH_HEAD.size
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


__all__ = [
    "BLANK_MAGIC_CODE",
    "BODY_CRC_POSITION",
    "BORN_HOST_POSITION",
    "BORN_TIMESTAMP_POSITION",
    "COMMIT_LOG_OFFSET_POSITION",
    "DEFAULT_COMPRESS_LEVEL",
    "FLAG_POSITION",
    "MAGIC_CODE",
    "MAGIC_POSITION",
    "MAX_BODY_BYTES",
    "MAX_PROPERTIES_BYTES",
    "MAX_TOPIC_BYTES",
    "MIN_ZLIB_BYTES",
    "QUEUE_ID_POSITION",
    "QUEUE_OFFSET_POSITION",
    "RECORD_FIXED_SIZE_V4",
    "RECORD_FIXED_SIZE_V6",
    "SYS_FLAG_POSITION",
    "TOTAL_SIZE_POSITION",
    "RecordDecodeError",
    "RecordEncodeError",
    "UndecodableRecord",
    "body_crc",
    "compress_body",
    "decode_batch_body",
    "decode_record",
    "decode_records",
    "decompress_body",
    "encode_batch_body",
    "encode_record",
    "encode_record_fields",
    "has_zlib_header",
    "pack_host",
    "peek_record",
    "record_size",
    "unpack_host",
]
