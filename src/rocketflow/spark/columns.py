"""Message records -> Arrow columns, decoded column-wise (no `MessageExt` per message on the fast path).

A pull body is concatenated message records (`rocketflow.protocol.codec`). `records_to_batch` finds
the record boundaries with one tight loop, then gathers every fixed-width field for all records at
once with numpy (big-endian views), slices the variable-width parts (body, properties) out with one
fancy-index gather each, and splits the properties into a ``map<string,string>`` with Arrow compute
kernels. Records with IPv6 hosts or with a compressed body take the per-message path
(`messages_to_batch`), which is also the reference the fast path is tested against.

A record that can be told apart but not decoded (`rocketflow.protocol.codec.UndecodableRecord`: a
COMPRESSED body that is not zlib, properties that are not UTF-8) becomes a row like the others with
its stored body (not inflated) and the reason in ``decode_error`` (null for every other row), or,
with ``fail_on_bad_records``, an `UndecodableRecordError`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from rocketflow.protocol.codec import MAGIC_CODE, RecordDecodeError, UndecodableRecord, decode_records
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.record_layout import HEAD_SIZE_V4, field_position
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
#: * ``reconsume_times``: INT / int32;
#: * ``decode_error``: STRING - null, except for a record that cannot be decoded: why (its ``body`` is
#:   then as stored, its ``properties`` empty when they are not readable).
#:
#: ``properties`` is there only with the source's ``includeProperties=true`` (`schema_ddl`): like Kafka's
#: headers, a map column costs every row its conversion whether a query reads it or not.
SCHEMA_DDL: Final = (
    "topic STRING, broker STRING, queue_id INT, queue_offset BIGINT, msg_id STRING, keys STRING, tags STRING, "
    "body BINARY, born_timestamp TIMESTAMP, store_timestamp TIMESTAMP, properties MAP<STRING,STRING>, "
    "reconsume_times INT, decode_error STRING"
)
#: The schema without ``properties`` (the source's default).
SCHEMA_DDL_WITHOUT_PROPERTIES: Final = SCHEMA_DDL.replace(" properties MAP<STRING,STRING>,", "")

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
    ("decode_error", pa.string()),
])


ARROW_SCHEMA_WITHOUT_PROPERTIES: Final = ARROW_SCHEMA.remove(ARROW_SCHEMA.get_field_index("properties"))


def schema_ddl(include_properties: bool) -> str:
    """The source's Spark schema, with or without the ``properties`` map."""
    return SCHEMA_DDL if include_properties else SCHEMA_DDL_WITHOUT_PROPERTIES


def arrow_schema(include_properties: bool) -> Any:
    """The Arrow schema of the batches `records_to_batch` builds, with or without ``properties``."""
    return ARROW_SCHEMA if include_properties else ARROW_SCHEMA_WITHOUT_PROPERTIES


class UndecodableRecordError(RecordDecodeError):
    """A record that cannot be decoded, met with ``fail_on_bad_records``."""

# Field positions in a record whose hosts are both IPv4.
_QUEUE_ID: Final = field_position("queue_id")
_QUEUE_OFFSET: Final = field_position("queue_offset")
_COMMIT_LOG_OFFSET: Final = field_position("commit_log_offset")
_SYS_FLAG: Final = field_position("sys_flag")
_BORN_TIMESTAMP: Final = field_position("born_timestamp")
_STORE_TIMESTAMP: Final = field_position("store_timestamp")
_STORE_HOST: Final = field_position("store_host")
_RECONSUME_TIMES: Final = field_position("reconsume_times")
_BODY_LEN: Final = field_position("body_len")
_BODY: Final = HEAD_SIZE_V4
#: The fixed head of such a record, big-endian, as one numpy element (gathered once a record).
_HEAD: Final = np.dtype({
    "names": ["size", "queue_id", "queue_offset", "commit_log_offset", "sys_flag", "born_timestamp",
              "store_timestamp", "store_host", "reconsume_times", "body_len"],
    "formats": [">i4", ">i4", ">i8", ">u8", ">i4", ">i8", ">i8", ">u8", ">i4", ">i4"],
    "offsets": [0, _QUEUE_ID, _QUEUE_OFFSET, _COMMIT_LOG_OFFSET, _SYS_FLAG, _BORN_TIMESTAMP, _STORE_TIMESTAMP,
                _STORE_HOST, _RECONSUME_TIMES, _BODY_LEN],
    "itemsize": _BODY,
})
_SLOW_FLAGS: Final = int(MessageSysFlag.COMPRESSED | MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)

