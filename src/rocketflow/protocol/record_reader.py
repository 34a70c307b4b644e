"""Reading message records: a commit-log record, or the records of a pull response body (no I/O).

Decoding and compression errors always surface as `RecordDecodeError`.

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

import zlib
from dataclasses import dataclass
from typing import Final

from rocketflow.protocol.compression import decompress_body
from rocketflow.protocol.ids import _ip_text
from rocketflow.protocol.message import MessageExt
from rocketflow.protocol.properties import decode_properties
from rocketflow.protocol.record_layout import (
    BLANK_MAGIC_CODE,
    COMMIT_LOG_OFFSET_POSITION,
    HOSTS_VARIANT_BYTE,
    MAGIC_CODE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    MIN_HEAD_SIZE,
    RECORD_HEADS,
    SIZE_AND_MAGIC,
    SYS_FLAG_POSITION,
    TAIL_FIXED_SIZE,
    RecordDecodeError,
)
from rocketflow.protocol.sysflag import MessageSysFlag

_COMPRESSED: Final = int(MessageSysFlag.COMPRESSED)


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




def peek_record(data: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """``(total_size, magic)`` of the record at ``pos`` without decoding it."""
    if pos < 0 or len(data) - pos < 8:
        raise RecordDecodeError(f"need 8 bytes at position {pos} to read a record's size and magic")
    total_size, magic = SIZE_AND_MAGIC.unpack_from(data, pos)
    return total_size, magic


def _describe_bad_start(data: bytes | bytearray | memoryview, pos: int, origin: int = 0) -> str:
    available = len(data) - pos
    where = pos + origin
    if pos < 0 or pos > len(data):
        return f"position {where} is outside the buffer of {len(data) + origin} bytes"
    if available >= 8:
        total_size, magic = SIZE_AND_MAGIC.unpack_from(data, pos)
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
    if pos < 0 or len(data) - pos < MIN_HEAD_SIZE:
        raise RecordDecodeError(_describe_bad_start(data, pos))
    total_size, magic = SIZE_AND_MAGIC.unpack_from(data, pos)
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
    if pos < 0 or end_of_data - pos < MIN_HEAD_SIZE:
        raise RecordDecodeError(_describe_bad_start(data, pos, origin))
    variant = (data[pos + HOSTS_VARIANT_BYTE] >> 4) & 3
    head = RECORD_HEADS[variant]
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
    if total_size < head_size + TAIL_FIXED_SIZE:
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
    if body_len < 0 or body_end + TAIL_FIXED_SIZE > record_end:
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
    heads = RECORD_HEADS
    host_cache = _host_cache
    topic_cache = _topic_cache
    new_message = _new_message_ext
    message_class = MessageExt
    flag_byte = HOSTS_VARIANT_BYTE
    tail_size = TAIL_FIXED_SIZE

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
        if end - pos < MIN_HEAD_SIZE:
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
                or body_end + tail_size > record_end):
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
    if pos < 0 or end - pos < MIN_HEAD_SIZE:
        return None
    head = RECORD_HEADS[(data[pos + HOSTS_VARIANT_BYTE] >> 4) & 3]
    total_size, magic = SIZE_AND_MAGIC.unpack_from(data, pos)
    record_end = pos + total_size
    if magic != MAGIC_CODE or total_size < head.size + TAIL_FIXED_SIZE or record_end > end:
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
    topic_end = body_end + 1 + data[body_end] if body_len >= 0 and body_end + TAIL_FIXED_SIZE <= record_end \
        else record_end
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




__all__ = ["UndecodableRecord", "decode_record", "decode_records", "peek_record"]
