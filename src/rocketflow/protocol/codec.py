"""The record codec in one import: the message record and batch body layouts, their writer and reader.

Each part lives in its own module: `record_layout` (byte layout, field positions, sizes, the two
errors), `record_writer` (encoding), `record_reader` (decoding, undecodable records),
`compression` (zlib bodies) and `batch_body` (SEND_BATCH_MESSAGE bodies). docs/design/wire-format.md
describes the formats.
"""

from __future__ import annotations

from rocketflow.protocol.batch_body import decode_batch_body, encode_batch_body
from rocketflow.protocol.compression import (
    DEFAULT_COMPRESS_LEVEL,
    MIN_ZLIB_BYTES,
    compress_body,
    decompress_body,
    has_zlib_header,
)
from rocketflow.protocol.ids import pack_host, unpack_host
from rocketflow.protocol.record_layout import (
    BLANK_MAGIC_CODE,
    BODY_CRC_POSITION,
    BORN_HOST_POSITION,
    BORN_TIMESTAMP_POSITION,
    COMMIT_LOG_OFFSET_POSITION,
    FLAG_POSITION,
    MAGIC_CODE,
    MAGIC_POSITION,
    MAX_BODY_BYTES,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    QUEUE_ID_POSITION,
    QUEUE_OFFSET_POSITION,
    RECORD_FIXED_SIZE_V4,
    RECORD_FIXED_SIZE_V6,
    SYS_FLAG_POSITION,
    TOTAL_SIZE_POSITION,
    RecordDecodeError,
    RecordEncodeError,
)
from rocketflow.protocol.record_reader import UndecodableRecord, decode_record, decode_records, peek_record
from rocketflow.protocol.record_writer import body_crc, encode_record, encode_record_fields, record_size

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
