"""The byte layout of a message record and of a batch body: the one definition every reader and writer uses.

A record is a commit-log entry and, unchanged, an element of a pull response body. Big-endian::

    i32 totalSize | i32 magic | i32 bodyCRC | i32 queueId | i32 flag | i64 queueOffset
    | i64 commitLogOffset | i32 sysFlag | i64 bornTimestamp | bornHost | i64 storeTimestamp
    | storeHost | i32 reconsumeTimes | i64 preparedTransactionOffset | i32 bodyLen
    | body | u8 topicLen | topic | i16 propertiesLen | properties

A host is its IP (4 or 16 bytes) then an i32 port: 8 bytes, or 20 when the sys flag's BORNHOST_V6 /
STOREHOST_V6 bit says so. Everything up to and including bodyLen is the record's *head*; its size
depends only on those two bits, so the head comes in four variants, indexed by `hosts_variant`.
The fields before the born host sit at fixed positions in every variant.

A batch body (SEND_BATCH_MESSAGE) is a run of elements, each::

    i32 totalSize | i32 magic (0) | i32 bodyCRC (0) | i32 flag | i32 bodyLen | body
    | i16 propertiesLen | properties

docs/design/wire-format.md describes both with their rules; `record_writer`, `record_reader`,
`batch_body` and the store's commit log all take their formats and sizes from here.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from typing import Final

from rocketflow.errors import RocketflowError
from rocketflow.protocol.ids import HOST_SIZE_V4, HOST_SIZE_V6
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.errors import ProtocolError


class RecordDecodeError(ProtocolError):
    """Bytes that do not form a valid message record, batch body or compressed body."""


class RecordEncodeError(RocketflowError, ValueError):
    """Message fields that cannot be written as a record (too long, out of range, not encodable)."""


MAGIC_CODE: Final = -626843481
#: The magic of the blank record that fills the end of a commit-log segment (size, magic, nothing else).
BLANK_MAGIC_CODE: Final = -875286124

#: A host field's format: its packed bytes (IP, then the i32 port), as one field.
HOST: Final = "host"
#: The head's fields in order, with their struct codes.
HEAD_FIELDS: Final = (
    ("total_size", "i"),
    ("magic", "i"),
    ("body_crc", "i"),
    ("queue_id", "i"),
    ("flag", "i"),
    ("queue_offset", "q"),
    ("commit_log_offset", "q"),
    ("sys_flag", "i"),
    ("born_timestamp", "q"),
    ("born_host", HOST),
    ("store_timestamp", "q"),
    ("store_host", HOST),
    ("reconsume_times", "i"),
    ("prepared_transaction_offset", "q"),
    ("body_len", "i"),
)
#: The variants' host widths, by `hosts_variant`: bit 0 is the born host's IPv6 bit, bit 1 the store host's.
VARIANT_HOST_SIZES: Final = (
    (HOST_SIZE_V4, HOST_SIZE_V4),
    (HOST_SIZE_V6, HOST_SIZE_V4),
    (HOST_SIZE_V4, HOST_SIZE_V6),
    (HOST_SIZE_V6, HOST_SIZE_V6),
)
_BORN_V6: Final = int(MessageSysFlag.BORNHOST_V6)
_STORE_V6: Final = int(MessageSysFlag.STOREHOST_V6)
#: The sys flag's IPv6 bits (a writer sets them from the hosts' widths).
HOSTS_V6_BITS: Final = _BORN_V6 | _STORE_V6


def head_format(born_host_size: int = HOST_SIZE_V4, store_host_size: int = HOST_SIZE_V4,
                keep: Collection[str] | None = None) -> str:
    """The struct format of a head with hosts of these widths; fields not in ``keep`` are skipped as padding
    (a reader that wants a few fields unpacks only those). Hosts are read and written packed (``"8s"``)."""
    codes = [">"]
    for name, code in HEAD_FIELDS:
        if code == HOST:
            width = born_host_size if name == "born_host" else store_host_size
            codes.append(f"{width}s" if keep is None or name in keep else f"{width}x")
        else:
            codes.append(code if keep is None or name in keep else f"{struct.calcsize('>' + code)}x")
    return "".join(codes)


def head_structs(keep: Collection[str] | None = None) -> tuple[struct.Struct, ...]:
    """The head struct of each variant, indexed by `hosts_variant` (with ``keep``, of those fields only)."""
    return tuple(struct.Struct(head_format(born, store, keep)) for born, store in VARIANT_HOST_SIZES)


def hosts_variant(sys_flag: int) -> int:
    """Which head variant a record with ``sys_flag`` has (index into `RECORD_HEADS`)."""
    return (sys_flag >> 4) & 3


def field_position(name: str, born_v6: bool = False, store_v6: bool = False) -> int:
    """Byte position of head field ``name`` in a record whose hosts have these widths."""
    host_sizes = {"born_host": HOST_SIZE_V6 if born_v6 else HOST_SIZE_V4,
                  "store_host": HOST_SIZE_V6 if store_v6 else HOST_SIZE_V4}
    position = 0
    for field, code in HEAD_FIELDS:
        if field == name:
            return position
        position += host_sizes[field] if code == HOST else struct.calcsize(">" + code)
    raise KeyError(f"no record head field {name!r}")


#: Every head field, by variant: what writers pack and full decoders unpack.
RECORD_HEADS: Final = head_structs()
#: Head size of a record with both hosts IPv4.
HEAD_SIZE_V4: Final = RECORD_HEADS[0].size
#: Bytes after the body that are not topic or properties: the topic length (u8) and properties length (i16).
TAIL_FIXED_SIZE: Final = 3
#: Fixed bytes of a record (everything but body, topic and properties) with IPv4 hosts.
RECORD_FIXED_SIZE_V4: Final = HEAD_SIZE_V4 + TAIL_FIXED_SIZE
#: Fixed bytes of a record with both hosts IPv6.
RECORD_FIXED_SIZE_V6: Final = RECORD_HEADS[3].size + TAIL_FIXED_SIZE

#: Byte positions of the fields that sit at one place in every variant (those before the born host).
TOTAL_SIZE_POSITION: Final = field_position("total_size")
MAGIC_POSITION: Final = field_position("magic")
BODY_CRC_POSITION: Final = field_position("body_crc")
QUEUE_ID_POSITION: Final = field_position("queue_id")
FLAG_POSITION: Final = field_position("flag")
QUEUE_OFFSET_POSITION: Final = field_position("queue_offset")
COMMIT_LOG_OFFSET_POSITION: Final = field_position("commit_log_offset")
SYS_FLAG_POSITION: Final = field_position("sys_flag")
BORN_TIMESTAMP_POSITION: Final = field_position("born_timestamp")
BORN_HOST_POSITION: Final = field_position("born_host")
#: The byte of the sys flag that holds the IPv6 bits: `hosts_variant` of it tells the head's variant.
HOSTS_VARIANT_BYTE: Final = SYS_FLAG_POSITION + 3
#: The head's bytes up to and including the sys flag: enough to tell the variant.
MIN_HEAD_SIZE: Final = SYS_FLAG_POSITION + 4

MAX_TOPIC_BYTES: Final = 127
MAX_PROPERTIES_BYTES: Final = 0x7FFF
MAX_BODY_BYTES: Final = 0x7FFFFFFF - RECORD_FIXED_SIZE_V6

#: A record's first two fields (total size, magic): enough to step over it, and all of a blank record.
SIZE_AND_MAGIC: Final = struct.Struct(">ii")
#: The size of the blank end-of-segment record; a record needs this much room after it in its segment.
BLANK_RECORD_SIZE: Final = SIZE_AND_MAGIC.size
#: The properties length field.
PROPERTIES_LENGTH: Final = struct.Struct(">h")
#: The topic length byte of each possible length (a record's topic is at most `MAX_TOPIC_BYTES`).
TOPIC_LENGTH_BYTES: Final = tuple(bytes((length,)) for length in range(MAX_TOPIC_BYTES + 1))

#: A batch element's head: total size, magic (clients write 0), body CRC (0), flag, body length.
BATCH_ELEMENT_HEAD: Final = struct.Struct(">iiiii")
#: The smallest batch element: its head and an empty properties length.
BATCH_ELEMENT_FIXED_SIZE: Final = BATCH_ELEMENT_HEAD.size + PROPERTIES_LENGTH.size


__all__ = [
    "BATCH_ELEMENT_FIXED_SIZE",
    "BATCH_ELEMENT_HEAD",
    "BLANK_MAGIC_CODE",
    "BLANK_RECORD_SIZE",
    "BODY_CRC_POSITION",
    "BORN_HOST_POSITION",
    "BORN_TIMESTAMP_POSITION",
    "COMMIT_LOG_OFFSET_POSITION",
    "FLAG_POSITION",
    "HEAD_FIELDS",
    "HEAD_SIZE_V4",
    "HOST",
    "HOSTS_V6_BITS",
    "HOSTS_VARIANT_BYTE",
    "MAGIC_CODE",
    "MAGIC_POSITION",
    "MAX_BODY_BYTES",
    "MAX_PROPERTIES_BYTES",
    "MAX_TOPIC_BYTES",
    "MIN_HEAD_SIZE",
    "PROPERTIES_LENGTH",
    "QUEUE_ID_POSITION",
    "QUEUE_OFFSET_POSITION",
    "RECORD_FIXED_SIZE_V4",
    "RECORD_FIXED_SIZE_V6",
    "RECORD_HEADS",
    "SIZE_AND_MAGIC",
    "SYS_FLAG_POSITION",
    "TAIL_FIXED_SIZE",
    "TOPIC_LENGTH_BYTES",
    "TOTAL_SIZE_POSITION",
    "VARIANT_HOST_SIZES",
    "RecordDecodeError",
    "RecordEncodeError",
    "field_position",
    "head_format",
    "head_structs",
    "hosts_variant",
]
