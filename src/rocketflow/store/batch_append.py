"""Appending encoded batches (SEND_BATCH_MESSAGE bodies as the producer wrote them) to the commit log.

Two paths store what per-message puts of the same messages would (test_store_batch_equivalence.py
holds them to it): `_stage_one_size_batch` packs a batch whose messages all have one body length and
one properties length with one unpack and one pack for all of them, and `_append_by_loop` walks any
batch message by message, reading TAGS, KEYS and UNIQ_KEY in place. `append_encoded_batches` writes
several staged batches that arrived together in one piece.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rocketflow.protocol.compression import has_zlib_header
from rocketflow.protocol.names import SCHEDULE_TOPIC
from rocketflow.protocol.record_layout import (
    BATCH_ELEMENT_FIXED_SIZE,
    BATCH_ELEMENT_HEAD,
    BLANK_RECORD_SIZE,
    MAGIC_CODE,
    PROPERTIES_LENGTH,
)
from rocketflow.protocol.record_writer import (
    ONE_SIZE_RECORD_FIELDS,
    one_size_records_packer,
    packed_host,
    record_head,
    record_packer,
)
from rocketflow.protocol.record_writer import topic_part as topic_part_of
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.protocol.tags import tags_code as compute_tags_code
from rocketflow.store.dispatcher import DispatchBatch, enters_consume_queue, schedule_tags_code
from rocketflow.store.mapped_file import Chunk, MappedFile, reserve_chunks, write_chunks
from rocketflow.store.message_append import AppendLog, decoded_properties, roll_segment
from rocketflow.store.put_request import AppendResult, EncodedBatchRequest, IllegalMessageError, PutMessageStatus

#: the most messages a one-size batch is packed for at once (larger ones take the per-message loop)
_ONE_SIZE_BATCH_MAX: Final = 1024
#: distinct TAGS values whose codes are remembered before starting over
_TAGS_CACHE_MAX: Final = 4096
_COMPRESSED: Final = int(MessageSysFlag.COMPRESSED)
#: a record's (and a batch element's) properties length field
_PROPS_LEN_SIZE: Final = PROPERTIES_LENGTH.size
#: TAGS value (raw bytes) -> tags code
_tags_codes: dict[bytes, int] = {}


@dataclass(slots=True)
class _StagedBatch:
    """A one-size batch packed for a place in the last segment, not written yet."""

    records: bytes
    #: (topic, queue id), or None when the records enter no consume queue
    key: tuple[str, int] | None
    first_queue_offset: int
    count: int
    first_offset: int
    units: list[int]
    index_keys: list[bytes]
    index_offsets: list[int]
    offsets: list[int]
    store: bytes


@functools.lru_cache(maxsize=256)
def _one_size_batch_struct(body_len: int, props_len: int, count: int) -> struct.Struct:
    """An encoded batch of `count` messages of one body and one properties length, as one struct."""
    element = f"{BATCH_ELEMENT_HEAD.format.lstrip('>')}{body_len}sH{props_len}s"
    return struct.Struct(">" + element * count)


def _property_values(all_props: Sequence[bytes], name: bytes) -> list[bytes | None]:
    """Per encoded properties, the value of `name` (``b"KEY\\x01"``) as the batch loop reads it, or None."""
    width = len(name)
    values: list[bytes | None] = []
    add = values.append
    for props in all_props:
        found = props.find(name)
        if found >= 0 and (found == 0 or props[found - 1] == 2):
            stop = props.find(b"\x02", found + width)
            add(props[found + width:stop] if stop >= 0 else props[found + width:])
        else:
            add(None)
    return values


def _same_place_values(data: bytes, all_props: Sequence[bytes], name: bytes, props_start: int,
                       element_size: int, prefix: bytes = b"") -> list[bytes] | None:
    """`prefix` + what `_property_values` reads, when `name` has a value of one length at one place in every
    message of a one-size batch (a producer's UNIQ_KEY): a find per message and strided byte counts instead of a
    loop. None when it is not so, or a value is empty."""
    count = len(all_props)
    first_props = all_props[0]
    first = first_props.find(name)
    if first < 0 or [props.find(name) for props in all_props].count(first) != count:
        return None
    # each name starts a property: at the start, or after a separator in every message
    if first and data[props_start + first - 1::element_size].count(2) != count:
        return None
    value_start = first + len(name)
    stop = first_props.find(b"\x02", value_start)
    if stop >= 0:
        if stop == value_start or data[props_start + stop::element_size].count(2) != count:
            return None
        values = [prefix + props[value_start:stop] for props in all_props]
    else:
        if value_start == len(first_props):
            return None
        values = [prefix + props[value_start:] for props in all_props]
    # a separator inside a value means that message's value ends earlier: not one place after all
    if b"".join(values).count(2) != prefix.count(2) * count:
        return None
    return values


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _illegal_element(index: int, detail: str) -> IllegalMessageError:
    return IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, f"batch message {index}: {detail}")


def _batch_layout(log: AppendLog, batch: EncodedBatchRequest) -> tuple[bytes, bytes, bytes, struct.Struct, int]:
    """What every record of a batch shares: topic part, born and store hosts, head struct, sys flag."""
    try:
        topic_part = topic_part_of(batch.topic)
    except (ValueError, UnicodeEncodeError, AttributeError) as exc:
        raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, f"bad topic: {exc}") from None
    try:
        born = packed_host(batch.born_host)
        store = log.default_store_host if batch.store_host is None else packed_host(batch.store_host)
    except (ValueError, TypeError, IndexError) as exc:
        raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, f"bad host: {exc}") from None
    head, sys_flag = record_head(born, store, batch.sys_flag)
    return topic_part, born, store, head, sys_flag

def _write_batch(log: AppendLog, chunks: list[Chunk], key: tuple[str, int] | None,
                 first_queue_offset: int, next_queue_offset: int, units: list[int], index_keys: list[bytes],
                 index_offsets: list[int], now: int, first_offset: int, end_offset: int, total: int,
                 count: int, offsets: list[int], store: bytes) -> tuple[AppendResult, DispatchBatch]:
    """Write a packed batch's chunks (space reserved) and account for it: the result and its dispatch."""
    write_chunks(chunks)
    if key is not None:
        log.topic_queue_table[key] = next_queue_offset
        queue_offsets = list(range(first_queue_offset, next_queue_offset))
    else:
        queue_offsets = [0] * count
    dispatch = DispatchBatch(runs={key: [first_queue_offset, units]} if key is not None else {},
                             index_keys=index_keys, index_offsets=index_offsets,
                             index_timestamps=[now] * len(index_keys), store_timestamp=now, end_offset=end_offset)
    result = AppendResult(
        status=PutMessageStatus.PUT_OK,
        wrote_offset=first_offset,
        wrote_bytes=total,
        queue_offset=first_queue_offset,
        store_timestamp=now,
        message_count=count,
        commit_log_offsets=offsets,
        queue_offsets=queue_offsets,
        store_host=store,
        end_offset=end_offset,
    )
    return result, dispatch

def _append_one_size_batch(log: AppendLog, batch: EncodedBatchRequest, now: int, topic_part: bytes, born: bytes,
                           store: bytes, head: struct.Struct, sys_flag: int
                           ) -> tuple[AppendResult, DispatchBatch] | None:
    """`append_encoded_batch` for a batch whose messages all have one encoded size, or None (nothing done)
    when it is not like that (see `_stage_one_size_batch`)."""
    mapped = log.files.last_for_write(0)
    staged = _stage_one_size_batch(log, batch, now, topic_part, born, store, head, sys_flag, mapped,
                                        mapped.wrote_position, log.topic_queue_table)
    if staged is None:
        return None
    results, dispatch = _write_staged(log, mapped, [staged], now)
    return results[0], dispatch

def append_encoded_batches(log: AppendLog, batches: Sequence[EncodedBatchRequest],
                           now: int) -> tuple[list[AppendResult], DispatchBatch]:
    """Append the leading batches of `batches` that can be written at once, at least the first one.

    Those that take the one-size path and fit the last segment (several batches that arrived
    together, say) are packed one after the other and written in one piece, with one dispatch
    for all; when the first cannot be, it alone is stored as `append_encoded_batch` stores it.
    Returns the results of the batches taken (a prefix of `batches`) and their dispatch. Raises
    as `append_encoded_batch` does for the first batch (nothing written); a later batch that
    would fail is left for the next call.
    """
    mapped = log.files.last_for_write(0)
    pos = mapped.wrote_position
    queue_offsets: dict[tuple[str, int], int] = {}
    staged: list[_StagedBatch] = []
    table = log.topic_queue_table
    for batch in batches:
        if batch.topic == SCHEDULE_TOPIC or not batch.encoded:
            break
        try:
            layout = _batch_layout(log, batch)
        except IllegalMessageError:
            break
        key = (batch.topic, batch.queue_id)
        one = _stage_one_size_batch(log, batch, now, *layout, mapped, pos,
                                         queue_offsets if key in queue_offsets else table)
        if one is None:
            if not staged:  # the first one takes the loop (its one-size attempt is already made)
                result, dispatch = _append_by_loop(log, batch, now, *layout)
                return [result], dispatch
            break
        staged.append(one)
        pos += len(one.records)
        if one.key is not None:
            queue_offsets[one.key] = one.first_queue_offset + one.count
    if not staged:  # the first batch is refused, or belongs to SCHEDULE_TOPIC_XXXX
        result, dispatch = append_encoded_batch(log, batches[0], now)
        return [result], dispatch
    return _write_staged(log, mapped, staged, now)

def _write_staged(log: AppendLog, mapped: MappedFile, staged: list[_StagedBatch],
                  now: int) -> tuple[list[AppendResult], DispatchBatch]:
    """Write staged batches (consecutive, from the wrote position of `mapped`) in one piece: their
    results and one dispatch. Raises OSError (nothing written) when the disk has no room."""
    records = staged[0].records if len(staged) == 1 else b"".join([one.records for one in staged])
    first_offset = staged[0].first_offset
    try:
        mapped.reserve(mapped.wrote_position + len(records))
    except BaseException:
        log.files.discard_unused_after(mapped)
        raise
    mapped.append(records)
    end_offset = first_offset + len(records)
    table = log.topic_queue_table
    runs: dict[tuple[str, int], list[Any]] = {}
    index_keys: list[bytes] = []
    index_offsets: list[int] = []
    results: list[AppendResult] = []
    for one in staged:
        key = one.key
        count = one.count
        if key is not None:
            table[key] = one.first_queue_offset + count
            queue_offsets = list(range(one.first_queue_offset, one.first_queue_offset + count))
            run = runs.get(key)
            if run is None:
                runs[key] = [one.first_queue_offset, one.units]
            else:  # the same queue again: its units follow on
                run[1] = run[1] + one.units
        else:
            queue_offsets = [0] * count
        if one.index_keys:
            index_keys += one.index_keys
            index_offsets += one.index_offsets
        results.append(AppendResult(
            status=PutMessageStatus.PUT_OK,
            wrote_offset=one.first_offset,
            wrote_bytes=len(one.records),
            queue_offset=one.first_queue_offset,
            store_timestamp=now,
            message_count=count,
            commit_log_offsets=one.offsets,
            queue_offsets=queue_offsets,
            store_host=one.store,
            end_offset=one.first_offset + len(one.records),
        ))
    dispatch = DispatchBatch(runs=runs, index_keys=index_keys, index_offsets=index_offsets,
                             index_timestamps=[now] * len(index_keys), store_timestamp=now, end_offset=end_offset)
    return results, dispatch

def _stage_one_size_batch(log: AppendLog, batch: EncodedBatchRequest, now: int, topic_part: bytes, born: bytes,
                          store: bytes, head: struct.Struct, sys_flag: int, mapped: MappedFile, pos: int,
                          queue_offsets: Mapping[tuple[str, int], int]) -> _StagedBatch | None:
    """Pack a batch whose messages all have one body and one properties length (a producer batching
    same-size records) for position `pos` of `mapped`: one unpack of the whole batch, one pack of all
    its records, and per-message work only in comprehensions. `queue_offsets` gives the queue's next
    offset. None when the batch is not like that, or needs anything the loop does (a check to fail,
    a separator to add, a segment to roll over)."""
    data = batch.encoded
    end = len(data)
    if end < BATCH_ELEMENT_FIXED_SIZE:
        return None
    element_size, _magic, _crc, _flag, body_len = BATCH_ELEMENT_HEAD.unpack_from(data, 0)
    props_len = element_size - BATCH_ELEMENT_FIXED_SIZE - body_len
    if element_size < BATCH_ELEMENT_FIXED_SIZE or end % element_size or body_len < 0 or not 0 <= props_len <= 0x7FFF:
        return None
    count = end // element_size
    if count > _ONE_SIZE_BATCH_MAX:
        return None
    config = log.config
    suffix = batch.properties_suffix
    if suffix and props_len:
        # each message's last byte is its last properties byte: a separator goes before the batch's
        # properties in all messages or in none, else the loop decides message by message
        ended = data[element_size - 1::element_size].count(2)
        if ended == 0:
            suffix = b"\x02" + suffix
        elif ended != count:
            return None
    record_props_len = props_len + len(suffix)
    size = head.size + _PROPS_LEN_SIZE + len(topic_part) + body_len + record_props_len
    if (body_len > config.max_message_size or record_props_len > config.max_properties_size
            or size > config.max_message_size
            or pos + count * size + BLANK_RECORD_SIZE > log.segment_size):
        return None
    values = _one_size_batch_struct(body_len, props_len, count).unpack(data)
    if (values[0::8].count(element_size) != count or values[4::8].count(body_len) != count
            or values[6::8].count(props_len) != count):
        return None
    all_props: tuple[bytes, ...] = values[7::8]
    bodies: tuple[bytes, ...] = values[5::8]
    # the messages' own properties in one piece, to check and to look for names in (bodies cannot fake one);
    # joined by 0x02, so that no two halves of a character across messages pass for one
    joined_props = b"\x02".join(all_props)
    if not joined_props.isascii() and not _is_utf8(joined_props):
        return None  # the loop names the message
    if sys_flag & _COMPRESSED and not all(map(has_zlib_header, bodies)):
        return None
    queue_id = batch.queue_id
    key = (batch.topic, queue_id)
    in_queue = enters_consume_queue(sys_flag)
    first_queue_offset = queue_offsets.get(key, 0) if in_queue else 0
    first_offset = mapped.file_from_offset + pos
    physical = range(first_offset, first_offset + count * size, size)
    crc32 = zlib.crc32
    # the records' fields, record after record: the shared ones repeated, then the others set column-wise
    fields: list[Any] = [size, MAGIC_CODE, 0, queue_id, 0, 0, 0, sys_flag, batch.born_timestamp, born, now, store,
                         0, 0, body_len, b"", topic_part, record_props_len, b"", suffix] * count
    fields[2::ONE_SIZE_RECORD_FIELDS] = [crc32(body) & 0x7FFFFFFF for body in bodies]
    fields[4::ONE_SIZE_RECORD_FIELDS] = values[3::8]
    fields[5::ONE_SIZE_RECORD_FIELDS] = range(first_queue_offset, first_queue_offset + count)
    fields[6::ONE_SIZE_RECORD_FIELDS] = physical
    fields[15::ONE_SIZE_RECORD_FIELDS] = bodies
    fields[18::ONE_SIZE_RECORD_FIELDS] = all_props
    records = one_size_records_packer(head, body_len, len(topic_part), props_len, len(suffix), count).pack(
        *fields)
    index_keys: list[bytes] = []
    index_offsets: list[int] = []
    maybe_tagged = b"S\x01" in joined_props  # one scan for both TAGS and KEYS, usually absent
    if config.message_index_enable:
        prefix = (batch.topic + "#").encode("utf-8")
        has_uniq = b"UNIQ_KEY\x01" in joined_props
        keys = _property_values(all_props, b"KEYS\x01") if maybe_tagged and b"KEYS\x01" in joined_props \
            else None
        same_place = _same_place_values(data, all_props, b"UNIQ_KEY\x01", BATCH_ELEMENT_FIXED_SIZE + body_len,
                                        element_size, prefix) if has_uniq and keys is None else None
        if same_place is not None:
            index_keys = same_place
            index_offsets = list(physical)
        elif has_uniq or keys is not None:
            nothing: list[bytes | None] = [None] * count
            uniq_keys = _property_values(all_props, b"UNIQ_KEY\x01") if has_uniq else nothing
            for offset, uniq, words in zip(physical, uniq_keys, keys or nothing, strict=True):
                if uniq:
                    index_keys.append(prefix + uniq)
                    index_offsets.append(offset)
                if words:
                    for word in words.split(b" "):
                        if word:
                            index_keys.append(prefix + word)
                            index_offsets.append(offset)
    units: list[int] = []
    if in_queue:
        units = [0, size, 0] * count
        units[0::3] = physical
        if maybe_tagged and b"TAGS\x01" in joined_props:
            units[2::3] = [0 if raw is None else _tags_code(raw)
                           for raw in _property_values(all_props, b"TAGS\x01")]
    return _StagedBatch(records, key if in_queue else None, first_queue_offset, count, first_offset, units,
                        index_keys, index_offsets, list(physical), store)

def _tags_code(raw: bytes) -> int:
    """The tags code of a raw TAGS value (remembered)."""
    cache = _tags_codes
    code = cache.get(raw)
    if code is None:
        if len(cache) > _TAGS_CACHE_MAX:
            cache.clear()
        code = cache[raw] = compute_tags_code(raw.decode("utf-8", "replace"))
    return code

def append_encoded_batch(log: AppendLog, batch: EncodedBatchRequest,
                         now: int) -> tuple[AppendResult, DispatchBatch]:
    """Append an `EncodedBatchRequest`: what `append` stores for the same messages one by one, in one pass.

    Decoding, checks, TAGS/KEYS/UNIQ_KEY lookups and record packing share one loop over the
    encoded messages (no per-message lists in between). Raises `IllegalMessageError` (nothing
    written) for a malformed or oversized message, naming it by its index in the batch.
    """
    if not batch.encoded:
        raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, "the batch body is empty")
    layout = _batch_layout(log, batch)
    if batch.topic != SCHEDULE_TOPIC:
        stored = _append_one_size_batch(log, batch, now, *layout)
        if stored is not None:
            return stored
    return _append_by_loop(log, batch, now, *layout)