_I32_I32: Final = struct.Struct(">ii")
#: `record_positions` walks, rather than scans for the magic code, when the first record is this big
SCAN_BELOW: Final = 190
_HEX_DIGITS: Final = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_MAGIC_BYTES: Final = tuple(struct.pack(">i", MAGIC_CODE))
#: Values up to this many bytes live inside their binary-view entry (Arrow's columnar format).
_VIEW_INLINE: Final = 12
_INLINE_RANGE: Final = np.arange(_VIEW_INLINE, dtype=np.int64)
_TWELVE_BYTES: Final = np.dtype((np.void, _VIEW_INLINE))
#: row n keeps the first n of 12 bytes (the zero padding Arrow wants after an inlined value)
_INLINE_MASKS: Final = np.ascontiguousarray(
    np.where(_INLINE_RANGE[None, :] < np.arange(_VIEW_INLINE + 1)[:, None], 0xFF, 0).astype(np.uint8)
).view(_TWELVE_BYTES).ravel()
#: Arrow's binary-view entry: the length, then 12 bytes (the value inlined, or prefix, buffer index, offset)
_VIEW: Final = np.dtype([("length", "<i4"), ("rest", _TWELVE_BYTES)])


def record_positions(data: bytes) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Start positions of the concatenated records in ``data`` (checks every size and magic).

    Records of one size (a producer's uniform messages) are found at once: every multiple of the first
    size must hold that size and the magic code, and then each is a record that ends where the next
    begins. Otherwise small records are found by every occurrence of the magic code, vectorized,
    accepted when the occurrences chain (a body that happens to contain the magic bytes breaks the
    chain), and records of `SCAN_BELOW` bytes or more by the record-by-record walk, which is then the
    cheaper (it costs a record what the scan costs ~190 bytes).
    """
    buffer = np.frombuffer(data, dtype=np.uint8)
    end = len(buffer)
    if end >= _BODY + 3:
        first_size = int.from_bytes(data[:4], "big", signed=True)
        if first_size >= _BODY + 3 and end % first_size == 0:
            positions = np.arange(0, end, first_size, dtype=np.int64)
            if (np.all(_field(buffer, positions, 0, ">i4") == first_size)
                    and np.all(_field(buffer, positions, 4, ">i4") == MAGIC_CODE)):
                return positions
        if first_size < SCAN_BELOW:
            magic = _MAGIC_BYTES
            hits = np.flatnonzero((buffer[4:-3] == magic[0]) & (buffer[5:-2] == magic[1])
                                  & (buffer[6:-1] == magic[2]) & (buffer[7:] == magic[3]))
            if len(hits) and hits[0] == 0:
                sizes = _field(buffer, hits, 0, ">i4").astype(np.int64)
                ends = hits + sizes
                if ends[-1] == end and np.array_equal(ends[:-1], hits[1:]) and np.all(sizes >= _BODY + 3):
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


def _field(buffer: np.ndarray[Any, Any], positions: np.ndarray[Any, Any], offset: int,
           dtype: str | np.dtype[Any]) -> np.ndarray[Any, Any]:
    """The fixed-width field at ``offset`` of every record, read through an overlapping byte-strided view.

    The view has one (unaligned) element starting at every byte, so one gather of ``len(positions)``
    elements reads the field; no per-byte index arrays.
    """
    kind = np.dtype(dtype)
    at_every_byte: np.ndarray[Any, Any] = np.ndarray(shape=(len(buffer) - kind.itemsize + 1,), dtype=kind,
                                                     buffer=buffer, strides=(1,))
    values: np.ndarray[Any, Any] = at_every_byte[positions + offset]
    return values


def _slices(kind: Any, data: Any, buffer: np.ndarray[Any, Any], starts: np.ndarray[Any, Any],
            lengths: np.ndarray[Any, Any], valid: np.ndarray[Any, Any] | None = None) -> Any:
    """An Arrow array (binary or string ``kind``) of ``buffer[start:start + length]`` for every pair
    (null where ``valid`` is False; such pairs must have length 0).

    Builds a binary-view array over ``data`` (the bytes behind ``buffer``; values of 12 bytes or less
    are inlined in their view, as the format requires) and lets Arrow cast it to the contiguous kind:
    one memcpy a value instead of numpy gathers through per-byte index arrays.
    """
    count = len(starts)
    views = np.empty(count, dtype=_VIEW)
    views["length"] = lengths
    inline = lengths <= _VIEW_INLINE
    all_inline = bool(inline.all())
    if not all_inline:
        # prefix (the first 4 bytes), data buffer 0, offset
        outside = None if not inline.any() else ~inline
        out_starts = starts if outside is None else starts[outside]
        reference = np.empty((len(out_starts), 3), dtype="<i4")
        reference[:, 0] = _field(buffer, out_starts, 0, "<i4")
        reference[:, 1] = 0
        reference[:, 2] = out_starts
        if outside is None:
            views["rest"] = reference.view(_TWELVE_BYTES).ravel()
        else:
            views["rest"][outside] = reference.view(_TWELVE_BYTES).ravel()
    if all_inline or inline.any():
        short_starts = starts if all_inline else starts[inline]
        short_lengths = lengths if all_inline else lengths[inline]
        # the 12 bytes from each start, gathered as one 12-byte element each through a byte-strided
        # view; the few starts within 12 bytes of the buffer's end are gathered byte by byte
        last_full = len(buffer) - _VIEW_INLINE
        near_end = short_starts > last_full
        if last_full >= 0:
            chunks = _field(buffer, np.where(near_end, 0, short_starts), 0, _TWELVE_BYTES)
        else:
            chunks = np.zeros(len(short_starts), dtype=_TWELVE_BYTES)
        inline_bytes = chunks.view(np.uint8).reshape(-1, _VIEW_INLINE)
        if near_end.any():
            index = np.minimum(short_starts[near_end][:, None] + _INLINE_RANGE, len(buffer) - 1)
            inline_bytes[near_end] = buffer[index] if len(buffer) else 0
        masks = _INLINE_MASKS[short_lengths].view(np.uint8).reshape(-1, _VIEW_INLINE)
        np.bitwise_and(inline_bytes, masks, out=inline_bytes)
        if all_inline:
            views["rest"] = chunks
        else:
            views["rest"][inline] = chunks
    view_kind = pa.binary_view() if kind == pa.binary() else pa.string_view()
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(view_kind, count, [validity, pa.py_buffer(views), pa.py_buffer(data)]).cast(kind)


def _constant_strings(text: str, count: int) -> Any:
    raw = text.encode("utf-8")
    offsets = (np.arange(count + 1, dtype=np.int64) * len(raw)).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)])


def _string_bytes(texts: Any) -> tuple[Any, Any, Any]:
    """A string array's ``count + 1`` offsets (int64), its data buffer and that buffer's bytes (uint8)."""
    texts = texts.cast(pa.string())
    _, offsets_buffer, data_buffer = texts.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=len(texts) + 1, offset=texts.offset * 4)
    data = data_buffer if data_buffer is not None else pa.py_buffer(b"")
    return offsets.astype(np.int64), data, np.frombuffer(data, dtype=np.uint8)


def properties_map(texts: Any) -> Any:
    """``map<string,string>`` of properties strings (``k 0x01 v 0x02 ...``), split the way
    `rocketflow.protocol.properties.decode_properties` splits them: entries end at 0x02 or at the end
    of the text, the key ends at an entry's first 0x01, entries without a key or a value are dropped.
    Repeated keys stay repeated, in order (a lookup takes the last)."""
    count = len(texts)
    offsets, data, chars = _string_bytes(texts)
    base = int(offsets[0])
    used = chars[base:int(offsets[-1])]
    separators = np.flatnonzero(used == 2) + base
    record_ends = offsets[1:]
    # Every entry ends at a 0x02 (the next entry starts after it) or at its text's end (starts at it).
    # Merged in position order without sorting: record i's separators, then its end, then record i+1's.
    separator_records = np.searchsorted(record_ends, separators, side="right")
    separators_before_end = np.searchsorted(separators, record_ends, side="left")
    entry_count = len(separators) + count
    ends = np.empty(entry_count, dtype=np.int64)
    next_starts = np.empty(entry_count, dtype=np.int64)
    parents = np.empty(entry_count, dtype=np.int64)
    at_separators = np.arange(len(separators)) + separator_records
    at_record_ends = separators_before_end + np.arange(count)
    ends[at_separators] = separators
    ends[at_record_ends] = record_ends
    next_starts[at_separators] = separators + 1
    next_starts[at_record_ends] = record_ends
    parents[at_separators] = separator_records
    parents[at_record_ends] = np.arange(count)
    starts = np.empty_like(ends)
    if entry_count:
        starts[0] = offsets[0]
        starts[1:] = next_starts[:-1]
    pairs = np.flatnonzero(used == 1) + base
    first_pair = np.searchsorted(pairs, starts, side="left")
    has_pair = first_pair < len(pairs)
    # an entry's key ends at the first 0x01 at or after its start, if that lies inside the entry
    key_ends = np.where(has_pair, pairs[np.minimum(first_pair, len(pairs) - 1)], ends) if len(pairs) else ends
    has_pair &= key_ends < ends
    keep = has_pair & (key_ends > starts) & (ends > key_ends + 1)
    key_starts = starts[keep]
    key_ends = key_ends[keep]
    value_ends = ends[keep]
    counts = np.bincount(parents[keep], minlength=count) if count else np.zeros(0, dtype=np.int64)
    map_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(counts, out=map_offsets[1:])
    keys = _slices(pa.string(), data, chars, key_starts, key_ends - key_starts)
    values = _slices(pa.string(), data, chars, key_ends + 1, value_ends - key_ends - 1)
    return pa.MapArray.from_arrays(pa.array(map_offsets, pa.int32()), keys, values)


def property_values(texts: Any, *keys: str) -> list[Any]:
    """For each of ``keys``, its value in each properties string (``k 0x01 v 0x02 ...``), null where the
    string has none: what `properties_map` then a last-wins lookup gives, without building the map (the
    source needs three keys of it when the map column is left out). Entries split as in
    `properties_map`; an entry with an empty value does not count."""
    count = len(texts)
    offsets, data, chars = _string_bytes(texts)
    base, end = int(offsets[0]), int(offsets[-1])
    record_ends = offsets[1:]
    separators = np.flatnonzero(chars[base:end] == 2) + base
    # every entry starts at its text's start or just after a 0x02, and ends at the next 0x02 or the text's end
    separator_records = np.searchsorted(record_ends, separators, side="right")
    entry_starts = np.concatenate([offsets[:-1], separators + 1])
    entry_records = np.concatenate([np.arange(count), separator_records])
    order = np.argsort(entry_starts, kind="stable")
    entry_starts, entry_records = entry_starts[order], entry_records[order]
    following = np.searchsorted(separators, entry_starts, side="left")
    entry_ends = np.minimum(separators[np.minimum(following, len(separators) - 1)] if len(separators)
                            else record_ends[entry_records], record_ends[entry_records])
    entry_ends = np.where(following < len(separators), entry_ends, record_ends[entry_records])
    results = []
    for key in keys:
        pattern = key.encode("utf-8") + b"\x01"
        width = len(pattern)
        candidates = np.flatnonzero(entry_ends - entry_starts > width)  # a non-empty value after the key
        if len(candidates):
            # each candidate's first bytes, compared whole (a void element compares as its bytes)
            window = _field(chars, entry_starts[candidates], 0, np.dtype((np.void, width)))
            candidates = candidates[window == np.void(pattern)]
        records = entry_records[candidates]
        # last wins: the last match of each record (entries are in position order, so in record order)
        last = np.ones(len(records), dtype=bool)
        last[:-1] = records[1:] != records[:-1]
        chosen = candidates[last]
        starts = np.zeros(count, dtype=np.int64)
        lengths = np.zeros(count, dtype=np.int64)
        valid = np.zeros(count, dtype=bool)
        starts[records[last]] = entry_starts[chosen] + width
        lengths[records[last]] = entry_ends[chosen] - entry_starts[chosen] - width
        valid[records[last]] = True
        results.append(_slices(pa.string(), data, chars, starts, lengths, valid))
    return results


def _offset_msg_ids(heads: np.ndarray[Any, Any]) -> Any:
    """The 32-hex-digit offset message ids: store host (IPv4 + port) then commit-log offset."""
    count = len(heads)
    raw = np.empty((count, 2), dtype=">u8")
    raw[:, 0] = heads["store_host"]
    raw[:, 1] = heads["commit_log_offset"]
    raw_bytes = raw.view(np.uint8).reshape(count, 16)
    digits = np.empty((count, 32), dtype=np.uint8)
    digits[:, 0::2] = _HEX_DIGITS[raw_bytes >> 4]
    digits[:, 1::2] = _HEX_DIGITS[raw_bytes & 0xF]
    offsets = (np.arange(count + 1, dtype=np.int64) * 32).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(digits)])


def _timestamps(millis: np.ndarray[Any, Any]) -> Any:
    return pa.array(millis.astype(np.int64) * 1000, type=_TIMESTAMP)


def records_to_batch(data: bytes, topic: str, broker: str, *, fail_on_bad_records: bool = False,
                     include_properties: bool = True) -> Any:
    """A `pyarrow.RecordBatch` (`arrow_schema(include_properties)`) of every record in ``data`` (a pull
    body, or several joined).

    ``topic`` and ``broker`` fill the columns of the same names (every record of a queue's pull has
    the queue's topic). A record that cannot be decoded is a row with ``decode_error`` set, or with
    ``fail_on_bad_records`` raises `UndecodableRecordError`. Raises `RecordDecodeError` for bytes that
    cannot be split into records. Without ``include_properties`` the map is still built (``msg_id``,
    ``keys`` and ``tags`` are looked up in it; that is the cheapest way) but not returned.
    """
    return _records_to_batch(data, topic, broker, fail_on_bad_records, include_properties)


def _records_to_batch(data: bytes, topic: str, broker: str, fail_on_bad_records: bool,
                      include_properties: bool) -> Any:
    if len(data) > 0x7FFFFFFF:
        raise RecordDecodeError(f"{len(data)} bytes of records do not fit one Arrow batch; decode them in pieces")
    positions = record_positions(data)
    if len(positions) == 0:
        return empty_batch(include_properties)
    buffer = np.frombuffer(data, dtype=np.uint8)
    heads = _field(buffer, positions, 0, _HEAD)
    if np.any(heads["sys_flag"] & _SLOW_FLAGS):
        return _per_message(data, topic, broker, fail_on_bad_records, include_properties)
    count = len(positions)
    body_lengths = heads["body_len"].astype(np.int64)
    sizes = heads["size"].astype(np.int64)
    body_starts = positions + _BODY
    topic_starts = body_starts + body_lengths + 1
    # a record whose lengths do not add up, or whose properties are not UTF-8: the per-message path says which
    if np.any(body_lengths < 0) or np.any(topic_starts + 2 > positions + sizes):
        return _per_message(data, topic, broker, fail_on_bad_records, include_properties)
    topic_lengths = buffer[topic_starts - 1].astype(np.int64)
    props_len_at = topic_starts + topic_lengths
    if np.any(props_len_at + 2 > positions + sizes):
        return _per_message(data, topic, broker, fail_on_bad_records, include_properties)
    props_lengths = _field(buffer, props_len_at, 0, ">u2").astype(np.int64)
    if np.any(props_len_at + 2 + props_lengths != positions + sizes):
        return _per_message(data, topic, broker, fail_on_bad_records, include_properties)
    props_text = _slices(pa.string(), data, buffer, props_len_at + 2, props_lengths)
    try:
        props_text.validate(full=True)
    except pa.ArrowInvalid:
        return _per_message(data, topic, broker, fail_on_bad_records, include_properties)
    if include_properties:
        properties = properties_map(props_text)
        uniq = pc.map_lookup(properties, MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "last")
        keys = pc.map_lookup(properties, MessageConst.KEYS, "last")
        tags = pc.map_lookup(properties, MessageConst.TAGS, "last")
    else:
        uniq, keys, tags = property_values(props_text, MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageConst.KEYS,
                                           MessageConst.TAGS)
    # the broker's offset message id only where a record has no UNIQ_KEY (producers set one on every message)
    msg_ids = uniq if uniq.null_count == 0 else pc.coalesce(uniq, _offset_msg_ids(heads))
    columns = [
        _constant_strings(topic, count),
        _constant_strings(broker, count),
        pa.array(heads["queue_id"].astype(np.int32), pa.int32()),
        pa.array(heads["queue_offset"].astype(np.int64), pa.int64()),
        msg_ids,
        keys,
        tags,
        _slices(pa.binary(), data, buffer, body_starts, body_lengths),
        _timestamps(heads["born_timestamp"]),
        _timestamps(heads["store_timestamp"]),
        *((properties,) if include_properties else ()),
        pa.array(heads["reconsume_times"].astype(np.int32), pa.int32()),
        pa.nulls(count, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_properties))


def _per_message(data: bytes, topic: str, broker: str, fail_on_bad_records: bool, include_properties: bool) -> Any:
    """`records_to_batch` by `decode_records`: the path of compressed, IPv6 and undecodable records."""
    undecodable: list[UndecodableRecord] = []
    messages = decode_records(data, undecodable=undecodable)
    if undecodable and fail_on_bad_records:
        first = undecodable[0]
        raise UndecodableRecordError(f"the record at offset {first.queue_offset} cannot be decoded: {first.reason}")
    for record in undecodable:
        record.message.topic = record.message.topic or topic
    return messages_to_batch(messages, broker, undecodable, include_properties=include_properties)


def messages_to_batch(messages: Sequence[MessageExt], broker: str,
                      undecodable: Sequence[UndecodableRecord] = (), *, include_properties: bool = True) -> Any:
    """A `pyarrow.RecordBatch` (`arrow_schema(include_properties)`) from decoded messages (the per-message
    path), with rows for ``undecodable`` records among them in offset order."""
    batch = _messages_to_batch(messages, broker, undecodable)
    return batch if include_properties else batch.drop_columns(["properties"])


def _messages_to_batch(messages: Sequence[MessageExt], broker: str, undecodable: Sequence[UndecodableRecord]) -> Any:
    unique = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    errors: list[str | None] = [None] * len(messages)
    if undecodable:
        reasons = {id(record.message): record.reason for record in undecodable}
        messages = sorted([*messages, *(record.message for record in undecodable)], key=lambda msg: msg.queue_offset)
        errors = [reasons.get(id(msg)) for msg in messages]
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
        pa.array(errors, pa.string()),
    ], schema=ARROW_SCHEMA)


def empty_batch(include_properties: bool = True) -> Any:
    """A zero-row batch of `arrow_schema(include_properties)`."""
    return pa.RecordBatch.from_pylist([], arrow_schema(include_properties))


__all__ = [
    "ARROW_SCHEMA",
    "ARROW_SCHEMA_WITHOUT_PROPERTIES",
    "SCHEMA_DDL",
    "SCHEMA_DDL_WITHOUT_PROPERTIES",
    "UndecodableRecordError",
    "arrow_schema",
    "empty_batch",
    "messages_to_batch",
    "properties_map",
    "record_positions",
    "records_to_batch",
    "schema_ddl",
]
