"""Message records -> Arrow columns, decoded column-wise (no `MessageExt` per message on the fast path).

A pull body is concatenated message records (`rocketflow.protocol.codec`). `records_to_batch` finds
the record boundaries with one tight loop, then gathers every fixed-width field for all records at
once with numpy (big-endian views), slices the variable-width parts (body, properties) out with one
fancy-index gather each, and splits the properties into a ``map<string,string>`` with Arrow compute
kernels. Records with IPv6 hosts or with a compressed body take the per-message path
(`messages_to_batch`), which is also the reference the fast path is tested against.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from rocketflow.protocol.codec import MAGIC_CODE, RecordDecodeError, decode_records
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.sysflag import MessageSysFlag

#: The Spark schema of the source, as DDL. Types (Spark / Arrow):
#:
#: * ``topic``, ``broker``: STRING / utf8 - the queue's topic and broker name;
#: * ``queue_id``: INT / int32; ``queue_offset``: BIGINT / int64 - position in the queue;
#: * ``msg_id``: STRING - the producer's UNIQ_KEY when it has one (what RocketMQ clients show as the
#:   message id), else the broker's offset message id (store host + commit-log offset, 32 hex digits);
#: * ``keys``, ``tags``: STRING, null when the message has none (``keys`` is the raw KEYS property,
#:   space-separated when several);
#: * ``body``: BINARY (inflated when the producer compressed it);
#: * ``born_timestamp``, ``store_timestamp``: TIMESTAMP / timestamp[us, UTC] (ms precision on the wire);
#: * ``properties``: MAP<STRING,STRING> - every stored property, system ones (UNIQ_KEY, KEYS, TAGS, ...)
#:   included;
#: * ``reconsume_times``: INT / int32.
SCHEMA_DDL: Final = (
    "topic STRING, broker STRING, queue_id INT, queue_offset BIGINT, msg_id STRING, keys STRING, tags STRING, "
    "body BINARY, born_timestamp TIMESTAMP, store_timestamp TIMESTAMP, properties MAP<STRING,STRING>, "
    "reconsume_times INT"
)

_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA: Final = pa.schema([
    ("topic", pa.string()),
    ("broker", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("msg_id", pa.string()),
    ("keys", pa.string()),
    ("tags", pa.string()),
    ("body", pa.binary()),
    ("born_timestamp", _TIMESTAMP),
    ("store_timestamp", _TIMESTAMP),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("reconsume_times", pa.int32()),
])

# Field positions in a record whose hosts are both IPv4 (see the codec's layout).
_QUEUE_ID: Final = 12
_QUEUE_OFFSET: Final = 20
_COMMIT_LOG_OFFSET: Final = 28
_SYS_FLAG: Final = 36
_BORN_TIMESTAMP: Final = 40
_STORE_TIMESTAMP: Final = 56
_STORE_HOST: Final = 64
_RECONSUME_TIMES: Final = 72
_BODY_LEN: Final = 84
_BODY: Final = 88
_SLOW_FLAGS: Final = int(MessageSysFlag.COMPRESSED | MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)

_I32_I32: Final = struct.Struct(">ii")
_HEX_DIGITS: Final = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_MAGIC_BYTES: Final = tuple(struct.pack(">i", MAGIC_CODE))


def record_positions(data: bytes) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Start positions of the concatenated records in ``data`` (checks every size and magic).

    Fast path: every occurrence of the magic code, vectorized, accepted when the occurrences chain
    (each record ends where the next begins, the last at the end). A body that happens to contain the
    magic bytes breaks the chain and sends the buffer through the record-by-record walk.
    """
    buffer = np.frombuffer(data, dtype=np.uint8)
    if len(buffer) >= _BODY + 3:
        magic = _MAGIC_BYTES
        hits = np.flatnonzero((buffer[4:-3] == magic[0]) & (buffer[5:-2] == magic[1])
                              & (buffer[6:-1] == magic[2]) & (buffer[7:] == magic[3]))
        if len(hits) and hits[0] == 0:
            sizes = np.ascontiguousarray(_gather_fixed(buffer, hits, 0, 4)).view(">i4").ravel().astype(np.int64)
            ends = hits + sizes
            if ends[-1] == len(buffer) and np.array_equal(ends[:-1], hits[1:]) and np.all(sizes >= _BODY + 3):
                return hits.astype(np.int64)
    return _walk_records(data)


