"""Writing message records: bytes in, bytes out (no files, no locks).

`encode_record_fields` is the reference writer: it checks every field and joins the record from its
parts. The store's append paths pack many records a second and use the packers below instead: a
whole record (head, body, topic, properties) is one `struct.Struct` call, cached by the variable
lengths, and a run of same-sized records one call for all of them. They write the same bytes as
the reference writer; tests/unit/test_record_writer.py proves it for the packers and for every
append path of the commit log.
"""

from __future__ import annotations

import functools
import struct
import zlib
from typing import Final

from rocketflow.protocol.ids import HOST_SIZE_V4, HOST_SIZE_V6, pack_host
from rocketflow.protocol.message import MessageExt
from rocketflow.protocol.properties import InvalidPropertyError, encode_properties
from rocketflow.protocol.record_layout import (
    BLANK_MAGIC_CODE,
    HOSTS_V6_BITS,
    MAGIC_CODE,
    MAX_BODY_BYTES,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    PROPERTIES_LENGTH,
    RECORD_FIXED_SIZE_V4,
    RECORD_HEADS,
    SIZE_AND_MAGIC,
    TAIL_FIXED_SIZE,
    TOPIC_LENGTH_BYTES,
    RecordEncodeError,
)
from rocketflow.protocol.sysflag import MessageSysFlag

_BORN_V6: Final = int(MessageSysFlag.BORNHOST_V6)
_STORE_V6: Final = int(MessageSysFlag.STOREHOST_V6)


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


# --------------------------------------------------------------------------- the reference writer


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
    """A record from already encoded parts.

    ``topic`` and ``properties`` are UTF-8, hosts come from `pack_host`. The IPv6 bits of
    ``sys_flag`` are set from the widths of the hosts, whatever the caller passed.
    """
    topic_len = len(topic)
    props_len = len(properties)
    body_len = len(body)
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
    for which, host in (("born", born_host), ("store", store_host)):
        if len(host) not in (HOST_SIZE_V4, HOST_SIZE_V6):
            raise RecordEncodeError(f"{which} host must be 8 or 20 packed bytes, got {len(host)}")
    head, sys_flag = record_head(born_host, store_host, sys_flag)
    try:
        packed = head.pack(
            head.size + body_len + TAIL_FIXED_SIZE + topic_len + props_len,
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
    return b"".join((packed, body, TOPIC_LENGTH_BYTES[topic_len], topic, PROPERTIES_LENGTH.pack(props_len),
                     properties))


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


# --------------------------------------------------------------------------- the packers of the append paths


def record_head(born_host: bytes, store_host: bytes, sys_flag: int) -> tuple[struct.Struct, int]:
    """The head struct for hosts of these packed widths, and ``sys_flag`` with its IPv6 bits set to match."""
    born_v6 = len(born_host) == HOST_SIZE_V6
    store_v6 = len(store_host) == HOST_SIZE_V6
    sys_flag = (sys_flag & ~HOSTS_V6_BITS) | (_BORN_V6 if born_v6 else 0) | (_STORE_V6 if store_v6 else 0)
    return RECORD_HEADS[born_v6 | store_v6 << 1], sys_flag


@functools.lru_cache(maxsize=4096)
def topic_part(topic: str) -> bytes:
    """A topic as a record stores it: its length byte, then its UTF-8 bytes (ValueError when too long)."""
    raw = topic.encode("utf-8")
    if len(raw) > MAX_TOPIC_BYTES:
        raise ValueError(f"topic is {len(raw)} bytes in UTF-8, at most {MAX_TOPIC_BYTES} allowed")
    return TOPIC_LENGTH_BYTES[len(raw)] + raw


@functools.lru_cache(maxsize=1024)
def packed_host_of(host: str, port: int) -> bytes:
    """`pack_host`, remembered: a store packs the same few hosts over and over."""
    return pack_host(host, port)


def packed_host(host: tuple[str, int] | bytes) -> bytes:
    """A host as records store it (8 or 20 bytes), from ``(ip, port)`` or already packed bytes."""
    if isinstance(host, bytes):
        if len(host) not in (HOST_SIZE_V4, HOST_SIZE_V6):
            raise ValueError(f"a packed host is 8 or 20 bytes, got {len(host)}")
        return host
    return packed_host_of(host[0], host[1])


_RECORD_PACKERS: dict[tuple[str, int, int, int], struct.Struct] = {}
_RECORD_PACKERS_MAX: Final = 4096


def record_packer(head: struct.Struct, body_len: int, topic_part_len: int, props_len: int) -> struct.Struct:
    """One struct for a whole record (head, body, topic part, properties length, properties), cached by the
    variable lengths. Its `pack` takes the head's fields, then ``body, topic_part, props_len, props``."""
    key = (head.format, body_len, topic_part_len, props_len)
    packer = _RECORD_PACKERS.get(key)
    if packer is None:
        if len(_RECORD_PACKERS) >= _RECORD_PACKERS_MAX:
            _RECORD_PACKERS.clear()
        packer = _RECORD_PACKERS[key] = struct.Struct(f"{head.format}{body_len}s{topic_part_len}sh{props_len}s")
    return packer


#: Values per record of a `one_size_records_packer`: the head's 15, body, topic part, properties length,
#: the record's own properties, the properties every record of the run ends with.
ONE_SIZE_RECORD_FIELDS: Final = 20


@functools.lru_cache(maxsize=256)
def one_size_records_packer(head: struct.Struct, body_len: int, topic_part_len: int, props_len: int,
                            suffix_len: int, count: int) -> struct.Struct:
    """``count`` records of one size as one struct, each packed from `ONE_SIZE_RECORD_FIELDS` values: its
    properties are its own ``props_len`` bytes followed by a ``suffix_len``-byte suffix (the properties
    length field holds their sum)."""
    record = f"{head.format.lstrip('>')}{body_len}s{topic_part_len}sh{props_len}s{suffix_len}s"
    return struct.Struct(">" + record * count)


def blank_record(room: int) -> bytes:
    """The blank record that fills the last ``room`` bytes of a commit-log segment."""
    return SIZE_AND_MAGIC.pack(room, BLANK_MAGIC_CODE)


__all__ = [
    "ONE_SIZE_RECORD_FIELDS",
    "blank_record",
    "body_crc",
    "encode_record",
    "encode_record_fields",
    "one_size_records_packer",
    "packed_host",
    "packed_host_of",
    "record_head",
    "record_packer",
    "record_size",
    "topic_part",
]