def _append_by_loop(log: AppendLog, batch: EncodedBatchRequest, now: int, topic_part: bytes, born: bytes, store: bytes,
                    head: struct.Struct, sys_flag: int) -> tuple[AppendResult, DispatchBatch]:
    """`append_encoded_batch`'s loop over the messages one by one (any batch, the one-size path's or not)."""
    data = batch.encoded
    end = len(data)
    topic = batch.topic
    queue_id = batch.queue_id
    suffix = batch.properties_suffix
    separated_suffix = b"\x02" + suffix
    fixed = head.size + _PROPS_LEN_SIZE + len(topic_part)
    topic_len = len(topic_part)
    born_timestamp = batch.born_timestamp
    max_size = log.config.max_message_size
    max_props = log.config.max_properties_size
    segment_size = log.segment_size
    key = (topic, queue_id)
    in_queue = enters_consume_queue(sys_flag)
    compressed = bool(sys_flag & _COMPRESSED)
    schedule = topic == SCHEDULE_TOPIC
    delay_levels = log.config.delay_levels_ms
    first_queue_offset = log.topic_queue_table.get(key, 0) if in_queue else 0
    queue_offset = first_queue_offset
    files = log.files
    mapped = first_mapped = files.last_for_write(0)
    base = mapped.file_from_offset
    pos = mapped.wrote_position
    room = segment_size - pos
    first_offset = base + pos
    chunks: list[Chunk] = []
    parts: list[bytes] = []
    add = parts.append
    offsets: list[int] = []
    add_offset = offsets.append
    units: list[int] = []
    add_units = units.extend
    indexing = log.config.message_index_enable
    index_keys: list[bytes] = []
    add_index = index_keys.append
    index_offsets: list[int] = []
    add_index_offset = index_offsets.append
    index_prefix = (topic + "#").encode("utf-8")
    tags_code_of = _tags_code
    unpack = BATCH_ELEMENT_HEAD.unpack_from
    element_head_size = BATCH_ELEMENT_HEAD.size
    crc32 = zlib.crc32
    record_struct = record_packer
    packers: dict[tuple[int, int], struct.Struct] = {}
    packer = head
    packer_body_len = packer_props_len = -1
    total = 0
    element = 0
    element_start = 0
    try:
        while element_start < end:
            if end - element_start < BATCH_ELEMENT_FIXED_SIZE:
                raise _illegal_element(element, f"truncated ({end - element_start} bytes left)")
            declared, _magic, _crc, flag, body_len = unpack(data, element_start)
            body_start = element_start + element_head_size
            body_end = body_start + body_len
            if body_len < 0 or body_end + 2 > end:
                raise _illegal_element(element, f"body length {body_len} exceeds the batch")
            if body_len > max_size:
                raise _illegal_element(element, f"body size {body_len} exceeds the maximum {max_size}")
            own_props_len = (data[body_end] << 8) | data[body_end + 1]
            element_end = body_end + 2 + own_props_len
            if own_props_len > 0x7FFF or element_end > end:
                raise _illegal_element(element, f"properties length {own_props_len} exceeds the batch")
            if declared != element_end - element_start:
                raise _illegal_element(element, f"declared size {declared} != actual {element_end - element_start}")
            body = data[body_start:body_end]
            if compressed and not has_zlib_header(body):
                raise _illegal_element(element, "the body is flagged compressed (sysFlag bit 0x1) but is not "
                                                f"zlib data (its first bytes {body[:2].hex() or 'none'} are no "
                                                "zlib header)")
            tags = 0
            uniq = keys = None
            if own_props_len:
                props = data[body_end + 2:element_end]
                if not props.isascii() and not _is_utf8(props):
                    raise _illegal_element(element, "its properties are not valid UTF-8")
                # TAGS, KEYS and UNIQ_KEY looked up in place: no full properties parse per message
                found = props.find(b"TAGS\x01")
                if found >= 0 and (found == 0 or props[found - 1] == 2):
                    stop = props.find(b"\x02", found + 5)
                    tags = tags_code_of(props[found + 5:stop] if stop >= 0 else props[found + 5:])
                if indexing:
                    found = props.find(b"UNIQ_KEY\x01")
                    if found >= 0 and (found == 0 or props[found - 1] == 2):
                        stop = props.find(b"\x02", found + 9)
                        uniq = props[found + 9:stop] if stop >= 0 else props[found + 9:]
                    found = props.find(b"KEYS\x01")
                    if found >= 0 and (found == 0 or props[found - 1] == 2):
                        stop = props.find(b"\x02", found + 5)
                        keys = props[found + 5:stop] if stop >= 0 else props[found + 5:]
                if suffix:
                    props = props + suffix if props[-1] == 2 else props + separated_suffix
            else:
                props = suffix
            props_len = len(props)
            size = fixed + body_len + props_len
            if props_len > max_props:
                raise IllegalMessageError(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                          f"batch message {element}: properties are {props_len} bytes, "
                                          f"at most {max_props} allowed")
            if size > max_size or size + BLANK_RECORD_SIZE > segment_size:
                raise _illegal_element(element, f"message of {size} bytes exceeds the maximum {max_size}")
            if size + BLANK_RECORD_SIZE > room:
                mapped, parts = roll_segment(files, mapped, parts, room, chunks)
                base = mapped.file_from_offset
                pos = mapped.wrote_position
                room = segment_size - pos
                add = parts.append
                if not offsets:
                    first_offset = base + pos
            phys = base + pos
            if body_len != packer_body_len or props_len != packer_props_len:
                found_packer = packers.get((body_len, props_len))
                if found_packer is None:
                    found_packer = packers[(body_len, props_len)] = record_struct(head, body_len, topic_len,
                                                                                  props_len)
                packer = found_packer
                packer_body_len, packer_props_len = body_len, props_len
            add(packer.pack(size, MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset, phys,
                            sys_flag, born_timestamp, born, now, store, 0, 0, body_len, body, topic_part,
                            props_len, props))
            pos += size
            room -= size
            total += size
            add_offset(phys)
            if in_queue:
                if schedule:
                    deliver_at = schedule_tags_code(decoded_properties(props), now, delay_levels)
                    if deliver_at is not None:
                        tags = deliver_at
                add_units((phys, size, tags))
                queue_offset += 1
            if uniq:
                add_index(index_prefix + uniq)
                add_index_offset(phys)
            if keys:
                for word in keys.split(b" "):
                    if word:
                        add_index(index_prefix + word)
                        add_index_offset(phys)
            element_start = element_end
            element += 1
        chunks.append((mapped, parts, False))
        reserve_chunks(chunks, pos)
    except BaseException:
        files.discard_unused_after(first_mapped)
        raise
    return _write_batch(log, chunks, key if in_queue else None, first_queue_offset, queue_offset, units,
                             index_keys, index_offsets, now, first_offset, base + pos, total, element, offsets,
                             store)


__all__ = ["append_encoded_batch", "append_encoded_batches"]