def _walk_records(data: bytes) -> np.ndarray[Any, np.dtype[np.int64]]:
    positions: list[int] = []
    append = positions.append
    unpack = _I32_I32.unpack_from
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < _BODY + 3:
            raise RecordDecodeError(f"truncated record at position {pos}: only {end - pos} bytes left")
        size, magic = unpack(data, pos)
        if magic != MAGIC_CODE or size < _BODY + 3 or pos + size > end:
            raise RecordDecodeError(f"bad record at position {pos}: size {size}, magic {magic & 0xFFFFFFFF:#010x}")
        append(pos)
        pos += size
    return np.array(positions, dtype=np.int64)


def _gather_fixed(buffer: np.ndarray[Any, Any], positions: np.ndarray[Any, Any], offset: int,
                  width: int) -> np.ndarray[Any, Any]:
    index = positions[:, None] + (offset + np.arange(width, dtype=np.int64))
    return buffer[index]


def _int_column(heads: np.ndarray[Any, Any], offset: int, dtype: str) -> np.ndarray[Any, Any]:
    """A big-endian integer field of every record from the gathered heads (one row per record)."""
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(heads[:, offset:offset + width]).view(dtype).ravel()


def _gather_slices(buffer: np.ndarray[Any, Any], starts: np.ndarray[Any, Any],
                   lengths: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The concatenation of ``buffer[start:start + length]`` for every pair, and Arrow int32 offsets."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total > 0x7FFFFFFF:
        raise RecordDecodeError(f"{total} bytes of variable-width data do not fit one Arrow array")
    index = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    return buffer[index], offsets.astype(np.int32)


def _binary_array(kind: Any, data: np.ndarray[Any, Any], offsets: np.ndarray[Any, Any]) -> Any:
    count = len(offsets) - 1
    return pa.Array.from_buffers(kind, count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _constant_strings(text: str, count: int) -> Any:
    raw = text.encode("utf-8")
    offsets = (np.arange(count + 1, dtype=np.int64) * len(raw)).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)])


def properties_map(texts: Any) -> Any:
    """``map<string,string>`` of properties strings (``k 0x01 v 0x02 ...``), entries without a key or a
    value dropped as `rocketflow.protocol.properties.decode_properties` does."""
    count = len(texts)
    entries_list = pc.split_pattern(texts, "\x02")
    parents = np.asarray(pc.list_parent_indices(entries_list))
    entries = pc.list_flatten(entries_list)
    parts = pc.split_pattern(entries, "\x01", max_splits=1)
    has_pair = np.asarray(pc.equal(pc.list_value_length(parts), 2).fill_null(False), dtype=bool)
    pairs = parts.filter(pa.array(has_pair))
    keys = pc.list_element(pairs, 0)
    values = pc.list_element(pairs, 1)
    keep = np.asarray(pc.and_(pc.not_equal(pc.binary_length(keys), 0), pc.not_equal(pc.binary_length(values), 0)),
                      dtype=bool)
    keep_mask = pa.array(keep)
    kept_parents = parents[has_pair][keep]
    counts = np.bincount(kept_parents, minlength=count) if count else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), keys.filter(keep_mask), values.filter(keep_mask))


def _offset_msg_ids(heads: np.ndarray[Any, Any]) -> Any:
    """The 32-hex-digit offset message ids: store host (IPv4 + port) then commit-log offset."""
    raw = np.concatenate([heads[:, _STORE_HOST:_STORE_HOST + 8], heads[:, _COMMIT_LOG_OFFSET:_COMMIT_LOG_OFFSET + 8]],
                         axis=1)
    count = len(heads)
    digits = np.empty((count, 32), dtype=np.uint8)
    digits[:, 0::2] = _HEX_DIGITS[raw >> 4]
    digits[:, 1::2] = _HEX_DIGITS[raw & 0xF]
    offsets = (np.arange(count + 1, dtype=np.int64) * 32).astype(np.int32)
    return _binary_array(pa.string(), digits.ravel(), offsets)


def _timestamps(millis: np.ndarray[Any, Any]) -> Any:
    return pa.array(millis.astype(np.int64) * 1000, type=_TIMESTAMP)


def records_to_batch(data: bytes, topic: str, broker: str) -> Any:
    """A `pyarrow.RecordBatch` (`ARROW_SCHEMA`) of every record in ``data`` (a pull body, or several joined).

    ``topic`` and ``broker`` fill the columns of the same names (every record of a queue's pull has
    the queue's topic). Raises `RecordDecodeError` for bytes that are not records.
    """
    positions = record_positions(data)
    if len(positions) == 0:
        return empty_batch()
    buffer = np.frombuffer(data, dtype=np.uint8)
    heads = _gather_fixed(buffer, positions, 0, _BODY)
    sys_flags = _int_column(heads, _SYS_FLAG, ">i4")
    if np.any(sys_flags & _SLOW_FLAGS):
        return messages_to_batch(decode_records(data), broker)
    count = len(positions)
    body_lengths = _int_column(heads, _BODY_LEN, ">i4").astype(np.int64)
    body_starts = positions + _BODY
    topic_starts = body_starts + body_lengths + 1
    topic_lengths = buffer[topic_starts - 1].astype(np.int64)
    props_len_at = topic_starts + topic_lengths
    props_lengths = (buffer[props_len_at].astype(np.int64) << 8) | buffer[props_len_at + 1]
    sizes = _int_column(heads, 0, ">i4").astype(np.int64)
    if np.any(body_lengths < 0) or np.any(props_len_at + 2 + props_lengths != positions + sizes):
        raise RecordDecodeError("a record's body, topic and properties lengths do not add up to its size")
    body_data, body_offsets = _gather_slices(buffer, body_starts, body_lengths)
    props_data, props_offsets = _gather_slices(buffer, props_len_at + 2, props_lengths)
    props_text = _binary_array(pa.string(), props_data, props_offsets)
    try:
        props_text.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise RecordDecodeError(f"message properties are not valid UTF-8: {exc}") from None
    properties = properties_map(props_text)
    uniq = pc.map_lookup(properties, MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "last")
    columns = [
        _constant_strings(topic, count),
        _constant_strings(broker, count),
        pa.array(_int_column(heads, _QUEUE_ID, ">i4").astype(np.int32), pa.int32()),
        pa.array(_int_column(heads, _QUEUE_OFFSET, ">i8").astype(np.int64), pa.int64()),
        pc.coalesce(uniq, _offset_msg_ids(heads)),
        pc.map_lookup(properties, MessageConst.KEYS, "last"),
        pc.map_lookup(properties, MessageConst.TAGS, "last"),
        _binary_array(pa.binary(), body_data, body_offsets),
        _timestamps(_int_column(heads, _BORN_TIMESTAMP, ">i8")),
        _timestamps(_int_column(heads, _STORE_TIMESTAMP, ">i8")),
        properties,
        pa.array(_int_column(heads, _RECONSUME_TIMES, ">i4").astype(np.int32), pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def messages_to_batch(messages: Sequence[MessageExt], broker: str) -> Any:
    """A `pyarrow.RecordBatch` (`ARROW_SCHEMA`) from decoded messages (the per-message path)."""
    unique = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    return pa.RecordBatch.from_arrays([
        pa.array([msg.topic for msg in messages], pa.string()),
        pa.array([broker] * len(messages), pa.string()),
        pa.array([msg.queue_id for msg in messages], pa.int32()),
        pa.array([msg.queue_offset for msg in messages], pa.int64()),
        pa.array([msg.properties.get(unique) or msg.msg_id for msg in messages], pa.string()),
        pa.array([msg.properties.get(MessageConst.KEYS) for msg in messages], pa.string()),
        pa.array([msg.properties.get(MessageConst.TAGS) for msg in messages], pa.string()),
        pa.array([msg.body for msg in messages], pa.binary()),
        pa.array([msg.born_timestamp * 1000 for msg in messages], _TIMESTAMP),
        pa.array([msg.store_timestamp * 1000 for msg in messages], _TIMESTAMP),
        pa.array([list(msg.properties.items()) for msg in messages], pa.map_(pa.string(), pa.string())),
        pa.array([msg.reconsume_times for msg in messages], pa.int32()),
    ], schema=ARROW_SCHEMA)


def empty_batch() -> Any:
    """A zero-row batch of `ARROW_SCHEMA`."""
    return pa.RecordBatch.from_pylist([], ARROW_SCHEMA)


__all__ = [
    "ARROW_SCHEMA",
    "SCHEMA_DDL",
    "empty_batch",
    "messages_to_batch",
    "properties_map",
    "record_positions",
    "records_to_batch",
]
